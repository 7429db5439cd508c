// Graceful drain: SIGTERM while a stream is in flight -> /ready 503 and new requests 503 while
// the stream runs to its end ([DONE], every token), then the process exits 0.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { MODEL_ID, dechunk, httpPost, parseSse, pollUntil, postJson, rawRequest, startServer } from './lib/server.mjs';

test('SIGTERM drains in-flight streams and exits 0', async () => {
  const server = await startServer(['--shutdown-grace', '60']);
  const maxTokens = 2000;
  const stream = await rawRequest(server.port, httpPost('/v1/completions', {
    model: MODEL_ID, prompt: 'Once upon a time', max_tokens: maxTokens, ignore_eos: true, stream: true,
    stream_options: { include_usage: true },
  }, 'Connection: close\r\n'), 'data: ');
  const ended = new Promise((resolve) => stream.on('end', resolve));
  server.proc.kill('SIGTERM');

  await pollUntil(async () => (await fetch(`${server.url}/ready`)).status === 503, { what: '/ready 503' });
  const refused = await postJson(`${server.url}/v1/completions`, { model: MODEL_ID, prompt: 'x' });
  assert.equal(refused.status, 503);
  assert.equal(refused.json.error.type, 'service_unavailable_error');
  assert.equal((await fetch(`${server.url}/health`)).status, 200);

  await ended;
  const { events, done } = parseSse(dechunk(stream.received));
  assert.ok(done, 'the in-flight stream did not finish');
  assert.equal(events.at(-1).usage.completion_tokens, maxTokens);
  assert.equal(events.at(-2).choices[0].finish_reason, 'length');
  assert.equal(await server.exited, 0, server.log());
});
