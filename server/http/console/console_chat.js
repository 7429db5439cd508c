// Part of the web console page: index.html includes the console_*.js files, in this order, into
// one <script> at build time (cmake/EmbedFile.cmake); they share its scope.
// The chat playground.
// ---------- chat ----------
const chat = { history: [], sessionId: '', controller: null, pending: null, turnShown: false, gen: 0 };

function newSessionId() {
  const a = new Uint8Array(12);
  crypto.getRandomValues(a);  // works outside secure contexts too (unlike randomUUID)
  return 'console-' + Array.from(a, (b) => b.toString(16).padStart(2, '0')).join('');
}
function showSessionId() {
  const el = $('session-id');
  el.textContent = $('session').checked ? chat.sessionId.slice(0, 16) + '…' : '';
  el.title = chat.sessionId;
}

function showChatError(msg) { const el = $('chat-error'); el.textContent = msg; el.hidden = false; }
function hideChatError() { $('chat-error').hidden = true; }

function setBusy(busy) { $('chat-send').disabled = busy; $('chat-stop').disabled = !busy; }

function makeMsg(role, text, statsText) {
  return h('div', { className: 'msg ' + role }, h('div', { className: 'role', textContent: role }),
           h('div', { className: 'text', textContent: text }),
           ...(statsText ? [h('div', { className: 'stats', textContent: statsText })] : []));
}

// Moves the shown turn (user message, reply, stats) into the history list above it.
function archiveTurn() {
  if (!chat.turnShown) return;
  $('history').append(makeMsg('user', $('current-user').textContent),
                      makeMsg('assistant', $('chat-output').textContent, $('chat-stats').textContent));
  chat.turnShown = false;
}

function clearTurn() {
  $('current-user').textContent = '';
  $('current-user-msg').hidden = true;
  $('chat-output').textContent = '';
  $('chat-stats').textContent = '';
}

function newChat() {
  if (chat.controller) chat.controller.abort();
  chat.controller = null;
  chat.gen++;  // a reply still winding down no longer touches this conversation
  setBusy(false);
  // The old conversation's cache is of no more use: free its blocks now, not at the TTL.
  if (chat.history.length > 0 && $('session').checked) {
    fetch('v1/sessions/' + encodeURIComponent(chat.sessionId), { method: 'DELETE', headers: authHeaders() })
      .catch(() => { /* the TTL ends it */ });
  }
  chat.history = [];
  chat.pending = null;
  chat.turnShown = false;
  chat.sessionId = newSessionId();
  $('history').textContent = '';
  clearTurn();
  hideChatError();
  showSessionId();
}

function numberField(id, parse) {
  const raw = $(id).value.trim();
  if (raw === '') return undefined;
  const v = parse(raw);
  return Number.isFinite(v) ? v : undefined;
}

function setStats(parts) {
  const el = $('chat-stats');
  el.textContent = '';
  parts.forEach(([label, value], i) => el.append(i ? ' · ' : '', label ? label + ' ' : '', h('b', { textContent: value })));
}

// Calls onData(payload) for each SSE event's data; UTF-8 split across chunks is decoded right
// because the decoder runs in streaming mode.
async function readSse(res, onData) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder('utf-8');
  let buf = '';
  let data = [];
  const line = (l) => {
    if (l.endsWith('\r')) l = l.slice(0, -1);
    if (l === '') {
      if (data.length) { const d = data.join('\n'); data = []; onData(d); }
      return;
    }
    if (l.startsWith(':')) return;  // comment / keep-alive
    const c = l.indexOf(':');
    const field = c < 0 ? l : l.slice(0, c);
    let value = c < 0 ? '' : l.slice(c + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') data.push(value);
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let start = 0;
    for (let i = buf.indexOf('\n'); i >= 0; i = buf.indexOf('\n', start)) {
      line(buf.slice(start, i));
      start = i + 1;
    }
    buf = buf.slice(start);
  }
  buf += decoder.decode();
  if (buf) line(buf);
  line('');
}

async function send() {
  if (chat.controller) return;
  const input = $('chat-input');
  const text = input.value;
  if (!text.trim()) return;
  hideChatError();
  // The JSON schema box: the reply is constrained to it (response_format json_schema).
  const schemaText = $('json-schema').value.trim();
  let schema;
  if (schemaText) {
    try {
      schema = JSON.parse(schemaText);
    } catch (e) {
      showChatError(`The JSON schema box does not hold JSON: ${e.message}`);
      return;
    }
  }
  archiveTurn();
  clearTurn();
  input.value = '';
  $('current-user').textContent = text;
  $('current-user-msg').hidden = false;

  const messages = [];
  const system = $('system').value.trim();
  if (system) messages.push({ role: 'system', content: system });
  messages.push(...chat.history, { role: 'user', content: text });
  const body = { messages, stream: true, stream_options: { include_usage: true } };
  if ($('model').value) body.model = $('model').value;
  const temperature = numberField('temperature', Number);
  const topP = numberField('top-p', Number);
  const maxTokens = numberField('max-tokens', (s) => parseInt(s, 10));
  const seed = numberField('seed', (s) => parseInt(s, 10));
  if (temperature !== undefined) body.temperature = temperature;
  if (topP !== undefined) body.top_p = topP;
  if (maxTokens !== undefined) body.max_tokens = maxTokens;
  if (seed !== undefined) body.seed = seed;
  if ($('session').checked) body.session_id = chat.sessionId;
  if ($('ignore-eos').checked) body.ignore_eos = true;
  if (schema !== undefined) body.response_format = { type: 'json_schema', json_schema: { name: 'console', schema } };

  const controller = new AbortController();
  const gen = ++chat.gen;
  chat.controller = controller;
  setBusy(true);
  const out = $('chat-output');
  const node = document.createTextNode('');
  out.appendChild(node);
  const conv = $('conversation');
  const t0 = performance.now();
  let tFirst = null;
  let pieces = 0;
  let usage = null;
  let finish = null;
  let streamError = null;
  let outcome = 'done';
  let pending = '';  // text not shown yet: the page shows it once per frame, not once per token
  let flushQueued = false;
  let live = true;
  const flush = () => {
    flushQueued = false;
    if (!live || !pending) return;
    const stick = conv.scrollHeight - conv.scrollTop - conv.clientHeight < 40;
    node.appendData(pending);
    pending = '';
    if (stick) conv.scrollTop = conv.scrollHeight;
    const s = (performance.now() - tFirst) / 1000;
    setStats([['TTFT', `${Math.round(tFirst - t0)} ms`], ['', `${pieces} chunks`],
              ['', s > 0.05 ? `~${(pieces / s).toFixed(1)} tok/s` : '…']]);
  };
  setStats([['', 'waiting for the first token…']]);
  try {
    const res = await fetch('v1/chat/completions', {
      method: 'POST', headers: authHeaders({ 'Content-Type': 'application/json' }),
      body: JSON.stringify(body), signal: controller.signal,
    });
    if (!res.ok) {
      const msg = await errorMessage(res);
      clearTurn();
      input.value = text;  // give the message back
      if (res.status === 401) {
        needKey();
        chat.pending = text;
        showChatError(msg + '\nEnter the API key under Settings: the message is sent again when you save it.');
      } else {
        showChatError(msg);
      }
      return;
    }
    keyAccepted();
    chat.turnShown = true;
    await readSse(res, (d) => {
      if (d === '[DONE]') return;
      let j;
      try { j = JSON.parse(d); } catch { return; }
      if (j.error) {
        streamError = j.error.message || JSON.stringify(j.error);
        showChatError('The server ended the stream: ' + streamError);
        return;
      }
      const ch = Array.isArray(j.choices) ? j.choices[0] : null;
      const content = ch && ch.delta && ch.delta.content;
      if (content) {
        if (tFirst === null) tFirst = performance.now();
        pending += content;
        pieces++;
        if (!flushQueued) { flushQueued = true; requestAnimationFrame(flush); }
      }
      if (ch && ch.finish_reason) finish = ch.finish_reason;
      if (j.usage) usage = j.usage;
    });
  } catch (e) {
    if (e.name === 'AbortError') {
      outcome = 'stopped';
    } else {
      outcome = 'error';
      showChatError('Request failed: ' + e.message);
    }
  } finally {
    flush();
    live = false;
    if (chat.controller === controller) { chat.controller = null; setBusy(false); }
  }
  if (gen !== chat.gen || !chat.turnShown) return;
  const reply = node.data;
  chat.history.push({ role: 'user', content: text }, { role: 'assistant', content: reply });
  const tEnd = performance.now();
  const parts = [];
  if (usage) {
    parts.push(['prompt', `${usage.prompt_tokens} tok`]);
    const cached = usage.prompt_tokens_details ? usage.prompt_tokens_details.cached_tokens : undefined;
    parts.push(['cached', cached === undefined ? '–' : `${cached} tok`]);
  }
  parts.push(['TTFT', tFirst === null ? '–' : `${Math.round(tFirst - t0)} ms`]);
  const completion = usage ? usage.completion_tokens : pieces;
  const secs = tFirst === null ? 0 : (tEnd - tFirst) / 1000;
  parts.push(['', secs > 0 && completion > 0 ? `${(completion / secs).toFixed(1)} tok/s` : '– tok/s']);
  parts.push(['', `${usage ? '' : '~'}${completion} completion tok`]);
  parts.push(['', outcome === 'stopped' ? 'stopped' : (streamError ? 'error' : (finish || outcome))]);
  setStats(parts);
}

$('chat-send').addEventListener('click', () => { send(); });
$('chat-stop').addEventListener('click', () => { if (chat.controller) chat.controller.abort(); });
$('chat-input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
});
$('new-chat').addEventListener('click', newChat);
$('session').addEventListener('change', showSessionId);

