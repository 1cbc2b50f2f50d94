// The page GET / serves: a self-contained chat (no build step, no external assets) that streams
// from /v1/chat/completions. ?q=TEXT&send=1[&key=KEY] sends TEXT on load (the headless browser test).
#pragma once

namespace kestrel::server {

inline constexpr const char* kWebPage = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>Kestrel</title>
<style>
 body{font:15px/1.45 system-ui,sans-serif;margin:0;background:#f6f6f4;color:#222;display:flex;flex-direction:column;height:100vh}
 header{padding:10px 16px;background:#1d3b53;color:#fff;font-weight:600}
 #log{flex:1;overflow-y:auto;padding:16px;max-width:820px;width:100%;box-sizing:border-box;margin:0 auto}
 .msg{white-space:pre-wrap;margin:8px 0;padding:10px 12px;border-radius:8px}
 .user{background:#dfe9f3}.assistant{background:#fff;border:1px solid #ddd}.error{background:#fbe3e3}
 form{display:flex;gap:8px;padding:12px;max-width:820px;width:100%;box-sizing:border-box;margin:0 auto}
 textarea{flex:1;font:inherit;padding:8px;border-radius:6px;border:1px solid #bbb;resize:vertical;min-height:44px}
 button{font:inherit;padding:8px 16px;border-radius:6px;border:0;background:#1d3b53;color:#fff}
 #key{width:140px;font:inherit;padding:6px;border-radius:6px;border:1px solid #bbb}
</style></head><body>
<header>Kestrel <span id="model" style="font-weight:400;opacity:.8"></span></header>
<div id="log"></div>
<form id="f"><textarea id="q" placeholder="Say something (Enter sends, Shift+Enter for a new line)"></textarea>
<input id="key" type="password" placeholder="API key (optional)"><button id="send">Send</button></form>
<script>
const log = document.getElementById('log'), q = document.getElementById('q'), key = document.getElementById('key');
const params = new URLSearchParams(location.search);
key.value = params.get('key') || localStorage.getItem('kestrel_key') || '';
const history = [];
function headers() {
  const h = {'Content-Type': 'application/json'};
  if (key.value) { h['Authorization'] = 'Bearer ' + key.value; localStorage.setItem('kestrel_key', key.value); }
  return h;
}
function add(role, text) {
  const d = document.createElement('div'); d.className = 'msg ' + role; d.textContent = text;
  log.appendChild(d); log.scrollTop = log.scrollHeight; return d;
}
fetch('/v1/models', {headers: headers()}).then(r => r.json()).then(j => {
  if (j.data) document.getElementById('model').textContent = j.data[0].id; }).catch(() => {});
async function send(text) {
  if (!text.trim()) return;
  history.push({role: 'user', content: text}); add('user', text);
  const out = add('assistant', ''); out.dataset.state = 'streaming';
  try {
    const r = await fetch('/v1/chat/completions', {method: 'POST', headers: headers(),
      body: JSON.stringify({model: document.getElementById('model').textContent || undefined,
                            messages: history, stream: true, max_tokens: 200})});
    if (!r.ok) { const j = await r.json(); throw new Error(j.error ? j.error.message : r.statusText); }
    const reader = r.body.getReader(), dec = new TextDecoder(); let buf = '', text = '';
    for (;;) {
      const {value, done} = await reader.read(); if (done) break;
      buf += dec.decode(value, {stream: true});
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const line = buf.slice(0, i).trim(); buf = buf.slice(i + 2);
        if (!line.startsWith('data: ')) continue;
        const data = line.slice(6); if (data === '[DONE]') continue;
        const c = JSON.parse(data).choices[0];
        if (c && c.delta && c.delta.content) { text += c.delta.content; out.textContent = text; log.scrollTop = log.scrollHeight; }
      }
    }
    history.push({role: 'assistant', content: text});
  } catch (e) { out.className = 'msg error'; out.textContent = 'Error: ' + e.message; }
  out.dataset.state = 'done';
}
document.getElementById('f').addEventListener('submit', e => { e.preventDefault(); const t = q.value; q.value = ''; send(t); });
q.addEventListener('keydown', e => { if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); document.getElementById('send').click(); } });
if (params.get('q') && params.get('send')) send(params.get('q'));
</script></body></html>
)HTML";

}  // namespace kestrel::server
