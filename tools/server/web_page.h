// The page GET / serves: a self-contained chat (no build step, no external assets, no fonts or
// CDNs) that streams from /v1/chat/completions. Markdown replies (web_markdown.h), Stop, settings
// (system prompt, temperature, top-p, max tokens, API key), conversations kept in localStorage,
// regenerate / edit the last message, tokens/s per reply (web_script.h); light and dark
// (web_style.h). ?q=TEXT&send=1[&key=KEY] sends TEXT in a new chat on load. The pieces are joined
// into one string at compile time; tests/server/web.test.mjs drives it in headless Chromium.
#pragma once

#include <array>
#include <cstddef>

#include "server/web_markdown.h"
#include "server/web_script.h"
#include "server/web_style.h"

namespace kestrel::server {

inline constexpr char kWebHead[] = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>Kestrel</title>
<style>)HTML";

inline constexpr char kWebBody[] = R"HTML(</style></head><body>
<div id="app">
<aside id="side" aria-label="Conversations">
 <div class="brand"><span class="logo" id="brand-logo"></span>Kestrel</div>
 <button id="new" type="button"></button>
 <div class="section">Conversations</div>
 <nav id="chats"></nav>
 <div class="side-foot"><button id="open-settings" type="button"></button></div>
</aside>
<div id="scrim"></div>
<main>
 <header>
  <button class="icon" id="menu" type="button" title="Conversations" aria-label="Conversations"></button>
  <div id="title">New chat</div>
  <button class="pill" id="model" type="button">connecting…</button>
  <button class="icon" id="settings-top" type="button" title="Settings" aria-label="Settings"></button>
 </header>
 <div id="log" aria-live="polite"></div>
 <form id="f">
  <div class="box">
   <textarea id="q" rows="1" placeholder="Message Kestrel…" aria-label="Message"></textarea>
   <button class="go" id="send" type="submit" title="Send (Enter)" aria-label="Send"></button>
   <button class="go" id="stop" type="button" title="Stop (Esc)" aria-label="Stop" hidden></button>
  </div>
  <div class="hint"><kbd>Enter</kbd> to send · <kbd>Shift</kbd>+<kbd>Enter</kbd> for a new line · <kbd>Esc</kbd> stops a reply</div>
 </form>
</main>
</div>
<dialog id="settings" aria-labelledby="s-title">
 <form id="sf" method="dialog" novalidate>
  <h2 id="s-title">Settings</h2>
  <p class="note">Kept in this browser and used for every conversation.</p>
  <label for="s-system">System prompt <small>(optional)</small></label>
  <textarea id="s-system" placeholder="You are a helpful assistant."></textarea>
  <div class="row">
   <div><label for="s-temperature">Temperature</label><input id="s-temperature" type="number" min="0" max="2" step="0.05"></div>
   <div><label for="s-top_p">Top-p</label><input id="s-top_p" type="number" min="0" max="1" step="0.05"></div>
   <div><label for="s-max_tokens">Max tokens</label><input id="s-max_tokens" type="number" min="1" step="1" placeholder="no limit"></div>
  </div>
  <label for="s-key">API key <small>(when the server was started with --api-key)</small></label>
  <input id="s-key" type="password" autocomplete="off" placeholder="none">
  <p class="note" id="keynote" hidden>This server needs an API key.</p>
  <div class="buttons">
   <button class="btn" id="s-reset" type="button">Defaults</button><span class="sp"></span>
   <button class="btn" value="cancel" formnovalidate>Cancel</button>
   <button class="btn primary" id="s-save" value="save">Save</button>
  </div>
 </form>
</dialog>
<script>
'use strict';
)HTML";

inline constexpr char kWebIcons[] = R"JS(
for (const [id, icon] of [['brand-logo', 'bird'], ['menu', 'menu'], ['settings-top', 'sliders'], ['send', 'send'], ['stop', 'stop']])
  document.getElementById(id).innerHTML = svg(icon, 18);
document.getElementById('new').innerHTML = svg('plus') + 'New chat';
document.getElementById('open-settings').innerHTML = svg('sliders') + 'Settings';
)JS";

inline constexpr char kWebTail[] = R"HTML(</script></body></html>
)HTML";

namespace web_detail {
// The concatenation of string literals, terminated once, computed by the compiler.
template <std::size_t... N>
constexpr auto join_text(const char (&... parts)[N]) {
  std::array<char, (N + ...) - sizeof...(N) + 1> out{};
  std::size_t at = 0;
  auto put = [&](const char* p, std::size_t n) {
    for (std::size_t i = 0; i + 1 < n; ++i) out[at++] = p[i];
  };
  (put(parts, N), ...);
  return out;
}
}  // namespace web_detail

inline constexpr auto kWebPageText =
    web_detail::join_text(kWebHead, kWebStyle, kWebBody, kWebMarkdown, kWebIcons, kWebScript, kWebTail);
inline constexpr const char* kWebPage = kWebPageText.data();

}  // namespace kestrel::server
