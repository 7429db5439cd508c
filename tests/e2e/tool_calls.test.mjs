// Tool calls and structured outputs through the official `openai` npm SDK, unmodified, against a
// real `kvserve serve`: chat.completions.parse with zodFunction tools and zodResponseFormat (the
// SDK parses and validates every call and object with zod), streamed tool calls whose fragments
// concatenate to the complete response's arguments (closing braces included), every
// tool_choice, a conversation that sends the calls and their results back, and the errors.
// Every tool format: generic (stories260K's plain template), Hermes (Qwen2.5's template),
// Llama 3.1 and Mistral v0.3, each over a real vocabulary (tests/data holds the templates), and
// the syntaxes the server derives from real templates of ../shared/templates (Qwen3-Coder's and
// GLM's argument markup, DeepSeek, Mistral Small 3.2, Functionary, gpt-oss through its harmony
// channels, Granite). The weights are random: every valid call is the constraint's doing.
// Requires `npm ci` in tests/e2e.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

let OpenAI;
let zodFunction;
let zodResponseFormat;
let z;
try {
  ({ default: OpenAI } = await import('openai'));
  ({ zodFunction, zodResponseFormat } = await import('openai/helpers/zod'));
  ({ z } = await import('zod'));
} catch {
  console.log('SKIP: the openai / zod npm packages are not installed (run `npm ci` in tests/e2e)');
  process.exit(77);
}

import { hermesModel, llama31Model, mistralModel, sharedTemplateModel, sharedTemplateModels } from './lib/models.mjs';
import { MODEL, startServer } from './lib/server.mjs';

const Weather = z.object({ city: z.string().max(12), unit: z.enum(['c', 'f']) });
const Time = z.object({ tz: z.string().max(8) });
const tools = [zodFunction({ name: 'get_weather', parameters: Weather, description: 'The weather in a city' }),
               zodFunction({ name: 'get_time', parameters: Time, description: 'The time in a time zone' })];
const schemas = { get_weather: Weather, get_time: Time };
const question = [{ role: 'user', content: 'What is the weather in Paris, and the time in Tokyo?' }];

// Each family's model, and the ids its calls get (Mistral's template wants 9 characters).
const OPENAI_ID = /^call_[A-Za-z0-9]{24}$/;
const families = [{ name: 'generic (plain template)', model: MODEL, id: OPENAI_ID }];
const hermes = hermesModel();
if (hermes) {
  families.push({ name: 'hermes (Qwen2.5 template)', model: hermes, id: OPENAI_ID },
                { name: 'llama3.1 (Llama 3.1 template)', model: llama31Model(), id: OPENAI_ID },
                { name: 'mistral (Mistral v0.3 template)', model: mistralModel(), id: /^[A-Za-z0-9]{9}$/ });
}
// The templates of models people run, their syntaxes derived by the server.
for (const [name, m] of Object.entries(sharedTemplateModels)) {
  const model = sharedTemplateModel(name);
  if (model) families.push({ name, model, id: m.id ?? OPENAI_ID, args: m.args ?? [] });
}

// Rebuilds the calls of a streamed chat completion: id, type and name once per index,
// arguments concatenated.
async function collectStream(stream) {
  const calls = [];
  let content = '';
  let finish = null;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    content += choice.delta.content ?? '';
    for (const d of choice.delta.tool_calls ?? []) {
      if (d.index === calls.length) {
        assert.ok(d.id && d.type === 'function' && d.function.name, `first fragment: ${JSON.stringify(d)}`);
        calls.push({ id: d.id, name: d.function.name, arguments: '' });
      } else {
        assert.equal(d.index, calls.length - 1);
        assert.equal(d.id, undefined, 'the id comes once');
      }
      calls[d.index].arguments += d.function.arguments ?? '';
    }
    finish = choice.finish_reason ?? finish;
  }
  return { calls, content, finish };
}

for (const family of families) {
  describe(`openai SDK tool calls: ${family.name}`, () => {
    let server;
    let client;
    let modelId;
    before(async () => {
      server = await startServer(['--max-model-len', '2048', ...(family.args ?? [])], { model: family.model });
      client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
      modelId = (await client.models.list()).data[0].id;
    });
    after(async () => {
      assert.equal(await server.stop(), 0, server.log());
    });

    test('tool_choice required: parse() validates every call with zod', async () => {
      let called = 0;
      for (let seed = 0; seed < 6; ++seed) {
        const r = await client.chat.completions.parse({ model: modelId, messages: question, tools, parallel_tool_calls: false,
                                                        tool_choice: 'required', temperature: 1, seed, max_tokens: 200 });
        const choice = r.choices[0];
        if (choice.finish_reason === 'length') continue;
        assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
        assert.ok(choice.message.tool_calls.length >= 1);
        for (const call of choice.message.tool_calls) {
          assert.match(call.id, family.id);
          schemas[call.function.name].parse(call.function.parsed_arguments);  // throws if invalid
          assert.deepEqual(JSON.parse(call.function.arguments), call.function.parsed_arguments);
          ++called;
        }
      }
      assert.ok(called >= 3, `only ${called} calls in 6 requests`);
    });

    test('parallel calls: every finished call parses and validates', async () => {
      let called = 0;
      for (let seed = 0; seed < 4; ++seed) {
        const r = await client.chat.completions.create({ model: modelId, messages: question, tools,
                                                         tool_choice: 'required', temperature: 1, seed, max_tokens: 400 });
        const choice = r.choices[0];
        if (choice.finish_reason === 'length') {  // cut inside a call: no call, the text as content
          assert.equal(choice.message.tool_calls, undefined);
          assert.equal(typeof choice.message.content, 'string');
          continue;
        }
        for (const call of choice.message.tool_calls) {
          schemas[call.function.name].parse(JSON.parse(call.function.arguments));
          ++called;
        }
      }
      // stories260K's random generic-format lists rarely close within the budget; the others do.
      if (family.model !== MODEL) assert.ok(called >= 1, 'no request finished its calls');
    });

    test('a named function is called once, with its own arguments', async () => {
      const r = await client.chat.completions.parse({ model: modelId, messages: question, tools, temperature: 1, seed: 9,
                                                      tool_choice: { type: 'function', function: { name: 'get_time' } },
                                                      max_tokens: 160 });
      const { message, finish_reason: finish } = r.choices[0];
      assert.equal(finish, 'tool_calls', JSON.stringify(r.choices[0]));
      assert.equal(message.tool_calls.length, 1);
      assert.equal(message.tool_calls[0].function.name, 'get_time');
      Time.parse(message.tool_calls[0].function.parsed_arguments);
    });

    test('streamed tool calls concatenate to the complete response (greedy)', async () => {
      const body = { model: modelId, messages: question, tools, tool_choice: 'required', parallel_tool_calls: false,
                     temperature: 0, max_tokens: 200 };
      const full = await client.chat.completions.create(body);
      assert.equal(full.choices[0].finish_reason, 'tool_calls', JSON.stringify(full.choices[0]));
      const streamed = await collectStream(await client.chat.completions.create({ ...body, stream: true }));
      assert.equal(streamed.finish, 'tool_calls');
      const calls = full.choices[0].message.tool_calls;
      assert.equal(streamed.calls.length, calls.length);
      calls.forEach((c, i) => {
        assert.equal(streamed.calls[i].name, c.function.name);
        assert.equal(streamed.calls[i].arguments, c.function.arguments);
        schemas[c.function.name].parse(JSON.parse(streamed.calls[i].arguments));  // the closing brace came
      });
      // The SDK's own stream helper assembles the same calls.
      const helper = client.chat.completions.stream({ ...body, stream: true });
      const final = await helper.finalChatCompletion();
      assert.deepEqual(final.choices[0].message.tool_calls.map((c) => c.function.arguments),
                       calls.map((c) => c.function.arguments));
    });

    test('the calls and their results go back into the conversation', async () => {
      const first = await client.chat.completions.create({ model: modelId, messages: question, tools, temperature: 0,
                                                           tool_choice: 'required', parallel_tool_calls: false, max_tokens: 200 });
      const { message } = first.choices[0];
      assert.ok(message.tool_calls?.length >= 1, JSON.stringify(first.choices[0]));
      const messages = [...question, message,
                        ...message.tool_calls.map((c) => ({ role: 'tool', tool_call_id: c.id, content: '22 C, sunny' }))];
      const second = await client.chat.completions.create({ model: modelId, messages, tools, max_tokens: 200,
                                                            parallel_tool_calls: false, temperature: 0 });
      assert.ok(['stop', 'length', 'tool_calls'].includes(second.choices[0].finish_reason));
      assert.ok(second.usage.prompt_tokens > first.usage.prompt_tokens);
      // The first turn's prompt comes from the prefix cache (whole blocks of it).
      assert.ok(second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 32,
                JSON.stringify([first.usage, second.usage]));
      // tool_choice none: the same conversation, no call.
      const plain = await client.chat.completions.create({ model: modelId, messages, tools, tool_choice: 'none',
                                                           max_tokens: 8, temperature: 0 });
      assert.equal(plain.choices[0].message.tool_calls, undefined);
    });

    test('tool_choice auto: text, or calls that parse', async () => {
      for (let seed = 0; seed < 3; ++seed) {
        const r = await client.chat.completions.create({ model: modelId, messages: question, tools, temperature: 1,
                                                         seed, max_tokens: 60 });
        const choice = r.choices[0];
        if (choice.finish_reason === 'tool_calls') {
          for (const c of choice.message.tool_calls) schemas[c.function.name].parse(JSON.parse(c.function.arguments));
        } else {
          assert.ok(['stop', 'length'].includes(choice.finish_reason), JSON.stringify(choice));
          assert.equal(typeof choice.message.content, 'string');
        }
      }
    });

    test('zodResponseFormat: parse() returns an object zod accepts', async () => {
      const Person = z.object({ name: z.string().max(10), age: z.number().int().min(0).max(120), pet: z.enum(['cat', 'dog']) });
      let parsed = 0;
      for (let seed = 0; seed < 4; ++seed) {
        const r = await client.chat.completions.parse({ model: modelId, messages: [{ role: 'user', content: 'Lily?' }],
                                                        response_format: zodResponseFormat(Person, 'person'),
                                                        temperature: 1, seed, max_tokens: 400 }).catch((e) => e);
        if (r instanceof Error || r.choices[0].finish_reason !== 'stop') continue;  // length: parse() throws
        Person.parse(r.choices[0].message.parsed);
        ++parsed;
      }
      assert.ok(parsed >= 1, `${parsed} of 4 finished`);
    });

    test('bad tool requests are 400s naming the field', async () => {
      const bad = async (body, param) => {
        await assert.rejects(client.chat.completions.create({ model: modelId, messages: question, ...body }),
                             (e) => e.status === 400 && e.param === param, param);
      };
      await bad({ tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice');
      await bad({ tools: [{ type: 'function', function: { name: 'has space' } }] }, 'tools[0].function.name');
      await bad({ tools: [tools[0], tools[0]] }, 'tools[1].function.name');
      await bad({ tool_choice: 'required' }, 'tool_choice');
      await bad({ tools, response_format: { type: 'json_object' } }, 'tools');
      await bad({ tools: [{ type: 'function', function: { name: 'f', description: 'f', strict: true,
                                                          parameters: { type: 'object', uniqueItems: true, properties: { a: { type: 'array', uniqueItems: true } } } } }],
                  tool_choice: 'required' }, 'tools');
      // The server still serves.
      const ok = await client.chat.completions.create({ model: modelId, messages: question, max_tokens: 4 });
      assert.equal(ok.choices.length, 1);
    });
  });
}
