// GET /v1/cache/blocks (the web console's block map) and GET / end to end against a real
// `kvserve serve`: the snapshot's runs and counts describe the whole pool; a running request
// is named to its own tenant and hidden behind an opaque label from another; its blocks go
// back when it ends; on a small pool the snapshot shows prefix sharing, preemption and
// sliding-window eviction while they happen. Every forward pass is slowed to a few
// milliseconds (hidden --inject-step-delay-ms) so a generation of the tiny model lasts long
// enough to be watched.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { MODEL_ID, pollUntil, startServer } from './lib/server.mjs';

const KEY_A = 'sk-console-a';
const KEY_B = 'sk-console-b';
const LONG_PROMPT = 'Once upon a time there was a little girl who liked to play in the park. '.repeat(6);

async function snapshot(url, key) {
  const res = await fetch(`${url}/v1/cache/blocks`, key ? { headers: { Authorization: `Bearer ${key}` } } : {});
  const text = await res.text();
  assert.equal(res.status, 200, text);
  return JSON.parse(text);
}

// Starts a streaming completion and resolves once its first token arrived; `done` resolves
// with the whole SSE text when the stream ends.
async function startStream(url, body, key) {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...(key ? { Authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify({ model: MODEL_ID, temperature: 0, ignore_eos: true, stream: true, ...body }),
  });
  if (res.status !== 200) assert.fail(`status ${res.status}: ${await res.text()}`);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = '';
  while (!text.includes('\n\n')) {
    const { value, done } = await reader.read();
    assert.ok(!done, `stream ended before its first event: ${text}`);
    text += decoder.decode(value, { stream: true });
  }
  const done = (async () => {
    for (;;) {
      const { value, done: end } = await reader.read();
      if (end) return text;
      text += decoder.decode(value, { stream: true });
    }
  })();
  return { done };
}

// A region of snapshot s ({num_blocks, counts, runs}: the pool, or s.compact): runs of the
// states `names` only, covering every block, agreeing with its counts.
function checkRegion(s, region, names) {
  const perState = {};
  let blocks = 0;
  for (const [count, state, owner, fill] of region.runs) {
    const name = s.states[state];
    assert.ok(count > 0 && names.includes(name) && fill >= 0 && fill <= s.block_size, name);
    assert.ok(owner >= -1 && owner < s.owners.length);
    perState[name] = (perState[name] || 0) + count;
    blocks += count;
  }
  assert.equal(blocks, region.num_blocks);
  for (const name of names) assert.equal(region.counts[name], perState[name] || 0, name);
}

function checkShape(s) {
  assert.equal(s.object, 'kv_cache.blocks');
  assert.deepEqual(s.states, ['free', 'used', 'cached', 'pinned', 'shared']);
  checkRegion(s, s, s.states);
}

const used = (s) => s.counts.used + s.counts.shared;

// The compaction region: smaller blocks, never cached or pinned.
function checkCompact(s) {
  const c = s.compact;
  assert.ok(c && c.num_blocks > 0 && c.bytes_per_block > 0 && c.bytes_per_block < s.bytes_per_block, JSON.stringify(c));
  checkRegion(s, c, ['free', 'used', 'shared']);
}

describe('GET /v1/cache/blocks and the console page', () => {
  let server;
  before(async () => {
    server = await startServer(['--api-key', `${KEY_A},${KEY_B}`, '--inject-step-delay-ms', '3']);
  });
  after(async () => {
    assert.equal(await server.stop(), 0, server.log());
  });

  test('the page is served without a key; the snapshot needs one', async () => {
    const page = await fetch(`${server.url}/`);
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-type'), /^text\/html/);
    const html = await page.text();
    for (const id of ['chat-input', 'chat-send', 'chat-output', 'chat-stop', 'kv-block-map', 'kv-legend',
                      'kv-used-count']) {
      assert.ok(html.includes(`data-testid="${id}"`), `the page has no data-testid="${id}"`);
    }
    assert.equal((await fetch(`${server.url}/v1/cache/blocks`)).status, 401);
    const s = await snapshot(server.url, KEY_A);
    checkShape(s);
    assert.equal(used(s), 0);
    assert.equal(s.owners.length, 0);
    assert.ok(s.bytes_per_block > 0 && s.dtype.length > 0);
    assert.equal(s.compact, undefined, 'no compaction region without --kv-compact-dtype');
  });

  test("a running request is named to its tenant, hidden from another, and gives its blocks back", async () => {
    const stream = await startStream(server.url, { prompt: LONG_PROMPT, max_tokens: 150 }, KEY_A);
    const mine = await snapshot(server.url, KEY_A);
    const theirs = await snapshot(server.url, KEY_B);
    checkShape(mine);
    assert.equal(mine.owners.length, 1, JSON.stringify(mine.owners));
    const owner = mine.owners[0];
    assert.match(owner.id, /^req-\d+$/);
    assert.equal(owner.kind, 'request');
    assert.equal(owner.state, 'running');
    assert.ok(owner.tokens > 60 && owner.blocks === Math.ceil(owner.tokens / mine.block_size), JSON.stringify(owner));
    assert.ok(used(mine) >= owner.blocks);
    assert.ok(mine.runs.some(([, state, o]) => o === 0 && state === 1), 'no used run of the owner');
    assert.equal(mine.engine.running, 1);
    const other = theirs.owners[0];
    assert.match(other.id, /^other-[0-9a-f]{6}$/);
    assert.equal(other.kind, 'other');
    assert.equal(other.tokens, 0);
    assert.equal(other.state, '');
    assert.ok(!JSON.stringify(theirs.owners).includes('req-'));
    await stream.done;
    const after = await pollUntil(async () => {
      const s = await snapshot(server.url, KEY_A);
      return used(s) === 0 ? s : null;
    }, { what: 'the request to free its blocks' });
    assert.equal(after.owners.length, 0);
    assert.ok(after.counts.cached > 0, 'the prompt blocks stay cached for reuse');
  });
});

describe('--no-console', () => {
  test('GET / is 404; the API still answers', async () => {
    const server = await startServer(['--no-console']);
    try {
      assert.equal((await fetch(`${server.url}/`)).status, 404);
      checkShape(await snapshot(server.url));
    } finally {
      assert.equal(await server.stop(), 0, server.log());
    }
  });
});

// --kv-compact-dtype int8: a running request's old full blocks move to the compaction region,
// which the snapshot describes after the main pool.
describe('a compaction region', () => {
  test('holds the old blocks of a running request and frees them when it ends', async () => {
    const server = await startServer(['--kv-compact-dtype', 'int8', '--kv-compact-every', '16', '--kv-compact-keep', '32',
                                      '--inject-step-delay-ms', '3']);
    try {
      const idle = await snapshot(server.url);
      checkShape(idle);
      checkCompact(idle);
      assert.match(idle.compact.dtype, /^int8\b/);
      assert.equal(idle.compact.counts.used, 0);
      const stream = await startStream(server.url, { prompt: LONG_PROMPT, max_tokens: 150 });
      const seen = await pollUntil(async () => {
        const s = await snapshot(server.url);
        return s.compact.counts.used >= 2 ? s : null;
      }, { timeoutMs: 30000, intervalMs: 5, what: 'used blocks in the compaction region' });
      checkShape(seen);
      checkCompact(seen);
      const owner = seen.owners.findIndex((o) => o.kind === 'request');
      assert.ok(owner >= 0, JSON.stringify(seen.owners));
      // Its table spans both regions: main and compact blocks together cover its tokens.
      const o = seen.owners[owner];
      assert.equal(o.blocks, Math.ceil(o.tokens / seen.block_size), JSON.stringify(o));
      assert.ok(seen.compact.runs.some(([, state, holder, fill]) => state === 1 && holder === owner &&
                                                                    fill === seen.block_size));
      await stream.done;
      await pollUntil(async () => (await snapshot(server.url)).compact.counts.used === 0,
                      { what: 'the compaction region to be free again' });
    } finally {
      assert.equal(await server.stop(), 0, server.log());
    }
  });
});

// A pool of 24 blocks of 16 tokens (stories260K's f16 blocks are 10,240 bytes).
describe('a small pool, watched while it works', () => {
  let server;
  before(async () => {
    server = await startServer(['--kv-cache-memory', String(24 * 10240), '--chat-window', '96', '--chat-sinks', '4',
                                '--inject-step-delay-ms', '3']);
  });
  after(async () => {
    assert.equal(await server.stop(), 0, server.log());
  });

  test('prefix sharing: a second request with the same prompt shares the first one\'s blocks', async () => {
    const first = await startStream(server.url, { prompt: LONG_PROMPT, max_tokens: 60 });
    const second = await startStream(server.url, { prompt: LONG_PROMPT, max_tokens: 60 });
    const s = await snapshot(server.url);
    checkShape(s);
    assert.ok(s.counts.shared >= 4, JSON.stringify(s.counts));
    assert.equal(s.owners.filter((o) => o.kind === 'request').length, 2);
    assert.ok(s.owners.some((o) => o.cached_prompt_tokens >= 64), JSON.stringify(s.owners));
    await Promise.all([first.done, second.done]);
  });

  test('preemption: two generations that cannot both fit', async () => {
    const before = (await snapshot(server.url)).engine.preemptions_total;
    const a = await startStream(server.url, { prompt: 'Once upon a time', max_tokens: 250 });
    const b = await startStream(server.url, { prompt: 'One day a cat', max_tokens: 250 });
    const seen = await pollUntil(async () => {
      const s = await snapshot(server.url);
      return s.engine.preemptions_total > before ? s : null;
    }, { timeoutMs: 30000, intervalMs: 5, what: 'a preemption in the snapshot' });
    checkShape(seen);
    assert.ok(seen.engine.evicted_blocks.preemption > 0);
    await Promise.all([a.done, b.done]);
  });

  test('window eviction: a chat session past its window loses its middle blocks', async () => {
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: MODEL_ID, temperature: 0, ignore_eos: true, max_tokens: 200, stream: true,
                             session_id: 'window-demo', messages: [{ role: 'user', content: 'Tell me a story.' }] }),
    });
    assert.equal(res.status, 200);
    const body = res.text();
    const seen = await pollUntil(async () => {
      const s = await snapshot(server.url);
      const o = s.owners.find((x) => x.session_id === 'window-demo' && x.evicted_tokens > 0);
      return o ? { s, o } : null;
    }, { timeoutMs: 30000, intervalMs: 5, what: 'window eviction in the snapshot' });
    assert.ok(seen.o.tokens <= 96, JSON.stringify(seen.o));
    assert.ok(seen.s.engine.evicted_blocks.window > 0);
    await body;
    const idle = await pollUntil(async () => {
      const s = await snapshot(server.url);
      return s.owners.find((x) => x.kind === 'session' && x.id === 'session:window-demo');
    }, { what: 'the idle session in the snapshot' });
    assert.equal(idle.state, 'idle');
    assert.ok(idle.evicted_tokens > 0);
  });
});
