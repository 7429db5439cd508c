// Pinned prefixes over HTTP against a real `kvserve serve`: POST /v1/cache/pins prefills and
// pins a prompt (text or chat messages), a later request that starts with it reports the
// pinned tokens as cached, GET lists only the caller's pins with their bytes, DELETE unpins,
// --max-pinned-memory refuses a pin that would pass it (429), and bad pins get 400 / 404 /
// 405 with the usual error body.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { MODEL_ID, startServer } from './lib/server.mjs';

const KEY_A = 'sk-pins-a';
const KEY_B = 'sk-pins-b';
const SYSTEM = 'Once upon a time there was a little girl named Lily who loved to play outside in the sun. '.repeat(3);

async function call(url, method, path, key, body) {
  const res = await fetch(`${url}${path}`, {
    method,
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${key}` },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null, text };
}

describe('/v1/cache/pins', () => {
  let server;
  before(async () => {
    server = await startServer(['--api-key', `${KEY_A},${KEY_B}`, '--kv-cache-memory', '2MiB',
                                '--max-pinned-memory', '256KiB']);
  });
  after(async () => {
    assert.equal(await server.stop(), 0, server.log());
  });

  test('a pinned prompt is reused, listed to its owner only, and unpinned', async () => {
    const pin = await call(server.url, 'POST', '/v1/cache/pins', KEY_A, { model: MODEL_ID, prompt: SYSTEM });
    assert.equal(pin.status, 200, pin.text);
    assert.equal(pin.body.object, 'cache.pin');
    assert.match(pin.body.id, /^pin-\d+$/);
    assert.ok(pin.body.pinned_tokens >= 16 && pin.body.pinned_tokens <= pin.body.prompt_tokens, pin.text);
    assert.equal(pin.body.pinned_tokens % 16, 0);
    assert.ok(pin.body.bytes > 0);

    const reuse = await call(server.url, 'POST', '/v1/completions', KEY_A,
                             { model: MODEL_ID, prompt: `${SYSTEM}The end.`, max_tokens: 2, temperature: 0 });
    assert.equal(reuse.status, 200, reuse.text);
    assert.ok(reuse.body.usage.prompt_tokens_details.cached_tokens >= pin.body.pinned_tokens, reuse.text);
    // Another key is another cache domain: no reuse, and the pin is invisible to it.
    const other = await call(server.url, 'POST', '/v1/completions', KEY_B,
                             { model: MODEL_ID, prompt: `${SYSTEM}The end.`, max_tokens: 2, temperature: 0 });
    assert.equal(other.body.usage.prompt_tokens_details?.cached_tokens ?? 0, 0, other.text);
    const listB = await call(server.url, 'GET', '/v1/cache/pins', KEY_B);
    assert.equal(listB.status, 200);
    assert.deepEqual(listB.body.data, []);
    assert.equal((await call(server.url, 'DELETE', `/v1/cache/pins/${pin.body.id}`, KEY_B)).status, 404);

    const listA = await call(server.url, 'GET', '/v1/cache/pins', KEY_A);
    assert.equal(listA.body.object, 'list');
    assert.deepEqual(listA.body.data.map((p) => p.id), [pin.body.id]);
    assert.equal(listA.body.pinned_bytes, pin.body.bytes);
    assert.equal(listA.body.max_pinned_bytes, 256 * 1024);

    const del = await call(server.url, 'DELETE', `/v1/cache/pins/${pin.body.id}`, KEY_A);
    assert.equal(del.status, 200, del.text);
    assert.deepEqual(del.body, { id: pin.body.id, object: 'cache.pin', deleted: true });
    assert.deepEqual((await call(server.url, 'GET', '/v1/cache/pins', KEY_A)).body.data, []);
    assert.equal((await call(server.url, 'DELETE', `/v1/cache/pins/${pin.body.id}`, KEY_A)).status, 404);
  });

  test('chat messages are pinned as the start of a conversation', async () => {
    const messages = [{ role: 'system', content: SYSTEM }];
    const pin = await call(server.url, 'POST', '/v1/cache/pins', KEY_A, { messages });
    assert.equal(pin.status, 200, pin.text);
    const chat = await call(server.url, 'POST', '/v1/chat/completions', KEY_A,
                            { messages: [...messages, { role: 'user', content: 'Hi' }], max_tokens: 2 });
    assert.equal(chat.status, 200, chat.text);
    assert.ok(chat.body.usage.prompt_tokens_details.cached_tokens >= pin.body.pinned_tokens, chat.text);
    assert.equal((await call(server.url, 'DELETE', `/v1/cache/pins/${pin.body.id}`, KEY_A)).status, 200);
  });

  test('the pinned-memory limit and bad pins', async () => {
    // Distinct prompts until the limit refuses one; what was pinned stays within it.
    let refused = null;
    const ids = [];
    for (let i = 0; i < 64 && !refused; ++i) {
      const r = await call(server.url, 'POST', '/v1/cache/pins', KEY_B, { prompt: `${i} ${SYSTEM}` });
      if (r.status === 200) ids.push(r.body.id);
      else refused = r;
    }
    assert.ok(refused, 'no pin was refused');
    assert.equal(refused.status, 429, refused.text);
    assert.match(refused.body.error.message, /max-pinned-memory/);
    const list = await call(server.url, 'GET', '/v1/cache/pins', KEY_B);
    assert.ok(list.body.pinned_bytes <= 256 * 1024);
    for (const id of ids) assert.equal((await call(server.url, 'DELETE', `/v1/cache/pins/${id}`, KEY_B)).status, 200);

    const short = await call(server.url, 'POST', '/v1/cache/pins', KEY_A, { prompt: 'Hi' });
    assert.equal(short.status, 400, short.text);
    assert.match(short.body.error.message, /no whole KV block/);
    assert.equal((await call(server.url, 'POST', '/v1/cache/pins', KEY_A, {})).status, 400);
    assert.equal((await call(server.url, 'POST', '/v1/cache/pins', KEY_A, { prompt: ['x'] })).status, 400);
    assert.equal((await call(server.url, 'PUT', '/v1/cache/pins', KEY_A, {})).status, 405);
    assert.equal((await call(server.url, 'GET', '/v1/cache/pins', 'sk-wrong')).status, 401);
    const model = await call(server.url, 'POST', '/v1/cache/pins', KEY_A, { model: 'nope', prompt: SYSTEM });
    assert.equal(model.status, 404, model.text);
  });
});
