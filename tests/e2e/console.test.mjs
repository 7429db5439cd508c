// The web console (GET /) in a real headless Chromium against a real `kvserve serve`: the page's
// contract test ids; a streamed chat reply growing in the page while the KV block map shows
// used blocks, which return to 0 when the reply ends; the stop button aborting a generation
// (the server frees its blocks and counts the request as aborted); no console errors or
// uncaught exceptions; screenshots on a desktop and a phone viewport; an API-key server (the key
// field appears after a 401, then chat works); and, on a tiny KV pool, two concurrent
// completions with one long prompt showing up as "shared" blocks in the map's legend; with a
// compaction region, its blocks counted in the legend and drawn after the pool.
// Needs /usr/bin/chromium and `npm ci` here (playwright-core); exit 77 (skipped) without them.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { MODEL_ID, metric, metrics, pollUntil, postJson, readSse, startServer } from './lib/server.mjs';

const CHROMIUM = '/usr/bin/chromium';
let chromium;
try {
  ({ chromium } = await import('playwright-core'));
} catch {
  process.stderr.write('SKIP: the playwright-core npm package is not installed (run `npm ci` in tests/e2e)\n');
  process.exit(77);
}
if (!fs.existsSync(CHROMIUM)) {
  process.stderr.write(`SKIP: no ${CHROMIUM} (apt-get install chromium)\n`);
  process.exit(77);
}

const here = path.dirname(fileURLToPath(import.meta.url));
const SHOTS = path.join(here, 'screenshots');
const LAUNCH = {
  executablePath: CHROMIUM,
  args: ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
};
// The page takes a snapshot every 400 ms, so a long generation must last seconds whatever the
// model and machine: every forward pass takes at least STEP_DELAY_MS (hidden
// --inject-step-delay-ms), and the page's "ignore EOS" box is ticked for every chat (the
// synthetic model stops early otherwise).
const STEP_DELAY = ['--inject-step-delay-ms', '3'];
const LONG_TOKENS = 1200;    // >= 3.6 s
const SHARED_TOKENS = 800;   // >= 2.4 s, both sequences in every step
const TESTIDS = ['chat-input', 'chat-send', 'chat-stop', 'chat-output', 'kv-block-map', 'kv-legend', 'kv-used-count'];
const LONG_PROMPT = 'Once upon a time, there was a little girl named Lily. She loved to play outside in the park ' +
  'with her friends. One day, she saw a big red ball under a tree and ran to get it. Her friend Tom came too, ' +
  'and they played with the ball all day until the sun went down and their mothers called them home.';

// A fresh context and page; console errors and uncaught exceptions go to `errors`.
async function openPage(browser, url, errors, viewport = { width: 1280, height: 800 }) {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  page.on('console', (m) => { if (m.type() === 'error') errors.push(`console: ${m.text()}`); });
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  await page.goto(url);
  return { context, page };
}

const text = (page, id) => page.getByTestId(id).textContent();
const usedBlocks = async (page) => Number(await text(page, 'kv-used-count'));
const outputLength = async (page) => (await text(page, 'chat-output')).length;
const mapBlocks = async (page) => Number(await page.getByTestId('kv-block-map').getAttribute('data-blocks'));

// `session`: the page's server-side session box (on by default; off, a reply's blocks are
// freed when it ends).
async function chat(page, message, { maxTokens, temperature = '0', session = false }) {
  await page.getByTestId('ignore-eos').check();
  await page.getByTestId('session').setChecked(session);
  await page.getByTestId('temperature').fill(temperature);
  await page.getByTestId('max-tokens').fill(String(maxTokens));
  await page.getByTestId('chat-input').fill(message);
  await page.getByTestId('chat-send').click();
}

// The reply is over when the send button is enabled again and the output has text.
async function waitReplyDone(page, timeoutMs = 60000) {
  await pollUntil(async () => !(await page.getByTestId('chat-send').isDisabled()) && (await outputLength(page)) > 0,
                  { timeoutMs, intervalMs: 50, what: 'the reply to finish' });
}

describe('web console', () => {
  let server;
  let browser;
  const errors = [];
  before(async () => {
    server = await startServer([...STEP_DELAY]);
    browser = await chromium.launch(LAUNCH);
  });
  after(async () => {
    await browser?.close();
    if (server) assert.equal(await server.stop(), 0, server.log());
  });

  test('GET / serves the page with its test ids; a streamed reply fills the map, then frees it', async () => {
    const res = await fetch(`${server.url}/`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^text\/html/);
    await res.text();

    const { context, page } = await openPage(browser, `${server.url}/`, errors);
    try {
      for (const id of TESTIDS) assert.equal(await page.getByTestId(id).count(), 1, `testid ${id}`);
      await pollUntil(async () => (await mapBlocks(page)) > 0, { what: 'data-blocks > 0' });
      await pollUntil(async () => (await page.locator('#model option').count()) > 0, { what: 'the model list' });
      assert.equal(await page.locator('#model').inputValue(), MODEL_ID);
      assert.equal(await usedBlocks(page), 0);

      await chat(page, 'Tell me a long story.', { maxTokens: LONG_TOKENS });
      // The text grows over at least two observations while the map shows the request's blocks.
      const lengths = [];
      let sawUsed = false;
      await pollUntil(async () => {
        const n = await outputLength(page);
        if (n > 0 && n !== lengths.at(-1)) lengths.push(n);
        if ((await usedBlocks(page)) > 0) sawUsed = true;
        return lengths.length >= 3 && sawUsed;
      }, { timeoutMs: 30000, intervalMs: 20, what: 'growing output and used blocks in the map' });
      assert.ok(lengths[0] < lengths[1] && lengths[1] < lengths[2], `lengths ${lengths}`);

      await waitReplyDone(page);
      await pollUntil(async () => (await usedBlocks(page)) === 0,
                      { timeoutMs: 10000, intervalMs: 50, what: 'kv-used-count back to 0' });
      assert.ok(await page.getByTestId('chat-stop').isDisabled());
      const stats = await text(page, 'chat-stats');
      assert.match(stats, /prompt \d+ tok/);
      assert.match(stats, new RegExp(`${LONG_TOKENS} completion tok`));
      assert.match(stats, /\d+(\.\d+)? tok\/s/);
      assert.match(stats, /TTFT \d+ ms/);
      assert.ok((await outputLength(page)) > 1000);
    } finally {
      await context.close();
    }
  });

  test('with the server-side session a turn reuses the last one, on the map; New chat frees it', async () => {
    const { context, page } = await openPage(browser, `${server.url}/`, errors);
    try {
      assert.ok(await page.getByTestId('session').isChecked(), 'sessions are the default');
      await pollUntil(async () => (await mapBlocks(page)) > 0, { what: 'the first snapshot' });
      await chat(page, 'Tell me a story about a dog.', { maxTokens: 48, session: true });
      await waitReplyDone(page);
      const first = Number((await text(page, 'chat-stats')).match(/prompt (\d+) tok/)[1]);
      // Between turns the idle session holds the conversation's blocks.
      await pollUntil(async () => (await usedBlocks(page)) > 0 &&
                                  (await page.getByTestId('kv-owners').textContent()).includes('idle'),
                      { timeoutMs: 10000, intervalMs: 50, what: "the idle session's blocks in the map" });
      await chat(page, 'What did the dog find?', { maxTokens: 16, session: true });
      await waitReplyDone(page);
      const cached = Number((await text(page, 'chat-stats')).match(/cached (\d+) tok/)[1]);
      assert.ok(cached >= first + 48 - 2, `turn 2 reused ${cached} of the ${first + 48} tokens of turn 1`);
      await page.getByTestId('new-chat').click();
      await pollUntil(async () => (await usedBlocks(page)) === 0,
                      { timeoutMs: 10000, intervalMs: 50, what: 'the session ended by New chat' });
      assert.equal(metric(await metrics(server.url), 'kvserve_chat_sessions'), 0);
    } finally {
      await context.close();
    }
  });

  test('stop aborts the generation and the server frees its blocks', async () => {
    const abortedBefore = metric(await metrics(server.url), 'kvserve_requests_total{status="aborted"}') ?? 0;
    const { context, page } = await openPage(browser, `${server.url}/`, errors);
    try {
      await pollUntil(async () => (await mapBlocks(page)) > 0, { what: 'the first snapshot' });
      await chat(page, 'Tell me a very long story.', { maxTokens: LONG_TOKENS });
      await pollUntil(async () => (await outputLength(page)) > 0 && (await usedBlocks(page)) > 0,
                      { timeoutMs: 30000, intervalMs: 20, what: 'output and used blocks' });
      await page.getByTestId('chat-stop').click();
      await pollUntil(async () => page.getByTestId('chat-send').isEnabled(), { what: 'the send button back' });
      const stopped = await outputLength(page);
      assert.ok(await page.getByTestId('chat-stop').isDisabled());
      await pollUntil(async () => (await usedBlocks(page)) === 0,
                      { timeoutMs: 10000, intervalMs: 50, what: 'kv-used-count back to 0 after stop' });
      await pollUntil(async () =>
        metric(await metrics(server.url), 'kvserve_requests_total{status="aborted"}') === abortedBefore + 1,
      { timeoutMs: 10000, what: 'the request counted as aborted' });
      // Nothing arrived after the stop (the server has dropped the request by now).
      assert.equal(await outputLength(page), stopped);
      assert.match(await text(page, 'chat-stats'), /stopped/);
      assert.ok(!(await text(page, 'chat-stats')).includes(`${LONG_TOKENS} completion tok`));
    } finally {
      await context.close();
    }
  });

  test("the page's SSE reader decodes UTF-8 characters split across network chunks", async () => {
    const { context, page } = await openPage(browser, `${server.url}/`, errors);
    try {
      const words = ['héllo', ' 日本語', ' 🦙🦙', ' ok'];
      const got = await page.evaluate(async (parts) => {
        const sse = parts.map((p) => `data: ${JSON.stringify({ choices: [{ delta: { content: p } }] })}\n\n`).join('') +
                    'data: [DONE]\n\n';
        const bytes = new TextEncoder().encode(sse);
        const body = new ReadableStream({  // one byte per chunk: every multi-byte character is split
          start(c) { for (const b of bytes) c.enqueue(new Uint8Array([b])); c.close(); },
        });
        const out = [];
        await readSse(new Response(body), (d) => out.push(d === '[DONE]' ? d : JSON.parse(d).choices[0].delta.content));
        return out;
      }, words);
      assert.deepEqual(got, [...words, '[DONE]']);
    } finally {
      await context.close();
    }
  });

  test('screenshots after a reply: desktop 1280x800 and phone 390x844', async () => {
    fs.mkdirSync(SHOTS, { recursive: true });
    for (const [name, viewport] of [['desktop', { width: 1280, height: 800 }], ['phone', { width: 390, height: 844 }]]) {
      const { context, page } = await openPage(browser, `${server.url}/`, errors, viewport);
      try {
        await pollUntil(async () => (await mapBlocks(page)) > 0, { what: 'the first snapshot' });
        await chat(page, 'Tell me a story about a dog.', { maxTokens: 300 });
        await waitReplyDone(page);
        // What the page shows is exactly the server's (greedy) reply.
        const full = await postJson(`${server.url}/v1/chat/completions`, {
          model: MODEL_ID, messages: [{ role: 'user', content: 'Tell me a story about a dog.' }], temperature: 0,
          top_p: 1, max_tokens: 300, ignore_eos: true,
        });
        assert.equal(full.status, 200, full.text);
        assert.equal(await text(page, 'chat-output'), full.json.choices[0].message.content);
        // A snapshot taken after the reply (the map drawn, the charts with a point after it).
        await pollUntil(async () => (await usedBlocks(page)) === 0, { what: 'the map after the reply' });
        const file = path.join(SHOTS, `console-${name}.png`);
        await page.screenshot({ path: file, fullPage: name === 'phone' });
        assert.ok(fs.statSync(file).size > 10000, `${file} is too small`);
      } finally {
        await context.close();
      }
    }
  });

  test('the JSON schema box constrains the reply; a bad schema is shown, not sent', async () => {
    const { context, page } = await openPage(browser, `${server.url}/`, errors);
    try {
      await page.locator('#schema-box summary').click();
      const schema = { type: 'object', properties: { ok: { type: 'boolean' }, n: { type: 'integer', minimum: 0, maximum: 9 } },
                       required: ['ok', 'n'], additionalProperties: false };
      await page.getByTestId('json-schema').fill(JSON.stringify(schema));
      await page.getByTestId('ignore-eos').setChecked(false);
      await page.getByTestId('session').setChecked(false);
      await page.getByTestId('temperature').fill('1');
      await page.getByTestId('max-tokens').fill('200');
      await page.getByTestId('chat-input').fill('Is it done?');
      await page.getByTestId('chat-send').click();
      await waitReplyDone(page);
      const reply = JSON.parse(await text(page, 'chat-output'));
      assert.equal(typeof reply.ok, 'boolean');
      assert.ok(Number.isInteger(reply.n) && reply.n >= 0 && reply.n <= 9, JSON.stringify(reply));
      assert.deepEqual(Object.keys(reply).sort(), ['n', 'ok']);
      // Not JSON: the page says so and sends nothing; a keyword kvserve cannot enforce: the 400.
      await page.getByTestId('json-schema').fill('{"type": ');
      await page.getByTestId('chat-input').fill('Again?');
      await page.getByTestId('chat-send').click();
      await page.getByTestId('chat-error').waitFor({ state: 'visible', timeout: 10000 });
      assert.match(await text(page, 'chat-error'), /does not hold JSON/);
      assert.equal(await page.getByTestId('chat-input').inputValue(), 'Again?');
      const seen = errors.length;
      await page.getByTestId('json-schema').fill('{"not": {"enum": [1]}}');
      await page.getByTestId('chat-send').click();
      await pollUntil(async () => /not at \//.test(await text(page, 'chat-error')), { what: 'the 400 shown' });
      // Chromium logs the 400 response itself; that line is expected here.
      errors.splice(seen, errors.length - seen, ...errors.slice(seen).filter((e) => !/status of 400/.test(e)));
      await page.getByTestId('json-schema').fill('');
    } finally {
      await context.close();
    }
  });

  test('no console errors and no uncaught exceptions in the pages above', () => {
    assert.deepEqual(errors, []);
  });
});

describe('web console with an API key', () => {
  let server;
  let browser;
  before(async () => {
    server = await startServer(['--api-key', 'sk-console', ...STEP_DELAY]);
    browser = await chromium.launch(LAUNCH);
  });
  after(async () => {
    await browser?.close();
    if (server) assert.equal(await server.stop(), 0, server.log());
  });

  test('a 401 shows the key field; with the key, chat and the map work', async () => {
    const errors = [];
    const { context, page } = await openPage(browser, `${server.url}/`, errors);
    try {
      // The page itself is open; its API calls get 401 and the key field appears.
      await page.getByTestId('api-key').waitFor({ state: 'visible', timeout: 10000 });
      await page.getByTestId('auth-notice').waitFor({ state: 'visible', timeout: 10000 });
      await page.getByTestId('kv-notice').waitFor({ state: 'visible', timeout: 10000 });
      assert.equal(await mapBlocks(page), 0);

      // A message sent without the key is refused in the page (no alert) ...
      await chat(page, 'Tell me a story.', { maxTokens: 20 });
      await page.getByTestId('chat-error').waitFor({ state: 'visible', timeout: 10000 });
      assert.match(await text(page, 'chat-error'), /401/);
      assert.equal(await outputLength(page), 0);

      // ... and sent again once the key is saved; every request now carries it.
      await page.getByTestId('api-key').fill('sk-console');
      await page.getByTestId('api-key').press('Enter');
      await waitReplyDone(page, 30000);
      assert.match(await text(page, 'chat-stats'), /20 completion tok/);
      assert.ok(await page.getByTestId('chat-error').isHidden());
      await pollUntil(async () => (await mapBlocks(page)) > 0, { what: 'a snapshot with the key' });
      await pollUntil(async () => page.getByTestId('kv-notice').isHidden(), { what: 'the 401 notice to go' });
      assert.ok(await page.getByTestId('auth-notice').isHidden());
      assert.equal(await page.locator('#model').inputValue(), MODEL_ID);
      assert.equal(await page.evaluate(() => sessionStorage.getItem('kvserve.console.apiKey')), 'sk-console');
      // The only console errors are Chromium's own lines about the 401 responses.
      assert.deepEqual(errors.filter((e) => !/status of 401/.test(e)), []);
    } finally {
      await context.close();
    }
  });
});

describe('web console on a tiny KV pool', () => {
  let server;
  let browser;
  before(async () => {
    // 320 blocks of stories260K (10 KiB per 16-token f16 block; synthetic:tiny: 800 of 4 KiB):
    // room for two long sequences that share their prompt's blocks.
    server = await startServer(['--kv-cache-memory', '3200KiB', ...STEP_DELAY]);
    browser = await chromium.launch(LAUNCH);
  });
  after(async () => {
    await browser?.close();
    if (server) assert.equal(await server.stop(), 0, server.log());
  });

  test('two concurrent completions with one long prompt show up as shared blocks', async () => {
    const errors = [];
    const { context, page } = await openPage(browser, `${server.url}/`, errors);
    const streams = [];
    try {
      await pollUntil(async () => (await mapBlocks(page)) > 0, { what: 'the first snapshot' });
      const blocks = await mapBlocks(page);
      const start = async () => {
        const res = await fetch(`${server.url}/v1/completions`, {
          method: 'POST', headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify({ model: MODEL_ID, prompt: LONG_PROMPT, max_tokens: SHARED_TOKENS, temperature: 0,
                                 ignore_eos: true, stream: true }),
        });
        assert.equal(res.status, 200);
        return res;
      };
      // The second starts once the first has prefilled (its first token is out), so the prompt's
      // full blocks are in the prefix cache and the second references them too.
      const first = await start();
      const reader = first.body.getReader();
      const { value } = await reader.read();
      assert.ok(value?.length > 0);
      const rest = (async () => { while (!(await reader.read()).done); })();
      const second = await start();
      streams.push(rest, readSse(second));

      let maxShared = 0;
      let maxUsed = 0;
      await pollUntil(async () => {
        const shared = Number(await page.getByTestId('kv-count-shared').textContent());
        maxShared = Math.max(maxShared, shared);
        maxUsed = Math.max(maxUsed, await usedBlocks(page));
        return maxShared > 0;
      }, { timeoutMs: 30000, intervalMs: 20, what: 'a "shared" count > 0 in the legend' }).catch((e) => {
        throw new Error(`${e.message} (max used ${maxUsed}, pool ${blocks})`);
      });
      fs.mkdirSync(SHOTS, { recursive: true });
      await page.screenshot({ path: path.join(SHOTS, 'console-shared.png') });
      await Promise.all(streams);
      await pollUntil(async () => (await usedBlocks(page)) === 0, { what: 'kv-used-count back to 0' });
      assert.deepEqual(errors, []);
    } finally {
      await Promise.allSettled(streams);
      await context.close();
    }
  });
});

describe('web console with a compaction region', () => {
  let server;
  let browser;
  before(async () => {
    server = await startServer(['--kv-compact-dtype', 'int8', '--kv-compact-every', '16', '--kv-compact-keep', '32',
                                ...STEP_DELAY]);
    browser = await chromium.launch(LAUNCH);
  });
  after(async () => {
    await browser?.close();
    if (server) assert.equal(await server.stop(), 0, server.log());
  });

  test('the legend counts compacted blocks; they are drawn after the pool and the tooltip names them', async () => {
    const errors = [];
    const { context, page } = await openPage(browser, `${server.url}/`, errors);
    let stream;
    try {
      await pollUntil(async () => (await mapBlocks(page)) > 0, { what: 'the first snapshot' });
      const compacted = async () => Number((await text(page, 'kv-count-compact')).split(' / ')[0].replace(/,/g, ''));
      assert.match(await text(page, 'kv-count-compact'), /^0 \/ [\d,]+$/);
      const res = await fetch(`${server.url}/v1/completions`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: MODEL_ID, prompt: LONG_PROMPT, max_tokens: SHARED_TOKENS, temperature: 0,
                               ignore_eos: true, stream: true }),
      });
      assert.equal(res.status, 200);
      stream = readSse(res);
      await pollUntil(async () => (await compacted()) >= 4, { timeoutMs: 30000, intervalMs: 20,
                                                              what: 'compacted blocks in the legend' });
      // The region starts one empty row below the main pool's last row.
      const at = await page.evaluate(() => {
        const [main, compact] = kv.regions;
        const g = kv.geom;
        const box = document.getElementById('map-canvas').getBoundingClientRect();
        const cell = compact.cell0;
        return { first: cell, mainEnd: main.n, cols: g.cols, x: box.left + ((cell % g.cols) + 0.5) * g.c / g.dpr,
                 y: box.top + (Math.floor(cell / g.cols) + 0.5) * g.c / g.dpr };
      });
      assert.equal(at.first, (Math.ceil(at.mainEnd / at.cols) + 1) * at.cols, JSON.stringify(at));
      await page.mouse.move(at.x, at.y);
      const tip = await text(page, 'kv-tooltip');
      assert.match(tip, new RegExp(`^block ${at.mainEnd} \\(compaction region\\)`), tip);
      assert.match(tip, /dtype {2}int8/);
      fs.mkdirSync(SHOTS, { recursive: true });
      await page.screenshot({ path: path.join(SHOTS, 'console-compact.png') });
      await stream;
      await pollUntil(async () => (await compacted()) === 0, { what: 'the compacted count back to 0' });
      assert.deepEqual(errors, []);
    } finally {
      await Promise.allSettled([stream]);
      await context.close();
    }
  });
});
