// Structured outputs validated by an independent JSON Schema validator (ajv, with ajv-formats):
// requests at temperature 1 with the real schemas of the shared MaskBench sample, through
// /v1/chat/completions' response_format, two choices each, on a random-weight model
// (synthetic:tiny), so that any valid output is the constraint's doing. Every output that ends
// with finish_reason "stop" must be valid, and hundreds must end. A schema kvserve refuses must
// be a 400 naming response_format, never a failure mid-stream. KVSERVE_MASKBENCH_EVERY picks
// every n-th file (default 4: 304 schemas). A run: 545 stopped, 507 valid, 38 that ajv cannot
// check (remote $refs, its own draft limits), 0 invalid, 4 s; the first runs found a leap
// second, a URI and an int32 that the grammar let through (fixed in formats.cpp and the
// integer formats). Requires `npm ci` in tests/e2e and ../shared/structured/maskbench.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';

let Ajv;
let Ajv2019;
let Ajv2020;
let addFormats;
try {
  ({ default: Ajv } = await import('ajv'));
  ({ default: Ajv2019 } = await import('ajv/dist/2019.js'));
  ({ default: Ajv2020 } = await import('ajv/dist/2020.js'));
  ({ default: addFormats } = await import('ajv-formats'));
} catch {
  console.log('SKIP: ajv / ajv-formats are not installed (run `npm ci` in tests/e2e)');
  process.exit(77);
}

import { SHARED } from './lib/models.mjs';
import { postJson, startServer } from './lib/server.mjs';

const dir = path.join(SHARED, 'structured', 'maskbench');
if (!fs.existsSync(dir)) {
  console.log(`SKIP: ${dir} is missing`);
  process.exit(77);
}
const every = Number(process.env.KVSERVE_MASKBENCH_EVERY ?? 4);
const files = fs.readdirSync(dir).filter((f) => f.endsWith('.json')).sort().filter((_, i) => i % every === 0);

// A validator for the schema's draft; null when ajv itself cannot compile the schema (then
// the output is not checked: the reference has no verdict).
function validatorFor(schema) {
  const draft = typeof schema === 'object' && schema !== null ? String(schema.$schema ?? '') : '';
  const Cls = draft.includes('2020-12') ? Ajv2020 : draft.includes('2019-09') ? Ajv2019 : Ajv;
  const ajv = new Cls({ strict: false, allErrors: false, validateSchema: false, logger: false });
  addFormats(ajv);
  try {
    return ajv.compile(schema);
  } catch {
    return null;
  }
}

let server;
before(async () => {
  server = await startServer(['--max-num-seqs', '16'], { model: 'synthetic:tiny' });
});
after(async () => {
  assert.equal(await server.stop(), 0, server.log());
});

// A random model rarely picks the one token that ends a string or closes an object among the
// hundreds the grammar allows, so outputs run to max_tokens; a logit bias on the closing tokens
// (as any client may send) makes most of them end. Where they may come is still the grammar's
// decision: a bias cannot allow a token the mask forbids.
async function closingBias() {
  const bias = {};
  for (let id = 0; id < 4096; ++id) {  // every token of a small vocabulary (synthetic:tiny: 512)
    const r = await postJson(`${server.url}/detokenize`, { tokens: [id] });
    if (r.status !== 200) break;  // past the vocabulary
    if (/["}\]]/.test(r.json.prompt)) bias[id] = 8;
    if (/^\s+$/.test(r.json.prompt)) bias[id] = -4;  // and less layout
  }
  assert.ok(Object.keys(bias).length > 0);
  return bias;
}

test(`outputs at temperature 1 are valid instances (every ${every}th MaskBench schema)`, async () => {
  const logit_bias = await closingBias();
  const tally = { requests: 0, refused: 0, stopped: 0, valid: 0, length: 0, unchecked: 0 };
  const invalid = [];
  let next = 0;
  async function worker() {
    while (next < files.length) {
      const file = files[next++];
      const { schema } = JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8'));
      const res = await postJson(`${server.url}/v1/chat/completions`, {
        messages: [{ role: 'user', content: 'Reply with a JSON value.' }],
        response_format: { type: 'json_schema', json_schema: { name: 'x', schema } },
        temperature: 1, seed: next, n: 2, max_tokens: 384, logit_bias,
      });
      ++tally.requests;
      const body = res.json;
      if (res.status === 400) {
        assert.equal(body.error.param, 'response_format', `${file}: ${JSON.stringify(body)}`);
        ++tally.refused;
        continue;
      }
      assert.equal(res.status, 200, `${file}: ${JSON.stringify(body)}`);
      const validate = validatorFor(schema);
      for (const choice of body.choices) {
        if (choice.finish_reason !== 'stop') {
          assert.equal(choice.finish_reason, 'length', file);
          ++tally.length;
          continue;
        }
        ++tally.stopped;
        if (!validate) {
          ++tally.unchecked;
          continue;
        }
        let value;
        try {
          value = JSON.parse(choice.message.content);
        } catch {
          invalid.push(`${file}: not JSON: ${choice.message.content.slice(0, 200)}`);
          continue;
        }
        if (validate(value)) {
          ++tally.valid;
        } else {
          invalid.push(`${file}: ${JSON.stringify(validate.errors?.[0])}: ${choice.message.content.slice(0, 300)}`);
        }
      }
    }
  }
  await Promise.all(Array.from({ length: 16 }, worker));
  console.log(`# ${JSON.stringify(tally)}`);
  assert.deepEqual(invalid, [], `${invalid.length} outputs that ended with "stop" are invalid`);
  assert.ok(tally.valid >= Math.min(300, files.length), `only ${tally.valid} valid outputs: ${JSON.stringify(tally)}`);
});
