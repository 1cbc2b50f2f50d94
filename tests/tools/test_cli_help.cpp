// Every subcommand's --help lists every option it accepts, read from the same declarations the
// parser is built from (tools/cli/commands.h); --version; unknown options name the nearest one.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/info_summary.h"
#include "common/testdata.h"
#include "kestrel.h"

using kestrel::test::cli_path;

namespace {

using Result = kestrel::test::CliResult;
Result run(const std::string& args) { return kestrel::test::run_cli(args); }

}  // namespace

TEST_CASE("every subcommand's --help lists every option it declares") {
  const auto& commands = kestrel::cli::commands();
  CHECK(commands.size() >= 10);
  for (const auto& c : commands) {
    CAPTURE(c.name);
    const Result r = run(std::string(c.name) + " --help");
    CHECK(r.code == 0);
    CHECK(r.out.find("kestrel " + std::string(c.name)) != std::string::npos);
    CHECK(r.out.find(c.summary) != std::string::npos);
    const kestrel::cli::Opts opts = c.options();
    CHECK(!opts.empty());
    for (const kestrel::cli::Opt& o : opts) {
      CHECK(!o.help.empty());
      for (const std::string& name : kestrel::cli::option_names(o)) {
        CAPTURE(name);
        CHECK(r.out.find(name) != std::string::npos);
      }
      CHECK(r.out.find(o.help.substr(0, 20)) != std::string::npos);
    }
    // -h too, and an unknown option fails with exit 2 naming itself and the nearest known one.
    CHECK(run(std::string(c.name) + " -h").out == r.out);
    const Result bad = run(std::string(c.name) + " --no-such-option-x");
    CHECK(bad.code == 2);
    CHECK(bad.err.find("--no-such-option-x") != std::string::npos);
  }
  // The shared options are spelled the same everywhere they appear.
  for (const auto& c : commands)
    for (const kestrel::cli::Opt& o : c.options()) {
      const auto names = kestrel::cli::option_names(o);
      for (const char* long_name : {"--model", "--threads", "--device", "--ctx-size", "--n-predict", "--file", "--prompt"})
        if (names.back() == long_name) {
          CAPTURE(c.name);
          CAPTURE(long_name);
          CHECK(names.size() == 2);  // its one-letter form too
        }
    }
}

TEST_CASE("kestrel --version, usage and suggestions") {
  Result r = run("--version");
  CHECK(r.code == 0);
  CHECK(r.out.find("kestrel 0.") == 0);
  CHECK(r.out.find("backends compiled: cpu") != std::string::npos);
  CHECK(r.out.find("cpu kernels: ") != std::string::npos);
  r = run("--help");
  CHECK(r.code == 0);
  for (const auto& c : kestrel::cli::commands()) CHECK(r.out.find(std::string("  ") + c.name + " ") != std::string::npos);
  r = run("serve --ctx 4096");
  CHECK(r.code == 2);
  CHECK(r.err.find("unknown option '--ctx' (did you mean --ctx-size?)") != std::string::npos);
  r = run("run --tmp 0");
  CHECK(r.code == 2);
  CHECK(r.err.find("did you mean --temp?") != std::string::npos);
  r = run("chta");
  CHECK(r.code == 2);
  CHECK(r.err.find("did you mean chat?") != std::string::npos);
  CHECK(kestrel::cli::nearest_option("--thread", kestrel::cli::run_options()) == "--threads");
  CHECK(kestrel::cli::nearest_option("--zzzzzzzzzz", kestrel::cli::run_options()).empty());
}

TEST_CASE("run, chat and serve use the built-in demo model when no -m is given") {
  // The demo model is stories260K Q8_0: greedy, it tells llama.cpp's Q8_0 story (testdata reference).
  const std::string ref = kestrel::test::testdata_file("reference/stories260K.once.txt");
  if (ref.empty()) return;
  const std::string text = kestrel::test::read_text_file(ref);
  const std::string section = "===== llama.cpp stories260K-q8_0.gguf =====\n";
  const size_t at = text.find(section);
  REQUIRE(at != std::string::npos);
  const Result r = run("run --echo -p 'Once upon a time' -n 32 --temp 0");
  CHECK(r.code == 0);
  CHECK(r.err.find("built-in demo model stories260K-q8_0.gguf") != std::string::npos);
  CHECK(r.err.find("[load ") != std::string::npos);
  CHECK(r.err.find("prompt 5 tokens") != std::string::npos);
  CHECK(r.err.find("generated 32 tokens") != std::string::npos);
  REQUIRE(r.out.size() > 100);
  CHECK(text.compare(at + section.size(), r.out.size(), r.out) == 0);  // the prompt, then the story
  // KESTREL_MODEL names the default model: a missing one is an error, not the demo.
  setenv("KESTREL_MODEL", "/nonexistent.gguf", 1);
  const Result env = run("run -p hi -n 1");
  unsetenv("KESTREL_MODEL");
  CHECK(env.code == 1);
  CHECK(env.err.find("/nonexistent.gguf") != std::string::npos);
}

TEST_CASE("kestrel info: the summary by default, the JSON with --json") {
  const std::string model = kestrel::test::testdata_file("models/qwen3moe-q4_k_m.gguf");
  if (model.empty()) return;
  Result r = run("info -m " + model + " -c 2048");
  CHECK(r.code == 0);
  for (const char* s : {"qwen3moe", "parameters", "active per token", "q4_K", "2 of 8 experts per token",
                        "4096 tokens trained", "at context 2048", "cpu ", "no chat template"})
    CHECK_MESSAGE(r.out.find(s) != std::string::npos, s);
  CHECK(r.out.size() < 2000);  // a summary, not the tensor list
  r = run("info --json -m " + model);
  CHECK(r.code == 0);
  CHECK(r.out.find("\"tensors\"") != std::string::npos);

  // A chat template names its tool-call family (here Qwen 2.5's: Hermes-style <tool_call>).
  const std::string tmpl_file = kestrel::test::testdata_file("chat_templates/Qwen-Qwen2.5-7B-Instruct.json");
  if (tmpl_file.empty()) return;
  kestrel_model* m = nullptr;
  REQUIRE(kestrel_model_load(model.c_str(), nullptr, &m) == KESTREL_OK);
  size_t len = 0;
  kestrel_model_describe(m, nullptr, 0, &len);
  std::string desc(len + 1, '\0');
  REQUIRE(kestrel_model_describe(m, desc.data(), desc.size(), &len) == KESTREL_OK);
  desc.resize(len);
  kestrel_model_free(m);
  kestrel::cli::InfoInputs in;
  in.desc = nlohmann::json::parse(desc);
  in.chat_template = nlohmann::json::parse(kestrel::test::read_text_file(tmpl_file))["template"].get<std::string>();
  in.n_ctx = 100;
  in.kv_type = "f16";
  in.kv_bytes_per_token = in.desc["memory"]["kv_bytes_per_token"].get<uint64_t>();
  const std::string s = kestrel::cli::info_summary(in);
  CHECK(s.find("template present") != std::string::npos);
  CHECK(s.find("tool calls: hermes") != std::string::npos);
  // KV at the context asked for: bytes per token x 100 (the summary prints KiB with one decimal).
  char kv[64];
  std::snprintf(kv, sizeof kv, "KV %.1f KiB", in.kv_bytes_per_token * 100 / 1024.0);
  CHECK_MESSAGE(s.find(kv) != std::string::npos, s);
}
