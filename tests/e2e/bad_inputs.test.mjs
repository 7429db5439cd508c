// The bad-input catalogue (bad_inputs.cases.mjs) against one real server: every malformed
// HTTP request (fetch, and raw sockets for framing errors) and every malformed gRPC call
// (bad_inputs_grpc.py, Debian's python3-grpcio) gets exactly its expected status, never a 5xx
// (gRPC: never INTERNAL, UNKNOWN or UNAVAILABLE); error bodies are OpenAI error
// objects in valid UTF-8 JSON. Afterwards the server still answers a good request over both
// front ends, no request failed inside the engine, no KV block is in use and the cache passes
// VerifyIntegrity (GET /debug/cache).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { KEY, grpcCases, httpCases, rawCases } from './bad_inputs.cases.mjs';
import { MODEL_ID, metric, metrics, pollUntil, rawRequest, startServer } from './lib/server.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const auth = { Authorization: `Bearer ${KEY}` };

async function send(url, c) {
  const headers = {};
  if (c.auth === undefined || c.auth === true) Object.assign(headers, auth);
  else if (typeof c.auth === 'string') headers.Authorization = c.auth;
  let body = c.body;
  if (body !== undefined && typeof body === 'object' && !Buffer.isBuffer(body)) body = JSON.stringify(body);
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(`${url}${c.path ?? '/v1/completions'}`, { method: c.method ?? 'POST', headers, body });
  const bytes = Buffer.from(await res.arrayBuffer());
  return { status: res.status, bytes };
}

describe('bad-input catalogue', () => {
  let server;
  const figures = { http: 0, raw: 0, grpc: 0 };
  before(async () => {
    server = await startServer(['--api-key', KEY, '--max-body-size', '65536', '--grpc-port', '0', '--max-num-seqs', '8',
                                '--header-timeout', '5', '--enable-debug-endpoints']);
  });
  after(async () => {
    console.log(`bad inputs: ${figures.http} HTTP, ${figures.raw} raw HTTP, ${figures.grpc} gRPC cases`);
    assert.equal(await server.stop(), 0, server.log());
  });

  test('HTTP: every malformed request gets its status and an OpenAI error body', async () => {
    const failures = [];
    for (const c of httpCases(MODEL_ID)) {
      const r = await send(server.url, c);
      const text = r.bytes.toString('utf8');
      let why = '';
      if (r.status !== c.status) why = `status ${r.status}, expected ${c.status}`;
      else if (!Buffer.from(text, 'utf8').equals(r.bytes)) why = 'body is not valid UTF-8';
      else if (c.status !== 405 || text) {
        let j;
        try { j = JSON.parse(text); } catch { why = `body is not JSON: ${text.slice(0, 100)}`; }
        if (j && c.status === 200) {
          if (j.error || !j.choices) why = 'not a completion';
        } else if (j && (typeof j.error?.message !== 'string' || typeof j.error?.type !== 'string')) why = 'no error object';
        else if (j && c.param !== undefined && j.error.param !== c.param) why = `param ${j.error.param}, expected ${c.param}`;
        else if (j && c.code !== undefined && j.error.code !== c.code) why = `code ${j.error.code}, expected ${c.code}`;
      }
      if (why) failures.push(`${c.name}: ${why} -- ${text.slice(0, 200)}`);
      figures.http++;
    }
    assert.deepEqual(failures, []);
  });

  test('raw HTTP: framing errors and limits', async () => {
    const failures = [];
    for (const c of rawCases) {
      // `closes`: read until the server closes (it must, within 5 s) and count the responses.
      let socket;
      try {
        socket = await Promise.race([
          rawRequest(server.port, c.raw, c.closes ? undefined : '\r\n\r\n'),
          new Promise((_, reject) => setTimeout(() => reject(new Error('the connection stayed open')), 5000)),
        ]);
      } catch (e) {
        failures.push(`${c.name}: ${e.message}`);
        continue;
      }
      const m = socket.received.match(/^HTTP\/1\.[01] (\d{3}) /);
      socket.destroy();
      const status = m ? Number(m[1]) : 0;
      if (status !== c.status) failures.push(`${c.name}: status ${status}, expected ${c.status}: ${socket.received.slice(0, 120)}`);
      const responses = socket.received.split(/HTTP\/1\.[01] \d{3} /).length - 1;
      if (c.closes && responses !== 1) failures.push(`${c.name}: ${responses} responses on one connection (smuggled)`);
      figures.raw++;
    }
    assert.deepEqual(failures, []);
  });

  test('gRPC: every malformed call gets its status code', (t) => {
    const py = '/usr/bin/python3';
    const probe = spawnSync(py, ['-c', 'import grpc, google.protobuf'], { encoding: 'utf8' });
    const protoc = spawnSync('protoc', ['--version'], { encoding: 'utf8' });
    if (probe.status !== 0 || protoc.status !== 0 || !fs.existsSync('/usr/bin/grpc_python_plugin')) {
      t.skip('python3-grpcio, protoc or grpc_python_plugin missing');
      return;
    }
    const cases = grpcCases(MODEL_ID);
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'kvserve-bad-')), 'cases.json');
    fs.writeFileSync(file, JSON.stringify(cases));
    const r = spawnSync(py, [path.join(here, 'bad_inputs_grpc.py'), '--grpc', `127.0.0.1:${server.grpcPort()}`,
                             '--key', KEY, '--cases', file, '--proto-dir', path.resolve(here, '../../proto')],
                        { encoding: 'utf8', timeout: 120000 });
    assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
    figures.grpc = cases.length;
  });

  test('afterwards: good requests succeed, nothing failed inside, no block is leaked', async () => {
    const good = await fetch(`${server.url}/v1/completions`, {
      method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: MODEL_ID, prompt: 'Once upon a time', max_tokens: 4, temperature: 0 }),
    });
    assert.equal(good.status, 200);
    assert.equal((await good.json()).usage.completion_tokens, 4);
    const text = await metrics(server.url);
    assert.equal(metric(text, 'kvserve_requests_total{status="error"}'), 0, 'a request failed inside the engine');
    assert.equal(metric(text, 'kvserve_engine_healthy'), 1);
    await pollUntil(async () => metric(await metrics(server.url), 'kvserve_kv_cache_blocks{state="used"}') === 0,
                    { what: 'used blocks back to 0' });
    assert.equal((await fetch(`${server.url}/ready`)).status, 200);
    const debug = await fetch(`${server.url}/debug/cache`, { headers: auth });
    const d = await debug.json();
    assert.equal(debug.status, 200, JSON.stringify(d));
    assert.equal(d.integrity, 'ok');
    assert.equal(d.blocks.used, 0);
  });
});
