// Helpers for the end-to-end tests: start a real `kvserve serve` on loopback with free ports,
// wait for it, talk to it, and stop it. No fixed sleeps: everything polls with a deadline.
//
// Environment: KVSERVE_BIN (the kvserve binary), KVSERVE_E2E_MODEL (a GGUF path or
// synthetic:<preset>; default: stories260K from the shared models folder).
import { spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const BIN = process.env.KVSERVE_BIN ?? path.resolve(here, '../../../build/kvserve');
export const MODEL = process.env.KVSERVE_E2E_MODEL ??
  path.resolve(here, '../../../../shared/models/stories260K.gguf');
// The id the server derives from the model (file name without .gguf, or the synthetic spec).
export const MODEL_ID = MODEL.startsWith('synthetic:') ? MODEL : path.basename(MODEL).replace(/\.gguf$/, '');

// Polls `fn` (async, truthy = done) every `intervalMs` until `timeoutMs`; returns its value
// or throws `what` on timeout.
export async function pollUntil(fn, { timeoutMs = 10000, intervalMs = 10, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

// Starts `kvserve serve` (HTTP on a free port, gRPC off unless args say otherwise) and waits
// until /ready is 200. Returns { url, port, grpcPort, proc, log(), stop(signal) -> exit code }.
export async function startServer(args = [], { env = {}, waitReady = true, model = MODEL } = {}) {
  // gRPC off unless args ask for a port (e.g. '--grpc-port', '0'); args win over the defaults.
  const grpc = args.includes('--grpc-port') ? [] : ['--grpc-port', '-1'];
  const fullArgs = ['serve', '--model', model, '--host', '127.0.0.1', '--http-port', '0', ...grpc,
                    '--threads', '1', ...args];
  const proc = spawn(BIN, fullArgs, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d) => { stdout += d; });
  proc.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve(code ?? signal)));
  let exitCode;
  exited.then((c) => { exitCode = c; });

  const port = await pollUntil(() => {
    if (exitCode !== undefined) throw new Error(`kvserve exited (${exitCode}) before listening:\n${stderr}`);
    const m = stdout.match(/HTTP on http:\/\/[^\s:]+:(\d+)/);
    return m ? Number(m[1]) : null;
  }, { timeoutMs: 30000, what: 'the "HTTP on" line' });
  const url = `http://127.0.0.1:${port}`;
  const server = {
    url,
    port,
    proc,
    exited,
    log: () => stderr,
    grpcPort: () => Number((stdout.match(/gRPC on [^\s]+:(\d+)/) ?? [])[1]),
    async stop(signal = 'SIGTERM') {
      if (exitCode === undefined) proc.kill(signal);
      return exited;
    },
  };
  if (waitReady) {
    await pollUntil(async () => {
      if (exitCode !== undefined) throw new Error(`kvserve exited (${exitCode}):\n${stderr}`);
      try {
        return (await fetch(`${url}/ready`)).status === 200;
      } catch {
        return false;
      }
    }, { timeoutMs: 60000, what: '/ready' });
  }
  return server;
}

export async function postJson(url, body, headers = {}) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: res.status, headers: res.headers, text, json };
}

// Reads an SSE response to its end: { events: [parsed JSON...], done: saw [DONE], raw }.
export async function readSse(res) {
  const decoder = new TextDecoder();
  let raw = '';
  for await (const chunk of res.body) raw += decoder.decode(chunk, { stream: true });
  return parseSse(raw);
}

export function parseSse(raw) {
  const events = [];
  let done = false;
  for (const block of raw.split('\n\n')) {
    if (block === '') continue;
    if (!block.startsWith('data: ')) throw new Error(`not an SSE data line: ${JSON.stringify(block)}`);
    if (done) throw new Error('event after [DONE]');
    const data = block.slice(6);
    if (data === '[DONE]') done = true;
    else events.push(JSON.parse(data));
  }
  if (!raw.endsWith('\n\n')) throw new Error('SSE stream does not end with a blank line');
  return { events, done, raw };
}

// Value of one sample in a Prometheus text exposition, e.g. metric(text,
// 'kvserve_kv_cache_blocks{state="used"}'); undefined when absent.
export function metric(text, name) {
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const sp = line.lastIndexOf(' ');
    if (sp > 0 && line.slice(0, sp) === name) return Number(line.slice(sp + 1));
  }
  return undefined;
}

export async function metrics(url) {
  const res = await fetch(`${url}/metrics`);
  return res.text();
}

// A raw TCP client: sends `request` bytes, resolves with the socket once `until` (a string)
// appears in what came back (the data so far is in socket.received).
export function rawRequest(port, request, until) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.received = '';
    socket.on('error', reject);
    socket.on('data', (d) => {
      socket.received += d.toString('latin1');
      if (until && socket.received.includes(until)) resolve(socket);
    });
    socket.on('end', () => resolve(socket));
    socket.write(request);
  });
}

// The body of a raw HTTP/1.1 response with chunked transfer encoding, decoded as UTF-8.
export function dechunk(raw) {
  const bytes = Buffer.from(raw, 'latin1');
  let pos = bytes.indexOf('\r\n\r\n') + 4;
  const parts = [];
  for (;;) {
    const eol = bytes.indexOf('\r\n', pos);
    const size = parseInt(bytes.subarray(pos, eol).toString('latin1'), 16);
    if (!(size > 0)) break;
    parts.push(bytes.subarray(eol + 2, eol + 2 + size));
    pos = eol + 2 + size + 2;
  }
  return Buffer.concat(parts).toString('utf8');
}

export function httpPost(pathName, body, extraHeaders = '') {
  const payload = typeof body === 'string' ? body : JSON.stringify(body);
  return `POST ${pathName} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
         `Content-Length: ${Buffer.byteLength(payload)}\r\n${extraHeaders}\r\n${payload}`;
}
