#include "chat/chat_template.h"

#include "chat/jinja/template.h"

namespace kestrel {
namespace {

constexpr int kMaxJsonDepth = 256;

// "<|role|>\ncontent\n" per message; content lists join their text parts; then
// "<|assistant|>\n" when add_generation_prompt. No BOS: tokenization adds it.
const char* kFallbackTemplate =
    "{%- for message in messages -%}\n"
    "{{ '<|' ~ message['role'] ~ '|>\\n' }}\n"
    "{%- if message['content'] is string -%}{{ message['content'] }}\n"
    "{%- elif message['content'] is iterable and message['content'] is not mapping -%}\n"
    "{%- for part in message['content'] if part is mapping and part['type'] == 'text' -%}{{ part['text'] }}{%- endfor -%}\n"
    "{%- elif message['content'] is not none -%}{{ message['content'] | tojson }}\n"
    "{%- endif -%}\n"
    "{{ '\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{ '<|assistant|>\\n' }}{%- endif -%}\n";

Expected<jinja::Value> to_value(const nlohmann::ordered_json& j, int depth, const char* what) {
  if (depth > kMaxJsonDepth) return Error(KESTREL_ERR_INVALID_ARGUMENT, std::string(what) + ": JSON nested too deeply");
  switch (j.type()) {
    case nlohmann::json::value_t::null: return jinja::Value::none();
    case nlohmann::json::value_t::boolean: return jinja::Value::boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return jinja::Value::integer(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? jinja::Value::integer(static_cast<int64_t>(u))
                                                   : jinja::Value::number(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float: return jinja::Value::number(j.get<double>());
    case nlohmann::json::value_t::string: return jinja::Value::string(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<jinja::Value> items;
      items.reserve(j.size());
      for (const auto& e : j) {
        auto v = to_value(e, depth + 1, what);
        if (!v.ok()) return v.status();
        items.push_back(std::move(v.value()));
      }
      return jinja::Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      jinja::Value d = jinja::Value::dict();
      for (const auto& [k, e] : j.items()) {
        auto v = to_value(e, depth + 1, what);
        if (!v.ok()) return v.status();
        d.dict_data().set(jinja::Value::string(k), std::move(v.value()));
      }
      return d;
    }
    default: return Error(KESTREL_ERR_INVALID_ARGUMENT, std::string(what) + ": unsupported JSON value");
  }
}

std::string describe(const jinja::TemplateError& e) {
  std::string where = "chat template: line " + std::to_string(e.line) + ", column " + std::to_string(e.column) + ": ";
  if (e.kind == jinja::ErrorKind::Raised) return where + e.message;
  // A resource limit names itself: "output limit of 16777216 bytes exceeded" (jinja/limits.h).
  if (e.kind == jinja::ErrorKind::Limit) return where + e.message;
  if (e.kind == jinja::ErrorKind::Syntax) return where + "syntax error: " + e.message;
  return where + jinja::error_kind_name(e.kind) + ": " + e.message;
}

}  // namespace

const char* ChatTemplate::fallback_source() { return kFallbackTemplate; }

Expected<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  jinja::TemplateError err(jinja::ErrorKind::Syntax, "");
  ChatTemplate t;
  t.tmpl_ = jinja::Template::parse(source, &err);
  if (!t.tmpl_) {
    const kestrel_status code = err.kind == jinja::ErrorKind::Syntax  ? KESTREL_ERR_FORMAT
                                : err.kind == jinja::ErrorKind::Limit ? KESTREL_ERR_OUT_OF_MEMORY
                                                                      : KESTREL_ERR_INTERNAL;
    return Error(code, describe(err));
  }
  return t;
}

Expected<std::string> ChatTemplate::render(const ChatInputs& in) const {
  if (!tmpl_) return Error(KESTREL_ERR_INVALID_ARGUMENT, "chat template: not parsed");
  if (!in.messages.is_array()) return Error(KESTREL_ERR_INVALID_ARGUMENT, "messages: expected a JSON array");
  if (!in.extra_context.is_null() && !in.extra_context.is_object())
    return Error(KESTREL_ERR_INVALID_ARGUMENT, "extra context: expected a JSON object");
  jinja::DictData vars;
  auto set = [&](const char* name, Expected<jinja::Value> v) -> Status {
    if (!v.ok()) return v.status();
    vars.set(jinja::Value::string(name), std::move(v.value()));
    return Status::Ok();
  };
  KS_RETURN_IF_ERROR(set("messages", to_value(in.messages, 0, "messages")));
  KS_RETURN_IF_ERROR(set("tools", in.tools ? to_value(*in.tools, 0, "tools") : jinja::Value::none()));
  KS_RETURN_IF_ERROR(set("documents", jinja::Value::none()));
  KS_RETURN_IF_ERROR(set("add_generation_prompt", jinja::Value::boolean(in.add_generation_prompt)));
  if (in.bos_token) KS_RETURN_IF_ERROR(set("bos_token", jinja::Value::string(*in.bos_token)));
  if (in.eos_token) KS_RETURN_IF_ERROR(set("eos_token", jinja::Value::string(*in.eos_token)));
  if (in.extra_context.is_object())
    for (const auto& [k, v] : in.extra_context.items()) KS_RETURN_IF_ERROR(set(k.c_str(), to_value(v, 0, "extra context")));

  jinja::RenderOptions opts;
  if (in.now) {
    opts.now = *in.now;
    std::tm copy = opts.now;
    const time_t t = timegm(&copy);  // fills tm_wday / tm_yday
    gmtime_r(&t, &opts.now);
  } else {
    const time_t t = std::time(nullptr);
    localtime_r(&t, &opts.now);
  }
  std::string out;
  jinja::TemplateError err(jinja::ErrorKind::Runtime, "");
  if (!tmpl_->render(vars, opts, &out, &err)) return Error(KESTREL_ERR_INVALID_ARGUMENT, describe(err));
  return out;
}

Expected<nlohmann::ordered_json> parse_chat_json(std::string_view text, const char* what) {
  try {
    return nlohmann::ordered_json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    return Error(KESTREL_ERR_INVALID_ARGUMENT, std::string(what) + ": invalid JSON: " + e.what());
  }
}

}  // namespace kestrel
