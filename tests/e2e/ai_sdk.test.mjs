// The Vercel AI SDK's OpenAI provider (npm `ai` and `@ai-sdk/openai`) against a real
// `kvserve serve` on loopback: generateText and streamText over the Responses API (the
// provider validates every object and event against its schemas), a conversation continued
// with previousResponseId (its cached input tokens), and chat completions through the same
// provider. Requires `npm ci` in tests/e2e.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

let generateText;
let streamText;
let createOpenAI;
try {
  ({ generateText, streamText } = await import('ai'));
  ({ createOpenAI } = await import('@ai-sdk/openai'));
} catch {
  console.log('SKIP: the ai / @ai-sdk/openai npm packages are not installed (run `npm ci` in tests/e2e)');
  process.exit(77);
}

import { MODEL_ID, startServer } from './lib/server.mjs';

describe('Vercel AI SDK', () => {
  let server;
  let provider;
  before(async () => {
    server = await startServer(['--api-key', 'sk-ai']);
    provider = createOpenAI({ baseURL: `${server.url}/v1`, apiKey: 'sk-ai' });
  });
  after(async () => {
    assert.equal(await server.stop(), 0, server.log());
  });

  test('generateText and streamText over the Responses API agree (greedy)', async () => {
    const options = { model: provider.responses(MODEL_ID), prompt: 'Once upon a time', maxOutputTokens: 20,
                      temperature: 0, maxRetries: 0 };
    const full = await generateText(options);
    assert.ok(full.text.length > 0, 'no text');
    assert.equal(full.finishReason, 'length');
    assert.equal(full.usage.outputTokens, 20);
    const stream = streamText({ ...options, onError: ({ error }) => { throw error; } });
    let text = '';
    for await (const part of stream.textStream) text += part;
    assert.equal(text, full.text);
    assert.equal((await stream.usage).outputTokens, 20);
    assert.equal(await stream.finishReason, 'length');
  });

  test('a conversation continued with previousResponseId prefills only the new input', async () => {
    const model = provider.responses(MODEL_ID);
    const first = await generateText({ model, prompt: 'Tell me about a cat.', maxOutputTokens: 24, maxRetries: 0 });
    const id = first.providerMetadata?.openai?.responseId;
    assert.ok(id?.startsWith('resp_'), `no response id: ${JSON.stringify(first.providerMetadata)}`);
    const second = await generateText({ model, prompt: 'What did it do next?', maxOutputTokens: 16, maxRetries: 0,
                                        providerOptions: { openai: { previousResponseId: id } } });
    const before = first.usage.inputTokens + first.usage.outputTokens;
    assert.ok(second.usage.cachedInputTokens >= before - 2,
              `reused ${second.usage.cachedInputTokens} of the ${before} tokens of the first turn`);
  });

  test('chat completions through the same provider', async () => {
    const r = await generateText({ model: provider.chat(MODEL_ID), prompt: 'Lily liked to', maxOutputTokens: 8,
                                   temperature: 0, maxRetries: 0 });
    assert.ok(r.text.length > 0);
    assert.equal(r.usage.outputTokens, 8);
  });
});
