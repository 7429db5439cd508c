// Security properties over HTTP against a real server with two API keys:
//   * API keys: only the exact key opens the API (prefixes, extensions, other case, other
//     schemes are refused); the comparison itself is constant-time by construction
//     (server/api/auth.cpp: SHA-256 of the presented token, CRYPTO_memcmp against every key,
//     branch-free selection; unit-tested in tests/unit/server/auth_test.cpp);
//   * error bodies reveal no paths or internals: an injected forward fault whose Status
//     message carries a source path reaches the client as a generic message; unknown models
//     do not reveal the served file's path; the debug endpoint does not exist unless enabled;
//   * cache_salt isolation: the same prompt under two salts shares no block (0 cached tokens,
//     no prefix-cache hit) and gives the same greedy output; the same salt shares; two API keys
//     with the same salt never share (the tenant is part of the salt);
//   * per-key limits on stored chat sessions (--max-sessions-per-key): one key's sessions never
//     evict another key's, and another key's session id is "unknown" (404), even while busy.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { MODEL, MODEL_ID, metric, metrics, pollUntil, postJson, startServer } from './lib/server.mjs';

const K1 = 'sk-tenant-one-0123456789';
const K2 = 'sk-tenant-two-9876543210';
const h = (key) => ({ Authorization: `Bearer ${key}` });
// Long enough for several full 16-token blocks.
const LONG = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park ' +
             'with her friends. One day, she saw a big red ball under a tree and ran to get it.';

describe('security', () => {
  let server;
  before(async () => {
    server = await startServer(['--api-key', `${K1},${K2}`, '--max-sessions-per-key', '2', '--session-busy-wait', '0',
                                '--inject-forward-faults', '300']);
  });
  after(async () => {
    assert.equal(await server.stop(), 0, server.log());
  });

  const complete = (key, body) => postJson(`${server.url}/v1/completions`,
                                           { model: MODEL_ID, temperature: 0, max_tokens: 8, ...body }, h(key));
  const chat = (key, body) => postJson(`${server.url}/v1/chat/completions`,
                                       { model: MODEL_ID, temperature: 0, max_tokens: 4, ...body }, h(key));

  test('only the exact API key opens the API', async () => {
    for (const bad of [K1.slice(0, -1), `${K1}x`, K1.toUpperCase(), ` ${K1}x`, '', 'sk-tenant-one']) {
      const r = await complete(bad, { prompt: 'x' });
      assert.equal(r.status, 401, `key '${bad}': ${r.text}`);
    }
    const basic = await postJson(`${server.url}/v1/completions`, { model: MODEL_ID, prompt: 'x' },
                                 { Authorization: `Basic ${Buffer.from(`${K1}:`).toString('base64')}` });
    assert.equal(basic.status, 401);
    assert.equal((await complete(K1, { prompt: 'x', max_tokens: 1 })).status, 200);
    assert.equal((await complete(K2, { prompt: 'x', max_tokens: 1 })).status, 200);
  });

  test('error bodies reveal no paths or internals', async () => {
    const dir = path.dirname(path.resolve(MODEL));
    const unknown = await postJson(`${server.url}/v1/completions`, { model: 'gpt-4', prompt: 'x' }, h(K1));
    assert.equal(unknown.status, 404);
    if (!MODEL.startsWith('synthetic:')) assert.ok(!unknown.text.includes(dir), unknown.text);
    assert.equal((await fetch(`${server.url}/debug/cache`, { headers: h(K1) })).status, 404);
    // Forward pass 300 fails (the hook's Status names its source file): run into it.
    const m = await metrics(server.url);
    const passes = metric(m, 'kvserve_engine_steps_total') + metric(m, 'kvserve_forward_errors_total');
    const r = await complete(K1, { prompt: 'x', max_tokens: 300 - passes + 5, ignore_eos: true });
    assert.equal(r.status, 500, r.text.slice(0, 300));
    assert.equal(r.json.error.type, 'server_error');
    for (const secret of ['engine_core.cpp', '/engine/', 'injected', 'test hook', 'INTERNAL']) {
      assert.ok(!r.text.includes(secret), `the error body reveals '${secret}': ${r.text}`);
    }
    assert.match(server.log(), /injected forward fault at pass 300/, 'the log keeps the detail');
  });

  test('cache_salt isolation: different salts share nothing, the same salt shares', async () => {
    // The engine publishes its counters after the step that answered a request, so /metrics
    // may lag the response: wait until it has counted the lookups of the requests sent so far.
    const counters = async () => {
      const m = await metrics(server.url);
      return { hits: metric(m, 'kvserve_prefix_cache_hits_total'),
               queries: metric(m, 'kvserve_prefix_cache_queries_total') };
    };
    const c0 = await counters();
    const hitsAfter = async (requests) => (await pollUntil(async () => {
      const c = await counters();
      return c.queries >= c0.queries + requests ? c : null;
    }, { timeoutMs: 5000, what: `${requests} prefix-cache lookups in /metrics` })).hits;
    const a1 = await complete(K1, { prompt: LONG, cache_salt: 'salt-a' });
    assert.equal(a1.status, 200, a1.text);
    assert.equal(a1.json.usage.prompt_tokens_details.cached_tokens, 0);
    const b = await complete(K1, { prompt: LONG, cache_salt: 'salt-b' });
    assert.equal(b.json.usage.prompt_tokens_details.cached_tokens, 0, 'salt-b reused salt-a blocks');
    assert.equal(await hitsAfter(2), c0.hits, 'a prefix-cache hit across salts');
    assert.equal(b.json.choices[0].text, a1.json.choices[0].text);
    const other = await complete(K2, { prompt: LONG, cache_salt: 'salt-a' });
    assert.equal(other.json.usage.prompt_tokens_details.cached_tokens, 0, 'another key reused salt-a blocks');
    assert.equal(await hitsAfter(3), c0.hits);
    const a2 = await complete(K1, { prompt: LONG, cache_salt: 'salt-a' });
    const cached = a2.json.usage.prompt_tokens_details.cached_tokens;
    assert.ok(cached >= 32, `the same salt shared only ${cached} tokens`);
    assert.equal(await hitsAfter(4), c0.hits + 1);
    assert.equal(a2.json.choices[0].text, a1.json.choices[0].text);
    console.log(`cache_salt: prompt ${a1.json.usage.prompt_tokens} tokens; cached tokens: other salt 0, other key 0, ` +
                `same salt ${cached}`);
  });

  test('chat sessions: per-key limits and isolation', async () => {
    const turn = (key, id, text = 'Tell me a story.') => chat(key, { session_id: id, messages: [{ role: 'user', content: text }] });
    const sessions = async () => metric(await metrics(server.url), 'kvserve_chat_sessions');
    const s0 = await sessions();
    for (const id of ['k2-a', 'k2-b']) assert.equal((await turn(K2, id)).status, 200);
    for (const id of ['k1-a', 'k1-b', 'k1-c', 'k1-d']) assert.equal((await turn(K1, id)).status, 200);
    assert.equal(await sessions(), s0 + 4, 'a key holds more than --max-sessions-per-key sessions');
    // K2's sessions survived K1's churn: their next turn reuses the cache.
    const again = await chat(K2, { session_id: 'k2-a', messages: [
      { role: 'user', content: 'Tell me a story.' }, { role: 'assistant', content: 'ok' },
      { role: 'user', content: 'More.' }] });
    assert.equal(again.status, 200, again.text);
    assert.ok(again.json.usage.prompt_tokens_details.cached_tokens > 0, 'K2 lost its session to K1');
    // Session ids live in one namespace per key: K2 naming K1's id gets a session of its own
    // (no 404 telling it the id exists, no way to use or block K1's), also while K1 uses it.
    const foreign = await turn(K2, 'k1-d');
    assert.equal(foreign.status, 200, foreign.text);
    const long = fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { ...h(K1), 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: MODEL_ID, session_id: 'k1-d', max_tokens: 1500, ignore_eos: true, stream: true,
                             messages: [{ role: 'user', content: 'Tell me a story.' }] }),
    });
    const res = await long;
    const reader = res.body.getReader();
    await reader.read();  // K1's request is running on k1-d
    const busy = await turn(K2, 'k1-d');
    assert.equal(busy.status, 200, `K1's request blocks K2's session of the same name: ${busy.text}`);
    const own = await turn(K1, 'k1-d');
    assert.equal(own.status, 409, own.text);  // the owner is told it is busy
    await reader.cancel();
  });
});
