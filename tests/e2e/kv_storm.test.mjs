// KV-exhaustion storm: a KV pool sized for about four sequences and 64 concurrent long greedy
// requests. Every request must finish (200, finish_reason "length") with exactly the output the
// same request produces alone on a roomy server, none may get a 5xx, the preemption counter
// must show that preemption happened, and afterwards no block is in use and the cache passes
// VerifyIntegrity (GET /debug/cache).
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { MODEL_ID, metric, metrics, pollUntil, postJson, readSse, startServer } from './lib/server.mjs';

const PROMPTS = [
  'Once upon a time', 'The little dog', 'Lily wanted to', 'One day, a boy named Tom',
  'The sun was hot and', 'Mom said to the girl', 'In the big forest there was', 'The cat and the bird',
];
const MAX_TOKENS = 200;
const CONCURRENT = 64;
const SEQUENCES_IN_POOL = 4;

function body(prompt, stream) {
  return { model: MODEL_ID, prompt, max_tokens: MAX_TOKENS, temperature: 0, ignore_eos: true, stream };
}

// One request; returns { status, text, finish }.
async function run(url, prompt, stream) {
  if (!stream) {
    const r = await postJson(`${url}/v1/completions`, body(prompt, false));
    return { status: r.status, text: r.json?.choices?.[0]?.text, finish: r.json?.choices?.[0]?.finish_reason,
             raw: r.text };
  }
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body(prompt, true)),
  });
  if (res.status !== 200) return { status: res.status, raw: await res.text() };
  const { events, done } = await readSse(res);
  const errors = events.filter((e) => e.error);
  return {
    status: errors.length ? 500 : 200,
    text: events.map((e) => e.choices?.[0]?.text ?? '').join(''),
    finish: done ? events.at(-1)?.choices?.[0]?.finish_reason : 'no [DONE]',
    raw: JSON.stringify(errors),
  };
}

test('64 concurrent long requests through a pool for ~4 sequences: correct output via preemption', async () => {
  // 1. Reference outputs, one request at a time, on a server with room to spare.
  const roomy = await startServer(['--max-num-seqs', '1']);
  const reference = new Map();
  let blockBytes;
  try {
    for (const p of PROMPTS) {
      const r = await run(roomy.url, p, false);
      assert.equal(r.status, 200, r.raw);
      assert.equal(r.finish, 'length');
      reference.set(p, r.text);
    }
    const m = await metrics(roomy.url);
    const capacity = metric(m, 'kvserve_kv_cache_capacity_blocks');
    const bytes = m.split('\n').filter((l) => l.startsWith('kvserve_kv_cache_bytes{'))
      .reduce((sum, l) => sum + Number(l.split(' ').at(-1)), 0);
    blockBytes = bytes / capacity;
  } finally {
    assert.equal(await roomy.stop(), 0, roomy.log());
  }
  assert.ok(blockBytes > 0);

  // 2. The storm. Longest sequence: prompt (< 16 tokens) + 200 -> at most 14 blocks of 16.
  const blocksPerSequence = Math.ceil((16 + MAX_TOKENS) / 16);
  const poolBytes = Math.round(blockBytes * blocksPerSequence * SEQUENCES_IN_POOL);
  const server = await startServer(['--kv-cache-memory', String(poolBytes), '--enable-debug-endpoints']);
  try {
    const start = Date.now();
    const jobs = Array.from({ length: CONCURRENT }, (_, i) => {
      const prompt = PROMPTS[i % PROMPTS.length];
      return run(server.url, prompt, i % 2 === 1).then((r) => ({ ...r, prompt, i }));
    });
    const results = await Promise.all(jobs);
    const seconds = (Date.now() - start) / 1000;
    const text = await metrics(server.url);
    const preemptions = metric(text, 'kvserve_preemptions_total');
    const capacity = metric(text, 'kvserve_kv_cache_capacity_blocks');
    let mismatches = 0;
    for (const r of results) {
      assert.equal(r.status, 200, `request ${r.i}: ${r.raw}`);
      assert.equal(r.finish, 'length', `request ${r.i}`);
      if (r.text !== reference.get(r.prompt)) mismatches++;
    }
    console.log(`storm: ${CONCURRENT} requests x ${MAX_TOKENS} tokens in ${seconds.toFixed(1)} s; pool ` +
                `${capacity} blocks (${poolBytes} bytes); preemptions ${preemptions}; greedy mismatches ${mismatches}`);
    assert.equal(mismatches, 0, 'outputs differ from the same request alone');
    assert.ok(preemptions > 0, 'the preemption counter did not move');
    await pollUntil(async () => metric(await metrics(server.url), 'kvserve_kv_cache_blocks{state="used"}') === 0,
                    { what: 'used blocks back to 0' });
    const debug = await fetch(`${server.url}/debug/cache`);
    const d = await debug.json();
    assert.equal(debug.status, 200, JSON.stringify(d));
    assert.equal(d.integrity, 'ok');
    assert.equal(d.blocks.used, 0);
  } finally {
    assert.equal(await server.stop(), 0, server.log());
  }
});
