// HTTP API end to end against a real `kvserve serve` on loopback (Node's fetch and raw
// sockets): greedy stream == non-stream, 16 parallel streams, every error status of the API
// (each followed by a request that still succeeds), backpressure (429 + Retry-After), and a
// client that disconnects mid-stream (its KV blocks are freed: the occupancy metric returns
// to 0 and the request counts as aborted).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  MODEL_ID, dechunk, httpPost, metric, metrics, parseSse, pollUntil, postJson, rawRequest, readSse, startServer,
} from './lib/server.mjs';

const PROMPT = 'Once upon a time';

async function completion(url, body, headers = {}) {
  return postJson(`${url}/v1/completions`, { model: MODEL_ID, prompt: PROMPT, temperature: 0, ...body }, headers);
}

async function expectOk(url) {
  const r = await completion(url, { max_tokens: 4 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.usage.completion_tokens, 4);
}

function assertError(r, status, { type, param, code } = {}) {
  assert.equal(r.status, status, r.text);
  assert.ok(r.json?.error, `no OpenAI error body: ${r.text}`);
  assert.equal(typeof r.json.error.message, 'string');
  if (type) assert.equal(r.json.error.type, type);
  if (param !== undefined) assert.equal(r.json.error.param, param);
  if (code !== undefined) assert.equal(r.json.error.code, code);
}

describe('kvserve HTTP API', () => {
  let server;
  before(async () => {
    server = await startServer(['--api-key', 'sk-e2e', '--max-body-size', '65536']);
  });
  after(async () => {
    assert.equal(await server.stop(), 0, server.log());
  });
  const auth = { Authorization: 'Bearer sk-e2e' };

  test('greedy streaming output equals the non-streaming output', async () => {
    const full = await completion(server.url, { max_tokens: 32 }, auth);
    assert.equal(full.status, 200, full.text);
    assert.equal(full.json.object, 'text_completion');
    assert.equal(full.json.choices[0].finish_reason, 'length');
    assert.deepEqual(Object.keys(full.json.usage).slice(0, 3), ['prompt_tokens', 'completion_tokens', 'total_tokens']);

    const res = await fetch(`${server.url}/v1/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...auth },
      body: JSON.stringify({ model: MODEL_ID, prompt: PROMPT, temperature: 0, max_tokens: 32, stream: true,
                             stream_options: { include_usage: true } }),
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^text\/event-stream/);
    const { events, done } = await readSse(res);
    assert.ok(done, 'no [DONE]');
    const usage = events.at(-1);
    assert.deepEqual(usage.choices, []);
    assert.equal(usage.usage.completion_tokens, 32);
    const text = events.slice(0, -1).map((e) => e.choices[0].text).join('');
    assert.equal(text, full.json.choices[0].text);
    assert.equal(events.at(-2).choices[0].finish_reason, 'length');
    for (const e of events.slice(0, -1)) assert.equal(e.usage, null);
  });

  test('chat completion, streamed and not, agree', async () => {
    const body = { model: MODEL_ID, messages: [{ role: 'user', content: 'Tell me a story.' }], temperature: 0,
                   max_tokens: 24 };
    const full = await postJson(`${server.url}/v1/chat/completions`, body, auth);
    assert.equal(full.status, 200, full.text);
    assert.equal(full.json.object, 'chat.completion');
    assert.equal(full.json.choices[0].message.role, 'assistant');
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: auth, body: JSON.stringify({ ...body, stream: true }),
    });
    const { events, done } = await readSse(res);
    assert.ok(done);
    assert.deepEqual(events[0].choices[0].delta, { role: 'assistant', content: '' });
    const text = events.map((e) => e.choices[0].delta.content ?? '').join('');
    assert.equal(text, full.json.choices[0].message.content);
    assert.equal(events.at(-1).choices[0].finish_reason, 'length');
  });

  test('16 parallel streams complete', async () => {
    const one = async () => {
      const res = await fetch(`${server.url}/v1/completions`, {
        method: 'POST',
        headers: auth,
        body: JSON.stringify({ model: MODEL_ID, prompt: PROMPT, max_tokens: 48, temperature: 0, ignore_eos: true,
                               stream: true, stream_options: { include_usage: true } }),
      });
      assert.equal(res.status, 200);
      const { events, done } = await readSse(res);
      assert.ok(done);
      assert.equal(events.at(-1).usage.completion_tokens, 48);
      return events.slice(0, -1).map((e) => e.choices[0].text).join('');
    };
    const texts = await Promise.all(Array.from({ length: 16 }, one));
    assert.equal(texts.length, 16);
    for (const t of texts) assert.ok(t.length > 0);
  });

  test('400: known fields of the wrong type name the field', async () => {
    assertError(await completion(server.url, { temperature: 'hot' }, auth), 400,
                { type: 'invalid_request_error', param: 'temperature' });
    assertError(await completion(server.url, { max_tokens: '5' }, auth), 400, { param: 'max_tokens' });
    assertError(await postJson(`${server.url}/v1/chat/completions`, { model: MODEL_ID, messages: 'hi' }, auth), 400,
                { param: 'messages' });
    assertError(await postJson(`${server.url}/v1/completions`, '{"model": ', auth), 400);
    assertError(await completion(server.url, { prompt: Array(2100).fill(7) }, auth), 400,
                { code: 'context_length_exceeded' });
    const ok = await completion(server.url, { max_tokens: 4 }, auth);
    assert.equal(ok.status, 200);
  });

  test('401 without or with a wrong key; observability stays open', async () => {
    assertError(await completion(server.url, {}), 401, { type: 'authentication_error', code: 'invalid_api_key' });
    assertError(await completion(server.url, {}, { Authorization: 'Bearer sk-wrong' }), 401);
    assert.equal((await fetch(`${server.url}/health`)).status, 200);
    assert.equal((await fetch(`${server.url}/ready`)).status, 200);
    assert.equal((await fetch(`${server.url}/metrics`)).status, 200);
    assert.equal((await completion(server.url, { max_tokens: 2 }, auth)).status, 200);
  });

  test('404 unknown model and unknown route; 405 wrong method', async () => {
    assertError(await postJson(`${server.url}/v1/completions`, { model: 'gpt-4', prompt: 'x' }, auth), 404,
                { code: 'model_not_found', param: 'model' });
    assertError(await postJson(`${server.url}/v1/nothing`, {}, auth), 404);
    const r = await fetch(`${server.url}/v1/completions`, { headers: auth });
    assert.equal(r.status, 405);
    assert.equal(r.headers.get('allow'), 'POST');
    assert.equal((await completion(server.url, { max_tokens: 2 }, auth)).status, 200);
  });

  test('413 body too large and 431 header too large', async () => {
    const big = await completion(server.url, { prompt: 'a'.repeat(100000) }, auth);
    assertError(big, 413);
    const huge = await rawRequest(server.port, `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20000)}\r\n\r\n`,
                                  '\r\n\r\n');
    assert.match(huge.received, /^HTTP\/1\.1 431 /);
    huge.destroy();
    assert.equal((await completion(server.url, { max_tokens: 2 }, auth)).status, 200);
  });

  test('a client that disconnects mid-stream aborts its request and frees its blocks', async () => {
    const before = await metrics(server.url);
    const abortedBefore = metric(before, 'kvserve_requests_total{status="aborted"}') ?? 0;
    const socket = await rawRequest(server.port, httpPost('/v1/completions', {
      model: MODEL_ID, prompt: PROMPT, max_tokens: 2000, ignore_eos: true, stream: true,
    }, 'Authorization: Bearer sk-e2e\r\n'), 'data: ');
    assert.match(socket.received, /^HTTP\/1\.1 200 /);
    socket.destroy();
    await pollUntil(async () => {
      const text = await metrics(server.url);
      return metric(text, 'kvserve_requests_total{status="aborted"}') === abortedBefore + 1 &&
             metric(text, 'kvserve_kv_cache_blocks{state="used"}') === 0;
    }, { timeoutMs: 10000, what: 'the aborted request to free its blocks' });
    assert.equal((await completion(server.url, { max_tokens: 2 }, auth)).status, 200);
  });

  test('clients that hang up as soon as they have the whole reply are logged as completed', async () => {
    const gone = () => server.log().split('client_gone=yes').length - 1;
    const logged = () => server.log().split('route=/v1/completions').length - 1;
    const goneBefore = gone(), loggedBefore = logged();
    for (let i = 0; i < 40; ++i) {
      // Non-streaming and streaming: the socket is destroyed the moment the last byte arrives.
      const stream = i % 2 === 1;
      const socket = await rawRequest(server.port, httpPost('/v1/completions', {
        model: MODEL_ID, prompt: PROMPT, max_tokens: 3, stream,
      }, 'Authorization: Bearer sk-e2e\r\n'), stream ? '0\r\n\r\n' : '"total_tokens"');
      assert.match(socket.received, /^HTTP\/1\.1 200 /);
      socket.destroy();
    }
    await pollUntil(() => logged() >= loggedBefore + 40, { timeoutMs: 10000, what: 'the access log lines' });
    assert.equal(gone() - goneBefore, 0, 'a completed request was logged as abandoned (499)');
  });

  test('tokenize / detokenize round trip; models list', async () => {
    const t = await postJson(`${server.url}/tokenize`, { prompt: PROMPT }, auth);
    assert.equal(t.status, 200);
    assert.equal(t.json.count, t.json.tokens.length);
    const d = await postJson(`${server.url}/detokenize`, { tokens: t.json.tokens }, auth);
    assert.equal(d.json.prompt, PROMPT);
    const m = await fetch(`${server.url}/v1/models`, { headers: auth });
    assert.equal((await m.json()).data[0].id, MODEL_ID);
  });

  test('SSE wire format is exact', async () => {
    const socket = await rawRequest(server.port, httpPost('/v1/completions', {
      model: MODEL_ID, prompt: PROMPT, max_tokens: 3, temperature: 0, stream: true,
    }, 'Authorization: Bearer sk-e2e\r\nConnection: close\r\n'));
    const raw = socket.received;
    const head = raw.slice(0, raw.indexOf('\r\n\r\n'));
    assert.match(head, /^HTTP\/1\.1 200 OK\r\n/);
    assert.match(head, /\r\nContent-Type: text\/event-stream\r\n/);
    assert.match(head, /\r\nTransfer-Encoding: chunked\r\n/);
    assert.ok(raw.endsWith('\r\n0\r\n\r\n'), 'no last chunk');
    const body = dechunk(raw);
    const { events, done } = parseSse(body);
    assert.ok(done);
    assert.ok(body.endsWith('\n\ndata: [DONE]\n\n'));
    assert.equal(events.length, 3);
    for (const e of events) {
      assert.deepEqual(Object.keys(e), ['id', 'object', 'created', 'model', 'choices']);
      assert.equal(e.object, 'text_completion');
    }
  });
});

describe('backpressure', () => {
  let server;
  before(async () => {
    server = await startServer(['--max-num-seqs', '1', '--max-queued-requests', '1']);
  });
  after(async () => {
    assert.equal(await server.stop(), 0, server.log());
  });

  test('429 with Retry-After beyond --max-queued-requests; others are not disturbed', async () => {
    // A runs (the only slot), then B and C race for the one queue place: exactly one of them
    // is refused.
    const a = await rawRequest(server.port, httpPost('/v1/completions', {
      model: MODEL_ID, prompt: PROMPT, max_tokens: 2000, ignore_eos: true, stream: true,
    }), 'data: ');
    const pending = [completion(server.url, { max_tokens: 3 }), completion(server.url, { max_tokens: 3 })];
    const first = await Promise.race(pending.map((p, i) => p.then((r) => ({ r, i }))));
    assertError(first.r, 429, { type: 'rate_limit_error', code: 'rate_limit_exceeded' });
    assert.equal(first.r.headers.get('retry-after'), '1');
    a.destroy();  // frees the slot: the queued one runs now
    const other = await pending[1 - first.i];
    assert.equal(other.status, 200, other.text);
    await expectOk(server.url);
  });
});
