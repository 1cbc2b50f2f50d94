// The engine side of `kestrel bench` (--parallel): N requests submitted at once to an engine of N
// sequence slots, each a distinct random prompt of n_prompt tokens generating n_gen tokens
// (greedy, end-of-generation ignored). The token budget per step holds every prompt, so the
// first step prefills them all and every later step decodes one token of each request: the rate
// from the moment the last request has its first token to the last token is batched decode's.
#include "bench_batch.h"

#include "bench_sample.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>

namespace kestrel::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Token times, written by the engine's worker (callbacks run one at a time there).
struct Timeline {
  std::mutex mu;
  std::vector<Clock::time_point> first;  // per request: its first token
  std::vector<Clock::time_point> all;    // every generated token
};

struct RequestUser {
  Timeline* t = nullptr;
  size_t index = 0;
  bool seen = false;
};

bool on_token(kestrel_token token, const char*, size_t, void* user) {
  if (token < 0) return true;  // the held-back text at the end, not a token
  auto* u = static_cast<RequestUser*>(user);
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(u->t->mu);
  if (!u->seen) u->t->first[u->index] = now, u->seen = true;
  u->t->all.push_back(now);
  return true;
}

// Tokens/s of decode with every request running (0 when fewer than two steps did).
double run(kestrel_engine* engine, const BatchBench& b, std::mt19937& rng, int32_t n_vocab) {
  Timeline t;
  const size_t n = static_cast<size_t>(b.n_parallel);
  t.first.resize(n);
  std::vector<RequestUser> users(n);
  std::vector<std::vector<kestrel_token>> prompts(n);
  kestrel_sampler_options so;
  kestrel_sampler_options_init(&so);
  so.temperature = 0;
  std::vector<uint64_t> ids(n);
  for (size_t i = 0; i < n; ++i) {
    prompts[i].resize(static_cast<size_t>(b.n_prompt));
    for (auto& x : prompts[i]) x = static_cast<kestrel_token>(rng() % static_cast<uint32_t>(n_vocab));
    users[i].t = &t, users[i].index = i;
    kestrel_request r;
    kestrel_request_init(&r);
    r.prompt = prompts[i].data();
    r.n_prompt = b.n_prompt;
    r.max_tokens = b.n_gen;
    r.stop_at_eog = false;
    r.sampling = &so;
    r.on_token = on_token;
    r.user = &users[i];
    check(kestrel_submit(engine, &r, &ids[i]));
  }
  for (uint64_t id : ids) {
    kestrel_request_result res;
    res.struct_size = sizeof res;
    check(kestrel_wait(engine, id, &res));
    if (res.finish == KESTREL_FINISH_ERROR) throw UsageError("bench: --parallel: a request failed");
  }
  const Clock::time_point start = *std::max_element(t.first.begin(), t.first.end());
  const Clock::time_point end = *std::max_element(t.all.begin(), t.all.end());
  const auto after = std::count_if(t.all.begin(), t.all.end(), [&](Clock::time_point p) { return p > start; });
  const double s = std::chrono::duration<double>(end - start).count();
  return s > 0 ? static_cast<double>(after) / s : 0;
}

}  // namespace

nlohmann::json bench_batch(const kestrel_model* model, const BatchBench& b,
                           std::vector<std::pair<std::string, std::string>>* rows) {
  if (b.n_gen < 2) throw UsageError("bench: --parallel needs -n >= 2 (decode is timed after each first token)");
  kestrel_engine_options eo;
  kestrel_engine_options_init(&eo);
  eo.n_parallel = static_cast<uint32_t>(b.n_parallel);
  eo.n_batch = static_cast<uint32_t>(std::max(256, b.n_parallel * b.n_prompt));
  eo.n_ctx = static_cast<uint32_t>(b.n_parallel * (b.n_prompt + b.n_gen + 32));
  eo.n_threads = b.n_threads;
  b.kv_types.apply(eo);
  kestrel_engine* raw = nullptr;
  check(kestrel_engine_new(model, &eo, &raw));
  const std::unique_ptr<kestrel_engine, void (*)(kestrel_engine*)> engine(raw, kestrel_engine_free);
  std::mt19937 rng(4321);
  const int32_t n_vocab = kestrel_model_n_vocab(model);
  run(engine.get(), b, rng, n_vocab);  // warm-up
  Sample smp;
  for (int r = 0; r < b.reps; ++r) smp.ts.push_back(run(engine.get(), b, rng, n_vocab));
  const double mean = smp.mean(), sd = smp.stddev(), median = smp.median();
  char cells[256];
  std::snprintf(cells, sizeof cells, "%.2f ± %.2f | %.2f | %.2f tokens/s per request (engine, %d concurrent)", mean, sd,
                median, mean / b.n_parallel, b.n_parallel);
  rows->emplace_back("tg" + std::to_string(b.n_gen) + " x" + std::to_string(b.n_parallel), cells);
  return {{"test", "parallel"},     {"n_parallel", b.n_parallel}, {"n_prompt_per_request", b.n_prompt},
          {"n_prompt", 0},          {"n_gen", b.n_gen},           {"avg_ts", mean},
          {"stddev_ts", sd},        {"median_ts", median},        {"samples_ts", smp.ts},
          {"per_request_ts", mean / b.n_parallel}};
}

}  // namespace kestrel::cli
