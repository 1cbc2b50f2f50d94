// The web page's Markdown renderer (JavaScript, joined into kWebPage by web_page.h). Everything
// is HTML-escaped first; the only tags in its output are the ones it writes itself, and the only
// attribute taken from the text is an http(s)/mailto link target (escaped, so it cannot leave its
// quotes). Covers what chat models write: fenced code (an unclosed fence runs to the end, so a
// reply still streaming shows as code), inline code, headings, bold/italic/strike, links, lists
// (nested, ordered, task items), block quotes, tables and rules. Single newlines are kept as <br>.
#pragma once

namespace kestrel::server {

inline constexpr char kWebMarkdown[] = R"JS(
const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ESC[c]);
const ICON = {
  plus: '<path d="M12 5v14M5 12h14"/>',
  menu: '<path d="M4 7h16M4 12h16M4 17h16"/>',
  sliders: '<path d="M4 7h9M17 7h3M4 12h3M11 12h9M4 17h11M19 17h1"/><circle cx="15" cy="7" r="2"/><circle cx="9" cy="12" r="2"/><circle cx="17" cy="17" r="2"/>',
  trash: '<path d="M4 7h16M10 11v6M14 11v6M6 7l1 13h10l1-13M9 7V4h6v3"/>',
  copy: '<rect x="9" y="9" width="11" height="11" rx="2"/><path d="M5 15V6a2 2 0 0 1 2-2h9"/>',
  regen: '<path d="M20 12a8 8 0 1 1-2.3-5.7M20 4v5h-5"/>',
  edit: '<path d="M4 20h4L19 9l-4-4L4 16v4zM13 7l4 4"/>',
  send: '<path d="M12 19V5M6 11l6-6 6 6"/>',
  stop: '<rect x="7" y="7" width="10" height="10" rx="2" fill="currentColor" stroke="none"/>',
  check: '<path d="M5 12.5l4.5 4.5L19 7.5"/>',
  bird: '<path d="M2.5 13.5c3.8.2 6.6-1.3 8.6-4.6L13.5 5c.7 3 2.4 5 5.2 6.2l2.8 1.1-3.8.9c-2.7.7-4.8 2.5-6 5.3l-.8 1.9-.6-2.6c-.5-2.3-2.3-3.6-5.3-3.8z" fill="currentColor" stroke="none"/>',
};
const svg = (name, size = 16) =>
  `<svg viewBox="0 0 24 24" width="${size}" height="${size}" fill="none" stroke="currentColor" stroke-width="2" ` +
  `stroke-linecap="round" stroke-linejoin="round" aria-hidden="true">${ICON[name]}</svg>`;

// Inline spans of one block's text: escaped first, then code spans and links set aside (so no
// later rule looks inside them), then emphasis.
function mdInline(src) {
  const keep = [];
  const stash = (html) => '\u0000' + (keep.push(html) - 1) + '\u0000';
  let s = esc(src);
  s = s.replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (m, f, code) => stash('<code>' + code.replace(/^ (.+) $/, '$1') + '</code>'));
  const link = (url) => stash(`<a href="${url}" target="_blank" rel="noopener noreferrer">`);
  s = s.replace(/\[([^\]\n]+)\]\(((?:https?:\/\/|mailto:)[^\s)]+)\)/g, (m, text, url) => link(url) + text + stash('</a>'));
  s = s.replace(/\bhttps?:\/\/(?:[\w\-.~:/?#@!$*+,;=%]|&amp;)*[\w/#=%-]/g, (url) => stash(`<a href="${url}" target="_blank" rel="noopener noreferrer">${url}</a>`));
  s = s.replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, '<strong>$1</strong>')
       .replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, '$1<strong>$2</strong>')
       .replace(/(^|[^*])\*(?=[^\s*])([^*\n]*?[^\s*])\*(?!\*)/g, '$1<em>$2</em>')
       .replace(/(^|[^\w])_(?=[^\s_])([^_\n]*?[^\s_])_(?!\w)/g, '$1<em>$2</em>')
       .replace(/~~(?=\S)([^~\n]*?\S)~~/g, '<del>$1</del>');
  return s.replace(/\u0000(\d+)\u0000/g, (m, i) => keep[i]);
}

function codeBlock(code, lang) {
  return `<div class="code"><div class="code-head"><span>${esc(lang || 'text')}</span>` +
         `<button class="icon" data-act="copy-code" title="Copy code" aria-label="Copy code">${svg('copy', 14)}</button></div>` +
         `<pre><code>${esc(code)}</code></pre></div>`;
}

const LIST = /^( *)([-*+]|\d{1,9}[.)])[ \t]+(.*)$/;
const indentOf = (line) => line.match(/^ */)[0].length;

function list(lines, i) {
  const first = lines[i].match(LIST), indent = first[1].length, ordered = /\d/.test(first[2]);
  const width = indent + first[2].length + 1;
  const sameLevel = (m) => m && m[1].length < width && /\d/.test(m[2]) === ordered;
  const items = [];
  while (i < lines.length) {
    const line = lines[i], m = line.match(LIST);
    if (sameLevel(m)) { items.push([m[3]]); i++; continue; }
    if (!line.trim()) {  // a blank line: the list goes on if what follows is indented or its next item
      let j = i + 1;
      while (j < lines.length && !lines[j].trim()) j++;
      if (j < lines.length && (indentOf(lines[j]) >= width || sameLevel(lines[j].match(LIST)))) {
        items[items.length - 1].push('');
        i++;
        continue;
      }
      break;
    }
    if (indentOf(line) <= indent) break;
    items[items.length - 1].push(line.slice(Math.min(indentOf(line), width)));
    i++;
  }
  const tag = ordered ? 'ol' : 'ul', start = ordered ? parseInt(first[2], 10) : 1;
  let html = `<${tag}${start !== 1 ? ` start="${start}"` : ''}>`;
  for (const item of items) {
    let task = '';
    const t = item[0].match(/^\[([ xX])\][ \t]+/);
    if (t) { task = `<input type="checkbox" disabled${t[1] === ' ' ? '' : ' checked'}> `; item[0] = item[0].slice(t[0].length); }
    const body = blocks(item);
    html += '<li>' + task + (item.includes('') ? body : body.replace(/^<p>([\s\S]*?)<\/p>/, '$1')) + '</li>';
  }
  return [html + `</${tag}>`, i];
}

const SEP = /^ *\|? *:?-+:? *(\| *:?-+:? *)*\|? *$/;
const cells = (row) => row.trim().replace(/^\|/, '').replace(/\|$/, '').split('|').map((c) => c.trim());

function table(lines, i) {
  const align = cells(lines[i + 1]).map((c) => (c.endsWith(':') ? (c.startsWith(':') ? 'center' : 'right') : 'left'));
  const row = (line, tag) => '<tr>' + align.map((a, k) => `<${tag} style="text-align:${a}">${mdInline(cells(line)[k] || '')}</${tag}>`).join('') + '</tr>';
  let html = '<div class="table"><table><thead>' + row(lines[i], 'th') + '</thead><tbody>';
  for (i += 2; i < lines.length && lines[i].includes('|') && lines[i].trim(); i++) html += row(lines[i], 'td');
  return [html + '</tbody></table></div>', i];
}

function blocks(lines) {
  let out = '', para = [], i = 0, m;
  const flush = () => {
    if (para.length) out += '<p>' + para.map(mdInline).join('<br>') + '</p>';
    para = [];
  };
  while (i < lines.length) {
    const line = lines[i];
    if ((m = line.match(/^ {0,3}(`{3,}|~{3,})[ \t]*([^`\s]*)[^`]*$/))) {
      flush();
      const close = new RegExp('^ {0,3}' + m[1][0] + '{' + m[1].length + ',}[ \\t]*$'), code = [];
      const lang = m[2].replace(/[^\w+#.-]/g, '').slice(0, 24);
      for (i++; i < lines.length && !close.test(lines[i]); i++) code.push(lines[i]);
      out += codeBlock(code.join('\n'), lang);
      i++;
      continue;
    }
    if (!line.trim()) { flush(); i++; continue; }
    if ((m = line.match(/^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$/))) {
      flush();
      out += `<h${m[1].length}>${mdInline(m[2])}</h${m[1].length}>`;
      i++;
      continue;
    }
    if (/^ {0,3}([-*_])([ \t]*\1){2,}[ \t]*$/.test(line)) { flush(); out += '<hr>'; i++; continue; }
    if (/^ {0,3}>/.test(line)) {
      flush();
      const quote = [];
      while (i < lines.length && /^ {0,3}>/.test(lines[i])) quote.push(lines[i++].replace(/^ {0,3}> ?/, ''));
      out += '<blockquote>' + blocks(quote) + '</blockquote>';
      continue;
    }
    if (line.includes('|') && i + 1 < lines.length && lines[i + 1].includes('-') && SEP.test(lines[i + 1]) &&
        (lines[i + 1].includes('|') || cells(lines[i]).length === 1)) {
      flush();
      let html;
      [html, i] = table(lines, i);
      out += html;
      continue;
    }
    if (LIST.test(line) && (!para.length || !/^ {4}/.test(line))) {
      flush();
      let html;
      [html, i] = list(lines, i);
      out += html;
      continue;
    }
    para.push(line.trim());
    i++;
  }
  flush();
  return out;
}

// Markdown text -> HTML (a string of the tags above; everything from the text is escaped).
const markdown = (src) => blocks(String(src).replace(/\r\n?/g, '\n').replace(/\u0000/g, '').split('\n'));
)JS";

}  // namespace kestrel::server
