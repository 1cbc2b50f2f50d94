#include "perf_calibrate.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "args.h"
#include "backends/backend.h"
#include "bench_roofline.h"
#include "engine/context.h"
#include "gguf/gguf.h"
#include "kestrel_version.h"  // generated: KESTREL_GIT_COMMIT
#include "model/model.h"
#include "model/synth.h"
#include "quantize/quantize.h"
#include "tensor/attention_batch.h"
#include "tensor/graph.h"
#include "tensor/op_params.h"

namespace kestrel::cli {
namespace {

double mem_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (in >> key >> kib)
    if (key == "MemTotal:") return kib * 1024;
  return 0;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "this CPU";
}

void check(const Status& st) {
  if (!st.ok()) throw UsageError("calibrate: " + st.message());
}

// `rows` rows of K weights of `type`, uniform in [-a, a]; only `unique` of them (all when 0) are
// quantized and the rest repeat them (a large matrix without quantizing all of it: the values do
// not change the time).
std::vector<uint8_t> weight_rows(DType type, int64_t K, int64_t rows, int64_t unique, float a, int threads,
                                 std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-a, a);
  const int64_t n_quant = unique > 0 ? std::min(unique, rows) : rows;
  std::vector<float> wf(static_cast<size_t>(K) * n_quant);
  for (float& v : wf) v = u(rng);
  const size_t row = dtype_row_size(type, K);
  std::vector<uint8_t> w(row * static_cast<size_t>(rows));
  check(quant::convert_rows(DType::F32, wf.data(), type, w.data(), n_quant, K, threads));
  for (int64_t r = n_quant; r < rows; r += n_quant)
    std::copy_n(w.begin(), row * static_cast<size_t>(std::min(n_quant, rows - r)), w.begin() + row * r);
  return w;
}

// Seconds per run of g over `reps` runs (after one to warm up): the best, or the median (a
// stream from memory, whose best is a lucky moment of a shared machine's bandwidth).
double time_runs(Executor& ex, Graph& g, int reps, bool median = false) {
  check(ex.run(g, 0, g.nodes().size()));
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    check(ex.run(g, 0, g.nodes().size()));
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return median ? t[t.size() / 2] : t.front();
}

// A CPU device and an executor of `threads` on it.
std::pair<std::unique_ptr<Device>, std::unique_ptr<Executor>> cpu_device(int threads) {
  auto d = create_device("cpu");
  check(d.status());
  auto e = d.value()->create_executor(threads);
  check(e.status());
  return {std::move(d.value()), std::move(e.value())};
}

// A [K, N] weight of `type` from random values, placed as the CPU backend places a model's
// (repacked where it repacks), times an F32 input of M columns; on its own device and executor.
// `unique`: as weight_rows'.
// `chain` > 1 (square weights): that many copies, each product's output the next one's input, so
// that each is an op of its own, as a model's layers are (one long product streams better).
struct MatmulBench {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Device> dev;
  std::unique_ptr<Executor> ex;
  std::unordered_map<std::string, Tensor> tensors;
  std::vector<float> x, y;
  Graph g;
  double flops = 0, bytes = 0;
  MatmulBench(DType type, int64_t K, int64_t N, int64_t M, int threads, int64_t unique = 0, int chain = 1) {
    if (chain > 1 && K != N) throw UsageError("calibrate: a chain of products needs square weights");
    std::mt19937 rng(7);
    // Chained products keep their activations' scale: weights of variance 1 / K.
    const float a = chain > 1 ? std::sqrt(3.0f / static_cast<float>(K)) : 1.0f;
    const std::vector<uint8_t> w = weight_rows(type, K, N, unique, a, threads, rng);
    gguf::Writer writer;
    for (int c = 0; c < chain; ++c) check(writer.add_tensor("w" + std::to_string(c), type, {K, N}, w.data(), w.size()));
    auto f = gguf::File::from_bytes(writer.to_bytes(), "<calibrate>");
    check(f.status());
    file = std::move(f.value());
    std::tie(dev, ex) = cpu_device(threads);
    for (int c = 0; c < chain; ++c) {
      const std::string name = "w" + std::to_string(c);
      const gguf::TensorInfo& ti = file->tensors().at(static_cast<size_t>(c));
      tensors.emplace(name, make_tensor(type, K, N, 1, 1, const_cast<uint8_t*>(file->tensor_data(ti))));
      tensors.at(name).name = name;
    }
    check(dev->place_weights(*file, tensors, {}));
    std::uniform_real_distribution<float> ux(-1, 1);
    x.resize(static_cast<size_t>(K) * M);
    for (float& v : x) v = ux(rng);
    y.resize(static_cast<size_t>(N) * M);
    for (int c = 0; c < chain; ++c) {  // x -> y -> x ... for a chain
      float* in = c % 2 ? y.data() : x.data();
      float* out = c % 2 ? x.data() : y.data();
      g.add(Op::MATMUL, g.external(make_tensor(DType::F32, N, M, 1, 1, out)),
            g.external(tensors.at("w" + std::to_string(c))), g.external(make_tensor(DType::F32, K, M, 1, 1, in)));
    }
    flops = 2.0 * K * N * M * chain;
    bytes = static_cast<double>(w.size()) * chain;
  }
  double time(int reps, bool median = false) { return time_runs(*ex, g, reps, median); }
};

// MATMUL_ID: E experts' [K, N] weights of `type` (placed as a model's, named as its expert
// tensors), T tokens of one input each choosing k distinct experts at random.
struct ExpertBench {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Device> dev;
  std::unique_ptr<Executor> ex;
  std::unordered_map<std::string, Tensor> tensors;
  std::vector<float> x, y;
  std::vector<int32_t> ids;
  Graph g;
  double flops = 0;
  ExpertBench(DType type, int64_t K, int64_t N, int64_t E, int64_t k, int64_t T, int threads) {
    std::mt19937 rng(11);
    const std::vector<uint8_t> w = weight_rows(type, K, N * E, 256, 1.0f, threads, rng);
    const std::string name = "blk.0.ffn_gate_exps.weight";
    gguf::Writer writer;
    check(writer.add_tensor(name, type, {K, N, E}, w.data(), w.size()));
    auto f = gguf::File::from_bytes(writer.to_bytes(), "<calibrate experts>");
    check(f.status());
    file = std::move(f.value());
    std::tie(dev, ex) = cpu_device(threads);
    tensors.emplace(name, make_tensor(type, K, N, E, 1, const_cast<uint8_t*>(file->tensor_data(file->tensors().at(0)))));
    tensors.at(name).name = name;
    check(dev->place_weights(*file, tensors, {}));
    std::uniform_real_distribution<float> u(-1, 1);
    x.resize(static_cast<size_t>(K * T));
    for (float& v : x) v = u(rng);
    y.resize(static_cast<size_t>(N * k * T));
    std::vector<int32_t> all(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) all[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    for (int64_t t = 0; t < T; ++t) {
      std::shuffle(all.begin(), all.end(), rng);
      ids.insert(ids.end(), all.begin(), all.begin() + k);
    }
    g.add(Op::MATMUL_ID, g.external(make_tensor(DType::F32, N, k, T, 1, y.data())), g.external(tensors.at(name)),
          g.external(make_tensor(DType::F32, K, 1, T, 1, x.data())),
          g.external(make_tensor(DType::I32, k, T, 1, 1, ids.data())));
    flops = 2.0 * K * N * k * T;
  }
  double time(int reps) { return time_runs(*ex, g, reps); }
};

// Attention's rates for heads of `head_dim`: a one-layer model of the Llama-3.2-1B shape's width
// (2048 / head_dim query heads, a quarter as many KV heads, a tiny FFN and vocabulary).
// Prefill: the chunk of 512 at positions 1536..2047 does 512 x 1536 more (query, position) pairs
// of q.k and p.v than the one at 0..511, and everything else the same, so their time difference
// is that attention's. Decode: a token at position 2048 against one at position 1, likewise.
struct AttentionRates {
  double prefill = 0, decode = 0;  // GFLOP/s
};
AttentionRates attention_rates(int head_dim, int threads) {
  using gguf::Value;
  const ArchDef* arch = find_arch("llama");
  if (!arch) throw UsageError("calibrate: no llama architecture");
  const uint32_t n_head = 2048 / head_dim;
  const TinyConfig cfg{"calibrate",
                       {{"context_length", Value::make_u32(4096)}, {"embedding_length", Value::make_u32(2048)},
                        {"block_count", Value::make_u32(1)}, {"feed_forward_length", Value::make_u32(64)},
                        {"attention.head_count", Value::make_u32(n_head)},
                        {"attention.head_count_kv", Value::make_u32(std::max(1u, n_head / 4))},
                        {"rope.freq_base", Value::make_f32(500000.0f)},
                        {"attention.layer_norm_rms_epsilon", Value::make_f32(1e-5f)}}};
  SynthOptions so;
  so.weight_type = DType::Q8_0;
  auto w = synth_model(*arch, cfg, so);
  check(w.status());
  auto f = gguf::File::from_bytes(w.value().to_bytes(), "<calibrate attention>");
  check(f.status());
  ModelLoadOptions lo;
  lo.backend = "cpu";
  lo.n_threads = threads;
  auto m = Model::from_file(std::move(f.value()), lo);
  check(m.status());
  ContextOptions co;
  co.n_ctx = 2048 + 64;
  co.n_batch = 512;
  co.n_threads = threads;
  const std::vector<int32_t> chunk(512, 5);
  const int32_t one = 5;
  auto seconds = [](auto&& fn) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // Medians, not minima: a difference of two lucky moments on a shared machine is noise.
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  // Decode steps, each rolled back so that every one runs at the same position.
  auto decode_at = [&](Context& ctx, int n) {
    std::vector<double> t;
    for (int i = 0; i < n; ++i) {
      const int32_t pos = ctx.kv().seq_pos_max(0) + 1;
      t.push_back(seconds([&] { check(ctx.decode({.tokens = {&one, 1}})); }));
      check(ctx.kv().seq_remove(0, pos, -1));
    }
    return median(t);
  };
  std::vector<double> prefill_extra, decode_extra;  // per round: the later chunk's (token's) extra seconds
  for (int rep = 0; rep < 3; ++rep) {
    auto ctx = Context::create(*m.value(), co);
    check(ctx.status());
    check(ctx.value()->decode({.tokens = {&one, 1}}));
    const double dec1 = decode_at(*ctx.value(), 15);
    check(ctx.value()->kv().seq_remove(0, 0, -1));
    double t0 = 0, t3 = 0;
    for (int c = 0; c < 4; ++c) {
      const double t = seconds([&] { check(ctx.value()->decode({.tokens = chunk})); });
      if (c == 0) t0 = t;
      if (c == 3) t3 = t;
    }
    prefill_extra.push_back(t3 - t0);
    decode_extra.push_back(decode_at(*ctx.value(), 15) - dec1);
  }
  const double per_pos = 2.0 * n_head * (head_dim + head_dim);
  const double dp = median(prefill_extra), dd = median(decode_extra);
  AttentionRates r;
  r.prefill = dp > 0 ? per_pos * 512.0 * 1536 / dp / 1e9 : 0;
  r.decode = dd > 0 ? per_pos * 2047 / dd / 1e9 : 0;
  return r;
}

// The streaming products' matrix: larger than any last-level cache we have met (300 MiB).
const double kStreamMiB = std::getenv("KESTREL_CALIBRATE_STREAM_MIB") ? std::atof(std::getenv("KESTREL_CALIBRATE_STREAM_MIB")) : 512;

// The number of 4096 x 4096 weights of `type` in the streaming products' chain.
int stream_chain(DType type) {
  return std::max(2, static_cast<int>(kStreamMiB * 1048576.0 / (static_cast<double>(dtype_row_size(type, 4096)) * 4096)));
}


// What a decode step's attention streams from caches larger than the last-level caches (GB/s):
// a chain of ATTENTION ops (a model's layers), each one token against its own cache of 4096
// positions of F16 K and V (8 KV heads of head_dim, a group of 2 query heads each: the smallest
// group the presets have, so the kernel's pace per byte and memory's are what show), kStreamMiB
// in all, median of 5. A long context's decode reads its caches from memory every step (the
// weights between two steps evict them), at this pace rather than at the warm rate
// attention_rates measures.
double attention_stream_gbs(int head_dim, int threads) {
  constexpr int32_t kCtx = 4096;
  const int64_t n_kv = 8, n_head = 2 * n_kv, width = head_dim * n_kv;
  const size_t per_layer = static_cast<size_t>(width) * kCtx;  // F16 values of a layer's K (or V)
  const int layers = std::max(2, static_cast<int>(kStreamMiB * 1048576.0 / (2.0 * 2 * static_cast<double>(per_layer))));
  std::vector<int32_t> batch = pack_one_sequence(kCtx, 1, 16);
  auto [dev, ex] = cpu_device(threads);
  // In the device's memory, as a model's cache is (huge pages where granted); F16 values in
  // [0.125, 0.25) of either sign: what they are does not change the time.
  const size_t count = 2 * per_layer * static_cast<size_t>(layers);
  Device* d = dev.get();
  std::unique_ptr<void, std::function<void(void*)>> kv(nullptr, [d](void* p) { d->release(p); });
  {
    auto mem = d->alloc(count * sizeof(uint16_t));
    check(mem.status());
    kv.reset(mem.value());
  }
  uint16_t* cache = static_cast<uint16_t*>(kv.get());
  uint32_t x = 12345;
  for (size_t i = 0; i < count; ++i) {
    x = x * 1664525u + 1013904223u;
    cache[i] = static_cast<uint16_t>(0x3000u | (x >> 16 & 0x83FFu));
  }
  std::vector<float> q(static_cast<size_t>(head_dim * n_head), 0.5f), out(q.size());
  Graph g;
  Tensor* qt = g.external(make_tensor(DType::F32, head_dim, n_head, 1, 1, q.data()));
  Tensor* bt = g.external(make_tensor(DType::I32, static_cast<int64_t>(batch.size()), 1, 1, 1, batch.data()));
  for (int l = 0; l < layers; ++l) {
    uint16_t* k = cache + 2 * per_layer * static_cast<size_t>(l);
    Node& n = g.add(Op::ATTENTION, g.external(make_tensor(DType::F32, head_dim, n_head, 1, 1, out.data())), qt,
                    g.external(make_tensor(DType::F16, width, kCtx, 1, 1, k)),
                    g.external(make_tensor(DType::F16, width, kCtx, 1, 1, k + per_layer)), nullptr, bt);
    n.params = AttentionParams{.scale = 1.0f / std::sqrt(static_cast<float>(head_dim)), .softcap = 0.0f, .window = 0};
  }
  return static_cast<double>(count * sizeof(uint16_t)) / time_runs(*ex, g, 5, true) / 1e9;
}

}  // namespace

HwProfile calibrate_cpu(int max_threads, bool verbose) {
  HwProfile p;
  p.name = "local";
  p.kind = "cpu";
  p.description = cpu_model();
  p.cores = std::max(1, max_threads);
  p.memory_bytes = mem_total_bytes();
  std::vector<int> counts;
  for (int t = 1; t < p.cores; t *= 2) counts.push_back(t);
  counts.push_back(p.cores);
  for (int t : counts) {
    ReadProbe probe(t);
    p.bandwidth_by_threads[t] = probe.measure(3);
    p.op_overhead_by_threads[t] = measure_pool_sync_us(t);
    if (verbose)
      std::fprintf(stderr, "calibrate: %d thread%s: DRAM read %.1f GB/s, %.2f us per op\n", t, t > 1 ? "s" : "",
                   p.bandwidth_by_threads[t], p.op_overhead_by_threads[t]);
  }
  // What an op costs beyond its bytes on every thread: the same 512 MiB of q8_0 weights as a
  // chain of 1024 x 1024 products against one of 4096 x 4096 products (16 times fewer); the
  // difference per op is the barrier, the activations' quantization, the threads' imbalance and
  // the prefetchers' ramp that each op pays (a small model's decode is hundreds of such ops).
  // The streams below are net of it (kestrel perf adds it per op).
  double op_fixed_s = 0;
  {
    const int n_big = stream_chain(DType::Q8_0);
    MatmulBench big(DType::Q8_0, 4096, 4096, 1, p.cores, 256, n_big);
    MatmulBench small(DType::Q8_0, 1024, 1024, 1, p.cores, 256, 16 * n_big);
    std::vector<double> diff;  // interleaved, so that the machine's drift falls on both alike
    for (int r = 0; r < 11; ++r) diff.push_back(small.time(1) - big.time(1));
    std::sort(diff.begin(), diff.end());
    op_fixed_s = std::max(0.0, diff[diff.size() / 2] / (15.0 * n_big));
    double& at_all = p.op_overhead_by_threads[p.cores];
    if (verbose)
      std::fprintf(stderr, "calibrate: an op's fixed cost on %d threads: %.2f us (the pool's barrier alone: %.2f)\n",
                   p.cores, op_fixed_s * 1e6, at_all);
    at_all = std::max(at_all, op_fixed_s * 1e6);
  }
  p.op_overhead_us = p.op_overhead_by_threads.rbegin()->second;

  // Each weight type's rate per core: a matrix-vector product on one thread with the weights in
  // cache (decode's compute side, batch 1), and a prefill-sized product (2048 x 8192 weights, 512
  // columns) on every thread, over the thread count (what the cores reach together, sharing
  // caches and memory); kestrel perf interpolates between the two by batch.
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K,
                  DType::Q6_K, DType::MXFP4}) {
    MatmulBench gemv(t, 2048, 256, 1, 1), gemm(t, 2048, 8192, 512, p.cores);
    const double r1 = gemv.flops / gemv.time(50) / 1e9, rn = gemm.flops / gemm.time(2) / 1e9 / p.cores;
    p.gflops_batch1[dtype_name(t)] = r1;
    p.gflops[dtype_name(t)] = rn;
    // What decode really reads at: this type's product on every thread over more weights than
    // the last-level caches hold (the kernel's own pace and prefetch included), as a chain of
    // 4096 x 4096 products (9-64 MiB each, a 7B model's projections' size); at batch 1, and at
    // 2, 4 and 8 (small batches take other kernels than batch 1's).
    const int chain = stream_chain(t);
    std::string streams;
    for (int batch : {1, 2, 4, 8}) {
      MatmulBench stream(t, 4096, 4096, batch, p.cores, 256, chain);
      const double sec = stream.time(batch == 1 ? 9 : 5, true);
      const double gbs = stream.bytes / std::max(sec - chain * op_fixed_s, sec / 2) / 1e9;  // net of the ops' fixed costs
      if (batch == 1) p.stream_gbs[dtype_name(t)] = gbs;
      else p.stream_gbs_by_batch[dtype_name(t)][batch] = gbs;
      char b[48];
      std::snprintf(b, sizeof b, "%s%.1f", batch == 1 ? "" : " / ", gbs);
      streams += b;
    }
    // Routed experts (MATMUL_ID) over a prefill: the Qwen3-30B-A3B shape's gate (2048 -> 768,
    // 128 experts), 512 tokens with 8 experts each, so 32 tokens an expert; fewer experts (and as
    // many tokens an expert) where 128 of this type would outgrow the stream's size.
    const double expert_bytes = static_cast<double>(dtype_row_size(t, 2048)) * 768;
    const int n_experts = std::clamp(static_cast<int>(kStreamMiB * 1048576.0 / expert_bytes), 16, 128);
    ExpertBench experts(t, 2048, 768, n_experts, n_experts / 16, 512, p.cores);
    p.expert_gflops[dtype_name(t)] = experts.flops / experts.time(3) / 1e9 / p.cores;
    if (verbose)
      std::fprintf(stderr,
                   "calibrate: matmul %s per core: %.1f GFLOP/s at batch 1, %.1f at batch 512, experts %.1f; "
                   "streams %s GB/s at batch 1 / 2 / 4 / 8\n",
                   dtype_name(t), r1, rn, p.expert_gflops[dtype_name(t)], streams.c_str());
  }
  // The formats the model falls back to: f32 for floats, int8 for the integer block quants.
  p.gflops["int8"] = p.gflops["q8_0"];
  p.gflops_batch1["int8"] = p.gflops_batch1["q8_0"];
  // Decode streams its weights through the placed kernels, which may read faster than the probe
  // (its prefetch pattern): the bandwidth of a thread count is the better of the two, measured
  // with a q4_0 product of 256 MiB at batch 1.
  for (int t : counts) {
    MatmulBench b(DType::Q4_0, 4096, 14563, 1, t);
    const double gbs = b.bytes / b.time(5) / 1e9;
    if (verbose)
      std::fprintf(stderr, "calibrate: q4_0 matmul at batch 1 on %d thread%s streams %.1f GB/s (the probe: %.1f)\n", t,
                   t > 1 ? "s" : "", gbs, p.bandwidth_by_threads[t]);
    p.bandwidth_by_threads[t] = std::max(gbs, p.bandwidth_by_threads[t]);
  }
  p.bandwidth_gbs = p.bandwidth_by_threads.rbegin()->second;
  p.eff_memory = 1.0;  // the bandwidths above are what the kernels reach
  p.eff_compute = 1.0;  // the rates above are what the kernels reach
  for (int head_dim : {64, 128}) {
    const AttentionRates a = attention_rates(head_dim, p.cores);
    if (a.prefill > 0) p.attention_prefill_by_head_dim[head_dim] = a.prefill;
    if (a.decode > 0) p.attention_decode_by_head_dim[head_dim] = a.decode;
    if (head_dim == 64) p.attention_gflops = a.prefill;
    const double stream = attention_stream_gbs(head_dim, p.cores);
    p.attention_stream_by_head_dim[head_dim] = stream;
    if (verbose)
      std::fprintf(stderr,
                   "calibrate: attention, heads of %d, on %d threads: %.1f GFLOP/s in prefill, %.1f in decode; "
                   "decode streams a long cache at %.1f GB/s\n",
                   head_dim, p.cores, a.prefill, a.decode, stream);
  }
  p.eff_attention = 1.0;
  p.step_overhead_us = 20;
  p.sources = {"measured by kestrel bench --calibrate on " + p.description,
               "core_gflops: each type's placed matmul of 2048 x 8192 weights by 512 columns on every thread, over "
               "the thread count; core_gflops_batch1: on one thread at batch 1, weights in cache; f32 and int8 (the "
               "formats other types fall back to) are f32's and q8_0's",
               "attention_prefill_gflops_by_head_dim: a one-layer model 2048 wide (2048 / head_dim heads, a quarter "
               "as many KV heads), a chunk of 512 at position 1536 against one at 0; attention_decode_gflops_by_head_dim: "
               "a token at position 2048 against one at 1; attention_gflops: prefill's at 64",
               "attention_stream_gbs_by_head_dim: a chain of ATTENTION ops, each one token against its own 4096 "
               "positions of F16 K and V (8 KV heads, 16 query heads), 512 MiB in all (median of 5)",
               "stream_gbs (and stream_gbs_by_batch, at 2, 4, 8 columns): each type's placed matmul at batch 1 on every "
               "thread over a chain of 4096 x 4096 weights, each product's output the next one's input, 512 MiB in "
               "all (median of 9; of 5)",
               "core_gflops_experts: MATMUL_ID of 128 experts of 2048 x 768 (Qwen3-30B-A3B's gate; fewer where they "
               "would outgrow 512 MiB), 512 tokens choosing one in 16 each, on every thread, over the thread count",
               "bandwidth_by_threads_gbs: the better of a 512 MiB read probe and a q4_0 matmul streaming 256 MiB at "
               "batch 1; op_overhead_by_threads_us: the thread pool's cost of an empty parallel op, on every thread the "
               "larger of that and a q8_0 product's fixed cost (512 MiB as 1024 x 1024 products against as 4096 x "
               "4096 ones)",
               "step_overhead_us: nominal"};
  return p;
}

void save_local_profile(const HwProfile& p) {
  const std::string path = local_profile_path();
  // mkdir -p of the directory part.
  for (size_t i = 1; i < path.size(); ++i)
    if (path[i] == '/') mkdir(path.substr(0, i).c_str(), 0755);
  std::ofstream out(path);
  if (!out) throw UsageError("calibrate: cannot write " + path);
  HwProfile stamped = p;
  stamped.kestrel_commit = KESTREL_GIT_COMMIT;
  out << stamped.to_json().dump(2) << "\n";
  if (!out) throw UsageError("calibrate: cannot write " + path);
}

}  // namespace kestrel::cli
