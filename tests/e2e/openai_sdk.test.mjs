// The official `openai` npm SDK against a real `kvserve serve` on loopback: completions, chat,
// streaming (with stream_options.include_usage), logprobs, models, the Responses API
// (create, stream, a previous_response_id chain, retrieve, input items, delete), and the SDK's
// typed errors for a wrong model and a wrong key. Requires `npm ci` in tests/e2e.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

let OpenAI;
try {
  ({ default: OpenAI } = await import('openai'));
} catch {
  console.log('SKIP: the openai npm package is not installed (run `npm ci` in tests/e2e)');
  process.exit(77);
}

import { MODEL_ID, startServer } from './lib/server.mjs';

describe('openai SDK', () => {
  let server;
  let client;
  before(async () => {
    server = await startServer(['--api-key', 'sk-sdk']);
    client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'sk-sdk', maxRetries: 0 });
  });
  after(async () => {
    assert.equal(await server.stop(), 0, server.log());
  });

  test('models.list', async () => {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    assert.deepEqual(ids, [MODEL_ID]);
  });

  test('completions.create', async () => {
    const r = await client.completions.create({ model: MODEL_ID, prompt: 'Once upon a time', max_tokens: 16,
                                                 temperature: 0 });
    assert.equal(r.object, 'text_completion');
    assert.equal(r.choices.length, 1);
    assert.ok(r.choices[0].text.length > 0);
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 16);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 16);
  });

  test('completions streaming equals non-streaming (greedy)', async () => {
    const params = { model: MODEL_ID, prompt: 'Lily liked to', max_tokens: 20, temperature: 0 };
    const full = await client.completions.create(params);
    const stream = await client.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let usage;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) text += c.text;
    }
    assert.equal(text, full.choices[0].text);
    assert.equal(usage.completion_tokens, 20);
  });

  test('chat.completions.create', async () => {
    const r = await client.chat.completions.create({
      model: MODEL_ID,
      messages: [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: 'Tell me one.' }],
      max_completion_tokens: 16,
      temperature: 0,
      logprobs: true,
      top_logprobs: 2,
    });
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.equal(r.usage.completion_tokens, 16);
    assert.equal(r.choices[0].logprobs.content.length, 16);
    assert.equal(r.choices[0].logprobs.content[0].top_logprobs.length, 2);
  });

  test('chat streaming with include_usage', async () => {
    const params = { model: MODEL_ID, messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 24,
                     temperature: 0 };
    const full = await client.chat.completions.create(params);
    const stream = await client.chat.completions.create({ ...params, stream: true,
                                                          stream_options: { include_usage: true } });
    let content = '';
    let role;
    let finish;
    const chunks = [];
    for await (const chunk of stream) {
      chunks.push(chunk);
      for (const c of chunk.choices) {
        role ??= c.delta.role;
        content += c.delta.content ?? '';
        finish = c.finish_reason ?? finish;
      }
    }
    assert.equal(role, 'assistant');
    assert.equal(content, full.choices[0].message.content);
    assert.equal(finish, 'length');
    const last = chunks.at(-1);
    assert.deepEqual(last.choices, []);
    assert.equal(last.usage.completion_tokens, 24);
    assert.equal(last.usage.prompt_tokens, full.usage.prompt_tokens);
  });

  test('responses.create, streamed and not, agree (greedy)', async () => {
    const params = { model: MODEL_ID, input: 'Lily liked to', max_output_tokens: 20, temperature: 0, store: false };
    const full = await client.responses.create(params);
    assert.equal(full.object, 'response');
    assert.equal(full.status, 'incomplete');
    assert.equal(full.incomplete_details.reason, 'max_output_tokens');
    assert.ok(full.output_text.length > 0, 'the SDK found no output text');
    assert.equal(full.usage.output_tokens, 20);
    const stream = await client.responses.create({ ...params, stream: true });
    const types = [];
    let text = '';
    let last;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.output_text.delta') text += event.delta;
      last = event;
    }
    assert.equal(types[0], 'response.created');
    assert.equal(last.type, 'response.incomplete');
    assert.equal(text, full.output_text);
    assert.equal(last.response.usage.output_tokens, 20);
  });

  test('responses: a previous_response_id chain prefills only the new input; retrieve, input items, delete',
       async () => {
    const r1 = await client.responses.create({ model: MODEL_ID, input: 'Tell me a story about a dog.',
                                               instructions: 'You tell short stories.', max_output_tokens: 24 });
    const r2 = await client.responses.create({ model: MODEL_ID, previous_response_id: r1.id,
                                               input: [{ role: 'user', content: 'What did the dog do next?' }],
                                               max_output_tokens: 24 });
    const r3 = await client.responses.create({ model: MODEL_ID, previous_response_id: r2.id,
                                               input: 'And then?', max_output_tokens: 8 });
    // Instructions apply to one response: r2 re-renders without them, so r1's prefix differs;
    // from r2 on the chain reuses everything it computed.
    const before = r2.usage.input_tokens + r2.usage.output_tokens;
    assert.ok(r3.usage.input_tokens_details.cached_tokens >= before - 2,
              `r3 reused ${r3.usage.input_tokens_details.cached_tokens} of ${before} tokens`);
    assert.equal(r3.previous_response_id, r2.id);
    const again = await client.responses.retrieve(r2.id);
    assert.equal(again.id, r2.id);
    assert.equal(again.output_text, r2.output_text);
    const items = [];
    for await (const item of client.responses.inputItems.list(r2.id)) items.push(item);
    assert.equal(items.length, 1);
    assert.equal(items[0].content[0].text, 'What did the dog do next?');
    await client.responses.delete(r1.id);
    await assert.rejects(client.responses.retrieve(r1.id), (e) => e instanceof OpenAI.NotFoundError);
    await assert.rejects(client.responses.create({ model: MODEL_ID, previous_response_id: 'resp_nope', input: 'x' }),
                         (e) => e instanceof OpenAI.NotFoundError && e.param === 'previous_response_id');
  });

  test('SDK errors: unknown model (404), wrong key (401)', async () => {
    await assert.rejects(client.completions.create({ model: 'gpt-4o', prompt: 'x' }),
                         (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === 'model_not_found');
    const bad = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'sk-wrong', maxRetries: 0 });
    await assert.rejects(bad.completions.create({ model: MODEL_ID, prompt: 'x' }),
                         (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
    await assert.rejects(client.completions.create({ model: MODEL_ID, prompt: 'x', temperature: 'hot' }),
                         (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature');
  });
});
