// The kestrel CLI, run as a user would: exact greedy text, eval JSON, info, tokenize, errors.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/testdata.h"
#include "kestrel.h"

using kestrel::test::cli_path;
using kestrel::test::CliResult;
using kestrel::test::run_cli;
using kestrel::test::testdata_file;
using nlohmann::json;

namespace {

struct Result {
  int code;
  std::string out;
};

// Runs the CLI with args (shell-quoted by the caller); stdout captured, stderr to err_file.
Result run(const std::string& args, const std::string& err_file = "/dev/null") {
  const std::string cmd = cli_path() + " " + args + " 2>" + err_file;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string ids_arg(const std::vector<int>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

}  // namespace

TEST_CASE("kestrel run: stories260K greedy text equals llama.cpp's first 64 tokens") {
  const std::string model = testdata_file("models/stories260K-f32.gguf");
  const std::string ref_path = testdata_file("reference/stories260K-f32.once.json");
  if (model.empty() || ref_path.empty()) return;
  const json ref = json::parse(kestrel::test::read_text_file(ref_path));
  std::vector<int> first64 = ref["greedy_tokens"].get<std::vector<int>>();
  first64.resize(64);
  // The expected text: llama.cpp's 64 tokens through the streaming detokenizer; llama.cpp's own
  // text of all 128 tokens (independently produced) must start with it.
  kestrel_model* m = nullptr;
  REQUIRE(kestrel_model_load(model.c_str(), nullptr, &m) == KESTREL_OK);
  kestrel_detokenizer* d = nullptr;
  REQUIRE(kestrel_detokenizer_new(m, false, &d) == KESTREL_OK);
  std::string expected;
  char buf[256];
  size_t len = 0;
  for (int t : first64) {
    REQUIRE(kestrel_detokenizer_push(d, t, buf, sizeof buf, &len) == KESTREL_OK);
    expected.append(buf, len);
  }
  REQUIRE(kestrel_detokenizer_flush(d, buf, sizeof buf, &len) == KESTREL_OK);
  expected.append(buf, len);
  kestrel_detokenizer_free(d);
  kestrel_model_free(m);
  const std::string full = ref["greedy_text"].get<std::string>();
  CHECK(expected.size() > 150);
  CHECK(full.rfind(expected, 0) == 0);
  Result r = run("run -m " + model + " -p 'Once upon a time' -n 64 --temp 0 --seed 1");
  REQUIRE(r.code == 0);
  CHECK(r.out == expected);
}

TEST_CASE("kestrel run --json-schema / --grammar-file: structured output from the command line") {
  const std::string model = testdata_file("models/stories260K-f32.gguf");
  if (model.empty()) return;
  Result r = run("run -m " + model + R"( -p 'Once' -n 200 --temp 0.9 --seed 3 --json-schema '{"type": "object", "properties": )"
                 R"({"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": false}')");
  REQUIRE(r.code == 0);
  const json j = json::parse(r.out);
  CHECK(j["ok"].is_boolean());
  CHECK(j.size() == 1);
  const std::string g = "/tmp/kestrel_cli_test.gbnf";
  FILE* f = std::fopen(g.c_str(), "w");
  REQUIRE(f);
  std::fputs("root ::= \" upon a \" (\"hill\" | \"time\")\n", f);
  std::fclose(f);
  r = run("run -m " + model + " -p 'Once' -n 20 --temp 0 --grammar-file " + g);
  REQUIRE(r.code == 0);
  CHECK((r.out == " upon a time" || r.out == " upon a hill"));
  const std::string err = "/tmp/kestrel_cli_test.err";
  r = run("run -m " + model + " -p 'Once' -n 20 --json-schema '{\"type\": \"string\", \"pattern\": \"x\"}'", err);
  CHECK(r.code != 0);
  CHECK(kestrel::test::read_text_file(err).find("'pattern'") != std::string::npos);
}

TEST_CASE("kestrel eval prints the reference schema and matches llama.cpp") {
  const std::string model = testdata_file("models/stories260K-q8_0.gguf");
  const std::string ref_path = testdata_file("reference/stories260K-q8_0.short.json");
  if (model.empty() || ref_path.empty()) return;
  const json ref = json::parse(kestrel::test::read_text_file(ref_path));
  Result r = run("eval -m " + model + " --tokens " + ids_arg(ref["prompt_tokens"].get<std::vector<int>>()) +
                 " --n-predict 8 --top 10");
  REQUIRE(r.code == 0);
  const json got = json::parse(r.out);
  CHECK(got["schema"] == "kestrel-llamacpp-reference/1");
  CHECK(got["prompt_top10"].size() == ref["prompt_tokens"].size());
  CHECK(got["prompt_top10"][0].size() == 10);
  CHECK(got["greedy_tokens"].size() == 8);
  const auto a = got["last_logits"].get<std::vector<float>>(), b = ref["last_logits"].get<std::vector<float>>();
  REQUIRE(a.size() == b.size());
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
  CHECK(diff <= 0.3);
}

TEST_CASE("kestrel info and tokenize") {
  const std::string model = testdata_file("models/stories260K-f32.gguf");
  if (model.empty()) return;
  Result r = run("info --json -m " + model);
  REQUIRE(r.code == 0);
  const json info = json::parse(r.out);
  CHECK(info["architecture"] == "llama");
  CHECK(info["hparams"]["n_layer"] == 5);
  CHECK(info["memory"]["kv_bytes_per_token"] == 5 * 2 * 32 * 2);
  CHECK(info["memory"]["kv_bytes_per_token_f8_e4m3"] == 5 * 2 * 32);
  const json fp8 = json::parse(run("info --json -m " + model + " -c 100 --kv-type f8_e4m3").out);
  CHECK(fp8["memory"]["kv_type"] == "f8_e4m3");
  CHECK(fp8["memory"]["kv_bytes_n_ctx"] == 100 * 5 * 2 * 32);
  // The block types: 34 (q8_0) and 18 (q4_0) bytes per 32 values, K and V apart (-ctk/-ctv).
  CHECK(info["memory"]["kv_bytes_per_token_q8_0"] == 5 * 2 * 34);
  CHECK(info["memory"]["kv_bytes_per_token_q4_0"] == 5 * 2 * 18);
  const json mixed = json::parse(run("info --json -m " + model + " -c 100 -ctk q8_0 --cache-type-v=q4_0").out);
  CHECK(mixed["memory"]["kv_type"] == "K q8_0, V q4_0");
  CHECK(mixed["memory"]["kv_bytes_n_ctx"] == 100 * 5 * (34 + 18));
  const json q8 = json::parse(run("info --json -m " + model + " -c 100 -ctk q8_0").out);  // V as K
  CHECK(q8["memory"]["kv_bytes_n_ctx"] == 100 * 5 * 2 * 34);
  const CliResult bad = run_cli("info -m " + model + " -ctk q5_0");
  CHECK(bad.code == 2);
  CHECK(bad.err.find("--cache-type-k: expected f16, q8_0, q4_0, f8_e4m3 or f32, got 'q5_0'") != std::string::npos);
  r = run("tokenize -m " + model + " -p 'Once upon a time'");
  REQUIRE(r.code == 0);
  CHECK(json::parse(r.out).get<std::vector<int>>() == std::vector<int>{1, 403, 407, 261, 378});
  r = run("tokenize -m " + model + " -p 'Once upon a time' --show-pieces");
  REQUIRE(r.code == 0);
  const json pieces = json::parse(r.out);
  REQUIRE(pieces.size() == 5);
  CHECK(pieces[0]["id"] == 1);
  CHECK(pieces[0]["piece"] == "<s>");
  std::string joined;
  for (size_t i = 1; i < pieces.size(); ++i) joined += pieces[i]["piece"].get<std::string>();
  CHECK(joined == " Once upon a time");
  r = run("tokenize -m " + model + " --no-add-special < /dev/null");
  CHECK(r.code == 0);
  CHECK(json::parse(r.out).get<std::vector<int>>().empty());
}

TEST_CASE("bad arguments, missing files and unsupported models give one clear line and a non-zero exit") {
  const std::string err = "/tmp/kestrel_cli_err.txt";
  CHECK(run("", err).code == 2);
  CHECK(run("frobnicate", err).code == 2);
  CHECK(run("eval --tokens 1", err).code == 2);  // no -m (run, chat and serve have the demo model)
  CHECK(kestrel::test::read_text_file(err).find("--model") != std::string::npos);
  CHECK(run("run -m /nonexistent.gguf -p hi", err).code == 1);
  CHECK(kestrel::test::read_text_file(err).find("/nonexistent.gguf") != std::string::npos);
  CHECK(run("run -m x.gguf -n notanumber", err).code == 2);
  const std::string vocab = testdata_file("tokenizer/ggml-vocab-bert-bge.gguf");
  if (!vocab.empty()) {
    CHECK(run("run -m " + vocab + " -p hi", err).code == 1);  // bert: architecture not supported
    CHECK(kestrel::test::read_text_file(err).find("ERR_") != std::string::npos);
  }
  CHECK(run("eval -m x.gguf --tokens 1,a,3", err).code == 2);
}

TEST_CASE("kestrel bench: llama-bench JSON keys, roofline fields and the per-op profile") {
  const std::string model = testdata_file("models/stories260K-f32.gguf");
  if (model.empty()) return;
  Result r = run("bench -m " + model + " -p 16,32 -n 8 -r 2 -t 2 --json --per-op");
  REQUIRE(r.code == 0);
  const json tests = json::parse(r.out);
  REQUIRE(tests.size() == 3);  // pp16, pp32, tg8
  CHECK(tests[0]["n_prompt"] == 16);
  CHECK(tests[1]["n_prompt"] == 32);
  CHECK(tests[2]["n_gen"] == 8);
  for (const json& t : tests) {
    for (const char* key : {"n_prompt", "n_gen", "n_threads", "avg_ts", "stddev_ts", "model_size", "model_type",
                            "bytes_per_token", "effective_gbs", "dram_read_gbs", "flops_per_token", "gflops"})
      CHECK_MESSAGE(t.contains(key), key);
    CHECK(t["n_threads"] == 2);
    CHECK(t["samples_ts"].size() == 2);
    CHECK(t["avg_ts"].get<double>() > 0);
    CHECK(t["model_type"] == "llama f32");
    // Every matmul of the model shows up with its bytes and FLOPs.
    bool matmul = false;
    for (const json& op : t["per_op"])
      if (op["op"] == "matmul f32") {
        matmul = true;
        CHECK(op["calls"].get<double>() > 0);
        CHECK(op["bytes"].get<double>() > 0);
        CHECK(op["flops"].get<double>() > 0);
      }
    CHECK(matmul);
  }
  r = run("bench -m " + model + " -p 8 -n 0 -r 1");
  REQUIRE(r.code == 0);
  CHECK(r.out.find("| pp8 |") != std::string::npos);
  CHECK(run("bench -m " + model + " -p 8,x").code == 2);
  CHECK(run("bench -m " + model + " -p 0 -n 0").code == 2);
  // --n-depth (llama-bench's -d): each test after that many cached tokens, in the table and the
  // JSON; the roofline counts the KV cache they add, less with a q8_0 cache.
  r = run("bench -m " + model + " -p 0 -n 4 -r 1 --n-depth 0,64 --json");
  REQUIRE(r.code == 0);
  const json d = json::parse(r.out);
  REQUIRE(d.size() == 2);
  CHECK(d[0]["n_depth"] == 0);
  CHECK(d[1]["n_depth"] == 64);
  CHECK(d[1]["bytes_per_token"].get<double>() > d[0]["bytes_per_token"].get<double>());
  const json q8 = json::parse(run("bench -m " + model + " -p 0 -n 4 -r 1 --n-depth 64 --json -ctk q8_0 -ctv q8_0").out);
  CHECK(q8[0]["bytes_per_token"].get<double>() < d[1]["bytes_per_token"].get<double>());
  r = run("bench -m " + model + " -p 0 -n 4 -r 1 --n-depth 32");
  CHECK(r.out.find("| tg4 @ d32 |") != std::string::npos);
  CHECK(run("bench -m " + model + " -n 4 --n-depth 8 --per-op").code == 2);
  CHECK(run("bench -m " + model + " -n 4 --n-depth -1").code == 2);
}

TEST_CASE("kestrel bench --parallel: batched decode through the engine") {
  const std::string model = testdata_file("models/stories260K-f32.gguf");
  if (model.empty()) return;
  Result r = run("bench -m " + model + " -p 0 -n 6 -r 2 -t 2 --parallel 1,3 --json");
  REQUIRE(r.code == 0);
  const json tests = json::parse(r.out);
  REQUIRE(tests.size() == 3);  // tg6, then the engine with 1 and with 3 requests
  for (size_t i = 1; i < 3; ++i) {
    const json& t = tests[i];
    CHECK(t["test"] == "parallel");
    CHECK(t["n_parallel"] == (i == 1 ? 1 : 3));
    CHECK(t["n_gen"] == 6);
    CHECK(t["n_threads"] == 2);
    CHECK(t["samples_ts"].size() == 2);
    CHECK(t["avg_ts"].get<double>() > 0);
    CHECK(t["per_request_ts"].get<double>() == doctest::Approx(t["avg_ts"].get<double>() / t["n_parallel"].get<int>()));
  }
  r = run("bench -m " + model + " -p 0 -n 4 -r 1 --parallel 2");
  REQUIRE(r.code == 0);
  CHECK(r.out.find("| tg4 x2 |") != std::string::npos);
  CHECK(run("bench -m " + model + " -p 0 -n 4 --parallel 0").code == 2);
  CHECK(run("bench -m " + model + " -p 0 -n 4 --parallel 65").code == 2);
  CHECK(run("bench -m " + model + " -p 0 -n 1 --parallel 2").code == 2);  // decode is timed after the first token
  CHECK(run("bench -m " + model + " -p 0 -n 4 --n-depth 8 --parallel 2").code == 2);  // from an empty cache only
}

TEST_CASE("kestrel run, serve and bench: speculative decoding options") {
  const std::string model = testdata_file("models/stories260K-f32.gguf");
  const std::string draft = testdata_file("models/stories260K-q4_0.gguf");
  if (model.empty() || draft.empty()) return;
  const std::string err = "/tmp/kestrel_cli_spec_err.txt";
  const std::string base = "run -m " + model + " -p 'Once upon a time' -n 96 --temp 0";
  const Result plain = run(base);
  REQUIRE(plain.code == 0);
  // Greedy: the same text with a draft model and with n-gram lookup, and a summary on stderr.
  Result r = run(base + " --draft " + draft + " --spec-k 5", err);
  REQUIRE(r.code == 0);
  CHECK(r.out == plain.out);
  CHECK(kestrel::test::read_text_file(err).find("speculative (draft): drafted") != std::string::npos);
  r = run(base + " --spec ngram", err);
  REQUIRE(r.code == 0);
  CHECK(r.out == plain.out);
  CHECK(kestrel::test::read_text_file(err).find("speculative (ngram)") != std::string::npos);
  // Usage errors before anything loads.
  CHECK(run(base + " --spec bogus", err).code == 2);
  CHECK(run(base + " --spec draft", err).code == 2);  // no --draft
  CHECK(kestrel::test::read_text_file(err).find("--draft") != std::string::npos);
  CHECK(run(base + " --spec ngram --spec-k 0", err).code == 2);
  CHECK(run("serve -m " + model + " --spec nope", err).code == 2);
  // The FP8 KV cache: a run works; a type that is not one is a usage error naming the choices.
  r = run("run -m " + model + " -p 'Once upon a time' -n 16 --temp 0 --kv-type f8_e4m3", err);
  CHECK(r.code == 0);
  CHECK_FALSE(r.out.empty());
  CHECK(run(base + " --kv-type q5_0", err).code == 2);
  CHECK(kestrel::test::read_text_file(err).find("f8_e4m3") != std::string::npos);
  CHECK(run("serve -m " + model + " --kv-type bf16", err).code == 2);
  // bench: speculative generation against plain, and the verification cost, in the JSON.
  r = run("bench -m " + model + " -p 0 -n 16 -r 1 --json --draft " + draft);
  REQUIRE(r.code == 0);
  const json tests = json::parse(r.out);
  bool gen = false, verify = false;
  for (const json& t : tests) {
    if (t.value("test", "") == "spec_generate") {
      gen = true;
      CHECK(t["mode"] == "draft");
      CHECK(t["drafted"].get<int>() > 0);
      CHECK(t["acceptance_rate"].get<double>() >= 0);
      CHECK(t["speedup"].get<double>() > 0);
    }
    if (t.value("test", "") == "spec_verify") {
      verify = true;
      CHECK(t["k"] == 4);
      CHECK(t["ratio"].get<double>() > 0);
    }
  }
  CHECK(gen);
  CHECK(verify);
}

TEST_CASE("kestrel synth writes a loadable model of the requested shape") {
  const std::string out = "/tmp/kestrel_cli_synth.gguf";
  Result r = run("synth qwen3moe --set block_count=3 --set expert_used_count=3 --vocab 100 --type q8_0 -o " + out);
  REQUIRE(r.code == 0);
  r = run("info --json -m " + out);
  REQUIRE(r.code == 0);
  const json info = json::parse(r.out);
  CHECK(info["architecture"] == "qwen3moe");
  CHECK(info["hparams"]["n_layer"] == 3);
  CHECK(info["hparams"]["moe"]["n_expert_used"] == 3);
  CHECK(info["vocab"]["n_tokens"] == 100);
  CHECK(info["tensor_types"].contains("q8_0"));
  r = run("run -m " + out + " -p 't5 t6 t7' -n 8 --temp 0");
  CHECK(r.code == 0);
  CHECK(!r.out.empty());
  // --layers keeps the first blocks of a real shape (here with a small vocabulary).
  r = run("synth qwen3-0.6b --layers 1 --vocab 64 -o " + out);
  REQUIRE(r.code == 0);
  const json cut = json::parse(run("info --json -m " + out).out);
  CHECK(cut["hparams"]["n_layer"] == 1);
  CHECK(cut["hparams"]["n_embd"] == 1024);
  CHECK(run("synth no-such-model").code == 2);
  CHECK(run("synth qwen3 --type no-such-type").code == 2);
  std::remove(out.c_str());
}
