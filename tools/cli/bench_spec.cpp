// The speculative side of `kestrel bench` (--draft MODEL | --spec ngram):
// - generation with and without speculation: kestrel_generate on one prompt, greedy, the same
//   number of tokens, repeated; tokens/s, acceptance rate, tokens per target pass, speedup;
// - the cost of verifying: one target pass over 1 + k tokens against one over a single token, at
//   the same cache depth (close to 1x when decode is bound by reading the weights).
#include "bench_spec.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

namespace kestrel::cli {
namespace {

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : (v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct GenRun {
  double ts = 0;  // tokens/s
  kestrel_spec_stats stats{};
};

GenRun generate_once(kestrel_context* ctx, const SpecBench& b, const kestrel_spec_options* spec,
                     kestrel_context* draft) {
  kestrel_sampler_options so;
  kestrel_sampler_options_init(&so);
  so.temperature = 0;
  GenRun r;
  r.stats.struct_size = sizeof r.stats;
  kestrel_generate_options go;
  kestrel_generate_options_init(&go);
  go.max_tokens = b.n_gen;
  go.stop_at_eog = false;
  go.sampling = &so;
  go.speculative = spec;
  go.draft = draft;
  go.spec_stats = &r.stats;
  int32_t n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  check(kestrel_generate(ctx, b.prompt.c_str(), &go, &n));
  r.ts = n / seconds_since(t0);
  return r;
}

// Seconds for one target pass over `n` tokens appended after `depth` cached ones (then removed).
double pass_seconds(kestrel_context* ctx, const std::vector<kestrel_token>& tokens, int32_t depth, int32_t n) {
  std::unique_ptr<bool[]> want(new bool[static_cast<size_t>(n)]);
  for (int32_t i = 0; i < n; ++i) want[i] = true;  // verification wants every row's logits
  kestrel_batch b{};
  b.n_tokens = n;
  b.tokens = tokens.data() + depth;
  b.logits = want.get();
  const auto t0 = std::chrono::steady_clock::now();
  check(kestrel_decode(ctx, &b));
  const double s = seconds_since(t0);
  check(kestrel_kv_seq_remove(ctx, 0, depth, -1));
  return s;
}

}  // namespace

nlohmann::json bench_speculative(const kestrel_model* model, const kestrel_model* draft_model, const SpecBench& b,
                                 std::vector<std::pair<std::string, std::string>>* rows) {
  kestrel_context_options co;
  kestrel_context_options_init(&co);
  co.n_ctx = static_cast<uint32_t>(std::max(512, b.depth + b.n_gen + 4 * b.spec.k_max + 64));
  co.n_threads = b.n_threads;
  ContextPtr ctx = new_context(model, &co);
  ContextPtr dctx = draft_model ? new_context(draft_model, &co) : nullptr;
  nlohmann::json out = nlohmann::json::array();

  // Generation, plain and speculative, interleaved per repetition (this machine drifts).
  std::vector<double> plain, spec;
  kestrel_spec_stats total{};
  generate_once(ctx.get(), b, nullptr, nullptr);  // warm-up
  for (int r = 0; r < b.reps; ++r) {
    plain.push_back(generate_once(ctx.get(), b, nullptr, nullptr).ts);
    const GenRun s = generate_once(ctx.get(), b, &b.spec, dctx.get());
    spec.push_back(s.ts);
    total.n_steps += s.stats.n_steps, total.n_drafted += s.stats.n_drafted, total.n_accepted += s.stats.n_accepted;
  }
  const char* mode = b.spec.mode == KESTREL_SPEC_DRAFT ? "draft" : "ngram";
  const double acc = total.n_drafted > 0 ? static_cast<double>(total.n_accepted) / total.n_drafted : 0;
  const double mean_accepted = total.n_steps > 0 ? static_cast<double>(total.n_accepted) / total.n_steps : 0.0;
  const double per_pass = 1.0 + mean_accepted;  // the accepted drafts and the token the pass adds
  char cells[320];
  std::snprintf(cells, sizeof cells, "%.2f | %.2f | plain, greedy", mean(plain), median(plain));
  rows->emplace_back("tg" + std::to_string(b.n_gen), cells);
  std::snprintf(cells, sizeof cells,
                "%.2f | %.2f | %s, k ≤ %d: %.1f%% of drafts accepted, %.2f per pass (%.2f tokens per pass), %.2fx plain",
                mean(spec), median(spec), mode, b.spec.k_max, 100 * acc, mean_accepted, per_pass,
                median(spec) / median(plain));
  rows->emplace_back("tg" + std::to_string(b.n_gen) + " spec", cells);
  out.push_back({{"test", "spec_generate"}, {"mode", mode}, {"n_gen", b.n_gen}, {"k_max", b.spec.k_max},
                 {"plain_ts", plain}, {"spec_ts", spec}, {"median_plain_ts", median(plain)},
                 {"median_spec_ts", median(spec)}, {"speedup", median(spec) / median(plain)},
                 {"acceptance_rate", acc}, {"mean_accepted", mean_accepted}, {"tokens_per_pass", per_pass}, {"drafted", total.n_drafted},
                 {"accepted", total.n_accepted}, {"passes", total.n_steps}});

  // Verification cost: 1 + k tokens in one pass against 1, after `depth` cached tokens.
  std::vector<kestrel_token> tokens(static_cast<size_t>(b.depth + b.k_verify + 1));
  const int32_t n_vocab = kestrel_model_n_vocab(model);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<kestrel_token>((i * 7919 + 13) % n_vocab);
  kestrel_kv_clear(ctx.get());
  kestrel_batch pre{};
  pre.n_tokens = b.depth;
  pre.tokens = tokens.data();
  check(kestrel_decode(ctx.get(), &pre));
  std::vector<double> one, many;
  pass_seconds(ctx.get(), tokens, b.depth, 1 + b.k_verify);  // warm-up
  for (int r = 0; r < 3 * b.reps; ++r) {
    one.push_back(pass_seconds(ctx.get(), tokens, b.depth, 1));
    many.push_back(pass_seconds(ctx.get(), tokens, b.depth, 1 + b.k_verify));
  }
  const double ratio = median(many) / median(one);
  std::snprintf(cells, sizeof cells, " | | one pass over %d tokens %.2f ms, over 1 token %.2f ms: %.2fx (after %d cached)",
                1 + b.k_verify, 1e3 * median(many), 1e3 * median(one), ratio, b.depth);
  rows->emplace_back("verify k=" + std::to_string(b.k_verify), cells);
  out.push_back({{"test", "spec_verify"}, {"k", b.k_verify}, {"depth", b.depth}, {"one_token_s", median(one)},
                 {"k_plus_one_s", median(many)}, {"ratio", ratio}});
  return out;
}

}  // namespace kestrel::cli
