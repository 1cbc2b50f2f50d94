// kestrel template: renders a conversation (a JSON file of messages) with a chat template — the
// model's tokenizer.chat_template (-m) or a Jinja file (--template) — and prints the prompt
// exactly, without adding a newline.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common.h"

namespace kestrel::cli {
namespace {

std::string read_file(const std::string& path, const char* what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error(std::string("cannot read ") + what + " file '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

Opts template_options() {
  return model_options() + Opts{{"--template", "FILE", "a Jinja chat template (instead of the model's)"},
                                {"--messages", "FILE", "the conversation: a JSON array of messages (required)"},
                                {"--tools", "FILE", "tools (a JSON array) the template may show"},
                                {"--bos", "TEXT", "bos_token for --template"},
                                {"--eos", "TEXT", "eos_token for --template"},
                                {"--add-generation-prompt", "", "end with the assistant's turn opened"}};
}

int cmd_template(const Args& a) {
  if (a.has("--model") == a.has("--template")) throw UsageError("give exactly one of -m MODEL and --template FILE");
  const std::string messages = read_file(a.required("--messages"), "messages");
  const std::string tools = a.has("--tools") ? read_file(a.str("--tools"), "tools") : "";
  const std::string source = a.has("--template") ? read_file(a.str("--template"), "template") : "";
  const std::string bos = a.str("--bos"), eos = a.str("--eos");
  ModelPtr model = a.has("--model") ? load_model_from_args(a, /*vocab_only=*/true) : nullptr;

  kestrel_chat_options co;
  kestrel_chat_options_init(&co);
  co.template_source = a.has("--template") ? source.c_str() : nullptr;
  co.tools_json = a.has("--tools") ? tools.c_str() : nullptr;
  co.bos_token = a.has("--bos") ? bos.c_str() : nullptr;
  co.eos_token = a.has("--eos") ? eos.c_str() : nullptr;
  co.add_generation_prompt = a.has("--add-generation-prompt");
  size_t len = 0;
  kestrel_status st = kestrel_chat_format(model.get(), messages.c_str(), &co, nullptr, 0, &len);
  std::string out(len + 1, '\0');
  if (st == KESTREL_OK) st = kestrel_chat_format(model.get(), messages.c_str(), &co, out.data(), out.size(), &len);
  check(st);
  std::fwrite(out.data(), 1, len, stdout);
  return 0;
}

}  // namespace kestrel::cli
