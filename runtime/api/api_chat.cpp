// Chat templates through the C API: kestrel_chat_format renders a JSON conversation with the
// caller's template, the model's tokenizer.chat_template, or the documented fallback;
// kestrel_chat_tokenize turns the rendered prompt into the prompt tokens.
#include "api/guard.h"
#include "api/handles.h"
#include "chat/chat_template.h"

using kestrel::api::fail;
using kestrel::api::guard;

namespace {

std::optional<std::string> special_text(const kestrel_model* model, const char* given, bool bos) {
  if (given) return std::string(given);
  if (!model) return std::nullopt;
  const kestrel::Tokenizer& tok = model->model->tokenizer();
  const int32_t id = bos ? tok.bos() : tok.eos();
  if (id < 0) return std::nullopt;
  return tok.token_to_piece(id, /*render_special=*/true);
}

}  // namespace

std::string kestrel::api::chat_template_source(const kestrel_model* model, const kestrel_chat_options& o) {
  if (o.template_source) return o.template_source;
  if (auto t = model->model->file().get_string("tokenizer.chat_template")) return *t;
  return kestrel::ChatTemplate::fallback_source();
}

extern "C" {

void kestrel_chat_options_init(kestrel_chat_options* o) {
  if (!o) return;
  *o = kestrel_chat_options{};
  o->struct_size = sizeof *o;
}

kestrel_status kestrel_chat_format(const kestrel_model* model, const char* messages_json, const kestrel_chat_options* opts,
                                   char* buf, size_t cap, size_t* len) {
  return guard("kestrel_chat_format", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(messages_json && len, "kestrel_chat_format", "messages_json and len must not be NULL");
    kestrel_chat_options o;
    kestrel_chat_options_init(&o);
    const char* err = nullptr;
    if (!kestrel::api::read_options(opts, &o, &err)) return fail(KESTREL_ERR_INVALID_ARGUMENT, std::string("kestrel_chat_format: ") + err);
    KS_API_CHECK_ARG(model || o.template_source, "kestrel_chat_format", "a model or options.template_source is needed");

    kestrel::ChatInputs in;
    auto messages = kestrel::parse_chat_json(messages_json, "messages_json");
    if (!messages.ok()) return fail(messages.status());
    if (!messages->is_array()) return fail(KESTREL_ERR_INVALID_ARGUMENT, "messages_json: expected a JSON array of messages");
    in.messages = std::move(messages.value());
    if (o.tools_json) {
      auto tools = kestrel::parse_chat_json(o.tools_json, "tools_json");
      if (!tools.ok()) return fail(tools.status());
      if (!tools->is_array() && !tools->is_null()) return fail(KESTREL_ERR_INVALID_ARGUMENT, "tools_json: expected a JSON array of tools");
      if (!tools->is_null()) in.tools = std::move(tools.value());
    }
    if (o.extra_context_json) {
      auto extra = kestrel::parse_chat_json(o.extra_context_json, "extra_context_json");
      if (!extra.ok()) return fail(extra.status());
      if (!extra->is_object()) return fail(KESTREL_ERR_INVALID_ARGUMENT, "extra_context_json: expected a JSON object");
      in.extra_context = std::move(extra.value());
    }
    in.add_generation_prompt = o.add_generation_prompt;
    in.bos_token = special_text(model, o.bos_token, true);
    in.eos_token = special_text(model, o.eos_token, false);

    auto tmpl = kestrel::ChatTemplate::parse(kestrel::api::chat_template_source(model, o));
    if (!tmpl.ok()) return fail(tmpl.status());
    auto text = tmpl->render(in);
    if (!text.ok()) return fail(text.status());
    return kestrel::api::copy_out("kestrel_chat_format", *text, buf, cap, len);
  });
}

kestrel_status kestrel_chat_tokenize(const kestrel_model* model, const char* text, size_t text_len, kestrel_token* tokens,
                                     size_t cap, size_t* n_tokens) {
  return guard("kestrel_chat_tokenize", [&]() -> kestrel_status {
    KS_API_CHECK_ARG(model && (text || text_len == 0) && n_tokens, "kestrel_chat_tokenize",
                     "model, text and n_tokens must not be NULL");
    const kestrel::Status b = kestrel::api::check_buffer("kestrel_chat_tokenize", tokens, cap);
    if (!b.ok()) return fail(b);
    const kestrel::Tokenizer& tok = model->model->tokenizer();
    // A rendered template holds control-token text (<|im_start|>, often the BOS text itself).
    auto ids = tok.tokenize(std::string_view(text ? text : "", text_len), /*add_special=*/true, /*parse_special=*/true);
    if (!ids.ok()) return fail(ids.status());
    // Templates usually write the BOS text themselves; the vocabulary may add one too: keep one.
    if (ids->size() >= 2 && tok.bos() >= 0 && (*ids)[0] == tok.bos() && (*ids)[1] == tok.bos()) ids->erase(ids->begin());
    return kestrel::api::copy_tokens("kestrel_chat_tokenize", *ids, tokens, cap, n_tokens);
  });
}

}  // extern "C"
