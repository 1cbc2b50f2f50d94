// kestrel bench: prompt processing (pp) and generation (tg) speed with their rooflines.
//   kestrel bench -m MODEL [-p 512] [-n 128] [-t THREADS] [-r REPS] [--json] [--per-op]
// pp: one batch of p tokens into an empty cache; tg: n tokens one at a time into an empty cache.
// Each test runs once to warm up, then r times; the table shows the mean and standard deviation
// of tokens/s (llama-bench's avg_ts/stddev_ts) and the median. --json prints llama-bench's keys
// plus the roofline fields; --per-op adds a table of where the time goes. On a host backend a tg
// test's DRAM share compares each repetition with a host read-bandwidth probe taken right before
// it (the median of those); on a device backend (-d cuda) every test is compared with the device's
// own copy bandwidth, measured once (Device::copy_bandwidth). JSON says which: "bandwidth_source"
// ("host read" or "device copy") and "bandwidth_gbs".
// --draft MODEL | --spec ngram [--spec-k N] [--spec-prompt TEXT] adds speculative generation
// against plain generation and the cost of a verification pass (bench_spec.cpp).
// --grammar json|FILE adds generation under a grammar against plain generation (bench_grammar.cpp).
// --parallel N[,N..] adds generation through the engine with N concurrent requests (bench_batch.cpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_batch.h"
#include "bench_grammar.h"
#include "bench_roofline.h"
#include "bench_sample.h"
#include "bench_spec.h"
#include "common.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/shape.h"
#include "perf_calibrate.h"
#include "perf_model.h"

namespace kestrel::cli {
namespace {

using nlohmann::json;

// Seconds to decode `tokens` in one batch (pp) or one at a time (tg), into an empty cache or,
// with depth > 0, after the first `depth` positions of sequence 0 (filled by fill_depth; what a
// previous run added is removed first).
double run_once(kestrel_context* ctx, const std::vector<kestrel_token>& tokens, bool one_at_a_time, int depth = 0) {
  if (depth == 0) kestrel_kv_clear(ctx);
  else check(kestrel_kv_seq_remove(ctx, 0, depth, -1));
  const auto t0 = std::chrono::steady_clock::now();
  kestrel_batch b{};
  if (one_at_a_time) {
    for (kestrel_token t : tokens) {
      b.n_tokens = 1;
      b.tokens = &t;
      check(kestrel_decode(ctx, &b));
    }
  } else {
    b.n_tokens = static_cast<int32_t>(tokens.size());
    b.tokens = tokens.data();
    check(kestrel_decode(ctx, &b));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Puts `tokens` into an empty cache, n_batch at a time (untimed): llama-bench's depth (-d).
void fill_depth(kestrel_context* ctx, const std::vector<kestrel_token>& tokens, int n_batch) {
  kestrel_kv_clear(ctx);
  for (size_t i = 0; i < tokens.size(); i += static_cast<size_t>(n_batch)) {
    kestrel_batch b{};
    b.n_tokens = static_cast<int32_t>(std::min(tokens.size() - i, static_cast<size_t>(n_batch)));
    b.tokens = tokens.data() + i;
    check(kestrel_decode(ctx, &b));
  }
}

std::string profile_json(kestrel_context* ctx) {
  size_t len = 0;
  check(kestrel_context_profile(ctx, false, nullptr, 0, &len));
  std::string s(len + 1, '\0');
  check(kestrel_context_profile(ctx, true, s.data(), s.size(), &len));
  s.resize(len);
  return s;
}

void print_per_op(const std::string& test, const json& ops, int n_tokens, double dram_gbs, const char* bw_label) {
  double total = 0;
  for (const auto& o : ops) total += o["seconds"].get<double>();
  std::printf("\nper-op, %s (%d tokens, %.2f ms/token):\n\n", test.c_str(), n_tokens, 1e3 * total / n_tokens);
  std::printf("| op | calls | ms | share | GB/s | %% %s | GFLOP/s |\n|---|---:|---:|---:|---:|---:|---:|\n", bw_label);
  for (const auto& o : ops) {
    const double s = o["seconds"].get<double>(), bytes = o["bytes"].get<double>(), fl = o["flops"].get<double>();
    const double gbs = s > 0 ? bytes / s / 1e9 : 0;
    std::printf("| %s | %lld | %.2f | %.1f%% | %.1f | %.0f%% | %.1f |\n", o["op"].get<std::string>().c_str(),
                o["calls"].get<long long>(), 1e3 * s, total > 0 ? 100 * s / total : 0, gbs,
                dram_gbs > 0 ? 100 * gbs / dram_gbs : 0, s > 0 ? fl / s / 1e9 : 0);
  }
}

// What a model's step reads: its products' weight types, its routed experts' types.
RefreshScope scope_of(const std::string& path, bool compute) {
  auto f = gguf::File::open(path);
  if (!f.ok()) throw UsageError("bench: " + f.status().message());
  auto shape = model_shape(*f.value());
  if (!shape.ok()) throw UsageError("bench: " + shape.status().message());
  RefreshScope scope;
  scope.all = false;
  scope.compute = compute;
  for (const MatmulCost& m : model_costs(shape.value(), "cpu", DType::F16, DType::F16).matmuls)
    if (!m.gather) (m.experts ? scope.experts : scope.dense).insert(m.type);
  return scope;
}

// Measures again part of the saved profile (bench --calibrate-memory [-m MODEL], --calibrate -m
// MODEL) and saves it.
int refresh_local_profile(const RefreshScope& scope) {
  HwProfile p = load_hw_profile("local");
  refresh_profile(p, true, scope);
  save_local_profile(p);
  std::printf("%s\n", p.to_json().dump(2).c_str());
  std::fprintf(stderr, "kestrel bench: saved %s\n", local_profile_path().c_str());
  return 0;
}

}  // namespace

Opts bench_options() {
  return model_options() +
         Opts{{"-p,--n-prompt", "N[,N..]", "prompt lengths to time, as llama-bench (default 512; 0: none)"},
              {"-n,--n-gen", "N[,N..]", "generation lengths to time (default 128; 0: none)"},
              {"-r,--repetitions", "N", "runs of each test; the table shows mean and spread (default 5)"},
              {"--n-depth", "N[,N..]", "tokens already in the KV cache when each test starts, as llama-bench's -d "
                                       "(default 0): decode speed at long context"},
              {"--spec-prompt", "TEXT", "the prompt the speculative generation test continues"},
              {"--grammar", "NAME|FILE", "also time generation under a grammar: json, or a GBNF file"},
              {"--parallel", "N[,N..]", "also time generation through the engine with N concurrent requests (32-token "
                                         "prompts, -n tokens each): batched decode's total tokens/s"},
              {"--json", "", "print the results as JSON"},
              {"--per-op", "", "also time each op of one decode step against the roofline"},
              {"--calibrate", "", "measure this machine for kestrel perf (bandwidth, compute per weight type, costs "
                                  "per op) and save it as the profile 'local'; no model needed. With -m: measure "
                                  "again in the saved profile only what that model's prediction reads (its types' "
                                  "streams and rates, attention, the elementwise ops; about a minute)"},
              {"--calibrate-memory", "", "measure again only what memory's speed sets in the saved profile (read "
                                         "bandwidth, the weight, expert and cache streams; a third of --calibrate's "
                                         "time): a machine whose bandwidth drifts; with -m, only the streams that "
                                         "model reads (a tenth)"}} +
         spec_options() + cache_options() + Opts{trace_option()};
}

int cmd_bench(const Args& a) {
  if (a.has("--calibrate-memory")) {
    if (a.has("--calibrate")) throw UsageError("bench: --calibrate measures everything; --calibrate-memory refreshes");
    if (a.has("--threads"))
      throw UsageError("bench: --calibrate-memory measures the saved profile's thread counts: drop --threads");
    return refresh_local_profile(a.has("--model") ? scope_of(a.str("--model"), false) : RefreshScope{});
  }
  if (a.has("--calibrate") && a.has("--model")) {
    if (a.has("--threads"))
      throw UsageError("bench: --calibrate -m measures the saved profile's thread counts: drop --threads");
    return refresh_local_profile(scope_of(a.str("--model"), true));
  }
  if (a.has("--calibrate")) {
    const int threads = static_cast<int>(a.integer("--threads", default_thread_count()));
    if (threads < 1) throw UsageError("bench: --threads must be >= 1");
    const HwProfile p = calibrate_cpu(threads, true);
    save_local_profile(p);
    std::printf("%s\n", p.to_json().dump(2).c_str());
    std::fprintf(stderr, "kestrel bench: saved %s (kestrel perf --hw local reads it)\n", local_profile_path().c_str());
    return 0;
  }
  a.required("--model");
  const TraceFile trace(a);
  // Like llama-bench, -p, -n and --n-depth take comma-separated lists (0 skips that kind of test).
  std::vector<std::pair<bool, int>> tests;  // (is generation, tokens)
  int n_max = 0, n_prompt_max = 1;
  for (const bool tg : {false, true})
    for (const int v : token_counts(tg ? "-n" : "-p", a.str(tg ? "--n-gen" : "--n-prompt", tg ? "128" : "512"))) {
      if (v > 0) tests.emplace_back(tg, v);
      n_max = std::max(n_max, v);
      if (!tg) n_prompt_max = std::max(n_prompt_max, v);
    }
  const std::vector<int> depths = token_counts("--n-depth", a.str("--n-depth", "0"));
  const int max_depth = *std::max_element(depths.begin(), depths.end());
  const int reps = static_cast<int>(a.integer("--repetitions", 5));
  if (tests.empty() || reps < 1) throw UsageError("bench: give some -p or -n test (> 0), and -r >= 1");
  const bool as_json = a.has("--json");
  std::vector<int> parallel;  // --parallel: concurrent requests through the engine
  if (a.has("--parallel")) {
    parallel = token_counts("--parallel", a.str("--parallel"));
    for (int np : parallel)
      if (np < 1 || np > 64) throw UsageError("bench: --parallel takes 1..64 requests");
    if (depths != std::vector<int>{0}) throw UsageError("bench: --parallel starts from an empty cache: drop --n-depth");
    if (std::none_of(tests.begin(), tests.end(), [](auto t) { return t.first && t.second >= 2; }))
      throw UsageError("bench: --parallel times decode after each request's first token: give -n >= 2");
  }
  const SpecArgs spec = spec_from_args(a);
  const KvTypes kv_types = kv_types_from_args(a);

  ModelPtr model = load_model_from_args(a);
  ModelPtr draft = load_draft_model(a, spec);
  const json desc = json::parse(describe(model.get()));
  ModelCost cost = model_cost(desc);
  kestrel_context_options co;
  kestrel_context_options_init(&co);
  kv_types.apply(co);
  // The roofline's KV bytes per cached position for the cache types measured (info gives F16's):
  // K and V each half of it, scaled by their bytes per value against F16's two.
  cost.kv_bytes_per_token *= (kv_value_bytes(kv_types.k) + kv_value_bytes(kv_types.v)) / 4;
  co.n_ctx = static_cast<uint32_t>(max_depth + n_max + 16);
  co.n_batch = static_cast<uint32_t>(std::max(n_prompt_max, max_depth > 0 ? 512 : 1));
  co.n_threads = static_cast<int32_t>(a.integer("--threads", 0));
  ContextPtr ctx = new_context(model.get(), &co);
  const int n_threads = co.n_threads > 0 ? co.n_threads : static_cast<int>(std::thread::hardware_concurrency());
  const std::string backend = kestrel_context_backend(ctx.get());
  // The roofline's bandwidth: a device backend's own copy bandwidth, else host reads. A device
  // backend's thread pool does not run the graph, so its sync cost is not measured either.
  const DeviceBandwidth devbw = measure_device_bandwidth(backend);
  if (!devbw.ok && backend != "cpu" && backend != "ref")
    std::fprintf(stderr, "kestrel bench: no device bandwidth for %s (%s): comparing with host reads\n",
                 backend.c_str(), devbw.why.c_str());
  const std::unique_ptr<ReadProbe> probe = devbw.ok ? nullptr : std::make_unique<ReadProbe>(n_threads);
  const char* bw_source = devbw.ok ? "device copy" : "host read";
  const char* bw_label = devbw.ok ? "device copy" : "DRAM";
  const double dram = devbw.ok ? devbw.gbs : probe->measure(4);
  const double sync_us = devbw.ok ? 0 : measure_pool_sync_us(n_threads);

  std::mt19937 rng(1234);
  const int32_t n_vocab = kestrel_model_n_vocab(model.get());
  auto random_tokens = [&](int n) {
    std::vector<kestrel_token> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<kestrel_token>(rng() % static_cast<uint32_t>(n_vocab));
    return t;
  };
  const std::string model_type = desc["architecture"].get<std::string>() + " " + cost.type_label;
  json results = json::array();
  std::vector<std::pair<std::string, std::string>> rows;  // test, cells
  for (const int depth : depths) {
    if (depth > 0) fill_depth(ctx.get(), random_tokens(depth), static_cast<int>(co.n_batch));
    for (const auto& [tg, n] : tests) {
      const auto tokens = random_tokens(n);
      run_once(ctx.get(), tg ? std::vector<kestrel_token>(tokens.begin(), tokens.begin() + std::min(n, 8)) : tokens, tg,
               depth);
      Sample smp, near;  // tokens/s; for tg, the DRAM probe taken right before each repetition
      for (int r = 0; r < reps; ++r) {
        if (tg && probe) near.ts.push_back(probe->measure(2));
        smp.ts.push_back(n / run_once(ctx.get(), tokens, tg, depth));
      }
      const double ts = smp.mean();
      // Roofline: tg reads every weight per token (plus the KV cache so far); pp reads the weights once
      // per batch and is FLOP-bound. Both tests start after `depth` cells: on average depth + n/2.
      const double avg_ctx = depth + n / 2.0;
      const double bytes_tok = cost.bytes_per_token / (tg ? 1 : n) + avg_ctx * cost.kv_bytes_per_token;
      const double flops_tok = cost.flops_per_token + avg_ctx * cost.attn_flops_per_ctx;
      const double eff_gbs = bytes_tok * ts / 1e9, gflops = flops_tok * ts / 1e9;
      // Share of the bandwidth: on the host each tg repetition against the probe taken just before
      // it (median); on a device against its copy bandwidth.
      const bool near_probe = tg && probe;
      const double dram_t = near_probe ? near.median() : dram;
      Sample share;
      for (size_t r = 0; near_probe && r < smp.ts.size(); ++r) share.ts.push_back(bytes_tok * smp.ts[r] / 1e9 / near.ts[r]);
      const double dram_share = near_probe ? share.median() : (dram > 0 ? eff_gbs / dram : 0);
      json j = {{"model_type", model_type}, {"model_size", static_cast<uint64_t>(cost.weight_bytes)},
                {"model_n_params", static_cast<uint64_t>(cost.n_params)}, {"n_threads", n_threads},
                {"n_prompt", tg ? 0 : n}, {"n_gen", tg ? n : 0}, {"n_depth", depth}, {"avg_ts", ts}, {"stddev_ts", smp.stddev()},
                {"median_ts", smp.median()}, {"samples_ts", smp.ts}, {"backend", backend},
                {"bytes_per_token", bytes_tok}, {"effective_gbs", eff_gbs}, {"dram_read_gbs", dram_t},
                {"dram_share", dram_share}, {"bandwidth_source", bw_source}, {"bandwidth_gbs", dram_t},
                {"flops_per_token", flops_tok}, {"gflops", gflops}};
      if (devbw.ok) {  // dram_read_gbs and dram_share then hold the device's copy bandwidth and share
        j["device"] = devbw.device;
        j["bandwidth_probe_bytes"] = static_cast<uint64_t>(devbw.bytes);
      } else {
        j["pool_sync_us"] = sync_us;
      }
      results.push_back(j);
      char cells[512];
      if (tg)
        std::snprintf(cells, sizeof cells, "%.2f ± %.2f | %.2f | %.1f MB/token · %.1f GB/s = %.0f%% of %s %.1f GB/s",
                      ts, smp.stddev(), smp.median(), bytes_tok / 1e6, eff_gbs, 100 * dram_share, bw_label, dram_t);
      else
        std::snprintf(cells, sizeof cells, "%.2f ± %.2f | %.2f | %.3g %s/token · %.1f GFLOP/s", ts, smp.stddev(),
                      smp.median(), flops_tok >= 1e8 ? flops_tok / 1e9 : flops_tok / 1e6,
                      flops_tok >= 1e8 ? "GFLOP" : "MFLOP", gflops);
      rows.emplace_back((tg ? "tg" : "pp") + std::to_string(n) + (depth > 0 ? " @ d" + std::to_string(depth) : ""), cells);
    }
  }
  if (spec.opts.mode != KESTREL_SPEC_NONE) {
    SpecBench sb;
    sb.spec = spec.opts;
    sb.prompt = a.str("--spec-prompt", "Once upon a time");
    for (const auto& [tg, n] : tests)
      if (tg) sb.n_gen = n;
    sb.reps = reps;
    sb.n_threads = co.n_threads;
    sb.k_verify = std::min(4, spec.opts.k_max);
    for (auto& j : bench_speculative(model.get(), draft.get(), sb, &rows)) results.push_back(j);
  }
  if (!parallel.empty()) {
    BatchBench bb;
    bb.n_gen = 0;
    for (const auto& [tg, n] : tests)
      if (tg) bb.n_gen = std::max(bb.n_gen, n);  // the longest generation test's length
    bb.reps = reps;
    bb.n_threads = co.n_threads;
    bb.kv_types = kv_types;
    for (const int np : parallel) {
      bb.n_parallel = np;
      results.push_back(bench_batch(model.get(), bb, &rows));
      results.back()["n_threads"] = n_threads;
    }
  }
  if (a.has("--grammar")) {
    GrammarBench gb;
    gb.spec = a.str("--grammar");
    for (const auto& [tg, n] : tests)
      if (tg) gb.n_gen = n;
    gb.reps = reps;
    gb.n_threads = co.n_threads;
    results.push_back(bench_grammar(model.get(), gb, &rows));
  }
  // Where the time goes: one more run of each test, op by op.
  std::vector<std::pair<std::string, json>> per_op;
  if (a.has("--per-op")) {
    if (depths != std::vector<int>{0}) throw UsageError("--per-op times the tests from an empty cache: drop --n-depth");
    check(kestrel_context_set_profiling(ctx.get(), true));
    size_t i = 0;
    for (const auto& [tg, n] : tests) {
      run_once(ctx.get(), random_tokens(n), tg);
      const json ops = json::parse(profile_json(ctx.get()));
      results[i++]["per_op"] = ops;
      per_op.emplace_back((tg ? "tg" : "pp") + std::to_string(n), ops);
    }
    check(kestrel_context_set_profiling(ctx.get(), false));
  }
  if (as_json) {
    std::printf("%s\n", results.dump(2).c_str());
    return 0;
  }
  char params[32];
  std::snprintf(params, sizeof params, "%.2f M", cost.n_params / 1e6);
  std::printf("| model | size | params | backend | threads | test | t/s | median | roofline |\n");
  std::printf("|---|---:|---:|---|---:|---|---:|---:|---|\n");
  for (const auto& [test, cells] : rows)
    std::printf("| %s | %.2f MiB | %s | %s | %d | %s | %s |\n", model_type.c_str(), cost.weight_bytes / 1048576.0,
                params, backend.c_str(), n_threads, test.c_str(), cells.c_str());
  if (devbw.ok)
    std::printf("\nbandwidth: device copy %.1f GB/s on %s (device-to-device copies of %.0f MiB, bytes read + written, best of 5)\n",
                devbw.gbs, devbw.device.c_str(), devbw.bytes / 1048576.0);
  else
    std::printf("\nthread pool: %.2f us per parallel op (%d threads, empty job, median)\n", sync_us, n_threads);
  for (const auto& [test, ops] : per_op)
    print_per_op(test, ops, std::stoi(test.substr(2)), dram, bw_label);
  return 0;
}

}  // namespace kestrel::cli
