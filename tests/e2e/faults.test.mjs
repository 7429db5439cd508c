// Fault injection (test hooks, hidden flag `serve --inject-forward-faults=SPEC`; see
// cli/engine_options.h) and start-up resource failures:
//   * one failing forward pass: the request in that batch gets an error (500 / an error event
//     in its stream) whose message reveals nothing internal, a request waiting outside the
//     batch completes normally, /ready stays 200 and no block leaks;
//   * a persistent fault (every pass fails): after 3 consecutive failures /ready is 503
//     "unhealthy", kvserve_engine_healthy is 0, new requests get 503, /health stays 200;
//   * too little memory at start-up: a KV pool under 2 blocks, a pool larger than the machine,
//     and a model or pool beyond an address-space limit (`ulimit -v`) each give one clear
//     line on stderr and a non-zero exit -- never a crash.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { test } from 'node:test';

import { BIN, MODEL, MODEL_ID, metric, metrics, pollUntil, postJson, readSse, startServer } from './lib/server.mjs';

const PROMPT = 'Once upon a time';
const INTERNALS = /injected|test hook|\.cpp|\/work\/|INTERNAL:|forward_index/;

test('one failing forward pass fails the requests of that batch; a waiting request completes', async () => {
  // One sequence per step: the long streaming request runs alone; the second one waits.
  const server = await startServer(['--max-num-seqs', '1', '--inject-forward-faults', '600']);
  try {
    const a = await fetch(`${server.url}/v1/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: MODEL_ID, prompt: PROMPT, max_tokens: 1500, ignore_eos: true, stream: true }),
    });
    assert.equal(a.status, 200);
    const reader = a.body.getReader();
    await reader.read();  // the first event: A runs (pass 0 was its prefill)
    const b = postJson(`${server.url}/v1/completions`,
                       { model: MODEL_ID, prompt: PROMPT, max_tokens: 20, ignore_eos: true, temperature: 0 });
    let rest = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      rest += new TextDecoder().decode(value);
    }
    const errorEvent = rest.split('\n\n').find((e) => e.startsWith('data: {"error"'));
    assert.ok(errorEvent, `no error event in the failed stream: ...${rest.slice(-300)}`);
    const error = JSON.parse(errorEvent.slice(6)).error;
    assert.equal(error.type, 'server_error');
    assert.doesNotMatch(error.message, INTERNALS);
    assert.ok(rest.endsWith('data: [DONE]\n\n'));
    const rb = await b;
    assert.equal(rb.status, 200, rb.text);
    assert.equal(rb.json.usage.completion_tokens, 20);
    const m = await metrics(server.url);
    assert.equal(metric(m, 'kvserve_forward_errors_total'), 1);
    assert.equal(metric(m, 'kvserve_requests_total{status="error"}'), 1);
    assert.equal(metric(m, 'kvserve_engine_healthy'), 1);
    assert.equal((await fetch(`${server.url}/ready`)).status, 200);
    // A non-streaming request hit by a fault: 500 with the same generic message.
    await pollUntil(async () => metric(await metrics(server.url), 'kvserve_kv_cache_blocks{state="used"}') === 0,
                    { what: 'used blocks back to 0' });
  } finally {
    assert.equal(await server.stop(), 0, server.log());
  }
});

test('a persistent fault: /ready reports it, new requests get 503, /health stays up', async () => {
  const server = await startServer(['--inject-forward-faults', '2-']);
  try {
    const ok = await postJson(`${server.url}/v1/completions`, { model: MODEL_ID, prompt: PROMPT, max_tokens: 2 });
    assert.equal(ok.status, 200, ok.text);  // passes 0 and 1
    for (let i = 0; i < 3; i++) {
      const r = await postJson(`${server.url}/v1/completions`, { model: MODEL_ID, prompt: PROMPT, max_tokens: 4 });
      assert.equal(r.status, 500, r.text);
      assert.equal(r.json.error.type, 'server_error');
      assert.doesNotMatch(r.text, INTERNALS);
    }
    const ready = await fetch(`${server.url}/ready`);
    assert.equal(ready.status, 503);
    assert.deepEqual(await ready.json(), { status: 'unhealthy' });
    assert.equal((await fetch(`${server.url}/health`)).status, 200);
    const m = await metrics(server.url);
    assert.equal(metric(m, 'kvserve_engine_healthy'), 0);
    assert.equal(metric(m, 'kvserve_forward_errors_total'), 3);
    const refused = await postJson(`${server.url}/v1/completions`, { model: MODEL_ID, prompt: PROMPT, max_tokens: 2 });
    assert.equal(refused.status, 503, refused.text);
    assert.equal(refused.headers.get('retry-after'), '1');
    assert.doesNotMatch(refused.text, INTERNALS);
    assert.equal(metric(await metrics(server.url), 'kvserve_kv_cache_blocks{state="used"}'), 0);
  } finally {
    assert.equal(await server.stop(), 0, server.log());
  }
});

// Runs `kvserve serve` to its exit (it must exit by itself), optionally under `ulimit -v`.
function serveUntilExit(args, ulimitKib) {
  const serve = [BIN, 'serve', '--host', '127.0.0.1', '--http-port', '0', '--grpc-port', '-1', '--threads', '1',
                 ...args].map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(' ');
  const script = ulimitKib ? `ulimit -v ${ulimitKib} && exec ${serve}` : `exec ${serve}`;
  // Under ASan a failed allocation must return null as it does without it (not abort).
  const env = { ...process.env, ASAN_OPTIONS: `${process.env.ASAN_OPTIONS ?? ''}:allocator_may_return_null=1` };
  const r = spawnSync('/bin/sh', ['-c', script], { encoding: 'utf8', timeout: 120000, env });
  const errors = r.stderr.split('\n').filter((l) => l.startsWith('kvserve serve:'));
  return { status: r.status, signal: r.signal, stderr: r.stderr, errors };
}

const sanitized = () => fs.readFileSync(BIN).includes('__asan_init');  // GCC or clang ASan

test('too little memory at start-up: a clear message and a non-zero exit', async (t) => {
  const tiny = serveUntilExit(['--model', MODEL, '--kv-cache-memory', '1KiB']);
  assert.equal(tiny.status, 2, tiny.stderr);
  assert.equal(tiny.errors.length, 1, tiny.stderr);
  assert.match(tiny.errors[0], /--kv-cache-memory 1024 bytes holds fewer than 2 blocks/);

  const huge = serveUntilExit(['--model', MODEL, '--kv-cache-memory', '64TiB']);
  assert.equal(huge.status, 1, huge.stderr);
  assert.equal(huge.errors.length, 1, huge.stderr);
  assert.match(huge.errors[0], /cannot allocate \d+ bytes of host memory for the KV cache/);

  if (sanitized()) {
    t.diagnostic('ulimit -v cases skipped: ASan reserves terabytes of address space for its shadow memory');
    return;
  }
  // Within a 1.5 GB address space: a 2 GiB pool, then a model whose weights alone need more.
  const pool = serveUntilExit(['--model', MODEL, '--kv-cache-memory', '2GiB'], 1500000);
  assert.equal(pool.status, 1, pool.stderr);
  assert.equal(pool.errors.length, 1, pool.stderr);
  assert.match(pool.errors[0], /cannot allocate \d+ bytes of host memory for the KV cache|out of memory/);

  const model = serveUntilExit(['--model', 'synthetic:1b', '--kv-cache-memory', '16MiB'], 1500000);
  assert.equal(model.signal, null, model.stderr);
  assert.equal(model.status, 1, model.stderr);
  assert.equal(model.errors.length, 1, model.stderr);
  assert.match(model.errors[0], /out of memory while loading the model 'synthetic:1b'/);
  console.log(`start-up failures: ${[tiny, huge, pool, model].map((r) => `exit ${r.status}`).join(', ')}`);
});
