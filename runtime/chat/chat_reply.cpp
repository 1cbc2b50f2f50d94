#include "chat/chat_reply.h"

#include <algorithm>
#include <optional>

namespace kestrel {
namespace {

using ojson = nlohmann::ordered_json;

enum class Got { kYes, kMore, kNo };  // matched / the text ended first / does not match

// Compact JSON text; invalid UTF-8 in a model's raw text becomes U+FFFD (never an exception).
std::string dump(const ojson& v) { return v.dump(-1, ' ', false, ojson::error_handler_t::replace); }

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t skip_ws(std::string_view t, size_t p) {
  while (p < t.size() && is_ws(t[p])) ++p;
  return p;
}

std::vector<std::string_view> words(std::string_view lit) {
  std::vector<std::string_view> w;
  size_t p = 0;
  while ((p = skip_ws(lit, p)) < lit.size()) {
    size_t q = p;
    while (q < lit.size() && !is_ws(lit[q])) ++q;
    w.push_back(lit.substr(p, q - p));
    p = q;
  }
  return w;
}

std::string_view first_word(std::string_view lit) {
  auto w = words(lit);
  return w.empty() ? std::string_view() : w[0];
}

// Matches `lit` at p, word by word with any whitespace before each word; *end after it.
Got match(std::string_view t, size_t p, std::string_view lit, size_t* end) {
  for (std::string_view w : words(lit)) {
    p = skip_ws(t, p);
    const std::string_view rest = t.substr(p);
    if (rest.size() < w.size()) return w.substr(0, rest.size()) == rest ? Got::kMore : Got::kNo;
    if (rest.substr(0, w.size()) != w) return Got::kNo;
    p += w.size();
  }
  *end = p;
  return Got::kYes;
}

// How many bytes at the end of t could begin `w` (a proper prefix of it): text to hold back.
size_t tail_prefix(std::string_view t, std::string_view w) {
  for (size_t n = std::min(t.size(), w.size() - (w.empty() ? 0 : 1)); n > 0; --n)
    if (t.substr(t.size() - n) == w.substr(0, n)) return n;
  return 0;
}

// The end of the JSON object or array starting at p (t[p] is '{' or '['), by brackets and strings.
Got scan_json(std::string_view t, size_t p, size_t* end) {
  std::string stack;
  bool in_string = false, escaped = false;
  for (size_t i = p; i < t.size(); ++i) {
    const char c = t[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') stack.push_back(c == '{' ? '}' : ']');
    else if (c == '}' || c == ']') {
      if (stack.empty() || stack.back() != c) return Got::kNo;
      stack.pop_back();
      if (stack.empty()) {
        *end = i + 1;
        return Got::kYes;
      }
    }
  }
  return Got::kMore;
}

// A JSON object or array at p (after whitespace), parsed.
Got json_at(std::string_view t, size_t p, char open, ojson* out, size_t* end) {
  p = skip_ws(t, p);
  if (p == t.size()) return Got::kMore;
  if (t[p] != open) return Got::kNo;
  const Got g = scan_json(t, p, end);
  if (g != Got::kYes) return g;
  try {
    *out = ojson::parse(t.substr(p, *end - p));
  } catch (const std::exception&) {
    return Got::kNo;
  }
  return Got::kYes;
}

// Arguments as compact JSON text: an object, or a string holding one (some models quote them).
std::optional<std::string> arguments_text(const ojson& v) {
  if (v.is_object()) return dump(v);
  if (v.is_string()) {
    try {
      const ojson o = ojson::parse(v.get<std::string>());
      if (o.is_object()) return dump(o);
    } catch (const std::exception&) {
    }
  }
  return std::nullopt;
}

// {"name": N, "<args_key>": {...}} (either args key is taken) as a call.
std::optional<ToolCall> call_of(const ojson& o, const ToolSyntax& s) {
  if (!o.is_object() || !o.contains("name") || !o["name"].is_string()) return std::nullopt;
  std::optional<std::string> args;
  for (const std::string& key : {s.args_key, std::string("arguments"), std::string("parameters")})
    if (!args && o.contains(key)) args = arguments_text(o[key]);
  if (!args) return std::nullopt;
  ToolCall c;
  c.name = o["name"].get<std::string>();
  c.arguments = *args;
  if (o.contains("id") && o["id"].is_string()) c.id = o["id"].get<std::string>();
  return c;
}

std::string trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && is_ws(s[a])) ++a;
  while (b > a && is_ws(s[b - 1])) --b;
  return std::string(s.substr(a, b - a));
}

constexpr size_t kMaxName = 256;

// A name ending where `stop` begins (found after p, within kMaxName bytes).
Got name_until(std::string_view t, size_t p, std::string_view stop, std::string* name, size_t* end) {
  const size_t q = t.find(stop, p);
  if (q == std::string_view::npos) return t.size() - p > kMaxName ? Got::kNo : Got::kMore;
  *name = trim(t.substr(p, q - p));
  if (name->empty() || q - p > kMaxName) return Got::kNo;
  *end = q;
  return Got::kYes;
}

// The JSON type the request's tool gives a parameter ("" when unknown).
std::string param_type(const ojson* tools, const std::string& fn, const std::string& param) {
  if (!tools || !tools->is_array()) return "";
  for (const ojson& t : *tools) {
    const ojson* f = t.contains("function") ? &t["function"] : &t;
    if (!f->is_object() || f->value("name", std::string()) != fn) continue;
    const ojson& props = f->value("parameters", ojson::object()).value("properties", ojson::object());
    if (props.is_object() && props.contains(param) && props[param].is_object())
      return props[param].value("type", ojson("")).is_string() ? props[param]["type"].get<std::string>() : "";
  }
  return "";
}

class Parser {
 public:
  Parser(const ChatSyntax& syn, std::string_view text, const ReplyOptions& o) : s_(syn.tools), t_(text), o_(o) {}

  // Calls and the content around them, from p.
  void run(size_t p, ChatReply* r) {
    for (;;) {
      size_t start = 0;
      std::string_view opener;
      if (!next_opener(p, &start, &opener)) {
        size_t hold = 0;
        if (o_.partial)
          for (std::string_view w : openers()) hold = std::max(hold, tail_prefix(t_.substr(p), w));
        if (o_.partial && s_.at_start_only && p == 0 && starts_call_at_start()) hold = t_.size();
        r->content += t_.substr(p, t_.size() - p - hold);
        return;
      }
      r->content += t_.substr(p, start - p);
      size_t end = 0;
      std::vector<ToolCall> calls;
      const Got g = call_at(start, opener, &calls, &end);
      if (g == Got::kYes) {
        for (ToolCall& c : calls) r->tool_calls.push_back(std::move(c));
        p = end;
        continue;
      }
      if (g == Got::kMore && o_.partial) return;  // wait for the rest
      if (g == Got::kMore) {                      // never finished: the text is content
        r->content += t_.substr(start);
        return;
      }
      // Not a call after all: its opener is content, and the search goes on after it.
      const size_t past = start + std::max<size_t>(1, opener.size());
      r->content += t_.substr(start, past - start);
      p = past;
    }
  }

 private:
  std::vector<std::string_view> openers() const {
    std::vector<std::string_view> v;
    for (std::string_view lit : {std::string_view(s_.section_open), std::string_view(s_.section_close),
                                 std::string_view(s_.open)})
      if (!first_word(lit).empty()) v.push_back(first_word(lit));
    if (s_.python_tag) v.push_back("<|python_tag|>");
    return v;
  }

  // A bare-JSON family's reply that may still turn out to be a call ('{' first).
  bool starts_call_at_start() const {
    const size_t q = skip_ws(t_, 0);
    return q == t_.size() || t_[q] == '{';
  }

  bool next_opener(size_t p, size_t* start, std::string_view* opener) const {
    size_t best = std::string_view::npos;
    for (std::string_view w : openers()) {
      const size_t q = t_.find(w, p);
      if (q < best) {
        best = q;
        *opener = w;
      }
    }
    if (s_.at_start_only && p == 0) {
      const size_t q = skip_ws(t_, 0);
      if (q < t_.size() && t_[q] == '{' && q < best) {
        best = q;
        *opener = {};
      }
    }
    *start = best;
    return best != std::string_view::npos;
  }

  Got call_at(size_t p, std::string_view opener, std::vector<ToolCall>* calls, size_t* end) {
    // Section markers are decoration around the calls.
    for (const std::string* lit : {&s_.section_open, &s_.section_close})
      if (!lit->empty() && opener == first_word(*lit)) return match(t_, p, *lit, end);
    if (s_.python_tag && opener == "<|python_tag|>") return json_call(p + opener.size(), "", calls, end);
    switch (s_.shape) {
      case ToolShape::kJsonObject: return json_call(p, s_.open, calls, end);
      case ToolShape::kJsonArray: return json_array(p, calls, end);
      case ToolShape::kNameArgs: return name_args(p, calls, end);
      case ToolShape::kXmlArgs: return xml_args(p, calls, end);
      case ToolShape::kHarmony: return Got::kNo;
    }
    return Got::kNo;
  }

  // `close` after q (nothing to match when empty).
  Got closed(size_t q, size_t* end) {
    if (s_.close.empty()) {
      *end = q;
      return Got::kYes;
    }
    return match(t_, q, s_.close, end);
  }

  Got json_call(size_t p, std::string_view open, std::vector<ToolCall>* calls, size_t* end) {
    size_t q = p;
    if (!open.empty()) {
      if (const Got g = match(t_, p, open, &q); g != Got::kYes) return g;
    }
    ojson o;
    if (const Got g = json_at(t_, q, '{', &o, &q); g != Got::kYes) return g;
    auto c = call_of(o, s_);
    if (!c) return Got::kNo;
    if (const Got g = closed(q, end); g != Got::kYes) return g;
    calls->push_back(std::move(*c));
    return Got::kYes;
  }

  Got json_array(size_t p, std::vector<ToolCall>* calls, size_t* end) {
    size_t q = 0;
    if (const Got g = match(t_, p, s_.open, &q); g != Got::kYes) return g;
    ojson a;
    if (const Got g = json_at(t_, q, '[', &a, &q); g != Got::kYes) return g;
    std::vector<ToolCall> got;
    for (const ojson& o : a) {
      auto c = call_of(o, s_);
      if (!c) return Got::kNo;
      got.push_back(std::move(*c));
    }
    if (got.empty()) return Got::kNo;
    if (const Got g = closed(q, end); g != Got::kYes) return g;
    for (ToolCall& c : got) calls->push_back(std::move(c));
    return Got::kYes;
  }

  // The name as written, less Kimi's "functions." and ":<n>".
  bool clean_name(std::string* name) const {
    if (!s_.name_prefix.empty()) {
      if (name->rfind(s_.name_prefix, 0) != 0) return false;
      name->erase(0, s_.name_prefix.size());
    }
    if (s_.name_index) {
      const size_t colon = name->rfind(':');
      if (colon == std::string::npos || colon + 1 == name->size()) return false;
      for (size_t i = colon + 1; i < name->size(); ++i)
        if ((*name)[i] < '0' || (*name)[i] > '9') return false;
      name->resize(colon);
    }
    return !name->empty() && name->find_first_of(" \n\t\r{}<>") == std::string::npos;
  }

  Got name_args(size_t p, std::vector<ToolCall>* calls, size_t* end) {
    size_t q = 0;
    if (const Got g = match(t_, p, s_.open, &q); g != Got::kYes) return g;
    ToolCall c;
    if (const Got g = name_until(t_, q, first_word(s_.sep), &c.name, &q); g != Got::kYes) return g;
    if (!clean_name(&c.name)) return Got::kNo;
    if (const Got g = match(t_, q, s_.sep, &q); g != Got::kYes) return g;
    ojson o;
    if (const Got g = json_at(t_, q, '{', &o, &q); g != Got::kYes) return g;
    c.arguments = dump(o);
    if (const Got g = closed(q, end); g != Got::kYes) return g;
    calls->push_back(std::move(c));
    return Got::kYes;
  }

  // A raw parameter value: JSON where the tool says the parameter is not a string and it parses.
  std::string value_json(const std::string& fn, const std::string& key, std::string raw) const {
    if (!raw.empty() && raw.front() == '\n') raw.erase(0, 1);
    if (!raw.empty() && raw.back() == '\n') raw.pop_back();
    const std::string type = param_type(o_.tools, fn, key);
    if (type != "string") {
      try {
        const ojson v = ojson::parse(raw);
        if (!type.empty() || !v.is_string()) return dump(v);
      } catch (const std::exception&) {
      }
    }
    return dump(ojson(raw));
  }

  Got xml_args(size_t p, std::vector<ToolCall>* calls, size_t* end) {
    size_t q = 0;
    if (const Got g = match(t_, p, s_.open, &q); g != Got::kYes) return g;
    // The name ends at the first of: the name's terminator, a key, the close.
    ToolCall c;
    size_t stop = std::string_view::npos;
    for (std::string_view w : {first_word(s_.sep), first_word(s_.key_open), first_word(s_.close)})
      if (!w.empty()) stop = std::min(stop, t_.find(w, q));
    if (stop == std::string_view::npos) return t_.size() - q > kMaxName ? Got::kNo : Got::kMore;
    c.name = trim(t_.substr(q, stop - q));
    if (c.name.empty() || stop - q > kMaxName || !clean_name(&c.name)) return Got::kNo;
    q = stop;
    if (!first_word(s_.sep).empty())
      if (const Got g = match(t_, q, s_.sep, &q); g != Got::kYes) return g;
    std::string args = "{";
    for (bool first = true;; first = false) {
      size_t r = 0;
      if (const Got g = match(t_, q, s_.close, &r); g == Got::kYes) {
        *end = r;
        break;
      } else if (g == Got::kMore) {
        return Got::kMore;
      }
      if (const Got g = match(t_, q, s_.key_open, &r); g != Got::kYes) return g;
      std::string key;
      if (const Got g = name_until(t_, r, first_word(s_.key_close), &key, &r); g != Got::kYes) return g;
      if (const Got g = match(t_, r, s_.key_close, &r); g != Got::kYes) return g;
      // The value runs to value_close's first word, kept as written but for one newline each side.
      const size_t v = t_.find(first_word(s_.value_close), r);
      if (v == std::string_view::npos) return Got::kMore;
      const std::string raw(t_.substr(r, v - r));
      if (const Got g = match(t_, v, s_.value_close, &q); g != Got::kYes) return g;
      if (!first) args += ",";
      args += dump(ojson(key)) + ":" + value_json(c.name, key, raw);
    }
    args += "}";
    try {
      c.arguments = dump(ojson::parse(args));
    } catch (const std::exception&) {
      return Got::kNo;
    }
    calls->push_back(std::move(c));
    return Got::kYes;
  }

  const ToolSyntax& s_;
  std::string_view t_;
  const ReplyOptions& o_;
};

// GPT-OSS Harmony: a sequence of messages "<|channel|>C [to=R] ...<|message|>BODY<|end|>", each
// after "<|start|>assistant" but the first. analysis is reasoning, a recipient functions.N a call,
// the rest content. Text outside that shape is content.
void parse_harmony(std::string_view t, const ReplyOptions& o, ChatReply* r) {
  static constexpr std::string_view kEnds[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
  constexpr std::string_view kStart = "<|start|>", kChannel = "<|channel|>", kMessage = "<|message|>";
  size_t p = 0;
  while (p < t.size()) {
    const size_t message_at = p;
    size_t q = 0;
    const Got start = match(t, p, "<|start|>assistant", &q);
    if (start == Got::kMore && o.partial) return;
    if (start == Got::kYes) p = q;
    const Got head = match(t, p, kChannel, &q);
    if (head == Got::kMore) {
      if (!o.partial) r->content += t.substr(message_at);
      return;
    }
    if (head == Got::kNo) {  // text outside a message: content, up to the next <|start|>
      size_t next = t.find(kStart, p);
      if (next == p) next = t.find(kStart, p + 1);
      std::string_view chunk = t.substr(message_at, next == std::string_view::npos ? t.size() - message_at : next - message_at);
      if (next == std::string_view::npos && o.partial) chunk.remove_suffix(tail_prefix(chunk, kStart));
      r->content += chunk;
      if (next == std::string_view::npos) return;
      p = next;
      continue;
    }
    const size_t msg = t.find(kMessage, q);
    if (msg == std::string_view::npos) {  // the header is still coming, or never ends
      if (!o.partial) r->content += t.substr(message_at);
      return;
    }
    const std::string_view header = t.substr(q, msg - q);  // "analysis", "commentary to=functions.f json", ...
    const size_t body_at = msg + kMessage.size();
    size_t body_end = t.size(), next = t.size();
    for (std::string_view e : kEnds) {
      const size_t x = t.find(e, body_at);
      if (x < body_end) {
        body_end = x;
        next = x + (e == kStart ? 0 : e.size());
      }
    }
    const bool ended = body_end < t.size();
    std::string_view body = t.substr(body_at, body_end - body_at);
    if (!ended && o.partial)
      for (std::string_view e : kEnds) body.remove_suffix(tail_prefix(body, e));
    const size_t to = header.find("to=");
    std::string recipient;
    if (to != std::string_view::npos) {
      size_t e = to + 3;
      while (e < header.size() && !is_ws(header[e]) && header[e] != '<') ++e;
      recipient = std::string(header.substr(to + 3, e - to - 3));
    }
    if (header.substr(0, 8) == "analysis" && !o.reasoning_inline) {
      r->reasoning += body;
    } else if (recipient.rfind("functions.", 0) == 0) {
      if (!ended && o.partial) return;
      ToolCall c;
      c.name = recipient.substr(10);
      ojson args;
      size_t e = 0;
      if (!c.name.empty() && json_at(body, 0, '{', &args, &e) == Got::kYes && skip_ws(body, e) == body.size()) {
        c.arguments = dump(args);
        r->tool_calls.push_back(std::move(c));
      } else {  // not a call after all: the whole message is content
        r->content += t.substr(message_at, next - message_at);
      }
    } else {
      r->content += body;
    }
    if (!ended) return;
    p = next;
  }
}

}  // namespace

ChatReply parse_reply(const ChatSyntax& syntax, std::string_view text, const ReplyOptions& opts) {
  ChatReply r;
  if (syntax.tools.shape == ToolShape::kHarmony) {
    parse_harmony(text, opts, &r);
    r.reasoning = trim(r.reasoning);
    if (opts.partial || !r.tool_calls.empty())
      while (!r.content.empty() && is_ws(r.content.back())) r.content.pop_back();
    return r;
  }
  size_t p = 0;
  const std::string_view open = syntax.think_open, close = syntax.think_close;
  if (!open.empty() && !opts.reasoning_inline) {
    bool in = opts.reasoning_open;
    const size_t q = skip_ws(text, 0);
    if (!in && text.substr(q, open.size()) == open) {
      in = true;
      p = q + open.size();
    } else if (!in && opts.partial && open.substr(0, text.size() - q) == text.substr(q)) {
      return r;  // nothing but (the start of) the open tag yet
    }
    if (in) {
      const size_t c = text.find(close, p);
      if (c == std::string_view::npos) {  // still reasoning (or never closed)
        std::string_view body = text.substr(p);
        if (opts.partial) body.remove_suffix(tail_prefix(body, close));
        r.reasoning = trim(body);
        return r;
      }
      r.reasoning = trim(text.substr(p, c - p));
      p = skip_ws(text, c + close.size());
    }
  }
  if (opts.parse_tools) {
    Parser(syntax, text.substr(p), opts).run(0, &r);
  } else {
    r.content = std::string(text.substr(p));
  }
  // Trailing whitespace waits while streaming (it may precede a call) and goes beside calls.
  if (opts.partial || !r.tool_calls.empty())
    while (!r.content.empty() && is_ws(r.content.back())) r.content.pop_back();
  return r;
}

ChatReply reply_delta(const ChatReply& before, const ChatReply& now) {
  auto tail = [](const std::string& a, const std::string& b) {
    return b.compare(0, a.size(), a) == 0 ? b.substr(a.size()) : b;
  };
  ChatReply d;
  d.content = tail(before.content, now.content);
  d.reasoning = tail(before.reasoning, now.reasoning);
  for (size_t i = before.tool_calls.size(); i < now.tool_calls.size(); ++i) d.tool_calls.push_back(now.tool_calls[i]);
  return d;
}

bool prompt_opens_reasoning(const ChatSyntax& syntax, std::string_view prompt) {
  if (syntax.think_open.empty()) return false;
  while (!prompt.empty() && is_ws(prompt.back())) prompt.remove_suffix(1);
  return prompt.size() >= syntax.think_open.size() &&
         prompt.substr(prompt.size() - syntax.think_open.size()) == syntax.think_open;
}

}  // namespace kestrel
