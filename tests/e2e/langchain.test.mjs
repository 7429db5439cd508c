// LangChain JS (@langchain/openai's ChatOpenAI, unmodified) against a real `kvserve serve`:
// withStructuredOutput through both of its methods (a JSON Schema response_format, and a forced
// function call), bindTools with a forced tool whose call LangChain parses into args, and the
// ToolMessage sent back for the next turn. Random weights: the outputs are valid because of the
// constraint. Requires `npm ci` in tests/e2e.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

let ChatOpenAI;
let tool;
let HumanMessage;
let z;
try {
  ({ ChatOpenAI } = await import('@langchain/openai'));
  ({ tool } = await import('@langchain/core/tools'));
  ({ HumanMessage } = await import('@langchain/core/messages'));
  ({ z } = await import('zod'));
} catch (e) {
  console.log(`SKIP: @langchain/openai, @langchain/core or zod is not installed (run \`npm ci\` in tests/e2e): ${e}`);
  process.exit(77);
}

import { hermesModel } from './lib/models.mjs';
import { startServer } from './lib/server.mjs';

const Person = z.object({ name: z.string().max(10), age: z.number().int().min(0).max(120) });
const weather = tool(async ({ city }) => `22 C and sunny in ${city}`,
                     { name: 'get_weather', description: 'The weather in a city', schema: z.object({ city: z.string().max(12) }) });

describe('LangChain JS', { skip: hermesModel() === null ? 'no shared vocabulary' : false }, () => {
  let server;
  let llm;
  before(async () => {
    server = await startServer([], { model: hermesModel() });
    const models = await (await fetch(`${server.url}/v1/models`)).json();
    llm = new ChatOpenAI({ model: models.data[0].id, apiKey: 'unused', configuration: { baseURL: `${server.url}/v1` },
                           temperature: 0, maxTokens: 300, maxRetries: 0 });
  });
  after(async () => {
    assert.equal(await server.stop(), 0, server.log());
  });

  test('withStructuredOutput: JSON Schema and function calling', async () => {
    for (const method of ['jsonSchema', 'functionCalling']) {
      const person = await llm.withStructuredOutput(Person, { name: 'person', method }).invoke('Tell me about Lily.');
      Person.parse(person);  // LangChain parsed it; zod agrees
    }
  });

  test('bindTools: a forced call parsed into args, then the ToolMessage goes back', async () => {
    const bound = llm.bindTools([weather], { tool_choice: 'required', parallel_tool_calls: false });
    const question = new HumanMessage('What is the weather in Paris?');
    const reply = await bound.invoke([question]);
    assert.equal(reply.tool_calls.length, 1, JSON.stringify(reply));
    const call = reply.tool_calls[0];
    assert.equal(call.name, 'get_weather');
    assert.equal(typeof call.args.city, 'string');
    assert.ok(call.id?.startsWith('call_'));
    const result = await weather.invoke(call);  // a ToolMessage answering call.id
    const next = await llm.bindTools([weather]).invoke([question, reply, result]);
    assert.equal(typeof next.content, 'string');
    assert.ok(next.usage_metadata.input_tokens > reply.usage_metadata.input_tokens);
  });
});
