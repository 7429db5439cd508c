// Part of the web console page: index.html includes the console_*.js files, in this order, into
// one <script> at build time (cmake/EmbedFile.cmake); they share its scope.
// The live KV block map, the owners table, the engine charts, and the start-up.
// ---------- KV block map ----------
// regions: the main pool, then the compaction region when the server has one, each drawn from
// the start of a row: { id0 (first block id), n, runs, starts (run i covers [starts[i],
// starts[i + 1])), dtype, cell0 (first cell, set by the layout) }.
const kv = { snap: null, regions: [], drawnKey: '', drawnRuns: null, geom: null, highlight: -1, timer: 0, inflight: false,
             history: [], legendKey: '' };
const rgb = (h) => { const n = parseInt(h.slice(1), 16); return [(n >> 16) & 255, (n >> 8) & 255, n & 255]; };
const mix = (a, b, t) => a.map((v, i) => Math.round(v + (b[i] - v) * t));  // rgb a..b, t = 0..1
const pack = ([r, g, b]) => ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;  // ImageData pixel (little-endian)
function stateColor(name, i) { return STATE_COLORS[name] || SPARE_COLORS[i % SPARE_COLORS.length]; }

function fmtInt(n) { return Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '–'; }
function fmtBytes(b) {
  if (!Number.isFinite(b)) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return `${b.toFixed(i && b < 10 ? 1 : 0)} ${u[i]}`;
}

function kvNotice(msg) {
  const el = $('kv-notice');
  if (el.textContent !== msg) el.textContent = msg;
  el.hidden = !msg;
}

function pollNow() {
  clearTimeout(kv.timer);
  if (!kv.inflight) poll();
}
function schedulePoll(delay) {  // every POLL_MS from the start of the last poll, only while visible
  clearTimeout(kv.timer);
  if (document.visibilityState === 'visible') kv.timer = setTimeout(poll, delay);
}
document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'visible') pollNow(); else clearTimeout(kv.timer);
});

async function poll() {
  if (kv.inflight) return;
  kv.inflight = true;
  const ctl = new AbortController();
  const timeout = setTimeout(() => ctl.abort(), 5000);
  const t0 = performance.now();
  let ok = false;
  try {
    const res = await fetch('v1/cache/blocks', { headers: authHeaders(), cache: 'no-store', signal: ctl.signal });
    if (res.status === 401) {
      needKey();
      await res.body?.cancel();
      kvNotice('The block map needs the API key (401): set it under Settings.');
    } else if (res.status === 404) {
      await res.body?.cancel();
      kvNotice('This server has no /v1/cache/blocks (404): an older kvserve? Still trying.');
    } else if (!res.ok) {
      kvNotice('Snapshot failed: ' + await errorMessage(res));
    } else {
      const snap = await res.json();
      keyAccepted();
      kvNotice('');
      applySnapshot(snap, performance.now() - t0);
      ok = true;
    }
  } catch (e) {
    kvNotice(e.name === 'AbortError' ? 'Snapshot timed out; still trying.'
                                     : `Server unreachable (${e.message}); still trying.`);
  } finally {
    clearTimeout(timeout);
    kv.inflight = false;
    schedulePoll(Math.max(100, (ok ? POLL_MS : RETRY_MS) - (performance.now() - t0)));
  }
}

function applySnapshot(s, latencyMs) {
  if (!s || !Array.isArray(s.runs) || !Number.isFinite(s.num_blocks)) {
    kvNotice('Unexpected snapshot format.');
    return;
  }
  kv.snap = s;
  const region = (id0, n, runs, dtype) => {
    const starts = new Float64Array(runs.length + 1);
    for (let i = 0; i < runs.length; i++) starts[i + 1] = starts[i] + (runs[i][0] || 0);
    return { id0, n, runs, starts, dtype, cell0: 0 };
  };
  kv.regions = [region(0, s.num_blocks, s.runs, s.dtype)];
  const c = s.compact;
  const compact = c && Array.isArray(c.runs) && c.num_blocks > 0;
  if (compact) kv.regions.push(region(s.num_blocks, c.num_blocks, c.runs, c.dtype));
  const counts = s.counts || {};
  const states = Array.isArray(s.states) ? s.states : [];
  $('kv-map').dataset.blocks = String(s.num_blocks);
  const used = (counts.used || 0) + (counts.shared || 0);
  $('kv-used').textContent = String(used);
  $('kv-total').textContent = fmtInt(s.num_blocks);
  $('kv-pct').textContent = s.num_blocks ? (100 * used / s.num_blocks).toFixed(1) : '0';
  $('kv-meta').textContent = `${fmtInt(s.num_blocks)} blocks × ${s.block_size} tokens · ${s.dtype} · ` +
    `${fmtBytes(s.bytes_per_block * s.num_blocks)}` +
    (compact ? ` · compaction: ${fmtInt(c.num_blocks)} × ${c.dtype} · ${fmtBytes(c.bytes_per_block * c.num_blocks)}` : '');
  $('kv-age').textContent = `snapshot ${Math.round(latencyMs)} ms`;
  updateLegend(states, counts, compact ? c : null);
  drawMap(false);
  updateOwners(s.owners || []);
  updateEngine(s.engine || {});
}

// A legend item with a used/total bar (the host tier, the compaction region); state: its key.
const meterItem = (state, name, title) => h('span', { className: 'item', 'data-state': state, title },
  h('span', { className: 'name', textContent: name }), h('span', { className: 'hostbar' }, h('i')),
  h('span', { className: 'count', 'data-testid': 'kv-count-' + state }));
function setMeter(item, used, total) {
  item.querySelector('.count').textContent = total ? `${fmtInt(used)} / ${fmtInt(total)}` : 'off';
  item.querySelector('.hostbar i').style.width = total ? `${(100 * used / total).toFixed(1)}%` : '0';
}

function updateLegend(states, counts, compact) {
  const el = $('kv-legend');
  const key = states.join(',') + (compact ? '|compact' : '');
  if (key !== kv.legendKey) {
    kv.legendKey = key;
    el.textContent = '';
    states.forEach((name, i) => el.appendChild(h('span', { className: 'item', 'data-state': name },
      h('span', { className: 'swatch', style: `background: ${stateColor(name, i)}` }),
      h('span', { className: 'name', textContent: name }),
      h('span', { className: 'count', 'data-testid': 'kv-count-' + name }))));
    el.appendChild(meterItem('host', 'host tier', 'host offload tier (swapped-out blocks; not in the map)'));
    if (compact) {
      el.appendChild(meterItem('compact', 'compacted',
        'compaction region: old context re-encoded in a smaller dtype, drawn below the main pool after an empty row'));
    }
  }
  for (const item of el.querySelectorAll('[data-state]')) {
    if (item.dataset.state === 'compact') {
      setMeter(item, compact.num_blocks - ((compact.counts || {}).free || 0), compact.num_blocks);
    } else if (item.dataset.state === 'host') {
      setMeter(item, counts.host_used || 0, counts.host_total || 0);
    } else {
      item.querySelector('.count').textContent = String(counts[item.dataset.state] || 0);
    }
  }
}

// Cell size from the container width and the block count: as large as fits a height budget.
function mapGeometry(n) {
  const dpr = window.devicePixelRatio || 1;
  const cssW = Math.max(1, $('kv-map').clientWidth);
  const W = Math.max(1, Math.floor(cssW * dpr));
  const maxH = Math.min(380, Math.max(160, window.innerHeight * 0.4)) * dpr;
  let c = Math.max(1, Math.min(Math.floor(28 * dpr), Math.floor(Math.sqrt(W * maxH / Math.max(1, n)))));
  while (c > 1 && Math.ceil(n / Math.floor(W / c)) * c > maxH) c--;
  const cols = Math.max(1, Math.floor(W / c));
  const rows = Math.max(1, Math.ceil(n / cols));
  return { dpr, W: cols * c, c, cols, rows, H: rows * c, gap: c >= 5 ? Math.max(1, Math.round(dpr)) : 0 };
}

// The geometry for every region, each after an empty row below the one before (sets
// region.cell0).
function mapLayout(regions) {
  const total = regions.reduce((a, r) => a + r.n, 0);
  let g = mapGeometry(total);
  if (regions.length > 1) g = mapGeometry(total + 2 * (regions.length - 1) * g.cols);  // room for the breaks
  let cell = 0;
  for (const r of regions) { r.cell0 = cell ? (Math.ceil(cell / g.cols) + 1) * g.cols : 0; cell = r.cell0 + r.n; }
  g.rows = Math.max(1, Math.ceil(cell / g.cols));
  g.H = g.rows * g.c;
  return g;
}

function sameRuns(a, b) {
  if (!a || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    const x = a[i];
    const y = b[i];
    if (x[0] !== y[0] || x[1] !== y[1] || x[2] !== y[2] || x[3] !== y[3]) return false;
  }
  return true;
}

// Pixels straight into an ImageData: the cost is the canvas size, whatever the fragmentation.
function drawMap(force) {
  const s = kv.snap;
  if (!s) return;
  const g = mapLayout(kv.regions);
  const runs = kv.regions.map((r) => r.runs);
  const key = `${kv.regions.map((r) => r.n).join()}|${s.block_size}|${g.W}|${g.c}|${kv.highlight}|${(s.states || []).join()}`;
  if (!force && key === kv.drawnKey && kv.drawnRuns.every((r, i) => sameRuns(r, runs[i]))) return;
  kv.drawnKey = key;
  kv.drawnRuns = runs;
  kv.geom = g;
  const cv = $('map-canvas');
  if (cv.width !== g.W || cv.height !== g.H) {
    cv.width = g.W;
    cv.height = g.H;
    cv.style.width = `${g.W / g.dpr}px`;
    cv.style.height = `${g.H / g.dpr}px`;
  }
  const ctx = cv.getContext('2d');
  const img = ctx.createImageData(g.W, g.H);
  const px = new Uint32Array(img.data.buffer);
  const bg = rgb(MAP_BG);
  px.fill(pack(bg));
  const states = s.states || [];
  const bs = s.block_size || 1;
  const inner = g.c - g.gap;
  const palette = new Map();  // (state, fill, dimmed) -> [top, bottom, split]
  for (const region of kv.regions) {
    let b = region.cell0;
    const last = region.cell0 + region.n;
    for (const [count, st, owner, fill] of region.runs) {
      const faded = kv.highlight >= 0 && owner !== kv.highlight;
      const pkey = (st * (bs + 1) + Math.max(0, Math.min(bs, fill | 0))) * 2 + (faded ? 1 : 0);
      let colors = palette.get(pkey);
      if (!colors) {
        const name = states[st];
        let full = rgb(stateColor(name, st));
        if (faded) full = mix(full, bg, 0.75);
        const frac = Math.max(0, Math.min(1, (fill || 0) / bs));
        const partial = name !== 'free' && frac < 1;
        const dim = mix(full, bg, 0.6);
        // Small cells show a partial fill as a lighter shade; larger ones as a bar whose height is the fill.
        const bar = partial && inner >= 4;
        colors = [pack(bar ? dim : (partial ? mix(dim, full, 0.25 + 0.75 * frac) : full)), pack(full),
                  bar ? inner - Math.round(inner * frac) : inner];  // rows above `split` get the first colour
        palette.set(pkey, colors);
      }
      const [top, bottom, split] = colors;
      const end = Math.min(b + Math.max(0, count | 0), last);
      for (; b < end; b++) {
        const x = (b % g.cols) * g.c;
        let o = Math.floor(b / g.cols) * g.c * g.W + x;
        for (let dy = 0; dy < inner; dy++, o += g.W) px.fill(dy < split ? top : bottom, o, o + inner);
      }
    }
  }
  ctx.putImageData(img, 0, 0);
}

// The block under the pointer: [region, index in it], or null.
function blockAt(ev) {
  const g = kv.geom;
  if (!g || !kv.snap) return null;
  const r = $('map-canvas').getBoundingClientRect();
  const col = Math.floor((ev.clientX - r.left) * g.dpr / g.c);
  const row = Math.floor((ev.clientY - r.top) * g.dpr / g.c);
  if (col < 0 || col >= g.cols || row < 0) return null;
  const cell = row * g.cols + col;
  const region = kv.regions.find((x) => cell >= x.cell0 && cell < x.cell0 + x.n);
  return region ? [region, cell - region.cell0] : null;
}

function runOf(st, b) {  // binary search: st[i] <= b < st[i + 1]
  let lo = 0;
  let hi = st.length - 2;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (st[mid] <= b) lo = mid; else hi = mid - 1;
  }
  return lo;
}

function showTip(ev) {
  const tip = $('tip');
  const at = blockAt(ev);
  const s = kv.snap;
  if (!at || !at[0].runs.length) { tip.hidden = true; return; }
  const [region, i] = at;
  const [, st, ownerIdx, fill] = region.runs[runOf(region.starts, i)];
  const lines = [`block ${region.id0 + i}${region.id0 ? ' (compaction region)' : ''}`, `state  ${(s.states || [])[st] ?? st}`];
  const owner = ownerIdx >= 0 && s.owners ? s.owners[ownerIdx] : null;
  if (owner) {
    lines.push(`owner  ${owner.id}`);
    lines.push(`       ${owner.kind}${owner.state ? ' · ' + owner.state : ''} · ${fmtInt(owner.tokens)} tokens`);
  } else {
    lines.push('owner  –');
  }
  lines.push(`fill   ${fill}/${s.block_size} tokens`, `dtype  ${region.dtype}`);
  tip.textContent = lines.join('\n');
  tip.hidden = false;
  const box = $('kv-map').getBoundingClientRect();
  let x = ev.clientX - box.left + 14;
  const y = ev.clientY - box.top + 14;
  if (x + tip.offsetWidth > box.width) x = Math.max(0, ev.clientX - box.left - tip.offsetWidth - 10);
  tip.style.left = `${x}px`;
  tip.style.top = `${y}px`;
}
$('map-canvas').addEventListener('pointermove', showTip);
$('map-canvas').addEventListener('pointerdown', showTip);  // touch: tap a cell
$('map-canvas').addEventListener('pointerleave', (ev) => { if (ev.pointerType !== 'touch') $('tip').hidden = true; });
document.addEventListener('pointerdown', (ev) => { if (ev.target !== $('map-canvas')) $('tip').hidden = true; });

function updateOwners(owners) {
  const LIMIT = 200;
  const order = owners.map((o, i) => i).sort((a, b) => (owners[b].blocks || 0) - (owners[a].blocks || 0));
  const rows = order.slice(0, LIMIT).map((i) => {
    const o = owners[i];
    return h('tr', { 'data-owner': i }, h('td', { title: String(o.id), textContent: String(o.id) }),
             ...[o.kind, o.state || '–', fmtInt(o.tokens), fmtInt(o.blocks), fmtInt(o.host_blocks),
                 fmtInt(o.evicted_tokens), fmtInt(o.cached_prompt_tokens)].map((v) => h('td', { textContent: String(v ?? '–') })));
  });
  const note = !owners.length ? 'no owners: the pool is idle' : owners.length > LIMIT ? `… ${owners.length - LIMIT} more` : '';
  if (note) rows.push(h('tr', {}, h('td', { className: 'empty', colSpan: 8, textContent: note })));
  $('owners').replaceChildren(...rows);
}
$('owners').addEventListener('mouseover', (e) => {
  const tr = e.target.closest('tr[data-owner]');
  const idx = tr ? Number(tr.dataset.owner) : -1;
  if (idx !== kv.highlight) { kv.highlight = idx; drawMap(false); }
});
$('owners').addEventListener('mouseleave', () => { kv.highlight = -1; drawMap(false); });

function updateEngine(e) {
  const ev = e.evicted_blocks || {};
  const items = [
    ['running', fmtInt(e.running)], ['waiting', fmtInt(e.waiting)], ['swapped', fmtInt(e.swapped)],
    ['tok/s', Number.isFinite(e.tokens_per_second) ? e.tokens_per_second.toFixed(1) : '–'],
    ['KV usage', Number.isFinite(e.kv_usage_ratio) ? (100 * e.kv_usage_ratio).toFixed(1) + '%' : '–'],
    ['preemptions', fmtInt(e.preemptions_total)], ['prefix-hit tokens', fmtInt(e.prefix_hit_tokens)],
    ['evicted blocks', `window ${fmtInt(ev.window)} · prefix LRU ${fmtInt(ev.prefix_lru)} · ` +
                       `session ${fmtInt(ev.session)} · preemption ${fmtInt(ev.preemption)}`],
  ];
  $('engine').replaceChildren(...items.map(([k, v]) => h('span', {}, k + ' ', h('b', { textContent: v }))));
  const now = Date.now() / 1000;
  kv.history.push({ t: now, tps: +e.tokens_per_second || 0, kv: +e.kv_usage_ratio || 0,
                    running: +e.running || 0, waiting: +e.waiting || 0 });
  while (kv.history.length && kv.history[0].t < now - CHART_WINDOW_S - 5) kv.history.shift();
  drawCharts();
}

function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

function drawChart(id, series, fixedMax) {
  const cv = $(id);
  const dpr = window.devicePixelRatio || 1;
  const w = cv.clientWidth;
  const ht = cv.clientHeight;
  if (!w || !ht) return;
  if (cv.width !== Math.round(w * dpr) || cv.height !== Math.round(ht * dpr)) {
    cv.width = Math.round(w * dpr);
    cv.height = Math.round(ht * dpr);
  }
  const ctx = cv.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, ht);
  const hist = kv.history;
  const top = fixedMax || niceMax(Math.max(0, ...series.flatMap((sr) => hist.map(sr.get))));
  const pad = 3;
  ctx.strokeStyle = '#2f3645';
  ctx.lineWidth = 1;
  for (const f of [0, 0.5, 1]) {
    const y = Math.round(pad + (ht - 2 * pad) * (1 - f)) + 0.5;
    ctx.beginPath(); ctx.moveTo(0, y); ctx.lineTo(w, y); ctx.stroke();
  }
  ctx.fillStyle = '#8d96a8';
  ctx.font = '10px system-ui, sans-serif';
  ctx.textBaseline = 'top';
  ctx.fillText(String(top), 2, 1);
  ctx.textBaseline = 'bottom';
  ctx.fillText(`-${CHART_WINDOW_S / 60} min`, 2, ht);
  const now = Date.now() / 1000;
  const xOf = (t) => (t - (now - CHART_WINDOW_S)) / CHART_WINDOW_S * w;
  const yOf = (v) => pad + (ht - 2 * pad) * (1 - Math.min(1, v / top));
  for (const sr of series) {
    if (hist.length < 1) continue;
    ctx.strokeStyle = sr.color;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    hist.forEach((p, i) => { const x = xOf(p.t); const y = yOf(sr.get(p)); if (i) ctx.lineTo(x, y); else ctx.moveTo(x, y); });
    ctx.stroke();
    if (sr.fill) {
      ctx.lineTo(xOf(hist[hist.length - 1].t), ht);
      ctx.lineTo(xOf(hist[0].t), ht);
      ctx.closePath();
      ctx.fillStyle = sr.fill;
      ctx.fill();
    }
  }
}

function drawCharts() {
  const last = kv.history[kv.history.length - 1];
  if (!last) return;
  $('cap-tps').textContent = last.tps.toFixed(1);
  $('cap-kv').textContent = (100 * last.kv).toFixed(1) + '%';
  $('cap-rw').textContent = `${last.running} / ${last.waiting}`;
  drawChart('chart-tps', [{ get: (p) => p.tps, color: '#56b4e9', fill: '#56b4e922' }]);
  drawChart('chart-kv', [{ get: (p) => p.kv, color: '#009e73', fill: '#009e7322' }], 1);
  drawChart('chart-rw', [{ get: (p) => p.running, color: '#56b4e9' }, { get: (p) => p.waiting, color: '#e69f00' }]);
}

new ResizeObserver(() => { drawMap(false); drawCharts(); }).observe($('kv-map'));

// ---------- start ----------
chat.sessionId = newSessionId();
showSessionId();
loadModels();
poll();
