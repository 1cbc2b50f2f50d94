// The web page's chat logic (JavaScript, joined into kWebPage by web_page.h after the Markdown
// renderer). State lives in localStorage: kestrel.chats (the conversations, each {id, title,
// created, updated, messages: [{role, content, stats?}]}), kestrel.current (the open one) and
// kestrel.settings. A reply enters a conversation only once it has finished or been stopped; a
// failed request is shown as an error after it and never saved (a new message goes back into the
// box). Replies stream from /v1/chat/completions (SSE); Stop aborts the fetch, which cancels the
// request on the server. window.kestrel exposes the state and the renderer to the browser test.
#pragma once

namespace kestrel::server {

inline constexpr char kWebScript[] = R"JS(
const $ = (s) => document.querySelector(s);
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}
function iconButton(icon, label, act, extra) {
  const b = el('button', 'icon');
  b.type = 'button';
  b.title = label;
  b.setAttribute('aria-label', label);
  b.dataset.act = act;
  b.innerHTML = svg(icon);
  if (extra) Object.assign(b.dataset, extra);
  return b;
}

const KEYS = { chats: 'kestrel.chats', current: 'kestrel.current', settings: 'kestrel.settings' };
const DEFAULTS = { system: '', temperature: 0.7, top_p: 0.95, max_tokens: 1024, key: '' };
function load(key, fallback) {
  try { const v = JSON.parse(localStorage.getItem(key)); return v == null ? fallback : v; } catch { return fallback; }
}
function store(key, value) {
  try { localStorage.setItem(key, JSON.stringify(value)); } catch (e) { console.warn('kestrel: not saved:', e); }
}
const params = new URLSearchParams(location.search);
let settings = Object.assign({}, DEFAULTS, load(KEYS.settings, {}));
try { settings.key = settings.key || localStorage.getItem('kestrel_key') || ''; } catch {}  // the old page's key
if (params.get('key')) { settings.key = params.get('key'); store(KEYS.settings, settings); }
let chats = load(KEYS.chats, []);
chats = Array.isArray(chats) ? chats.filter((c) => c && typeof c.id === 'string' && Array.isArray(c.messages)) : [];
let current = load(KEYS.current, null);
let busy = null;       // the reply streaming now: {chat, base (the messages it answers), turn, ctrl}
let transient = null;  // {error, user?}: a failed request, shown once and never saved
let modelId = '';

const saveChats = () => store(KEYS.chats, chats.filter((c) => c.messages.length));
const openChat = () => chats.find((c) => c.id === current) || null;
const titleOf = (text) => { const t = text.trim().split('\n')[0]; return t.length > 48 ? t.slice(0, 47) + '…' : t; };
const newId = () => Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
function headers() {
  const h = { 'Content-Type': 'application/json' };
  if (settings.key) h.Authorization = 'Bearer ' + settings.key;
  return h;
}

// ---- rendering ----
function renderList() {
  const nav = $('#chats');
  nav.textContent = '';
  const shown = chats.filter((c) => c.messages.length || (busy && busy.chat === c)).sort((a, b) => b.updated - a.updated);
  if (!shown.length) nav.append(el('div', 'none', 'No conversations yet'));
  for (const c of shown) {
    const row = el('div', 'chat' + (c.id === current ? ' on' : ''));
    row.dataset.id = c.id;
    row.tabIndex = 0;
    row.title = c.title;
    row.append(el('span', 't', c.title || 'New chat'), iconButton('trash', 'Delete conversation', 'delete', { id: c.id }));
    nav.append(row);
  }
}

function statsNode(s) {
  const n = el('span', 'stats'), tokens = Number(s.tokens) || 0, tps = Number(s.tps) || 0, ms = Number(s.ms) || 0;
  const parts = [`<b>${tokens}</b> token${tokens === 1 ? '' : 's'}`];  // numbers only: nothing from the text
  if (tps) parts.push(`<b>${tps >= 100 ? Math.round(tps) : tps.toFixed(1)}</b> tok/s`);
  parts.push(ms < 1000 ? Math.round(ms) + ' ms' : (ms / 1000).toFixed(1) + ' s');
  if (s.finish === 'stopped') parts.push('<span class="stop">stopped</span>');
  else if (s.finish === 'length') parts.push('max tokens reached');
  n.innerHTML = parts.join(' · ');
  if (s.ttft != null) n.title = `first token after ${Number(s.ttft)} ms`;
  return n;
}

function replyHtml(content, reasoning, streaming) {  // reasoning_content, if any, folded above the reply
  const open = streaming && !content ? ' open' : '';
  const think = reasoning ? `<details class="think"${open}><summary>${open ? 'Thinking…' : 'Thoughts'}</summary>${markdown(reasoning)}</details>` : '';
  return think + markdown(content);
}

function turn(m, i, tools) {
  const t = el('div', 'turn ' + m.role);
  const body = el('div', 'msg ' + m.role);
  const meta = el('div', 'meta');
  if (m.role === 'assistant') {
    t.append(avatar());
    body.innerHTML = replyHtml(m.content, m.reasoning);
    body.dataset.state = 'done';
    if (m.stats) { body.dataset.finish = m.stats.finish; meta.append(statsNode(m.stats)); }
    if (tools) {
      meta.append(iconButton('copy', 'Copy', 'copy', { i }));
      if (tools.last) meta.append(iconButton('regen', 'Regenerate', 'regen'));
    }
  } else {
    body.textContent = m.content;
    if (tools && tools.editable) meta.append(iconButton('edit', 'Edit', 'edit', { i }));
    if (tools && tools.last) meta.append(iconButton('regen', 'Send again', 'retry'));
  }
  t.append(body, meta);
  if (tools && tools.last) t.classList.add('last');
  return t;
}

function avatar() {
  const a = el('div', 'avatar');
  a.innerHTML = svg('bird', 18);
  return a;
}

function emptyState() {
  const e = el('div', 'empty');
  e.innerHTML = `<div class="logo">${svg('bird', 32)}</div><h1>What shall we talk about?</h1>` +
    `<p>${modelId ? 'Chatting with <b></b> on Kestrel.' : 'Kestrel is ready.'}</p><div class="sugg"></div>`;
  if (modelId) e.querySelector('b').textContent = modelId;
  for (const [a, b] of [['Tell me a story', 'about a dragon who is afraid of the dark'],
                        ['Explain recursion', 'with a short code example'],
                        ['Write a haiku', 'about the first snow of winter'],
                        ['Plan a picnic', 'a checklist for four people']]) {
    const btn = el('button');
    btn.type = 'button';
    btn.dataset.act = 'suggest';
    btn.append(a, el('span', '', b));
    e.querySelector('.sugg').append(btn);
  }
  return e;
}

function render() {
  renderList();
  const c = busy ? busy.chat : openChat();
  $('#title').textContent = c && c.title ? c.title : 'New chat';
  document.title = c && c.title ? c.title + ' · Kestrel' : 'Kestrel';
  const log = $('#log'), top = log.scrollTop;
  log.textContent = '';
  const msgs = busy ? busy.base : c ? c.messages : [];
  if (!msgs.length && !transient) { log.append(emptyState()); return; }
  const inner = el('div', 'inner');
  let lastUser = -1;
  msgs.forEach((m, i) => { if (m.role === 'user') lastUser = i; });
  msgs.forEach((m, i) => inner.append(turn(m, i, busy ? null : { last: i === msgs.length - 1, editable: i === lastUser })));
  if (busy) inner.append(busy.turn);
  if (transient) {
    if (transient.user != null) inner.append(Object.assign(turn({ role: 'user', content: transient.user }), { className: 'turn user failed' }));
    const t = el('div', 'turn');
    const e = el('div', 'msg error', transient.error);
    e.dataset.state = 'done';
    e.dataset.finish = 'error';
    t.append(e);
    inner.append(t);
  }
  log.append(inner);
  log.scrollTop = top;
}

const nearBottom = () => { const l = $('#log'); return l.scrollHeight - l.scrollTop - l.clientHeight < 120; };
const scrollDown = () => { const l = $('#log'); l.scrollTop = l.scrollHeight; };
function autosize() {
  const q = $('#q');
  q.style.height = 'auto';
  q.style.height = Math.min(q.scrollHeight, 220) + 'px';
  $('#send').disabled = !q.value.trim();
}
function setBusy(on) {
  $('#send').hidden = on;
  $('#stop').hidden = !on;
  document.body.classList.toggle('busy', on);
  autosize();
}

// ---- talking to the server ----
async function httpError(r) {
  let msg = r.statusText || 'request failed';
  try { const j = await r.json(); if (j.error && j.error.message) msg = j.error.message; } catch {}
  if (r.status === 401) {
    showSettings(true);
    return new Error('This server needs an API key: enter it in Settings. (' + msg + ')');
  }
  return new Error(`${r.status}: ${msg}`);
}

async function loadModel() {
  const pill = $('#model');
  try {
    const r = await fetch('/v1/models', { headers: headers() });
    if (r.status === 401) {
      pill.className = 'pill bad';
      pill.textContent = 'API key needed';
      modelId = '';
      if (!$('#settings').open) showSettings(true);
      return;
    }
    const j = await r.json();
    modelId = (j.data && j.data[0] && j.data[0].id) || '';
    pill.className = 'pill ok';
    pill.textContent = modelId || 'connected';
  } catch {
    pill.className = 'pill bad';
    pill.textContent = 'offline';
  }
  if (!busy && !(openChat() || {}).messages?.length && !transient) render();
}

// Streams a reply to base (the conversation so far, ending with the user's message) into chat.
// restore: the text of a new message, put back into the box if the request fails.
async function generate(chat, base, restore) {
  transient = null;
  const node = el('div', 'msg assistant');
  node.dataset.state = 'streaming';
  node.innerHTML = '<span class="dots"><i></i><i></i><i></i></span>';
  const meta = el('div', 'meta');
  const t = el('div', 'turn assistant last');
  t.append(avatar(), node, meta);
  const ctrl = new AbortController();
  busy = { chat, base, turn: t, ctrl };
  setBusy(true);
  render();
  scrollDown();
  const body = { messages: base.map((m) => ({ role: m.role, content: m.content })), stream: true,
                 stream_options: { include_usage: true } };
  if (settings.system.trim()) body.messages.unshift({ role: 'system', content: settings.system });
  if (modelId) body.model = modelId;
  for (const k of ['temperature', 'top_p', 'max_tokens']) if (settings[k] !== '' && settings[k] != null) body[k] = Number(settings[k]);
  let text = '', reasoning = '', n = 0, usage = null, finish = null, error = null, t1 = 0, tl = 0, queued = false;
  const t0 = performance.now();
  const paint = () => {
    queued = false;
    const follow = nearBottom();
    node.innerHTML = replyHtml(text, reasoning, true);
    meta.textContent = `${n} token${n === 1 ? '' : 's'}…`;
    meta.className = 'meta stats';
    if (follow) scrollDown();
  };
  try {
    const r = await fetch('/v1/chat/completions', { method: 'POST', headers: headers(), body: JSON.stringify(body), signal: ctrl.signal });
    if (!r.ok) throw await httpError(r);
    const reader = r.body.getReader(), dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      const events = buf.split(/\r?\n\r?\n/);
      buf = events.pop();
      for (const ev of events) {
        const data = ev.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('\n');
        if (!data || data === '[DONE]') continue;
        const j = JSON.parse(data);
        if (j.error) throw new Error(j.error.message || 'the server reported an error');
        if (j.usage) usage = j.usage;
        const c = j.choices && j.choices[0];
        if (!c) continue;
        const d = c.delta || {};
        if (d.content || d.reasoning_content) {
          tl = performance.now();
          if (!t1) t1 = tl;
          n++;
          text += d.content || '';
          reasoning += d.reasoning_content || '';
          if (!queued) { queued = true; requestAnimationFrame(paint); }
        }
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
  } catch (e) {
    error = e;
  }
  const stopped = ctrl.signal.aborted;
  busy = null;
  setBusy(false);
  if (error && !stopped) {
    const msg = error.name === 'TypeError' ? `Could not reach the server (${error.message}).` : error.message;
    transient = { error: msg, user: restore };
    if (restore != null && !$('#q').value) { $('#q').value = restore; autosize(); }
    if (!chat.messages.length) { chats = chats.filter((c) => c !== chat); current = null; store(KEYS.current, null); }
    render();
    scrollDown();
    return;
  }
  const tokens = (usage && usage.completion_tokens) || n;
  const end = tl || performance.now();
  const stats = { tokens, ms: Math.round(end - t0), ttft: t1 ? Math.round(t1 - t0) : null, finish: stopped ? 'stopped' : finish || 'stop',
                  tps: null };
  // The decode rate (first token to last) when the tokens came spread out; over the whole request
  // when they came in a burst, where arrival times say nothing about the rate.
  if (tokens > 1 && tl - t1 >= 250) stats.tps = (tokens - 1) / ((tl - t1) / 1000);
  else if (tl > t0) stats.tps = tokens / ((tl - t0) / 1000);
  const reply = { role: 'assistant', content: text, stats };
  if (reasoning) reply.reasoning = reasoning;
  chat.messages = text || reasoning ? base.concat(reply) : base;  // stopped before the first token: the question stays
  if (base.length === 1 || !chat.title) chat.title = titleOf(base[0].content);
  chat.updated = Date.now();
  saveChats();
  const follow = nearBottom();
  render();
  if (follow) scrollDown();
}

function send(text) {
  if (busy || !text.trim()) return;
  let c = openChat();
  if (!c) {
    c = { id: newId(), title: titleOf(text), created: Date.now(), updated: Date.now(), messages: [] };
    chats.push(c);
    current = c.id;
    store(KEYS.current, current);
  }
  generate(c, c.messages.concat({ role: 'user', content: text }), text);
}
const stop = () => { if (busy) busy.ctrl.abort(); };

function regenerate() {
  const c = openChat();
  if (busy || !c) return;
  let end = c.messages.length;
  while (end > 0 && c.messages[end - 1].role !== 'user') end--;
  if (end) generate(c, c.messages.slice(0, end), null);
}

function startEdit(i) {
  const c = openChat(), turnNode = document.querySelectorAll('#log .turn')[i];
  if (busy || !c || !turnNode) return;
  const box = el('div', 'edit-box'), ta = el('textarea'), row = el('div');
  ta.value = c.messages[i].content;
  const cancel = el('button', 'btn', 'Cancel'), save = el('button', 'btn primary', 'Save & send');
  cancel.type = save.type = 'button';
  cancel.onclick = render;
  save.dataset.act = 'save-edit';
  save.onclick = () => { if (ta.value.trim()) generate(c, c.messages.slice(0, i).concat({ role: 'user', content: ta.value }), null); };
  ta.onkeydown = (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); save.click(); }
    if (e.key === 'Escape') render();
  };
  row.append(cancel, save);
  box.append(ta, row);
  turnNode.textContent = '';
  turnNode.append(box);
  ta.focus();
}

function selectChat(id) {
  stop();
  current = id;
  store(KEYS.current, current);
  transient = null;
  document.body.classList.remove('menu');
  render();
  scrollDown();
  $('#q').focus();
}

function deleteChat(id) {
  const c = chats.find((x) => x.id === id);
  if (!c || !confirm(`Delete “${c.title}”?`)) return;
  if (busy && busy.chat === c) stop();
  chats = chats.filter((x) => x !== c);
  saveChats();
  if (current === id) selectChat(null); else renderList();
}

async function copyText(text, button) {
  try { await navigator.clipboard.writeText(text); } catch {
    const ta = el('textarea');
    ta.value = text;
    document.body.append(ta);
    ta.select();
    document.execCommand('copy');
    ta.remove();
  }
  const old = button.innerHTML;
  button.innerHTML = svg('check', 14);
  setTimeout(() => { button.innerHTML = old; }, 1200);
}

// ---- settings ----
const FIELDS = ['system', 'temperature', 'top_p', 'max_tokens', 'key'];
function showSettings(needKey) {
  const d = $('#settings');
  for (const k of FIELDS) $('#s-' + k).value = settings[k] ?? '';
  $('#keynote').hidden = !needKey;
  if (!d.open) d.showModal();
  if (needKey) $('#s-key').focus();
}
function saveSettings() {
  const old = settings.key;
  for (const k of FIELDS) settings[k] = $('#s-' + k).value;
  for (const k of ['temperature', 'top_p', 'max_tokens']) if (settings[k] !== '') settings[k] = Number(settings[k]);
  store(KEYS.settings, settings);
  if (settings.key !== old || !modelId) loadModel();
}

// ---- events ----
$('#f').addEventListener('submit', (e) => {
  e.preventDefault();
  const q = $('#q'), text = q.value;
  if (busy || !text.trim()) return;
  q.value = '';
  autosize();
  send(text);
});
$('#q').addEventListener('input', autosize);
$('#q').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); $('#f').requestSubmit(); }
});
document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && busy && !$('#settings').open) stop(); });
$('#stop').addEventListener('click', stop);
$('#new').addEventListener('click', () => selectChat(null));
$('#open-settings').addEventListener('click', () => showSettings(false));
$('#settings-top').addEventListener('click', () => showSettings(false));
$('#model').addEventListener('click', () => { if ($('#model').classList.contains('bad')) showSettings(true); });
$('#menu').addEventListener('click', () => document.body.classList.toggle('menu'));
$('#scrim').addEventListener('click', () => document.body.classList.remove('menu'));
$('#s-reset').addEventListener('click', () => { for (const k of FIELDS) if (k !== 'key') $('#s-' + k).value = DEFAULTS[k]; });
$('#sf').addEventListener('submit', (e) => { if (e.submitter && e.submitter.value === 'save') saveSettings(); });
$('#chats').addEventListener('click', (e) => {
  const del = e.target.closest('[data-act=delete]');
  if (del) { e.stopPropagation(); deleteChat(del.dataset.id); return; }
  const row = e.target.closest('.chat');
  if (row) selectChat(row.dataset.id);
});
$('#chats').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && e.target.classList.contains('chat')) selectChat(e.target.dataset.id);
});
$('#log').addEventListener('click', (e) => {
  const b = e.target.closest('[data-act]');
  if (!b) return;
  const c = openChat(), act = b.dataset.act;
  if (act === 'copy-code') copyText(b.closest('.code').querySelector('code').textContent, b);
  else if (act === 'copy' && c) copyText(c.messages[+b.dataset.i].content, b);
  else if (act === 'regen' || act === 'retry') regenerate();
  else if (act === 'edit') startEdit(+b.dataset.i);
  else if (act === 'suggest') send(b.firstChild.textContent + ' ' + b.lastChild.textContent);
});
window.addEventListener('storage', (e) => {  // another tab changed the conversations
  if (e.key === KEYS.chats && !busy) { chats = load(KEYS.chats, []); render(); }
});

window.kestrel = { markdown, send, stop, regenerate, get chats() { return chats; }, get settings() { return settings; },
                   get busy() { return !!busy; }, get model() { return modelId; } };
render();
scrollDown();
autosize();
loadModel().then(() => { window.kestrel.ready = true; });
if (params.get('q') && params.get('send')) { selectChat(null); send(params.get('q')); }
)JS";

}  // namespace kestrel::server
