#include "perf_calibrate.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
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
#include "model/shape.h"
#include "model/synth.h"
#include "perf_model.h"
#include "quantize/quantize.h"
#include "sampling/sampler.h"
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

// "w<c>" (appended, not `"w" + std::to_string(c)`: that inlined into a loop trips GCC 12's false
// -Wrestrict).
std::string weight_name(int c) {
  std::string name = "w";
  return name.append(std::to_string(c));
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
    for (int c = 0; c < chain; ++c) check(writer.add_tensor(weight_name(c), type, {K, N}, w.data(), w.size()));
    auto f = gguf::File::from_bytes(writer.to_bytes(), "<calibrate>");
    check(f.status());
    file = std::move(f.value());
    std::tie(dev, ex) = cpu_device(threads);
    for (int c = 0; c < chain; ++c) {
      const std::string name = weight_name(c);
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
            g.external(tensors.at(weight_name(c))), g.external(make_tensor(DType::F32, K, M, 1, 1, in)));
    }
    flops = 2.0 * K * N * M * chain;
    bytes = static_cast<double>(w.size()) * chain;
  }
  double time(int reps, bool median = false) { return time_runs(*ex, g, reps, median); }
};

// `bytes` written to a temporary file (in $TMPDIR, else /tmp) and mapped; the file is unlinked at
// once (the mapping keeps it). Null when it cannot be written: the caller keeps the bytes in memory.
std::unique_ptr<gguf::File> mapped_file(const std::vector<uint8_t>& bytes) {
  const char* dir = std::getenv("TMPDIR");
  std::string path = dir && *dir ? dir : "/tmp";
  path.append("/kestrel-calibrate-XXXXXX");
  const int fd = mkstemp(path.data());
  if (fd < 0) return nullptr;
  bool ok = true;
  for (size_t done = 0; ok && done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n > 0) done += static_cast<size_t>(n);
    else ok = n < 0 && errno == EINTR;
  }
  ::close(fd);
  std::unique_ptr<gguf::File> file;
  if (ok)
    if (auto f = gguf::File::open(path); f.ok()) file = std::move(f.value());
  ::unlink(path.c_str());
  return file;
}

// MATMUL_ID: E experts' [K, N] weights of `type` (placed as a model's, named as its expert
// tensors), T tokens of one input each choosing k distinct experts at random. `chain` > 1: that
// many copies (a model's layers), an op each, the same input.
struct ExpertBench {
  std::unique_ptr<gguf::File> file;
  std::unique_ptr<Device> dev;
  std::unique_ptr<Executor> ex;
  std::unordered_map<std::string, Tensor> tensors;
  std::vector<float> x, y;
  std::vector<int32_t> ids;
  std::mt19937 rng{11};
  int64_t E = 0, k = 0;
  Graph g;
  double flops = 0, bytes = 0;  // bytes: the experts' weights one run reads
  // mapped: the file written to a temporary file and mapped, as a model's is (its experts are read
  // in place: they are not repacked), rather than held in memory.
  ExpertBench(DType type, int64_t K, int64_t N, int64_t n_experts, int64_t k_used, int64_t T, int threads,
              int chain = 1, bool mapped = false)
      : E(n_experts), k(k_used) {
    const std::vector<uint8_t> w = weight_rows(type, K, N * E, 256, 1.0f, threads, rng);
    gguf::Writer writer;
    auto name = [](int c) {
      std::string n = "blk.";
      return n.append(std::to_string(c)).append(".ffn_gate_exps.weight");
    };
    for (int c = 0; c < chain; ++c) check(writer.add_tensor(name(c), type, {K, N, E}, w.data(), w.size()));
    file = mapped ? mapped_file(writer.to_bytes()) : nullptr;
    if (!file) {
      auto f = gguf::File::from_bytes(writer.to_bytes(), "<calibrate experts>");
      check(f.status());
      file = std::move(f.value());
    }
    std::tie(dev, ex) = cpu_device(threads);
    for (int c = 0; c < chain; ++c) {
      const gguf::TensorInfo& ti = file->tensors().at(static_cast<size_t>(c));
      tensors.emplace(name(c), make_tensor(type, K, N, E, 1, const_cast<uint8_t*>(file->tensor_data(ti))));
      tensors.at(name(c)).name = name(c);
    }
    check(dev->place_weights(*file, tensors, {}));
    std::uniform_real_distribution<float> u(-1, 1);
    x.resize(static_cast<size_t>(K * T));
    for (float& v : x) v = u(rng);
    y.resize(static_cast<size_t>(N * k * T * chain));
    ids.resize(static_cast<size_t>(k * T * chain));
    reroute();
    for (int c = 0; c < chain; ++c)
      g.add(Op::MATMUL_ID, g.external(make_tensor(DType::F32, N, k, T, 1, y.data() + N * k * T * c)),
            g.external(tensors.at(name(c))), g.external(make_tensor(DType::F32, K, 1, T, 1, x.data())),
            g.external(make_tensor(DType::I32, k, T, 1, 1, ids.data() + k * T * c)));
    flops = 2.0 * K * N * k * T * chain;
    bytes = static_cast<double>(w.size()) / static_cast<double>(E) * static_cast<double>(k * chain);
  }
  // Every token of every op chooses its k experts afresh.
  void reroute() {
    std::vector<int32_t> all(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) all[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    for (size_t i = 0; i < ids.size(); i += static_cast<size_t>(k)) {
      std::shuffle(all.begin(), all.end(), rng);
      std::copy_n(all.begin(), k, ids.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  double time(int reps) { return time_runs(*ex, g, reps); }
  // A decode step's experts (T = 1): the median run, each routed afresh, so that the experts it
  // reads were not the last run's (bytes counts them once: one token, k distinct experts an op).
  double stream_gbs(int reps, double op_fixed_s) {
    std::vector<double> t;
    // Every expert read once first (their pages mapped, as a model's are after its first steps).
    for (int64_t first = 0; first + k <= E; first += k) {
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(first + static_cast<int64_t>(i) % k);
      check(ex->run(g, 0, g.nodes().size()));
    }
    for (int r = 0; r < reps; ++r) {
      reroute();
      const auto t0 = std::chrono::steady_clock::now();
      check(ex->run(g, 0, g.nodes().size()));
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    const double sec = t[t.size() / 2], net = sec - static_cast<double>(g.nodes().size()) * op_fixed_s;
    return bytes / std::max(net, sec / 2) / 1e9;
  }
};

// Attention's rates for heads of `head_dim`, and the elementwise ops' rate: a one-layer model of
// the Llama-3.2-1B shape (2048 wide, 2048 / head_dim query heads, a quarter as many KV heads, its
// FFN of 8192, a small vocabulary), each op timed alone (engine/profile.h).
// - Prefill, own tokens: a chunk of 512 at positions 0..511 (the causal triangle).
// - Prefill, earlier positions: the chunk at 1536..2047 does 512 x 1536 more (query, position)
//   pairs than the one at 0..511, and the same triangle, so the difference of their attention
//   times is that rectangle's.
// - Decode: a token at position 2048 against one at position 1, likewise.
// - Elementwise: every op of the chunks other than the products, attention and the embedding's
//   rows, over the activations ModelCosts counts for this layer (elementwise_bytes_per_token).
struct AttentionRates {
  double prefill = 0, diag = 0, decode = 0;  // GFLOP/s
  double elementwise_gbs = 0;
};
AttentionRates attention_rates(int head_dim, int threads) {
  using gguf::Value;
  const ArchDef* arch = find_arch("llama");
  if (!arch) throw UsageError("calibrate: no llama architecture");
  const uint32_t n_head = 2048 / head_dim;
  const TinyConfig cfg{"calibrate",
                       {{"context_length", Value::make_u32(4096)}, {"embedding_length", Value::make_u32(2048)},
                        {"block_count", Value::make_u32(1)}, {"feed_forward_length", Value::make_u32(8192)},
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
  auto shape = model_shape(*f.value());
  check(shape.status());
  const double elementwise_bytes = model_costs(shape.value(), "cpu", DType::F16, DType::F16).elementwise_bytes_per_token;
  ModelLoadOptions lo;
  lo.backend = "cpu";
  lo.n_threads = threads;
  auto m = Model::from_file(std::move(f.value()), lo);
  check(m.status());
  ContextOptions co;
  co.n_ctx = 2048 + 64;
  co.n_batch = 512;
  co.n_threads = threads;
  // Varied tokens, as a prompt's are.
  std::vector<int32_t> chunk(512);
  for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<int32_t>((i * 37 + 11) % 64);  // synth's 64 tokens
  // Every row wanted, as embeddings (no output head): a chunk's last layer is then not cut to its
  // output rows after attention, as a prompt's is, so the layer runs whole.
  std::array<bool, 512> every_row;
  every_row.fill(true);
  const DecodeBatch whole{.tokens = chunk, .want_logits = every_row, .embeddings = true};
  const int32_t one = 5;
  // Medians, not minima: a difference of two lucky moments on a shared machine is noise.
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  // One decode call, profiled: its attention's seconds and the other ops' (the products, the
  // embedding's rows and attention left out).
  struct Split {
    double attention = 0, elementwise = 0;
  };
  auto run = [&](Context& ctx, const DecodeBatch& b) {
    ctx.profiler()->reset();
    check(ctx.decode(b));
    Split sp;
    for (const auto& op : nlohmann::json::parse(ctx.profiler()->json())) {
      const std::string name = op["op"];
      const double sec = op["seconds"];
      if (name == "attention") sp.attention += sec;
      else if (name.rfind("matmul", 0) != 0 && name != "get_rows") sp.elementwise += sec;
    }
    return sp;
  };
  // Decode steps, each rolled back so that every one runs at the same position: attention's median.
  auto decode_at = [&](Context& ctx, int n) {
    std::vector<double> t;
    for (int i = 0; i < n; ++i) {
      const int32_t pos = ctx.kv().seq_pos_max(0) + 1;
      t.push_back(run(ctx, {.tokens = {&one, 1}}).attention);
      check(ctx.kv().seq_remove(0, pos, -1));
    }
    return median(t);
  };
  std::vector<double> own, later, decode_extra, elementwise;  // per round
  for (int rep = 0; rep < 3; ++rep) {
    auto ctx = Context::create(*m.value(), co);
    check(ctx.status());
    ctx.value()->set_profiling(true);
    check(ctx.value()->decode({.tokens = {&one, 1}}));
    const double dec1 = decode_at(*ctx.value(), 15);
    check(ctx.value()->kv().seq_remove(0, 0, -1));
    double a0 = 0, a3 = 0;
    for (int c = 0; c < 4; ++c) {
      const Split sp = run(*ctx.value(), whole);
      if (c == 0) a0 = sp.attention;
      if (c == 3) a3 = sp.attention;
      elementwise.push_back(sp.elementwise);
    }
    own.push_back(a0);
    later.push_back(a3 - a0);
    decode_extra.push_back(decode_at(*ctx.value(), 15) - dec1);
  }
  const double per_pos = 2.0 * n_head * (head_dim + head_dim);
  // The elementwise ops: the quickest chunk. On this random one-layer model SWIGLU runs 10-20x
  // slower in some chunks (likely subnormal products of its extreme gate values), which the
  // models' own prompts have not shown (`kestrel bench --per-op`).
  const double a0 = median(own), dp = median(later), dd = median(decode_extra);
  const double el = *std::min_element(elementwise.begin(), elementwise.end());
  AttentionRates r;
  r.diag = a0 > 0 ? per_pos * (512.0 * 513 / 2) / a0 / 1e9 : 0;
  r.prefill = dp > 0 ? per_pos * 512.0 * 1536 / dp / 1e9 : 0;
  r.decode = dd > 0 ? per_pos * 2047 / dd / 1e9 : 0;
  r.elementwise_gbs = el > 0 ? elementwise_bytes * 512 / el / 1e9 : 0;
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

// What a decode step reads `type`'s weights at on `threads` threads: its placed product at `batch`
// columns over a chain of 4096 x 4096 weights (9-64 MiB each, a 7B model's projections' size;
// more than the last-level caches hold in all), the kernel's own pace and prefetch included, net
// of each op's fixed cost (kestrel perf adds it per op); median of 9 runs at batch 1, of 5 above.
double weight_stream_gbs(DType type, int batch, int threads, double op_fixed_s) {
  const int chain = stream_chain(type);
  MatmulBench stream(type, 4096, 4096, batch, threads, 256, chain);
  const double sec = stream.time(batch == 1 ? 9 : 5, true);
  return stream.bytes / std::max(sec - chain * op_fixed_s, sec / 2) / 1e9;
}

// What a decode step's routed experts stream at on `threads` threads: one token choosing 8 of 128
// experts of the Qwen3-30B-A3B shape (fewer experts where two layers of them would outgrow
// kStreamMiB) in each of a chain of MATMUL_ID ops (a model's layers) over kStreamMiB of experts,
// mapped from a file as a model's are, routed afresh every run; net of each op's fixed cost,
// median of 15. Its gate and up (2048 -> 768) and its down (768 -> 2048: rows of three Q4_K
// super-blocks) stream differently: the rate of a layer's three, equal in bytes.
double expert_stream_gbs(DType type, int threads, double op_fixed_s) {
  const double stream = kStreamMiB * 1048576.0;
  auto rate = [&](int64_t K, int64_t N) {
    const double expert = static_cast<double>(dtype_row_size(type, K)) * static_cast<double>(N);
    const int E = std::clamp(static_cast<int>(stream / (2 * expert)), 16, 128);
    ExpertBench b(type, K, N, E, 8, 1, threads, std::max(2, static_cast<int>(stream / (E * expert))), true);
    return b.stream_gbs(15, op_fixed_s);
  };
  const double up = rate(2048, 768), down = rate(768, 2048);
  return 3 / (2 / up + 1 / down);
}

// The read bandwidth of `threads` threads: the better of the probe and a q4_0 product streaming
// 256 MiB at batch 1 (decode streams its weights through the placed kernels, whose prefetch pattern
// may read faster than the probe's).
double read_bandwidth(int threads, double probe_gbs, bool verbose) {
  MatmulBench b(DType::Q4_0, 4096, 14563, 1, threads);
  const double gbs = b.bytes / b.time(5) / 1e9;
  if (verbose)
    std::fprintf(stderr, "calibrate: q4_0 matmul at batch 1 on %d thread%s streams %.1f GB/s (the probe: %.1f)\n",
                 threads, threads > 1 ? "s" : "", gbs, probe_gbs);
  return std::max(gbs, probe_gbs);
}

// A weight type's rate per core in a prefill: its placed product of 2048 x 8192 weights by 512
// columns on every thread, over the thread count (what the cores reach together, sharing caches
// and memory).
double prefill_gflops_per_core(DType t, int cores) {
  MatmulBench gemm(t, 2048, 8192, 512, cores);
  return gemm.flops / gemm.time(2) / 1e9 / cores;
}

// Routed experts (MATMUL_ID) over a prefill: the Qwen3-30B-A3B shape's gate (2048 -> 768, 128
// experts), 512 tokens with 8 experts each, so 32 tokens an expert; fewer experts (and as many
// tokens an expert) where 128 of this type would outgrow the stream's size. Per core.
double expert_gflops_per_core(DType t, int cores) {
  const double expert_bytes = static_cast<double>(dtype_row_size(t, 2048)) * 768;
  const int n_experts = std::clamp(static_cast<int>(kStreamMiB * 1048576.0 / expert_bytes), 16, 128);
  ExpertBench experts(t, 2048, 768, n_experts, n_experts / 16, 512, cores);
  return experts.flops / experts.time(3) / 1e9 / cores;
}

// The engine's greedy sampler over a row of Llama 3's 128256-entry vocabulary (it copies and
// scans the whole row): nanoseconds per entry, the median of 31 rows.
double sample_ns_per_logit() {
  constexpr int kVocab = 128256;
  std::mt19937 rng(11);
  std::normal_distribution<float> logit(0.0f, 3.0f);
  std::vector<std::vector<float>> rows(4, std::vector<float>(kVocab));
  for (auto& r : rows)
    for (float& v : r) v = logit(rng);
  SamplerParams sp;
  sp.temperature = 0;
  Sampler sampler(sp);
  std::vector<double> sec;
  for (size_t i = 0; i < 31; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto token = sampler.sample(rows[i % rows.size()]);
    sec.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    if (!token.ok()) throw UsageError("calibrate: the sampler: " + token.status().message());
  }
  std::sort(sec.begin(), sec.end());
  return sec[sec.size() / 2] / kVocab * 1e9;
}

// Attention's rates and cache streams at heads of 64 and 128, and the elementwise ops' rate (the
// 1B shape's own layer, at 64).
void calibrate_attention(HwProfile& p, bool verbose) {
  for (int head_dim : {64, 128}) {
    const AttentionRates a = attention_rates(head_dim, p.cores);
    if (a.prefill > 0) p.attention_prefill_by_head_dim[head_dim] = a.prefill;
    if (a.diag > 0) p.attention_prefill_diag_by_head_dim[head_dim] = a.diag;
    if (a.decode > 0) p.attention_decode_by_head_dim[head_dim] = a.decode;
    if (head_dim == 64) p.attention_gflops = a.prefill;
    if (head_dim == 64) p.elementwise_gbs = a.elementwise_gbs;  // the 1B shape's own layer
    const double stream = attention_stream_gbs(head_dim, p.cores);
    p.attention_stream_by_head_dim[head_dim] = stream;
    if (verbose)
      std::fprintf(stderr,
                   "calibrate: attention, heads of %d, on %d threads: %.1f GFLOP/s in prefill (%.1f on a chunk's own "
                   "tokens), %.1f in decode; decode streams a long cache at %.1f GB/s; the elementwise ops move %.1f GB/s\n",
                   head_dim, p.cores, a.prefill, a.diag, a.decode, stream, a.elementwise_gbs);
  }
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
    MatmulBench gemv(t, 2048, 256, 1, 1);
    const double r1 = gemv.flops / gemv.time(50) / 1e9, rn = prefill_gflops_per_core(t, p.cores);
    p.gflops_batch1[dtype_name(t)] = r1;
    p.gflops[dtype_name(t)] = rn;
    // What decode really reads at, at batch 1, and at 2, 4 and 8 (small batches take other
    // kernels than batch 1's).
    std::string streams;
    for (int batch : {1, 2, 4, 8}) {
      const double gbs = weight_stream_gbs(t, batch, p.cores, op_fixed_s);
      if (batch == 1) p.stream_gbs[dtype_name(t)] = gbs;
      else p.stream_gbs_by_batch[dtype_name(t)][batch] = gbs;
      char b[48];
      std::snprintf(b, sizeof b, "%s%.1f", batch == 1 ? "" : " / ", gbs);
      streams += b;
    }
    p.expert_gflops[dtype_name(t)] = expert_gflops_per_core(t, p.cores);
    p.expert_stream_gbs[dtype_name(t)] = expert_stream_gbs(t, p.cores, op_fixed_s);
    if (verbose)
      std::fprintf(stderr,
                   "calibrate: matmul %s per core: %.1f GFLOP/s at batch 1, %.1f at batch 512, experts %.1f; "
                   "streams %s GB/s at batch 1 / 2 / 4 / 8, experts %.1f at batch 1\n",
                   dtype_name(t), r1, rn, p.expert_gflops[dtype_name(t)], streams.c_str(),
                   p.expert_stream_gbs[dtype_name(t)]);
  }
  // The formats the model falls back to: f32 for floats, int8 for the integer block quants.
  p.gflops["int8"] = p.gflops["q8_0"];
  p.gflops_batch1["int8"] = p.gflops_batch1["q8_0"];
  for (int t : counts) p.bandwidth_by_threads[t] = read_bandwidth(t, p.bandwidth_by_threads[t], verbose);
  p.bandwidth_gbs = p.bandwidth_by_threads.rbegin()->second;
  p.eff_memory = 1.0;  // the bandwidths above are what the kernels reach
  p.eff_compute = 1.0;  // the rates above are what the kernels reach
  calibrate_attention(p, verbose);
  p.sample_ns_per_logit = sample_ns_per_logit();
  if (verbose) std::fprintf(stderr, "calibrate: the greedy sampler: %.2f ns per vocabulary entry\n", p.sample_ns_per_logit);
  p.eff_attention = 1.0;
  p.step_overhead_us = 20;
  p.sources = {"measured by kestrel bench --calibrate on " + p.description,
               "core_gflops: each type's placed matmul of 2048 x 8192 weights by 512 columns on every thread, over "
               "the thread count; core_gflops_batch1: on one thread at batch 1, weights in cache; f32 and int8 (the "
               "formats other types fall back to) are f32's and q8_0's",
               "attention_prefill_gflops_by_head_dim: a one-layer model 2048 wide (2048 / head_dim heads, a quarter "
               "as many KV heads, FFN 8192), its attention op timed alone, a chunk of 512 at position 1536 against one "
               "at 0; attention_prefill_diag_gflops_by_head_dim: the chunk at 0 (its causal triangle); "
               "attention_decode_gflops_by_head_dim: a token at position 2048 against one at 1; attention_gflops: "
               "prefill's at 64",
               "elementwise_gbs: the same model at heads of 64 (the Llama-3.2-1B shape's layer), its ops other than the "
               "products, attention and the embedding's rows, timed alone over 512-token chunks (median), against the "
               "activations kestrel perf counts for them",
               "attention_stream_gbs_by_head_dim: a chain of ATTENTION ops, each one token against its own 4096 "
               "positions of F16 K and V (8 KV heads, 16 query heads), 512 MiB in all (median of 5)",
               "stream_gbs (and stream_gbs_by_batch, at 2, 4, 8 columns): each type's placed matmul at batch 1 on every "
               "thread over a chain of 4096 x 4096 weights, each product's output the next one's input, 512 MiB in "
               "all (median of 9; of 5)",
               "core_gflops_experts: MATMUL_ID of 128 experts of 2048 x 768 (Qwen3-30B-A3B's gate; fewer where they "
               "would outgrow 512 MiB), 512 tokens choosing one in 16 each, on every thread, over the thread count",
               "expert_stream_gbs: MATMUL_ID at batch 1 on every thread, one token choosing 8 of 128 experts of 2048 x "
               "768 (fewer where two layers would outgrow 512 MiB) in each of a chain of ops over 512 MiB of experts, "
               "routed afresh every run (median of 15)",
               "bandwidth_by_threads_gbs: the better of a 512 MiB read probe and a q4_0 matmul streaming 256 MiB at "
               "batch 1; op_overhead_by_threads_us: the thread pool's cost of an empty parallel op, on every thread the "
               "larger of that and a q8_0 product's fixed cost (512 MiB as 1024 x 1024 products against as 4096 x "
               "4096 ones)",
               "sample_ns_per_logit: the engine's greedy sampler over rows of 128256 random logits (median of 31)",
               "step_overhead_us: nominal"};
  return p;
}

void refresh_profile(HwProfile& p, bool verbose, const RefreshScope& scope) {
  if (!p.is_cpu() || p.bandwidth_by_threads.empty() || p.stream_gbs.empty())
    throw UsageError("calibrate: a refresh measures again a profile kestrel bench --calibrate measured; this one "
                     "has no measured bandwidths (run kestrel bench --calibrate)");
  if (!p.kestrel_commit.empty() && p.kestrel_commit != KESTREL_GIT_COMMIT) {
    std::string why = "calibrate: the profile was calibrated by kestrel commit ";
    why.append(p.kestrel_commit).append(" and this is ").append(KESTREL_GIT_COMMIT);
    throw UsageError(why.append(": its kernel rates may be out of date, so measure it all again (kestrel bench --calibrate)"));
  }
  for (auto& [t, gbs] : p.bandwidth_by_threads) {
    ReadProbe probe(t);
    const double measured = probe.measure(3);
    if (verbose) std::fprintf(stderr, "calibrate: %d thread%s: DRAM read %.1f GB/s\n", t, t > 1 ? "s" : "", measured);
    gbs = read_bandwidth(t, measured, verbose);
  }
  p.bandwidth_gbs = p.bandwidth_by_threads.rbegin()->second;
  auto wanted = [&](const std::set<std::string>& types, const std::string& name) { return scope.all || types.count(name); };
  // Each type's batch-1 stream measured again; its smaller batches' streams move with it (the
  // same kernels, paced by the same memory).
  const double op_fixed_s = p.op_us(p.cores) * 1e-6;
  for (auto& [name, gbs] : p.stream_gbs) {
    DType t;
    if (!dtype_from_name(name.c_str(), &t)) continue;
    if (wanted(scope.dense, name)) {
      const double now = weight_stream_gbs(t, 1, p.cores, op_fixed_s), ratio = now / gbs;
      if (verbose) std::fprintf(stderr, "calibrate: %s streams %.1f GB/s at batch 1 (was %.1f)\n", name.c_str(), now, gbs);
      gbs = now;
      for (auto& [batch, b] : p.stream_gbs_by_batch[name]) b *= ratio;
    }
    if (auto e = p.expert_stream_gbs.find(name); e != p.expert_stream_gbs.end() && wanted(scope.experts, name)) {
      e->second = expert_stream_gbs(t, p.cores, op_fixed_s);
      if (verbose) std::fprintf(stderr, "calibrate: %s experts stream %.1f GB/s at batch 1\n", name.c_str(), e->second);
    }
    // A prefill's side: the products' and the experts' rates at 512 columns.
    if (scope.compute && wanted(scope.dense, name) && p.gflops.count(name)) {
      p.gflops[name] = prefill_gflops_per_core(t, p.cores);
      if (name == "q8_0") p.gflops["int8"] = p.gflops[name];  // the integer formats' fallback
      if (verbose) std::fprintf(stderr, "calibrate: matmul %s per core: %.1f GFLOP/s at batch 512\n", name.c_str(), p.gflops[name]);
    }
    if (scope.compute && wanted(scope.experts, name) && p.expert_gflops.count(name)) {
      p.expert_gflops[name] = expert_gflops_per_core(t, p.cores);
      if (verbose) std::fprintf(stderr, "calibrate: experts %s per core: %.1f GFLOP/s\n", name.c_str(), p.expert_gflops[name]);
    }
  }
  if (scope.compute) {
    calibrate_attention(p, verbose);  // its cache streams too
    p.sample_ns_per_logit = sample_ns_per_logit();
    if (verbose) std::fprintf(stderr, "calibrate: the greedy sampler: %.2f ns per vocabulary entry\n", p.sample_ns_per_logit);
  } else {
    for (auto& [head_dim, gbs] : p.attention_stream_by_head_dim) {
      gbs = attention_stream_gbs(head_dim, p.cores);
      if (verbose) std::fprintf(stderr, "calibrate: attention at heads of %d streams a long cache at %.1f GB/s\n", head_dim, gbs);
    }
  }
  // Said once, however many refreshes followed (earlier builds said it once per refresh).
  std::erase_if(p.sources, [](const std::string& s) { return s.find("measured again by kestrel bench") != std::string::npos; });
  p.sources.push_back("bandwidth_by_threads_gbs, stream_gbs (stream_gbs_by_batch scaled with it), "
                      "expert_stream_gbs and attention_stream_gbs_by_head_dim measured again by kestrel bench "
                      "--calibrate-memory (with -m, only the streams of that model's weight types)");
  if (scope.compute)
    p.sources.push_back("core_gflops and core_gflops_experts of a model's weight types, the attention rates, "
                        "elementwise_gbs and sample_ns_per_logit measured again by kestrel bench --calibrate -m MODEL");
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
