// libFuzzer target: the Jinja engine as a chat request reaches it. The input is a template
// source, a NUL byte, then a JSON context: an object of template variables (its "messages",
// "tools", "add_generation_prompt", "bos_token", "eos_token" go where a chat request puts them,
// the rest become extra variables) or an array (the messages). Without a NUL, the whole input is
// the template and the messages are a short user/assistant exchange.
//
// The render runs under the default limits (jinja/limits.h), exactly as kestrel serve renders.
// A bug is: a crash or sanitizer report, a leak (namespace cycles), an error without a message,
// an error that says "internal error" (a C++ exception the interpreter did not turn into a
// template error) or "out of memory" (an allocation no limit stopped), or an output over the
// output limit.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "chat/chat_template.h"
#include "chat/jinja/limits.h"

using kestrel::ChatInputs;
using kestrel::ChatTemplate;
using json = nlohmann::ordered_json;

namespace {

// Messages are "chat template: line L, column C: <what>"; <what> may quote the template, so
// only its start tells what went wrong.
void check_error(const std::string& message) {
  const size_t column = message.find(", column ");
  if (message.rfind("chat template: line ", 0) != 0 || column == std::string::npos) __builtin_trap();
  const size_t what = message.find(": ", column);
  if (what == std::string::npos) __builtin_trap();
  const std::string_view w = std::string_view(message).substr(what + 2);
  if (w.rfind("TemplateRuntimeError: internal error", 0) == 0) __builtin_trap();  // an escaped C++ exception
  if (w.rfind("out of memory", 0) == 0) __builtin_trap();                         // an allocation no limit stopped
}

ChatInputs inputs_from(std::string_view context) {
  ChatInputs in;
  std::tm now{};
  now.tm_year = 125;
  now.tm_mday = 15;
  in.now = now;  // strftime_now: a fixed clock, so a crash reproduces
  json ctx = json::parse(context.begin(), context.end(), nullptr, false);
  if (ctx.is_discarded()) {
    in.messages = json::array({{{"role", "user"}, {"content", "Hi"}}, {{"role", "assistant"}, {"content", "Hello!"}}});
    return in;
  }
  if (ctx.is_array()) {
    in.messages = ctx;
    return in;
  }
  if (!ctx.is_object()) return in;
  json extra = json::object();
  for (auto& [key, value] : ctx.items()) {
    if (key == "messages" && value.is_array()) in.messages = value;
    else if (key == "tools") in.tools = value;
    else if (key == "add_generation_prompt" && value.is_boolean()) in.add_generation_prompt = value.get<bool>();
    else if (key == "bos_token" && value.is_string()) in.bos_token = value.get<std::string>();
    else if (key == "eos_token" && value.is_string()) in.eos_token = value.get<std::string>();
    else extra[key] = value;
  }
  in.extra_context = std::move(extra);
  return in;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view source = input.substr(0, nul);
  const std::string_view context = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);

  auto tmpl = ChatTemplate::parse(source);
  if (!tmpl.ok()) {
    check_error(tmpl.status().message());
    return 0;
  }
  auto out = tmpl->render(inputs_from(context));
  if (!out.ok()) {
    check_error(out.status().message());
    return 0;
  }
  if (out->size() > kestrel::jinja::Limits{}.max_output_bytes) __builtin_trap();
  return 0;
}
