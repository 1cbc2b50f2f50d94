// Throughput of the CPU's ATTENTION kernel alone: one sequence of CTX cached tokens (blocks of 16
// cells), the last T of them the batch's queries (T = 1: a decode step at depth CTX), random
// F16/Q8_0/Q4_0/F32 caches, GQA. Rounds alternate the AVX2 and AVX-512 inner loops (the latter
// where the CPU has them), so both are measured in the same minutes; each line is the median of
// the rounds. FLOPs count q.k and p.v over the visible (query, cell) pairs: 2 (hd_k + hd_v) each
// per head. Not a test; docs/PERF.md quotes it.
//
//   kestrel_bench_attention CACHE HEAD_DIM N_HEAD N_KV CTX T [THREADS] [ROUNDS]
//   e.g.  kestrel_bench_attention f16 64 32 8 2048 512 2     (prefill: 512 tokens at 1536..2047)
//         kestrel_bench_attention f16 64 32 8 16384 1 2      (decode at depth 16384)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/simd.h"
#include "tensor/attention_batch.h"
#include "tensor/dtype.h"
#include "tensor/graph.h"
#include "tensor/op_params.h"

using namespace kestrel;

namespace {

std::vector<uint8_t> random_rows(DType t, int64_t width, int64_t rows, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::vector<float> f(static_cast<size_t>(width));
  const size_t rb = dtype_row_size(t, width);
  std::vector<uint8_t> out(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : f) v = nd(rng);
    dtype_info(t).from_float(f.data(), out.data() + rb * static_cast<size_t>(r), width);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s CACHE HEAD_DIM N_HEAD N_KV CTX T [THREADS] [ROUNDS]\n", argv[0]);
    return 2;
  }
  DType ct{};
  const int64_t hd = std::atoll(argv[2]), nh = std::atoll(argv[3]), nkv = std::atoll(argv[4]);
  const int32_t ctx = std::atoi(argv[5]), T = std::atoi(argv[6]);
  const int threads = argc > 7 ? std::atoi(argv[7]) : 1, rounds = argc > 8 ? std::atoi(argv[8]) : 5;
  if (!dtype_from_name(argv[1], &ct) || hd <= 0 || nkv <= 0 || nh % nkv || ctx < 1 || T < 1 || T > ctx ||
      threads < 1 || rounds < 1) {
    std::fprintf(stderr, "%s: bad arguments\n", argv[0]);
    return 2;
  }
  auto dev = create_device("cpu");
  if (!dev.ok()) return 1;
  auto ex = dev.value()->create_executor(threads);
  if (!ex.ok()) return 1;
  std::mt19937 rng(3);
  const int32_t bs = 16, cells = (ctx + bs - 1) / bs * bs;
  // The cache in the device's memory, as a model's is (huge pages where granted).
  const std::vector<uint8_t> kh = random_rows(ct, hd * nkv, cells, rng), vh = random_rows(ct, hd * nkv, cells, rng);
  auto km = dev.value()->alloc(kh.size()), vm = dev.value()->alloc(vh.size());
  if (!km.ok() || !vm.ok()) return 1;
  std::copy(kh.begin(), kh.end(), static_cast<uint8_t*>(km.value()));
  std::copy(vh.begin(), vh.end(), static_cast<uint8_t*>(vm.value()));
  std::vector<float> q(static_cast<size_t>(hd * nh * T)), out(q.size());
  std::normal_distribution<float> nd;
  for (float& v : q) v = nd(rng);
  std::vector<int32_t> b = pack_one_sequence(ctx, T, bs);
  Graph g;
  Node& n = g.add(Op::ATTENTION, g.external(make_tensor(DType::F32, hd, nh, T, 1, out.data())),
                  g.external(make_tensor(DType::F32, hd, nh, T, 1, q.data())),
                  g.external(make_tensor(ct, hd * nkv, cells, 1, 1, km.value())),
                  g.external(make_tensor(ct, hd * nkv, cells, 1, 1, vm.value())), nullptr,
                  g.external(make_tensor(DType::I32, static_cast<int64_t>(b.size()), 1, 1, 1, b.data())));
  n.params = AttentionParams{.scale = 0.125f, .softcap = 0.0f, .window = 0};
  double pairs = 0;
  for (int32_t t = 0; t < T; ++t) pairs += ctx - T + t + 1;
  const double flops = 2.0 * (hd + hd) * static_cast<double>(nh) * pairs;
  std::vector<bool> isas = {false};
  if (cpu::has_avx512_vnni()) isas.push_back(true);
  std::vector<std::vector<double>> secs(isas.size());
  if (!ex.value()->run(g, 0, 1).ok()) return 1;  // warm-up
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < isas.size(); ++i) {
      cpu::allow_avx512(isas[i]);
      const auto t0 = std::chrono::steady_clock::now();
      if (!ex.value()->run(g, 0, 1).ok()) return 1;
      secs[i].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  for (size_t i = 0; i < isas.size(); ++i) {
    std::sort(secs[i].begin(), secs[i].end());
    const double s = secs[i][secs[i].size() / 2];
    std::printf("%s hd %lld heads %lld/%lld ctx %d T %d threads %d %s: %.3f ms, %.1f GFLOP/s\n", dtype_name(ct),
                static_cast<long long>(hd), static_cast<long long>(nh), static_cast<long long>(nkv), ctx, T, threads,
                isas[i] ? "avx512" : "avx2  ", s * 1e3, flops / s / 1e9);
  }
  dev.value()->release(km.value());
  dev.value()->release(vm.value());
  return 0;
}
