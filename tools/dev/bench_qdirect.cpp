// Throughput of one fused decode kernel (qgemm.h's qdirect_dot) on one thread: a random weight
// matrix of the given type and shape times 1-8 activation columns, repeated. A small matrix
// (e.g. K 2048, N 64: 72 KB of Q4_0) measures the kernel's arithmetic from cache, a large one
// (512 MiB) its speed from DRAM. Not a test; docs/PERF.md quotes it.
//
//   kestrel_bench_qdirect TYPE K N [REPS] [COLS]      e.g.  q4_0 2048 64 20000   or   q4_0 2048 262144 3
// TYPE may also be q4_0_r8, q4_K_r8, q8_0_r8 or q6_K_r8: Q4_0 / Q4_K / Q8_0 / Q6_K in the CPU backend's repacked
// layouts. KESTREL_NO_AVX512=1 measures the AVX2 kernels on a CPU that has AVX-512.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include <sys/mman.h>

#include "backends/cpu/kernels/qgemm.h"
#include "backends/cpu/simd.h"
#include "backends/cpu/repacked.h"
#include "tensor/dtype.h"

using namespace kestrel;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s TYPE K N [REPS] [COLS]\n", argv[0]);
    return 2;
  }
  DType t{};
  // q4_0_r8 / q4_K_r8 / q8_0_r8 / q6_K_r8: the CPU backend's load-time layouts (not file types, so named here).
  bool found = true;
  if (std::strcmp(argv[1], "q4_0_r8") == 0) {
    t = cpu::Q4_0_R8;
  } else if (std::strcmp(argv[1], "q4_K_r8") == 0) {
    t = cpu::Q4_K_R8;
  } else if (std::strcmp(argv[1], "q8_0_r8") == 0) {
    t = cpu::Q8_0_R8;
  } else if (std::strcmp(argv[1], "q6_K_r8") == 0) {
    t = cpu::Q6_K_R8;
  } else {
    found = dtype_from_name(argv[1], &t);
  }
  const bool grouped = cpu::is_grouped(t);
  const int64_t K = std::atoll(argv[2]), N = std::atoll(argv[3]);
  const int reps = argc > 4 ? std::atoi(argv[4]) : 100;
  const int64_t cols = argc > 5 ? std::atoll(argv[5]) : 1;
  // The grouped ids are backend-private (dtype_info knows none): sizes are the file type's.
  const DTypeInfo& ti = dtype_info(cpu::plain_type(t));
  if (!found || !cpu::has_avx2_fma() || K <= 0 || N <= 0 || cols < 1 || cols > 8 ||
      !cpu::qdirect_supports(t, K, K / ti.block_size * ti.type_size)) {
    std::fprintf(stderr, "%s: no fused kernel for %s, K %lld (or no AVX2, or COLS outside 1-8)\n", argv[0], argv[1],
                 static_cast<long long>(K));
    return 1;
  }
  const int64_t rb = K / ti.block_size * ti.type_size;
  // Huge pages, as the CPU backend places weights (backends/cpu/weights_cpu.h): on 4 KiB pages a large
  // matrix measures page walks as much as DRAM.
  const size_t w_bytes = static_cast<size_t>(rb * N);
  void* map = mmap(nullptr, w_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return 1;
  madvise(map, w_bytes, MADV_HUGEPAGE);
  const std::span<uint8_t> w(static_cast<uint8_t*>(map), w_bytes);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> row(static_cast<size_t>(K));
  const FromFloatFn quantize = dtype_info(cpu::plain_type(t)).from_float;
  for (int64_t r = 0; r < N; ++r) {
    for (float& v : row) v = nd(rng);
    quantize(row.data(), w.data() + r * rb, K);
  }
  if (grouped) {
    if (!cpu::grouped_fits(cpu::plain_type(t), K, N)) return 1;
    const std::vector<uint8_t> plain(w.begin(), w.end());
    cpu::to_grouped(cpu::plain_type(t), plain.data(), K, N, w.data());
  }
  cpu::QuantizedActs xa;
  xa.resize(K, cols);
  for (int64_t c = 0; c < cols; ++c) {
    for (float& v : row) v = nd(rng);
    cpu::qgemm_quantize_acts(ti.vec_dot_type, row.data(), K, xa, c);
  }
  std::vector<float> y(static_cast<size_t>(N * cols));
  cpu::qdirect_dot(t, w.data(), rb, 0, N, xa, cols, y.data(), N);  // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) cpu::qdirect_dot(t, w.data(), rb, 0, N, xa, cols, y.data(), N);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double blocks = static_cast<double>(N) * static_cast<double>(K / 32) * reps;
  std::printf("%s K=%lld N=%lld cols=%lld: %.2f GB/s of weights, %.3f ns per 32 values\n",
              grouped ? argv[1] : dtype_name(t),
              static_cast<long long>(K), static_cast<long long>(N), static_cast<long long>(cols),
              static_cast<double>(rb * N) * reps / s / 1e9, s / blocks * 1e9);
  return 0;
}
