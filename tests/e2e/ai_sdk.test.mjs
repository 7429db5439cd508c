// The Vercel AI SDK's OpenAI provider (npm `ai` and `@ai-sdk/openai`) against a real
// `kvserve serve` on loopback: generateText and streamText over the Responses API (the
// provider validates every object and event against its schemas), a conversation continued
// with previousResponseId (its cached input tokens), chat completions through the same
// provider, generateObject and streamObject with a zod schema (the SDK validates the object),
// and generateText running a two-step tool loop (a forced call, the tool executed by the SDK,
// its result sent back, then text). Requires `npm ci` in tests/e2e.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

let generateText;
let streamText;
let generateObject;
let streamObject;
let tool;
let stepCountIs;
let createOpenAI;
let z;
try {
  ({ generateText, streamText, generateObject, streamObject, tool, stepCountIs } = await import('ai'));
  ({ createOpenAI } = await import('@ai-sdk/openai'));
  ({ z } = await import('zod'));
} catch {
  console.log('SKIP: the ai / @ai-sdk/openai npm packages are not installed (run `npm ci` in tests/e2e)');
  process.exit(77);
}

import { hermesModel } from './lib/models.mjs';
import { MODEL_ID, startServer } from './lib/server.mjs';

const Person = z.object({ name: z.string().max(10), age: z.number().int().min(0).max(120), pet: z.enum(['cat', 'dog']) });

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

  test('generateObject and streamObject: objects the schema accepts', async () => {
    const options = { model: provider.chat(MODEL_ID), schema: Person, prompt: 'Tell me about Lily.', maxOutputTokens: 400,
                      temperature: 0, maxRetries: 0 };
    const { object, finishReason } = await generateObject(options);
    assert.equal(finishReason, 'stop');
    Person.parse(object);
    const stream = streamObject({ ...options, onError: ({ error }) => { throw error; } });
    let partials = 0;
    for await (const partial of stream.partialObjectStream) partials += partial ? 1 : 0;
    assert.ok(partials > 1, 'the object did not stream');
    assert.deepEqual(await stream.object, object);  // greedy: the same object
  });
});

describe('Vercel AI SDK tool loop', { skip: hermesModel() === null ? 'no shared vocabulary' : false }, () => {
  let server;
  before(async () => {
    server = await startServer([], { model: hermesModel() });
  });
  after(async () => {
    assert.equal(await server.stop(), 0, server.log());
  });

  test('generateText: a tool call, its execution, its result sent back, then text', async () => {
    const provider = createOpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused' });
    const executed = [];
    const weather = tool({
      description: 'The weather in a city',
      inputSchema: z.object({ city: z.string().max(12) }),
      execute: async ({ city }) => {
        executed.push(city);
        return { city, celsius: 22 };
      },
    });
    const result = await generateText({
      model: provider.chat('qwen-tools'), tools: { weather }, prompt: 'What is the weather in Paris?',
      prepareStep: async ({ stepNumber }) => ({ toolChoice: stepNumber === 0 ? 'required' : 'none' }),
      stopWhen: stepCountIs(3), maxOutputTokens: 200, temperature: 0, maxRetries: 0,
    });
    assert.equal(result.steps.length, 2, JSON.stringify(result.steps.map((s) => s.finishReason)));
    const [first, second] = result.steps;
    assert.equal(first.finishReason, 'tool-calls');
    assert.equal(first.toolCalls.length, 1);
    assert.equal(first.toolCalls[0].toolName, 'weather');
    assert.deepEqual(executed, [first.toolCalls[0].input.city]);
    assert.equal(first.toolResults[0].output.celsius, 22);
    assert.ok(['stop', 'length'].includes(second.finishReason));
    // The call and its result went back as OpenAI messages, and the server rendered them.
    const body = typeof second.request.body === 'string' ? JSON.parse(second.request.body) : second.request.body;
    const sent = body.messages.map((m) => m.role);
    assert.deepEqual(sent, ['user', 'assistant', 'tool'], JSON.stringify(body.messages));
    assert.equal(body.messages[2].tool_call_id, first.toolCalls[0].toolCallId);
    // ... after the first step's prompt, which came from the prefix cache (whole blocks of it).
    assert.ok(second.usage.inputTokens > first.usage.inputTokens);
    assert.ok(second.usage.cachedInputTokens >= first.usage.inputTokens - 32, JSON.stringify([first.usage, second.usage]));
  });
});
