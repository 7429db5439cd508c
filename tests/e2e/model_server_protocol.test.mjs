// The model-server protocol of Kubernetes' inference gateway (gateway-api-inference-extension,
// proposal 003), under vLLM's metric names so an endpoint picker configured for vLLM reads
// kvserve unchanged: /metrics scraped while a load runs must show the queue and the KV pool
// move (vllm:num_requests_waiting, vllm:num_requests_running, vllm:kv_cache_usage_perc, each
// with model_name), agree with kvserve's own families, and return to idle afterwards.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { MODEL_ID, metric, metrics, pollUntil, postJson, startServer } from './lib/server.mjs';

let server;
before(async () => {
  // Two sequences at a time and a slow step: six requests keep four waiting for a while.
  server = await startServer(['--max-num-seqs', '2', '--inject-step-delay-ms', '5']);
});
after(async () => {
  assert.equal(await server.stop(), 0, server.log());
});

test('the vLLM-named gauges follow the queue and the KV pool', async () => {
  const scrape = () => metrics(server.url);
  const label = `{model_name="${MODEL_ID}"}`;
  const idle = await scrape();
  for (const name of ['vllm:num_requests_waiting', 'vllm:num_requests_running', 'vllm:kv_cache_usage_perc',
                      'vllm:gpu_cache_usage_perc']) {
    assert.equal(metric(idle, name + label), 0, name);
    assert.match(idle, new RegExp(`# TYPE ${name} gauge`));
  }
  assert.match(idle, /^vllm:lora_requests_info\{max_lora="0",running_lora_adapters="",waiting_lora_adapters=""\} \d/m);
  // The cache configuration line agrees with /v1/cache/blocks (the picker's prefix scorer reads its block size).
  const pool = await (await fetch(`${server.url}/v1/cache/blocks`)).json();
  assert.equal(metric(idle, `vllm:cache_config_info{block_size="${pool.block_size}",num_gpu_blocks="${pool.num_blocks}"}`), 1);

  const load = Array.from({ length: 6 }, (_, i) => postJson(`${server.url}/v1/completions`, {
    prompt: `Story ${i}: once upon a time`, max_tokens: 120, ignore_eos: true, temperature: 0 }));
  const seen = { waiting: 0, running: 0, usage: 0 };
  await pollUntil(async () => {
    const text = await scrape();
    const waiting = metric(text, 'vllm:num_requests_waiting' + label);
    const running = metric(text, 'vllm:num_requests_running' + label);
    const usage = metric(text, 'vllm:kv_cache_usage_perc' + label);
    // The same snapshot as kvserve's own families.
    assert.equal(running, metric(text, 'kvserve_requests{state="running"}'));
    assert.equal(usage, metric(text, 'kvserve_kv_cache_usage_ratio'));
    assert.equal(metric(text, 'vllm:gpu_cache_usage_perc' + label), usage);
    assert.ok(running <= 2 && usage >= 0 && usage <= 1, text);
    seen.waiting = Math.max(seen.waiting, waiting);
    seen.running = Math.max(seen.running, running);
    seen.usage = Math.max(seen.usage, usage);
    return seen.waiting >= 3 && seen.running === 2 && seen.usage > 0;
  }, { timeoutMs: 30000, intervalMs: 20, what: 'a queue, two running requests and KV blocks in use' });
  for (const r of await Promise.all(load)) assert.equal(r.status, 200, r.text);

  await pollUntil(async () => {
    const text = await scrape();
    return metric(text, 'vllm:num_requests_waiting' + label) === 0 &&
           metric(text, 'vllm:num_requests_running' + label) === 0 &&
           metric(text, 'vllm:kv_cache_usage_perc' + label) === 0;
  }, { timeoutMs: 10000, what: 'the gauges back to idle' });
});
