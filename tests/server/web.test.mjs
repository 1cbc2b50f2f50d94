// The web chat page (GET /) in headless Chromium, driven over the DevTools protocol with `ws`: the
// API-key prompt on a 401, send with Enter and a streamed reply equal to the same request made
// directly (greedy), tokens/s shown, Stop mid-reply (the download throttled so that the reply is
// still streaming; nothing arrives after Stop, the partial reply is kept and is a prefix of the
// whole reply that Regenerate then gives), edit the last message, a failed request (an invalid
// setting: a 400) shown as an error and kept out of the history, a reload that finds the
// conversations and settings, Markdown rendered with HTML in a reply shown as text, dark mode and
// a phone-sized screen. Screenshots go to $KESTREL_TEST_OUT, else ./web-test-artifacts (ctest runs
// it in the build directory). Exit 77 (skipped) without node_modules or chromium unless
// KESTREL_REQUIRE_TESTDATA=1.
import { execFileSync, spawn } from 'node:child_process';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { paths, results, startServer, test } from './harness.mjs';

const required = process.env.KESTREL_REQUIRE_TESTDATA === '1';
function skip(why) {
  console.log(`${why}${required ? '' : ' (skipped)'}`);
  process.exit(required ? 1 : 77);
}
let WebSocket;
try {
  ({ default: WebSocket } = await import('ws'));
} catch {
  skip('ws package missing: run npm ci --prefix tests/server');
}
const chrome = ['chromium', 'chromium-browser', 'google-chrome']
  .map((c) => { try { return execFileSync('sh', ['-c', `command -v ${c}`]).toString().trim(); } catch { return ''; } })
  .find(Boolean);
if (!chrome) skip('chromium not found');
const { cli, model } = paths();
const OUT = process.env.KESTREL_TEST_OUT || join(process.cwd(), 'web-test-artifacts');
mkdirSync(OUT, { recursive: true });
for (const f of readdirSync(OUT)) if (/^(\d\d|timeout)-[\w-]+\.png$/.test(f)) rmSync(join(OUT, f));  // an earlier run's
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const KEY = 'web-key-456';
const { server, base } = await startServer(cli, ['-m', model, '-t', '1', '--port', '0', '--api-key', KEY, '--parallel', '2',
                                                 '-c', '2048', '--alias', 'stories']);

// ---- Chromium over the DevTools protocol ----
const profile = mkdtempSync(join(tmpdir(), 'kestrel-web-'));
const browser = spawn(chrome, ['--headless', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
                               '--no-default-browser-check', '--disable-extensions', '--disable-background-networking',
                               '--disable-component-update', '--mute-audio', '--hide-scrollbars', '--force-color-profile=srgb',
                               `--user-data-dir=${profile}`, '--remote-debugging-port=0', '--window-size=1280,820', 'about:blank'],
                      { stdio: ['ignore', 'ignore', 'pipe'], detached: true });
function cleanup() {
  try { process.kill(-browser.pid, 'SIGKILL'); } catch {}
  if (server.exitCode === null) server.kill('SIGKILL');
  rmSync(profile, { recursive: true, force: true });
}
process.on('exit', cleanup);

const devtools = await new Promise((resolve, reject) => {
  let err = '';
  browser.stderr.on('data', (d) => {
    err += d;
    const m = err.match(/DevTools listening on ws:\/\/([\w.[\]:-]+:\d+)\//);
    if (m) resolve(m[1]);
  });
  browser.on('exit', (code) => reject(new Error(`chromium exited (${code}): ${err.slice(-500)}`)));
  setTimeout(() => reject(new Error('chromium did not start: ' + err.slice(-500))), 30000);
});
const target = await (await fetch(`http://${devtools}/json/new?about:blank`, { method: 'PUT' })).json();
const ws = new WebSocket(target.webSocketDebuggerUrl, { perMessageDeflate: false });
await new Promise((r, j) => { ws.on('open', r); ws.on('error', j); });
let seq = 0;
const pending = new Map();
ws.on('message', (m) => {
  const j = JSON.parse(m);
  const p = j.id && pending.get(j.id);
  if (!p) return;
  pending.delete(j.id);
  if (j.error) p.reject(new Error(`${p.method}: ${j.error.message}`));
  else p.resolve(j.result);
});
const call = (method, params = {}) => new Promise((resolve, reject) => {
  const id = ++seq;
  pending.set(id, { resolve, reject, method });
  ws.send(JSON.stringify({ id, method, params }));
});
async function evaluate(expression) {
  const r = await call('Runtime.evaluate', { expression, returnByValue: true, awaitPromise: true });
  if (r.exceptionDetails) throw new Error(`${expression}: ${r.exceptionDetails.exception?.description ?? r.exceptionDetails.text}`);
  return r.result.value;
}
const shots = [];
async function shot(name) {
  const r = await call('Page.captureScreenshot', { format: 'png' });
  const file = join(OUT, `${name}.png`);
  writeFileSync(file, Buffer.from(r.data, 'base64'));
  shots.push(file);
}
async function waitFor(expression, what, ms = 20000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await evaluate(expression);
    if (v) return v;
    if (Date.now() > end) {
      await shot(`timeout-${what.replace(/\W+/g, '-')}`).catch(() => {});
      throw new Error(`timed out waiting for ${what}`);
    }
    await sleep(40);
  }
}
// Navigates (or reloads) and waits for the new document's script to have started.
async function open(url) {
  await evaluate('window.__old = true');
  await call(url ? 'Page.navigate' : 'Page.reload', url ? { url } : {});
  await waitFor("!window.__old && document.readyState === 'complete' && window.kestrel?.ready === true", 'the page to load');
}
const click = (sel) => evaluate(`(() => { const e = document.querySelector(${JSON.stringify(sel)});
  if (!e) throw new Error('nothing matches ${sel.replace(/'/g, '')}'); e.click(); return true; })()`);
async function typeAndEnter(text) {  // real key events: the text, then Enter (which sends)
  await evaluate("document.querySelector('#q').focus()");
  await call('Input.insertText', { text });
  for (const type of ['keyDown', 'keyUp']) await call('Input.dispatchKeyEvent', { type, key: 'Enter', code: 'Enter', windowsVirtualKeyCode: 13 });
}
async function setSettings(values) {
  await click('#settings-top');
  await waitFor("document.querySelector('#settings').open", 'the settings dialog');
  await evaluate(`(() => { for (const [k, v] of Object.entries(${JSON.stringify(values)})) document.getElementById('s-' + k).value = v; })()`);
  await click('#s-save');
  await waitFor("!document.querySelector('#settings').open", 'the settings dialog to close');
}
const lastReply = () => evaluate(`(() => { const m = [...document.querySelectorAll('#log .msg.assistant')].pop();
  return m && { state: m.dataset.state, finish: m.dataset.finish ?? null, text: m.textContent, cls: m.className,
                stats: m.parentElement.querySelector('.stats')?.textContent ?? '' }; })()`);
const waitReply = (what) => waitFor(`(() => { const m = [...document.querySelectorAll('#log .msg.assistant')].pop();
  return m && m.dataset.state === 'done' && !window.kestrel.busy; })()`, what);
const stored = () => evaluate("JSON.parse(localStorage.getItem('kestrel.chats') || '[]')");
const openChat = async () => { const id = await evaluate("JSON.parse(localStorage.getItem('kestrel.current'))"); return (await stored()).find((c) => c.id === id); };

await call('Page.enable');
await call('Runtime.enable');
await call('Network.enable');
await call('Emulation.setDeviceMetricsOverride', { width: 1280, height: 820, deviceScaleFactor: 1, mobile: false });

await test('without a key the page asks for one (401), then connects', async () => {
  await open(`${base}/`);
  await waitFor("document.querySelector('#settings').open && !document.querySelector('#keynote').hidden", 'the API key prompt');
  await sleep(200);
  await shot('01-api-key-prompt');
  await evaluate(`document.getElementById('s-key').value = ${JSON.stringify(KEY)}`);
  await evaluate("document.getElementById('s-temperature').value = 0; document.getElementById('s-max_tokens').value = 40");
  await click('#s-save');
  await waitFor("window.kestrel.model === 'stories'", 'the model name');
  const s = await evaluate("JSON.parse(localStorage.getItem('kestrel.settings'))");
  assert.equal(s.key, KEY);
  assert.equal(s.temperature, 0);
  assert.equal(s.max_tokens, 40);
  await shot('02-empty-chat');
});

await test('Enter sends; the streamed reply equals the direct request, with tokens/s', async () => {
  await typeAndEnter('Once upon a time');
  await waitReply('the first reply');
  const r = await lastReply();
  assert.equal(r.cls, 'msg assistant', `the page shows an error: ${r.text}`);
  assert.equal(r.finish, 'length');
  assert.match(r.stats, /^40 tokens · [\d.]+ tok\/s · [\d.]+ m?s · max tokens reached$/);
  const chats = await stored();
  assert.equal(chats.length, 1);
  const [user, reply] = chats[0].messages;
  assert.deepEqual(user, { role: 'user', content: 'Once upon a time' });
  assert.equal(reply.stats.tokens, 40);
  const direct = await (await fetch(`${base}/v1/chat/completions`, {
    method: 'POST', headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'stories', messages: [{ role: 'user', content: 'Once upon a time' }], temperature: 0, max_tokens: 40 }),
  })).json();
  assert.equal(reply.content, direct.choices[0].message.content);
  assert.equal(await evaluate("document.querySelector('#chats .chat.on .t').textContent"), 'Once upon a time');
  await shot('03-reply');
});

let partial = '';
await test('Stop mid-reply: nothing arrives after it and the partial reply is kept', async () => {
  await click('#new');
  await waitFor("document.querySelector('#log .empty')", 'an empty new chat');
  await setSettings({ max_tokens: 300 });
  // ~6 SSE events a second: the 300-token reply takes most of a minute to arrive, so it is
  // certainly still streaming when Stop is pressed.
  await call('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: 1200, uploadThroughput: -1 });
  try {
    await typeAndEnter('The little dog');
    await waitFor("(() => { const m = document.querySelector('#log .msg.assistant'); return m && m.dataset.state === 'streaming' && m.textContent.length >= 12; })()",
                  'the reply to start streaming');
    assert.equal(await evaluate("document.querySelector('#stop').hidden"), false, 'Stop is shown while streaming');
    await shot('04-streaming');
    await click('#stop');
    await waitReply('the stopped reply');
  } finally {
    await call('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });
  }
  const r = await lastReply();
  assert.equal(r.finish, 'stopped');
  assert.match(r.stats, /· stopped$/);
  await sleep(1000);
  assert.equal((await lastReply()).text, r.text, 'text arrived after Stop');
  assert.equal(await evaluate("document.querySelector('#send').hidden"), false, 'Send is back');
  const c = await openChat();
  assert.equal(c.messages.length, 2);
  partial = c.messages[1].content;
  assert.ok(partial.length >= 12, 'the partial reply is kept');
  assert.equal(c.messages[1].stats.finish, 'stopped');
  assert.ok(c.messages[1].stats.tokens < 300);
  await shot('05-stopped');
});

await test('Regenerate gives the whole reply, which the stopped one began', async () => {
  await click('#log .turn.last [data-act=regen]');
  await waitReply('the regenerated reply');
  const c = await openChat();
  assert.equal(c.messages.length, 2);
  assert.equal(c.messages[1].stats.finish, 'length');
  assert.equal(c.messages[1].stats.tokens, 300);
  assert.ok(c.messages[1].content.startsWith(partial), 'greedy: the stopped reply is a prefix of the whole one');
  assert.ok(c.messages[1].content.length > partial.length);
});

await test('edit the last message: the conversation continues from the edited text', async () => {
  await setSettings({ max_tokens: 24 });
  await click('#log [data-act=edit]');
  await waitFor("document.querySelector('#log .edit-box textarea')", 'the editor');
  await evaluate("document.querySelector('#log .edit-box textarea').value = 'The little cat'");
  await shot('06-editing');
  await click('#log [data-act=save-edit]');
  await waitReply('the reply to the edited message');
  const c = await openChat();
  assert.equal(c.messages.length, 2);
  assert.equal(c.messages[0].content, 'The little cat');
  assert.equal(c.messages[1].stats.tokens, 24);
  assert.equal(await evaluate("document.querySelector('#log .msg.user').textContent"), 'The little cat');
});

await test('a failed request is shown as an error and not added to the history', async () => {
  const before = await stored();
  await setSettings({ temperature: 5 });
  await typeAndEnter('This one fails');
  const err = await waitFor("document.querySelector('#log .msg.error')?.textContent", 'the error');
  assert.match(err, /^400: 'temperature' must be in \[0, 2\]/);
  assert.deepEqual(await stored(), before, 'the conversations did not change');
  assert.equal(await evaluate("document.querySelector('#q').value"), 'This one fails', 'the message is back in the box');
  assert.equal(await evaluate("document.querySelectorAll('#log .msg.assistant').length"), 1);
  await shot('07-error');
  await setSettings({ temperature: 0 });
  await evaluate("document.querySelector('#q').value = ''");
});

const MARKDOWN = [
  '## A reply in Markdown', '', 'Text with **bold**, *italic*, `inline code` and a [link](https://example.com/?a=1&b=2).', '',
  '- first item', '- second item', '  - nested item', '', '1. one', '2. two', '',
  '```python', 'def greet(name):', '    return f"<b>Hello, {name}!</b>"', '```', '',
  '| model | tokens/s |', '|---|--:|', '| stories | 1234.5 |', '',
  '> HTML is shown as text: <img src=x onerror="window.__xss=1"> <script>window.__xss=2</script>',
].join('\n');

await test('after a reload: the conversations, the settings, Markdown with HTML shown as text', async () => {
  await evaluate(`(() => {
    const chats = JSON.parse(localStorage.getItem('kestrel.chats'));
    chats.push({ id: 'md', title: 'Markdown check', created: Date.now(), updated: Date.now(), messages: [
      { role: 'user', content: 'Show me some Markdown <img src=x onerror="window.__xss=3">' },
      { role: 'assistant', content: ${JSON.stringify(MARKDOWN)}, stats: { tokens: 120, tps: 987.6, ms: 150, finish: 'stop' } }] });
    localStorage.setItem('kestrel.chats', JSON.stringify(chats));
    localStorage.setItem('kestrel.current', JSON.stringify('md'));
  })()`);
  await open();
  const titles = await evaluate("[...document.querySelectorAll('#chats .chat .t')].map((e) => e.textContent)");
  assert.deepEqual(titles.sort(), ['Markdown check', 'Once upon a time', 'The little cat']);
  const s = await evaluate('window.kestrel.settings');
  assert.equal(s.temperature, 0);
  assert.equal(s.max_tokens, 24);
  const md = await evaluate(`(() => { const m = document.querySelector('#log .msg.assistant');
    return { h2: m.querySelector('h2')?.textContent, strong: m.querySelector('strong')?.textContent, li: m.querySelectorAll('li').length,
             ol: m.querySelectorAll('ol > li').length, code: m.querySelector('.code pre code')?.textContent,
             lang: m.querySelector('.code-head span')?.textContent, td: m.querySelector('table td:last-child')?.textContent,
             href: m.querySelector('a')?.getAttribute('href'), quote: m.querySelector('blockquote')?.textContent,
             imgs: document.querySelectorAll('#log img, #log script').length, user: document.querySelector('#log .msg.user').textContent }; })()`);
  assert.equal(md.h2, 'A reply in Markdown');
  assert.equal(md.strong, 'bold');
  assert.equal(md.li, 5);
  assert.equal(md.ol, 2);
  assert.equal(md.code, 'def greet(name):\n    return f"<b>Hello, {name}!</b>"');
  assert.equal(md.lang, 'python');
  assert.equal(md.td, '1234.5');
  assert.equal(md.href, 'https://example.com/?a=1&b=2');
  assert.equal(md.imgs, 0, 'no element was made from HTML in a message');
  assert.match(md.quote, /<img src=x onerror="window.__xss=1"> <script>window.__xss=2<\/script>/);
  assert.equal(md.user, 'Show me some Markdown <img src=x onerror="window.__xss=3">');
  const xss = await evaluate('window.__xss');
  assert.equal(xss, undefined);
  assert.equal(await evaluate("window.kestrel.markdown('<img src=x onerror=alert(1)>')"), '<p>&lt;img src=x onerror=alert(1)&gt;</p>');
  await shot('08-markdown');
  await evaluate("[...document.querySelectorAll('#chats .chat')].find((e) => e.textContent === 'Once upon a time').click()");
  await waitFor("document.querySelector('#title').textContent === 'Once upon a time'", 'the first conversation');
  const r = await lastReply();
  assert.equal(r.finish, 'length');
  assert.match(r.stats, /^40 tokens · /);
  await shot('09-reloaded-conversation');
});

await test('dark mode and a phone-sized screen', async () => {
  await call('Emulation.setEmulatedMedia', { features: [{ name: 'prefers-color-scheme', value: 'dark' }] });
  const bg = await evaluate('getComputedStyle(document.body).backgroundColor');
  const [r, g, b] = bg.match(/\d+/g).map(Number);
  assert.ok(r + g + b < 150, `a dark background, got ${bg}`);
  await shot('10-dark');
  await evaluate("[...document.querySelectorAll('#chats .chat')].find((e) => e.textContent === 'Markdown check').click()");
  await shot('11-dark-markdown');
  await call('Emulation.setDeviceMetricsOverride', { width: 390, height: 800, deviceScaleFactor: 2, mobile: true });
  await sleep(300);
  assert.ok(await evaluate("document.querySelector('aside').getBoundingClientRect().right <= 0"), 'the sidebar is a hidden drawer');
  await shot('12-phone-dark');
  await call('Emulation.setEmulatedMedia', { features: [{ name: 'prefers-color-scheme', value: 'light' }] });
  await click('#menu');
  await sleep(400);
  assert.ok(await evaluate("document.querySelector('aside').getBoundingClientRect().left >= 0"), 'the menu opens the drawer');
  await shot('13-phone-menu');
});

ws.close();
console.log(`screenshots in ${OUT}: ${shots.map((f) => f.slice(OUT.length + 1)).join(', ')}`);
console.log(results.failures ? `${results.failures} failed` : 'all passed');
process.exit(results.failures ? 1 : 0);
