// Chat templates: a conversation (messages, tools) rendered into a prompt by a Jinja template,
// with Hugging Face transformers' semantics (Jinja2 3.1 with trim_blocks, lstrip_blocks, the
// immutable sandbox, loop controls, the `generation` tag, HF's tojson, raise_exception and
// strftime_now). Parse once, render many times, from any number of threads.
#pragma once
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kestrel {

namespace jinja {
class Template;
}

struct ChatInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // a JSON array of messages
  std::optional<nlohmann::ordered_json> tools;     // nullopt: `tools` is None
  nlohmann::ordered_json extra_context;            // null or an object: more template variables
  bool add_generation_prompt = false;
  std::optional<std::string> bos_token, eos_token;  // nullopt: the variable is undefined
  std::optional<std::tm> now;                       // strftime_now's clock; nullopt: local time now
};

class ChatTemplate {
 public:
  // A syntax error is KESTREL_ERR_FORMAT: "chat template: line L, column C: syntax error: ...".
  static Expected<ChatTemplate> parse(std::string_view source);
  // A render error is KESTREL_ERR_INVALID_ARGUMENT: "chat template: line L, column C: <what>",
  // where <what> is raise_exception's own message, or "<PythonErrorType>: <message>".
  Expected<std::string> render(const ChatInputs& inputs) const;

  // The template used when a model has none: "<|role|>\ncontent\n" per message, then
  // "<|assistant|>\n" when add_generation_prompt (documented in docs/API.md).
  static const char* fallback_source();

 private:
  std::shared_ptr<const jinja::Template> tmpl_;
};

// Parses JSON text keeping object key order; INVALID_ARGUMENT naming `what` on bad JSON.
Expected<nlohmann::ordered_json> parse_chat_json(std::string_view text, const char* what);

}  // namespace kestrel
