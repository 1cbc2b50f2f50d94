// kestrel_chat_format through the C API: template sources (caller, GGUF key, fallback), BOS/EOS
// defaults, buffers and error statuses, and `kestrel template` through the CLI binary;
// kestrel_chat_tokenize's single BOS.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/testdata.h"
#include "kestrel.h"

namespace {

struct Rendered {
  kestrel_status status;
  std::string text;  // the prompt, or kestrel_last_error()
};

Rendered format(const kestrel_model* model, const char* messages, const kestrel_chat_options* opts) {
  size_t len = 0;
  kestrel_status st = kestrel_chat_format(model, messages, opts, nullptr, 0, &len);
  if (st != KESTREL_OK) return {st, kestrel_last_error()};
  std::string buf(len + 1, '\0');
  st = kestrel_chat_format(model, messages, opts, buf.data(), buf.size(), &len);
  if (st != KESTREL_OK) return {st, kestrel_last_error()};
  buf.resize(len);
  return {st, buf};
}

const char* kMessages = R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi ✓"}])";

kestrel_model* load_vocab(const std::string& path) {
  kestrel_model_options mo;
  kestrel_model_options_init(&mo);
  mo.vocab_only = true;
  kestrel_model* m = nullptr;
  REQUIRE(kestrel_model_load(path.c_str(), &mo, &m) == KESTREL_OK);
  return m;
}

struct CliResult {
  int code;
  std::string out, err;
};

std::string temp_file(const std::string& name, const std::string& content) {
  const std::string path = std::string(P_tmpdir) + "/kestrel_chat_" + std::to_string(getpid()) + "_" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

CliResult run_cli(const std::string& args) {
  const std::string err_path = temp_file("stderr.txt", "");
  const std::string cmd = kestrel::test::cli_path() + " " + args + " 2>" + err_path;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out, kestrel::test::read_text_file(err_path)};
}

}  // namespace

TEST_CASE("kestrel_chat_format: a caller's template without a model") {
  kestrel_chat_options o;
  kestrel_chat_options_init(&o);
  o.template_source = "{{ bos_token is defined }}|{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                      "{% if add_generation_prompt %}<assistant>{% endif %}|{{ tools|length }}|{{ flag }}";
  o.tools_json = R"([{"type": "function", "function": {"name": "f"}}])";
  o.extra_context_json = R"({"flag": true})";
  o.add_generation_prompt = true;
  Rendered r = format(nullptr, kMessages, &o);
  REQUIRE(r.status == KESTREL_OK);
  CHECK(r.text == "False|<system>Be brief.<user>Hi ✓<assistant>|1|True");
  o.bos_token = "<s>";
  o.template_source = "{{ bos_token }}{{ eos_token is defined }}";
  CHECK(format(nullptr, kMessages, &o).text == "<s>False");

  // Buffers: too small is BUFFER_TOO_SMALL with the needed size; nothing past cap is written.
  o.template_source = "abcdef";
  char small[4] = {'x', 'x', 'x', 'x'};
  size_t len = 0;
  CHECK(kestrel_chat_format(nullptr, kMessages, &o, small, 3, &len) == KESTREL_ERR_BUFFER_TOO_SMALL);
  CHECK(len == 6);
  CHECK(small[3] == 'x');
}

TEST_CASE("kestrel_chat_format: errors are statuses with messages") {
  kestrel_chat_options o;
  kestrel_chat_options_init(&o);
  size_t len = 0;
  CHECK(kestrel_chat_format(nullptr, kMessages, &o, nullptr, 0, &len) == KESTREL_ERR_INVALID_ARGUMENT);  // no template, no model
  CHECK(kestrel_chat_format(nullptr, nullptr, &o, nullptr, 0, &len) == KESTREL_ERR_INVALID_ARGUMENT);
  o.template_source = "{{ messages }}";
  Rendered bad_json = format(nullptr, "[{\"role\": ", &o);
  CHECK(bad_json.status == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(bad_json.text.find("messages_json") != std::string::npos);
  CHECK(format(nullptr, R"({"role": "user"})", &o).status == KESTREL_ERR_INVALID_ARGUMENT);  // not an array
  o.tools_json = "{oops";
  CHECK(format(nullptr, kMessages, &o).text.find("tools_json") != std::string::npos);
  o.tools_json = nullptr;
  o.extra_context_json = "[1]";
  CHECK(format(nullptr, kMessages, &o).text.find("extra_context_json") != std::string::npos);
  o.extra_context_json = nullptr;
  o.template_source = "{% for m in messages %}";
  Rendered syntax = format(nullptr, kMessages, &o);
  CHECK(syntax.status == KESTREL_ERR_FORMAT);
  CHECK(syntax.text.rfind("chat template: line 1, column ", 0) == 0);
  o.template_source = "{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}";
  Rendered raised = format(nullptr, kMessages, &o);
  CHECK(raised.status == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(raised.text.rfind("chat template: line 1, column ", 0) == 0);
  CHECK(raised.text.substr(raised.text.size() - 25) == "System role not supported");
  kestrel_chat_options unset{};  // struct_size 0: not initialized
  unset.template_source = "x";
  CHECK(kestrel_chat_format(nullptr, kMessages, &unset, nullptr, 0, &len) == KESTREL_ERR_INVALID_ARGUMENT);
}

TEST_CASE("kestrel_chat_format: the model's template and BOS/EOS, or the fallback") {
  // Phi-3's vocabulary carries tokenizer.chat_template; Jinja2 renders it (bos "<s>") as below.
  const std::string phi3 = kestrel::test::testdata_file("tokenizer/ggml-vocab-phi-3.gguf");
  if (!phi3.empty()) {
    kestrel_model* m = load_vocab(phi3);
    kestrel_chat_options o;
    kestrel_chat_options_init(&o);
    o.add_generation_prompt = true;
    Rendered r = format(m, kMessages, &o);
    REQUIRE(r.status == KESTREL_OK);
    CHECK(r.text == "<s><|user|>\nHi ✓<|end|>\n<|assistant|>\n");
    o.template_source = "{{ bos_token }}|{{ eos_token }}";  // the caller's template, the model's tokens
    CHECK(format(m, kMessages, &o).text == "<s>|<|endoftext|>");
    kestrel_model_free(m);
  }
  // stories260K has no chat template: the documented fallback.
  const std::string stories = kestrel::test::testdata_file("models/stories260K-f32.gguf");
  if (!stories.empty()) {
    kestrel_model* m = load_vocab(stories);
    kestrel_chat_options o;
    kestrel_chat_options_init(&o);
    o.add_generation_prompt = true;
    const char* parts = R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]}])";
    CHECK(format(m, kMessages, &o).text == "<|system|>\nBe brief.\n<|user|>\nHi ✓\n<|assistant|>\n");
    CHECK(format(m, parts, &o).text == "<|user|>\nab\n<|assistant|>\n");
    o.add_generation_prompt = false;
    CHECK(format(m, "[]", &o).text == "");
    kestrel_model_free(m);
  }
}

namespace {
// kestrel_tokenize (add_special, parse_special) or kestrel_chat_tokenize of text.
std::vector<kestrel_token> tokens_of(const kestrel_model* m, const std::string& text, bool chat) {
  std::vector<kestrel_token> ids(text.size() + 8);
  size_t n = 0;
  const kestrel_status st = chat ? kestrel_chat_tokenize(m, text.data(), text.size(), ids.data(), ids.size(), &n)
                                 : kestrel_tokenize(m, text.data(), text.size(), true, true, ids.data(), ids.size(), &n);
  REQUIRE(st == KESTREL_OK);
  ids.resize(n);
  return ids;
}
}  // namespace

TEST_CASE("kestrel_chat_tokenize: one BOS when the template writes it and the vocabulary adds it") {
  const std::string stories = kestrel::test::testdata_file("models/stories260K-f32.gguf");
  if (stories.empty()) return;
  kestrel_model* m = load_vocab(stories);
  const kestrel_token bos = kestrel_model_token_bos(m);
  REQUIRE(bos >= 0);
  kestrel_chat_options o;
  kestrel_chat_options_init(&o);
  o.template_source = "{{ bos_token }}{{ messages[1].content }}";
  const Rendered r = format(m, kMessages, &o);
  REQUIRE(r.status == KESTREL_OK);
  CHECK(r.text == "<s>Hi ✓");
  const std::vector<kestrel_token> plain = tokens_of(m, r.text, false), chat = tokens_of(m, r.text, true);
  REQUIRE(plain.size() >= 3);
  CHECK((plain[0] == bos && plain[1] == bos));  // the vocabulary's BOS and the template's
  CHECK(chat == std::vector<kestrel_token>(plain.begin() + 1, plain.end()));
  CHECK(chat[1] != bos);
  // The fallback writes no BOS: the vocabulary's one stays, nothing is dropped.
  o.template_source = nullptr;
  const std::string fallback = format(m, kMessages, &o).text;
  CHECK(tokens_of(m, fallback, true) == tokens_of(m, fallback, false));
  CHECK(tokens_of(m, fallback, true)[0] == bos);
  kestrel_model_free(m);
  // A vocabulary that adds no BOS (Qwen2): exactly kestrel_tokenize with control text parsed.
  const std::string qwen2 = kestrel::test::testdata_file("tokenizer/ggml-vocab-qwen2.gguf");
  if (qwen2.empty()) return;
  m = load_vocab(qwen2);
  const std::string im = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
  CHECK(tokens_of(m, im, true) == tokens_of(m, im, false));
  CHECK(tokens_of(m, im, true).size() < 12);  // the control tokens were parsed
  kestrel_model_free(m);
}

TEST_CASE("kestrel template: the CLI prints the rendering exactly, or a one-line error") {
  const std::string messages = temp_file("messages.json", kMessages);
  const std::string tools = temp_file("tools.json", R"([{"type": "function", "function": {"name": "get_weather"}}])");
  const std::string tmpl = temp_file("template.jinja",
                                     "{{ bos_token is defined }}{% for m in messages %}[{{ m.role }}]{{ m.content }}\n{% endfor %}"
                                     "{% for t in tools or [] %}({{ t.function.name }}){% endfor %}"
                                     "{% if add_generation_prompt %}[assistant]{% endif %}\n");
  CliResult r = run_cli("template --template " + tmpl + " --messages " + messages);
  CHECK(r.code == 0);
  CHECK(r.out == "False[system]Be brief.\n[user]Hi ✓\n");  // no newline added; the template's last one dropped
  r = run_cli("template --template " + tmpl + " --messages " + messages + " --tools " + tools +
              " --add-generation-prompt --bos '<s>' --eos '</s>'");
  CHECK(r.code == 0);
  CHECK(r.out == "True[system]Be brief.\n[user]Hi ✓\n(get_weather)[assistant]");

  const std::string stories = kestrel::test::testdata_file("models/stories260K-f32.gguf");
  if (!stories.empty()) {  // no chat template in the file: the fallback
    r = run_cli("template -m " + stories + " --messages " + messages + " --add-generation-prompt");
    CHECK(r.code == 0);
    CHECK(r.out == "<|system|>\nBe brief.\n<|user|>\nHi ✓\n<|assistant|>\n");
  }
  const std::string phi3 = kestrel::test::testdata_file("tokenizer/ggml-vocab-phi-3.gguf");
  if (!phi3.empty()) {
    r = run_cli("template -m " + phi3 + " --messages " + messages + " --add-generation-prompt");
    CHECK(r.code == 0);
    CHECK(r.out == "<s><|user|>\nHi ✓<|end|>\n<|assistant|>\n");
  }

  const std::string broken = temp_file("broken.jinja", "ok\n{% for m in messages %}{{ m.role }");
  r = run_cli("template --template " + broken + " --messages " + messages);
  CHECK(r.code != 0);
  CHECK(r.out.empty());
  CHECK(r.err.find("chat template: line 2, column ") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  const std::string raising = temp_file("raise.jinja", "{{ raise_exception('Only user and assistant roles are supported!') }}");
  r = run_cli("template --template " + raising + " --messages " + messages);
  CHECK(r.code != 0);
  CHECK(r.err.find("chat template: line 1, column ") != std::string::npos);
  CHECK(r.err.find("Only user and assistant roles are supported!") != std::string::npos);
  r = run_cli("template --messages " + messages);  // neither -m nor --template
  CHECK(r.code != 0);
}
