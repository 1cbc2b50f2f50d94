// The grammar side of `kestrel bench` (--grammar): greedy generation of the same number of tokens
// with and without the grammar, rounds interleaved, on the model's own vocabulary (a synthetic
// model made with `kestrel synth --vocab-from` has a real one). "json" is an array of at least
// 1,000 JSON objects, so that no run ends early and every step computes or looks up a mask over
// the whole vocabulary; its masks are cached per grammar state, as in serving.
#include "bench_grammar.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace kestrel::cli {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : (v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2);
}

// Tokens/s of one greedy generation (the grammar or the schema may be null).
double run(kestrel_context* ctx, const GrammarBench& b, const char* grammar, const char* schema) {
  kestrel_sampler_options so;
  kestrel_sampler_options_init(&so);
  so.temperature = 0;
  kestrel_generate_options go;
  kestrel_generate_options_init(&go);
  go.max_tokens = b.n_gen;
  go.stop_at_eog = false;
  go.sampling = &so;
  go.grammar = grammar;
  go.json_schema = schema;
  int32_t n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  check(kestrel_generate(ctx, b.prompt.c_str(), &go, &n));
  return n / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

nlohmann::json bench_grammar(const kestrel_model* model, const GrammarBench& b,
                             std::vector<std::pair<std::string, std::string>>* rows) {
  std::string grammar, schema;
  if (b.spec == "json") {
    schema = R"({"type": "array", "minItems": 1000, "items": {"type": "object"}})";
  } else {
    std::ifstream f(b.spec, std::ios::binary);
    if (!f) throw UsageError("bench: --grammar: cannot read '" + b.spec + "' (or give 'json')");
    std::stringstream ss;
    ss << f.rdbuf();
    const bool is_schema = b.spec.size() > 5 && b.spec.compare(b.spec.size() - 5, 5, ".json") == 0;
    (is_schema ? schema : grammar) = ss.str();
  }
  kestrel_context_options co;
  kestrel_context_options_init(&co);
  co.n_ctx = static_cast<uint32_t>(b.n_gen + 64);
  co.n_threads = b.n_threads;
  kestrel_context* raw = nullptr;
  check(kestrel_context_new(model, &co, &raw));
  std::unique_ptr<kestrel_context, decltype(&kestrel_context_free)> ctx(raw, kestrel_context_free);
  const char* g = grammar.empty() ? nullptr : grammar.c_str();
  const char* s = schema.empty() ? nullptr : schema.c_str();
  run(ctx.get(), b, g, s);  // warm-up: the vocabulary's trie is built once per model
  std::vector<double> plain, constrained;
  for (int r = 0; r < b.reps; ++r) {
    plain.push_back(run(ctx.get(), b, nullptr, nullptr));
    constrained.push_back(run(ctx.get(), b, g, s));
  }
  const double tp = median(plain), tc = median(constrained);
  double mean = 0;
  for (double x : constrained) mean += x / static_cast<double>(constrained.size());
  const double per_token_ms = 1e3 / tc - 1e3 / tp;
  char cells[256];
  std::snprintf(cells, sizeof cells, "%.2f | %.2f | plain %.2f t/s: the grammar adds %+.1f%% per token (%.3f ms)", mean, tc, tp,
                100.0 * (tp / tc - 1.0), per_token_ms);
  const std::string test = "tg" + std::to_string(b.n_gen) + " grammar " + (b.spec == "json" ? "json" : "file");
  rows->emplace_back(test, cells);
  return {{"test", test}, {"grammar", b.spec}, {"n_gen", b.n_gen}, {"ts_grammar", tc}, {"ts_plain", tp},
          {"overhead", tp / tc - 1.0}, {"grammar_ms_per_token", per_token_ms}};
}

}  // namespace kestrel::cli
