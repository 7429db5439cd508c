// Part of the web console page: index.html includes the console_*.js files, in this order, into
// one <script> at build time (cmake/EmbedFile.cmake); they share its scope.
// Helpers, the API key and the model list.
const $ = (id) => document.getElementById(id);
// A new element: props are set as properties (className, textContent, dataset via 'data-*'
// attributes); children are nodes or strings (strings become text, never HTML).
function h(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k.startsWith('data-')) e.setAttribute(k, v); else e[k] = v;
  }
  e.append(...children);
  return e;
}
const POLL_MS = 400;
const RETRY_MS = 2000;  // while snapshots fail (401, 404, server down): fewer failed requests
const CHART_WINDOW_S = 180;
const KEY_STORE = 'kvserve.console.apiKey';
const STATE_COLORS = { free: '#2c3342', used: '#56b4e9', cached: '#009e73', pinned: '#e69f00', shared: '#cc79a7' };
const SPARE_COLORS = ['#f0e442', '#d55e00', '#0072b2', '#999999'];
const MAP_BG = '#12151c';

// ---------- API key and requests ----------
let apiKey = '';
try { apiKey = sessionStorage.getItem(KEY_STORE) || ''; } catch { /* storage unavailable */ }
let keyNeeded = false;

function authHeaders(extra) {
  return apiKey ? { ...extra, Authorization: 'Bearer ' + apiKey } : { ...extra };
}

// The server's message from an error response ({"error":{"message":...}}), or the status.
async function errorMessage(res) {
  let text = '';
  try { text = await res.text(); } catch { /* body gone */ }
  try {
    const j = JSON.parse(text);
    if (j && j.error && j.error.message) return `${res.status}: ${j.error.message}`;
  } catch { /* not JSON */ }
  return `HTTP ${res.status} ${res.statusText}${text ? ': ' + text.slice(0, 200) : ''}`;
}

function needKey() {
  const notice = $('auth-notice');
  notice.textContent = apiKey
    ? 'The server rejected the API key (401). Enter another one under Settings.'
    : 'This server needs an API key (401). Enter it under Settings; it is kept for this tab only.';
  notice.hidden = false;
  if (!keyNeeded) {
    keyNeeded = true;
    $('settings').open = true;
    $('api-key').focus();
  }
}

function keyAccepted() {
  if (!keyNeeded) return;
  keyNeeded = false;
  $('auth-notice').hidden = true;
}

$('api-key').value = apiKey;
$('key-form').addEventListener('submit', (e) => {
  e.preventDefault();
  apiKey = $('api-key').value.trim();
  try {
    if (apiKey) sessionStorage.setItem(KEY_STORE, apiKey); else sessionStorage.removeItem(KEY_STORE);
  } catch { /* storage unavailable */ }
  keyNeeded = false;
  $('auth-notice').hidden = true;
  $('settings').open = false;
  hideChatError();
  loadModels();
  pollNow();
  if (chat.pending !== null && !chat.controller) {  // the message a 401 refused: send it again
    $('chat-input').value = chat.pending;
    chat.pending = null;
    send();
  }
});
$('key-clear').addEventListener('click', () => {
  apiKey = '';
  $('api-key').value = '';
  try { sessionStorage.removeItem(KEY_STORE); } catch { /* storage unavailable */ }
});

// ---------- models ----------
async function loadModels() {
  try {
    const res = await fetch('v1/models', { headers: authHeaders(), cache: 'no-store' });
    if (res.status === 401) { needKey(); await res.body?.cancel(); return; }
    if (!res.ok) { showChatError('Could not list the models: ' + await errorMessage(res)); return; }
    keyAccepted();
    const j = await res.json();
    const sel = $('model');
    const previous = sel.value;
    const ids = (j && Array.isArray(j.data) ? j.data : []).map((m) => String(m.id));
    sel.replaceChildren(...ids.map((id) => h('option', { value: id, textContent: id })));
    if (previous && [...sel.options].some((o) => o.value === previous)) sel.value = previous;
  } catch (e) {
    showChatError('Could not list the models: ' + e.message);
  }
}

