// The web page's stylesheet (joined into kWebPage by web_page.h): light and dark through
// prefers-color-scheme, system fonts only, a sidebar that becomes a drawer on narrow screens.
#pragma once

namespace kestrel::server {

inline constexpr char kWebStyle[] = R"CSS(
:root{--bg:#fff;--side:#f6f5f2;--fg:#1d2024;--muted:#6b7079;--line:#e5e3de;--accent:#b0532b;--accent-fg:#fff;
 --user:#f2efea;--code:#f6f5f2;--codehead:#ecebe6;--err:#b42318;--errbg:#fef3f2;--errline:#f6c9c4;--hover:rgba(0,0,0,.05);
 --shadow:0 1px 2px rgba(0,0,0,.05),0 6px 24px rgba(0,0,0,.07);--mono:ui-monospace,SFMono-Regular,Menlo,Consolas,"Liberation Mono",monospace;
 color-scheme:light dark}
@media (prefers-color-scheme:dark){:root{--bg:#1b1c1f;--side:#141518;--fg:#e8e7e3;--muted:#9ba0a8;--line:#2e3035;--accent:#e2814f;
 --accent-fg:#1b1c1f;--user:#2a2c31;--code:#121316;--codehead:#202226;--err:#ffb4ab;--errbg:#35201d;--errline:#5c302a;
 --hover:rgba(255,255,255,.06);--shadow:0 1px 2px rgba(0,0,0,.4),0 6px 24px rgba(0,0,0,.35)}}
*{box-sizing:border-box}
[hidden]{display:none!important}
html,body{height:100%}
body{margin:0;font:15px/1.6 system-ui,-apple-system,"Segoe UI",Roboto,Ubuntu,Cantarell,"Noto Sans",sans-serif;
 background:var(--bg);color:var(--fg);-webkit-font-smoothing:antialiased;overflow:hidden}
button{font:inherit;color:inherit}
#app{display:flex;height:100vh;height:100dvh}
aside{width:268px;flex:none;background:var(--side);border-right:1px solid var(--line);display:flex;flex-direction:column;min-height:0}
.brand{display:flex;align-items:center;gap:10px;padding:16px 16px 12px;font-weight:650;font-size:16px;letter-spacing:.01em}
.logo{width:30px;height:30px;border-radius:9px;background:var(--accent);color:var(--accent-fg);display:grid;place-items:center;flex:none}
#new{display:flex;align-items:center;gap:8px;margin:2px 12px 10px;padding:9px 12px;border:1px solid var(--line);border-radius:10px;
 background:var(--bg);cursor:pointer;font-weight:550;box-shadow:0 1px 1px rgba(0,0,0,.03)}
#new:hover{border-color:var(--accent)}
.section{padding:8px 18px 4px;font-size:11.5px;font-weight:600;text-transform:uppercase;letter-spacing:.06em;color:var(--muted)}
#chats{flex:1;overflow-y:auto;padding:2px 8px 8px}
.chat{display:flex;align-items:center;gap:4px;padding:7px 6px 7px 10px;border-radius:8px;cursor:pointer;font-size:14px;margin-bottom:1px}
.chat:hover,.chat:focus-visible{background:var(--hover);outline:0}
.chat.on{background:var(--hover);font-weight:600}
.chat .t{flex:1;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.chat .icon{opacity:0;padding:3px}
.chat:hover .icon,.chat.on .icon{opacity:.8}
.none{color:var(--muted);font-size:13.5px;padding:8px 10px}
.side-foot{padding:10px 12px 12px;border-top:1px solid var(--line);display:flex;flex-direction:column;gap:2px}
.side-foot button{display:flex;align-items:center;gap:10px;padding:8px 10px;border:0;border-radius:8px;background:none;cursor:pointer;text-align:left}
.side-foot button:hover{background:var(--hover)}
main{flex:1;display:flex;flex-direction:column;min-width:0;min-height:0}
header{display:flex;align-items:center;gap:10px;padding:10px 18px;border-bottom:1px solid var(--line);min-height:54px}
#title{font-weight:600;flex:1;min-width:0;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.pill{font-size:12.5px;color:var(--muted);border:1px solid var(--line);border-radius:999px;padding:2px 10px 2px 8px;
 display:inline-flex;align-items:center;gap:6px;white-space:nowrap;background:none;cursor:default}
.pill::before{content:"";width:7px;height:7px;border-radius:50%;background:#9aa0a6}
.pill.ok::before{background:#2f9e5b}
.pill.bad{color:var(--err);border-color:var(--errline);cursor:pointer}
.pill.bad::before{background:var(--err)}
.icon{background:none;border:0;color:var(--muted);padding:6px;border-radius:7px;cursor:pointer;display:inline-flex;align-items:center;gap:6px}
.icon:hover{background:var(--hover);color:var(--fg)}
#menu{display:none}
#log{flex:1;overflow-y:auto;overflow-anchor:none}
.inner{max-width:800px;margin:0 auto;padding:28px 24px 12px}
.turn{margin:0 0 26px}
.turn.user{display:flex;flex-direction:column;align-items:flex-end;margin-bottom:18px}
.msg{overflow-wrap:anywhere}
.msg.user{background:var(--user);padding:9px 15px;border-radius:18px 18px 5px 18px;max-width:82%;white-space:pre-wrap}
.turn.failed .msg.user{opacity:.55}
.msg.error{background:var(--errbg);color:var(--err);border:1px solid var(--errline);padding:10px 14px;border-radius:12px;white-space:pre-wrap}
.meta{display:flex;align-items:center;gap:2px;color:var(--muted);font-size:12.5px;margin-top:4px;min-height:30px}
.turn.assistant{display:grid;grid-template-columns:30px minmax(0,1fr);column-gap:16px}
.turn.assistant>.msg,.turn.assistant>.meta,.turn.assistant>.edit-box{grid-column:2}
.turn.assistant .meta{margin-left:-6px}
.avatar{grid-row:1/span 2;width:30px;height:30px;border-radius:9px;display:grid;place-items:center;color:var(--accent);
 border:1px solid var(--line);background:var(--bg)}
.meta:empty{min-height:0;margin:0}
.meta .icon{opacity:0;transition:opacity .15s}
.turn:hover .meta .icon,.turn:focus-within .meta .icon,.turn.last .meta .icon{opacity:1}
@media (hover:none){.meta .icon,.chat .icon{opacity:1}}
.stats{font-variant-numeric:tabular-nums;padding:0 8px 0 6px;white-space:nowrap}
.stats b{font-weight:600;color:var(--fg)}
.stats .stop{color:var(--accent)}
.dots{display:inline-flex;gap:5px;padding:10px 0}
.dots i{width:7px;height:7px;border-radius:50%;background:var(--muted);animation:pulse 1.2s infinite ease-in-out}
.dots i:nth-child(2){animation-delay:.15s}.dots i:nth-child(3){animation-delay:.3s}
@keyframes pulse{0%,80%,100%{opacity:.25;transform:scale(.8)}40%{opacity:1;transform:none}}
.msg.assistant[data-state=streaming]>:last-child:not(.code):not(.table)::after{content:"";display:inline-block;width:8px;height:1.05em;
 margin-left:2px;vertical-align:-2px;background:var(--accent);border-radius:2px;animation:blink 1s steps(2) infinite}
@keyframes blink{50%{opacity:0}}
.msg.assistant>:first-child{margin-top:0}
.msg.assistant>:last-child{margin-bottom:0}
.msg.assistant p,.msg.assistant ul,.msg.assistant ol,.msg.assistant blockquote{margin:0 0 .85em}
.msg.assistant h1,.msg.assistant h2,.msg.assistant h3,.msg.assistant h4,.msg.assistant h5,.msg.assistant h6{margin:1.2em 0 .5em;line-height:1.3}
.msg.assistant h1{font-size:1.45em}.msg.assistant h2{font-size:1.25em}.msg.assistant h3{font-size:1.1em}
.msg.assistant h4,.msg.assistant h5,.msg.assistant h6{font-size:1em}
.msg.assistant ul,.msg.assistant ol{padding-left:1.5em}
.msg.assistant li{margin:.2em 0}
.msg.assistant li>ul,.msg.assistant li>ol{margin:.2em 0}
.msg.assistant blockquote{border-left:3px solid var(--line);padding:0 0 0 14px;color:var(--muted)}
.msg.assistant hr{border:0;border-top:1px solid var(--line);margin:1.2em 0}
.msg a{color:var(--accent);text-underline-offset:2px}
code{font-family:var(--mono);font-size:.88em;background:var(--code);border:1px solid var(--line);padding:.08em .35em;border-radius:5px}
.code{border:1px solid var(--line);border-radius:11px;overflow:hidden;margin:0 0 .95em;background:var(--code)}
.code-head{display:flex;justify-content:space-between;align-items:center;padding:3px 6px 3px 14px;background:var(--codehead);
 font:12px var(--mono);color:var(--muted)}
.code-head .icon{padding:5px}
.code pre{margin:0;padding:12px 16px;overflow-x:auto;font:13px/1.55 var(--mono)}
.code pre code{background:none;border:0;padding:0;font-size:inherit}
.table{overflow-x:auto;margin:0 0 .95em}
table{border-collapse:collapse;font-size:.95em}
th,td{border:1px solid var(--line);padding:6px 12px}
th{background:var(--code);font-weight:600}
details.think{border:1px solid var(--line);border-radius:10px;padding:6px 12px;margin:0 0 .9em;color:var(--muted);font-size:.93em}
details.think summary{cursor:pointer;font-weight:550}
.edit-box{width:100%;max-width:82%;display:flex;flex-direction:column;gap:8px}
.edit-box textarea{width:100%;min-height:80px;font:inherit;padding:10px 14px;border:1px solid var(--accent);border-radius:14px;
 background:var(--bg);color:inherit;resize:vertical;outline:0}
.edit-box div{display:flex;justify-content:flex-end;gap:8px}
.empty{min-height:100%;display:flex;flex-direction:column;align-items:center;justify-content:center;text-align:center;padding:40px 24px;color:var(--muted)}
.empty .logo{width:56px;height:56px;border-radius:16px}
.empty h1{color:var(--fg);font-size:23px;font-weight:650;margin:18px 0 4px}
.empty p{margin:0}
.sugg{display:grid;grid-template-columns:1fr 1fr;gap:10px;margin-top:26px;width:min(560px,100%)}
.sugg button{border:1px solid var(--line);background:var(--bg);border-radius:12px;padding:11px 14px;font-size:14px;cursor:pointer;text-align:left;color:var(--fg)}
.sugg button:hover{border-color:var(--accent);background:var(--hover)}
.sugg button span{display:block;color:var(--muted);font-size:12.5px}
#f{max-width:800px;width:100%;margin:0 auto;padding:6px 24px 14px}
.box{display:flex;align-items:flex-end;gap:8px;border:1px solid var(--line);border-radius:18px;padding:8px 8px 8px 16px;background:var(--bg);box-shadow:var(--shadow)}
.box:focus-within{border-color:var(--accent)}
#q{flex:1;border:0;outline:0;resize:none;background:transparent;color:inherit;font:inherit;line-height:1.5;max-height:220px;padding:6px 0;min-height:36px}
.go{width:36px;height:36px;flex:none;border-radius:11px;border:0;background:var(--accent);color:var(--accent-fg);display:grid;place-items:center;cursor:pointer}
.go:disabled{opacity:.35;cursor:default}
#stop{background:var(--fg);color:var(--bg)}
.hint{text-align:center;font-size:12px;color:var(--muted);margin-top:7px}
kbd{font:11px var(--mono);border:1px solid var(--line);border-bottom-width:2px;border-radius:4px;padding:0 4px}
dialog{border:1px solid var(--line);border-radius:16px;padding:0;background:var(--bg);color:var(--fg);width:min(500px,calc(100vw - 24px));box-shadow:var(--shadow)}
dialog::backdrop{background:rgba(10,10,12,.4)}
#sf{padding:20px 22px 18px}
#sf h2{margin:0 0 4px;font-size:18px}
#sf label{display:block;font-size:13px;font-weight:600;margin:14px 0 5px}
#sf label small{font-weight:400;color:var(--muted)}
#sf input,#sf textarea{width:100%;font:inherit;font-size:14px;padding:8px 11px;border:1px solid var(--line);border-radius:9px;background:var(--bg);color:inherit;outline:0}
#sf input:focus,#sf textarea:focus{border-color:var(--accent)}
#sf input:invalid{border-color:var(--err)}
#sf textarea{min-height:84px;resize:vertical}
.row{display:grid;grid-template-columns:repeat(3,1fr);gap:12px}
.note{font-size:12.5px;color:var(--muted);margin:6px 0 0}
#keynote{color:var(--err)}
.buttons{display:flex;gap:8px;margin-top:20px}
.buttons .sp{flex:1}
.btn{padding:8px 15px;border-radius:10px;border:1px solid var(--line);background:var(--bg);font-weight:550;cursor:pointer}
.btn:hover{background:var(--hover)}
.btn.primary{background:var(--accent);border-color:var(--accent);color:var(--accent-fg)}
#scrim{display:none}
@media (max-width:760px){
 aside{position:fixed;inset:0 auto 0 0;z-index:20;transform:translateX(-102%);transition:transform .2s ease;box-shadow:var(--shadow)}
 body.menu aside{transform:none}
 body.menu #scrim{display:block;position:fixed;inset:0;background:rgba(10,10,12,.35);z-index:10}
 #menu{display:inline-flex}
 header{padding:8px 10px}
 .inner{padding:18px 14px 8px}
 #f{padding:4px 10px 10px}
 .msg.user,.edit-box{max-width:92%}
 .turn.assistant{display:block}
 .avatar{display:none}
 .sugg{grid-template-columns:1fr}
 .hint{display:none}
 .row{grid-template-columns:1fr 1fr}
}
)CSS";

}  // namespace kestrel::server
