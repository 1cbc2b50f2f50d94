// Chat replies through the C API: kestrel_reply_parser splits generated text into content,
// reasoning and tool calls by the chat template's family (chat/chat_reply.h), streamed as deltas,
// and gives the grammar that enforces tool_choice "required" or a named function.
#include <algorithm>

#include "api/guard.h"
#include "api/handles.h"
#include "chat/chat_reply.h"
#include "chat/chat_template.h"
#include "chat/tool_grammar.h"

using kestrel::api::fail;
using kestrel::api::guard;
using ojson = nlohmann::ordered_json;

namespace {

// The length of the longest prefix of s that does not end inside a UTF-8 sequence.
size_t complete_utf8(std::string_view s) {
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? s.size() - back : s.size();
  }
  return s.size();
}

std::string new_id(kestrel_reply_parser& p) {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const int n = p.syntax.tools.id_chars > 0 ? p.syntax.tools.id_chars : 24;
  std::string id = p.syntax.tools.id_chars > 0 ? "" : "call_";
  for (int i = 0; i < n; ++i) id += kChars[p.rng() % 62];
  return id;
}

std::string delta_json(kestrel_reply_parser& p, const kestrel::ChatReply& d) {
  ojson j = ojson::object();
  if (!d.content.empty()) j["content"] = d.content;
  if (!d.reasoning.empty()) j["reasoning_content"] = d.reasoning;
  if (!d.tool_calls.empty()) {
    j["tool_calls"] = ojson::array();
    for (const kestrel::ToolCall& c : d.tool_calls) {
      p.ids.push_back(c.id.empty() ? new_id(p) : c.id);
      j["tool_calls"].push_back({{"index", p.ids.size() - 1},
                                 {"id", p.ids.back()},
                                 {"type", "function"},
                                 {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
  }
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

}  // namespace

extern "C" {

kestrel_status kestrel_reply_parser_new(const kestrel_model* model, const kestrel_chat_options* chat, const char* prompt,
                                        const char* tool_choice, uint32_t flags, kestrel_reply_parser** out) {
  return guard("kestrel_reply_parser_new", [&]() -> kestrel_status {
    const char* fn = "kestrel_reply_parser_new";
    KS_API_CHECK_ARG(out, fn, "out must not be NULL");
    *out = nullptr;
    KS_API_CHECK_ARG(flags <= (KESTREL_REPLY_PARALLEL_TOOLS | KESTREL_REPLY_REASONING_INLINE), fn, "unknown flags");
    kestrel_chat_options o;
    kestrel_chat_options_init(&o);
    const char* err = nullptr;
    if (!kestrel::api::read_options(chat, &o, &err)) return fail(KESTREL_ERR_INVALID_ARGUMENT, std::string(fn) + ": " + err);
    KS_API_CHECK_ARG(model || o.template_source, fn, "a model or chat->template_source is needed");
    auto p = std::make_unique<kestrel_reply_parser>();
    std::string arch;
    if (model)
      if (auto a = model->model->file().get_string("general.architecture")) arch = *a;
    p->syntax = kestrel::detect_chat_syntax(kestrel::api::chat_template_source(model, o), arch);
    p->tools = ojson::array();
    if (o.tools_json) {
      auto tools = kestrel::parse_chat_json(o.tools_json, "tools_json");
      if (!tools.ok()) return fail(tools.status());
      if (!tools->is_array()) return fail(KESTREL_ERR_INVALID_ARGUMENT, "tools_json: expected a JSON array of tools");
      p->tools = std::move(tools.value());
    }
    const std::string choice = tool_choice ? tool_choice : "auto";
    p->opts.parse_tools = choice != "none" && !p->tools.empty();
    p->opts.reasoning_inline = (flags & KESTREL_REPLY_REASONING_INLINE) != 0;
    p->opts.reasoning_open = prompt && kestrel::prompt_opens_reasoning(p->syntax, prompt);
    if (choice != "auto" && choice != "none") {
      KS_API_CHECK_ARG(!p->tools.empty(), fn, "tool_choice '" + choice + "' needs tools");
      kestrel::ToolGrammarOptions g;
      g.only = choice == "required" ? "" : choice;
      g.parallel = (flags & KESTREL_REPLY_PARALLEL_TOOLS) != 0;
      g.reasoning_open = p->opts.reasoning_open && !p->opts.reasoning_inline;
      auto gbnf = kestrel::tool_call_gbnf(p->syntax, p->tools, g);
      if (!gbnf.ok()) return fail(gbnf.status());
      p->grammar = std::move(gbnf.value());
    }
    p->opts.tools = &p->tools;
    *out = p.release();
    return KESTREL_OK;
  });
}

kestrel_status kestrel_reply_parser_grammar(const kestrel_reply_parser* p, char* buf, size_t cap, size_t* len) {
  return guard("kestrel_reply_parser_grammar", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(p && len, "kestrel_reply_parser_grammar", "p and len must not be NULL");
    return kestrel::api::copy_out("kestrel_reply_parser_grammar", p->grammar, buf, cap, len);
  });
}

kestrel_status kestrel_reply_parser_push(kestrel_reply_parser* p, const char* text, size_t text_len, bool final,
                                         char* buf, size_t cap, size_t* len) {
  return guard("kestrel_reply_parser_push", [&]() -> kestrel_status {
    const char* fn = "kestrel_reply_parser_push";
    KS_API_CHECK_ARG(p && len && (text || text_len == 0), fn, "p, text and len must not be NULL");
    const kestrel::Status b = kestrel::api::check_buffer(fn, buf, cap);
    if (!b.ok()) return fail(b);
    if (!p->pending.empty()) {
      KS_API_CHECK_ARG(text_len == 0 && !final, fn, "a delta is waiting: take it first (no text, not final)");
    } else if (text_len > 0 || final) {
      KS_API_CHECK_ARG(!p->done, fn, "the reply was already final");
      p->text.append(text ? text : "", text_len);
      p->done = final;
      kestrel::ReplyOptions o = p->opts;
      o.partial = !final;
      const std::string_view upto(p->text.data(), final ? p->text.size() : complete_utf8(p->text));
      const kestrel::ChatReply now = kestrel::parse_reply(p->syntax, upto, o);
      p->pending = delta_json(*p, kestrel::reply_delta(p->shown, now));
      p->shown = now;
    }
    const std::string out = p->pending.empty() ? "{}" : p->pending;
    const kestrel_status st = kestrel::api::copy_out(fn, out, buf, cap, len);
    if (st == KESTREL_OK) p->pending.clear();
    return st;
  });
}

void kestrel_reply_parser_free(kestrel_reply_parser* p) { delete p; }

kestrel_status kestrel_reply_parser_show_markers(const kestrel_reply_parser* p, kestrel_detokenizer* d) {
  return guard("kestrel_reply_parser_show_markers", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(p && d, "kestrel_reply_parser_show_markers", "parser and detokenizer must not be NULL");
    d->detok->render_also(kestrel::chat_marker_tokens(p->syntax, d->detok->tokenizer()));
    return KESTREL_OK;
  });
}

}  // extern "C"
