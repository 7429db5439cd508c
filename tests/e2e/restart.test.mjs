// Conversations that outlive a restart (`--state-dir`), driven by the official openai npm SDK
// against a real `kvserve serve`: a chat completions session (the whole history re-sent each
// turn, as every client does) and a Responses API chain (previous_response_id). The server
// is stopped with SIGTERM and started again on the same directory; the next turn must reuse
// at least 95 % of what was computed before (usage's cached tokens) and give the text the
// server gives when it never restarted (greedy). Requires `npm ci` in tests/e2e.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';

let OpenAI;
try {
  ({ default: OpenAI } = await import('openai'));
} catch {
  console.log('SKIP: the openai npm package is not installed (run `npm ci` in tests/e2e)');
  process.exit(77);
}

import { MODEL_ID, startServer } from './lib/server.mjs';

const KEY = 'sk-restart';
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kvserve-state-'));
const USER = ['Tell me a story about a cat.', 'What did the cat do next?', 'And then?', 'How did it end?'];

async function start(stateDir) {
  const server = await startServer(['--api-key', `${KEY},sk-other`, ...(stateDir ? ['--state-dir', stateDir] : [])]);
  return { server, client: new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0 }) };
}

// One chat turn of `messages` (the client's whole history) in session `session`.
async function chatTurn(client, messages, session) {
  const r = await client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: 24, temperature: 0,
                                                   session_id: session });
  return { text: r.choices[0].message.content, usage: r.usage };
}

describe('--state-dir', () => {
  after(() => fs.rmSync(dir, { recursive: true, force: true }));

  test('a chat session and a Responses chain continue after a restart with their cache', async () => {
    // The reference: the same conversation on a server that never restarts.
    const ref = await start(null);
    const refMessages = [];
    let refLast;
    for (const line of USER) {
      refMessages.push({ role: 'user', content: line });
      refLast = await chatTurn(ref.client, refMessages, 'ref');
      refMessages.push({ role: 'assistant', content: refLast.text });
    }
    const refChain = [];
    let prev;
    for (const line of USER) {
      const r = await ref.client.responses.create({ model: MODEL_ID, input: line, max_output_tokens: 24,
                                                    temperature: 0, previous_response_id: prev });
      refChain.push(r.output_text);
      prev = r.id;
    }
    assert.equal(await ref.server.stop(), 0, ref.server.log());

    // Three turns, SIGTERM, a new server on the same directory, the fourth turn.
    let { server, client } = await start(dir);
    const messages = [];
    let last;
    for (const line of USER.slice(0, 3)) {
      messages.push({ role: 'user', content: line });
      last = await chatTurn(client, messages, 'story');
      messages.push({ role: 'assistant', content: last.text });
    }
    prev = undefined;
    let lastResponse;
    for (const line of USER.slice(0, 3)) {
      lastResponse = await client.responses.create({ model: MODEL_ID, input: line, max_output_tokens: 24,
                                                     temperature: 0, previous_response_id: prev });
      prev = lastResponse.id;
    }
    assert.equal(await server.stop(), 0, server.log());
    assert.match(server.log(), /saved 2 chat sessions/);

    ({ server, client } = await start(dir));
    try {
      messages.push({ role: 'user', content: USER[3] });
      const turn = await chatTurn(client, messages, 'story');
      const before = last.usage.prompt_tokens + last.usage.completion_tokens;
      assert.ok(turn.usage.prompt_tokens_details.cached_tokens >= 0.95 * before,
                `chat: reused ${turn.usage.prompt_tokens_details.cached_tokens} of ${before} tokens`);
      assert.equal(turn.text, refLast.text);

      // The stored response is read back; its chain continues in its session.
      const stored = await client.responses.retrieve(prev);
      assert.equal(stored.output_text, lastResponse.output_text);
      const next = await client.responses.create({ model: MODEL_ID, input: USER[3], max_output_tokens: 24,
                                                   temperature: 0, previous_response_id: prev });
      const had = lastResponse.usage.input_tokens + lastResponse.usage.output_tokens;
      assert.ok(next.usage.input_tokens_details.cached_tokens >= 0.95 * had,
                `responses: reused ${next.usage.input_tokens_details.cached_tokens} of ${had} tokens`);
      assert.equal(next.output_text, refChain[3]);
      console.log(`after the restart: chat reused ${turn.usage.prompt_tokens_details.cached_tokens} of ${before}, ` +
                  `responses ${next.usage.input_tokens_details.cached_tokens} of ${had} tokens`);

      // Another key sees neither.
      const other = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'sk-other', maxRetries: 0 });
      await assert.rejects(other.responses.retrieve(prev), (e) => e.status === 404);
    } finally {
      assert.equal(await server.stop(), 0, server.log());
    }
  });
});
