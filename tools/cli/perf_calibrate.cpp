#include "perf_calibrate.h"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <unordered_map>
#include <vector>

#include "args.h"
#include "backends/backend.h"
#include "bench_roofline.h"
#include "engine/context.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/synth.h"
#include "quantize/quantize.h"
#include "tensor/graph.h"

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

// A [K, N] weight of `type` from random values, placed as the CPU backend places a model's
// (repacked where it repacks), times an F32 input of M columns; on its own device and executor.
struct MatmulBench {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Device> dev;
  std::unique_ptr<Executor> ex;
  std::unordered_map<std::string, Tensor> tensors;
  std::vector<float> x, y;
  Graph g;
  double flops = 0, bytes = 0;
  MatmulBench(DType type, int64_t K, int64_t N, int64_t M, int threads) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> wf(static_cast<size_t>(K) * N);
    for (float& v : wf) v = u(rng);
    std::vector<uint8_t> w(dtype_row_size(type, K) * static_cast<size_t>(N));
    check(quant::convert_rows(DType::F32, wf.data(), type, w.data(), N, K, threads));
    gguf::Writer writer;
    check(writer.add_tensor("w", type, {K, N}, w.data(), w.size()));
    auto f = gguf::File::from_bytes(writer.to_bytes(), "<calibrate>");
    check(f.status());
    file = std::move(f.value());
    auto d = create_device("cpu");
    check(d.status());
    dev = std::move(d.value());
    const gguf::TensorInfo& ti = file->tensors().at(0);
    tensors.emplace("w", make_tensor(type, K, N, 1, 1, const_cast<uint8_t*>(file->tensor_data(ti))));
    tensors.at("w").name = "w";
    check(dev->place_weights(*file, tensors, {}));
    auto e = dev->create_executor(threads);
    check(e.status());
    ex = std::move(e.value());
    x.resize(static_cast<size_t>(K) * M);
    for (float& v : x) v = u(rng);
    y.resize(static_cast<size_t>(N) * M);
    g.add(Op::MATMUL, g.external(make_tensor(DType::F32, N, M, 1, 1, y.data())), g.external(tensors.at("w")),
          g.external(make_tensor(DType::F32, K, M, 1, 1, x.data())));
    flops = 2.0 * K * N * M;
    bytes = static_cast<double>(w.size());
  }
  static void check(const Status& st) {
    if (!st.ok()) throw UsageError("calibrate: " + st.message());
  }
  // Best seconds per run over `reps` runs (after one to warm up).
  double time(int reps) {
    check(ex->run(g, 0, g.nodes().size()));
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      check(ex->run(g, 0, g.nodes().size()));
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  }
};

// Attention's rate: a one-layer model of the Llama-3.2-1B shape's attention (32 query heads of 64,
// 8 KV heads, a tiny FFN and vocabulary) prefilled in chunks of 512; the chunk at positions
// 1536..2047 does 512 x 1536 more (query, position) pairs of q.k and p.v than the one at 0..511,
// and everything else the same, so their time difference is that attention's.
double attention_gflops(int threads) {
  using gguf::Value;
  const ArchDef* arch = find_arch("llama");
  if (!arch) throw UsageError("calibrate: no llama architecture");
  const TinyConfig cfg{"calibrate",
                       {{"context_length", Value::make_u32(4096)}, {"embedding_length", Value::make_u32(2048)},
                        {"block_count", Value::make_u32(1)}, {"feed_forward_length", Value::make_u32(64)},
                        {"attention.head_count", Value::make_u32(32)}, {"attention.head_count_kv", Value::make_u32(8)},
                        {"rope.freq_base", Value::make_f32(500000.0f)},
                        {"attention.layer_norm_rms_epsilon", Value::make_f32(1e-5f)}}};
  SynthOptions so;
  so.weight_type = DType::Q8_0;
  auto w = synth_model(*arch, cfg, so);
  MatmulBench::check(w.status());
  auto f = gguf::File::from_bytes(w.value().to_bytes(), "<calibrate attention>");
  MatmulBench::check(f.status());
  ModelLoadOptions lo;
  lo.backend = "cpu";
  lo.n_threads = threads;
  auto m = Model::from_file(std::move(f.value()), lo);
  MatmulBench::check(m.status());
  ContextOptions co;
  co.n_ctx = 2048;
  co.n_batch = 512;
  co.n_threads = threads;
  const std::vector<int32_t> chunk(512, 5);
  double best0 = 1e30, best3 = 1e30;
  for (int rep = 0; rep < 2; ++rep) {
    auto ctx = Context::create(*m.value(), co);
    MatmulBench::check(ctx.status());
    for (int c = 0; c < 4; ++c) {
      const auto t0 = std::chrono::steady_clock::now();
      MatmulBench::check(ctx.value()->decode({.tokens = chunk}));
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (c == 0) best0 = std::min(best0, t);
      if (c == 3) best3 = std::min(best3, t);
    }
  }
  const double flops = 2.0 * 32 * (64 + 64) * 512.0 * 1536;
  return best3 > best0 ? flops / (best3 - best0) / 1e9 : 0;
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
    if (verbose)
      std::fprintf(stderr, "calibrate: matmul %s per core: %.1f GFLOP/s at batch 1, %.1f at batch 512\n",
                   dtype_name(t), r1, rn);
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
  p.attention_gflops = attention_gflops(p.cores);
  p.eff_attention = 1.0;
  if (verbose) std::fprintf(stderr, "calibrate: attention on %d threads: %.1f GFLOP/s\n", p.cores, p.attention_gflops);
  p.step_overhead_us = 20;
  p.sources = {"measured by kestrel bench --calibrate on " + p.description,
               "core_gflops: each type's placed matmul of 2048 x 8192 weights by 512 columns on every thread, over "
               "the thread count; core_gflops_batch1: on one thread at batch 1, weights in cache; f32 and int8 (the "
               "formats other types fall back to) are f32's and q8_0's",
               "attention_gflops: prefill attention of the 1B shape (32 heads of 64, 8 KV heads), a chunk of 512 at "
               "position 1536 against one at 0",
               "bandwidth_by_threads_gbs: the better of a 512 MiB read probe and a q4_0 matmul streaming 256 MiB at "
               "batch 1; op_overhead_by_threads_us: the thread pool's cost of an empty parallel op",
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
  out << p.to_json().dump(2) << "\n";
  if (!out) throw UsageError("calibrate: cannot write " + path);
}

}  // namespace kestrel::cli
