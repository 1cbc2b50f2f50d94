// MATMUL on the CPU. Quantized weights take the integer path of qgemm.h when the CPU has AVX2:
// activations are quantized once per call; for batches up to a per-type size (decode, speculative
// verification, short prompts), every type but Q2_K/Q3_K takes a fused kernel that decodes the
// blocks in registers; otherwise each thread unpacks a chunk
// of its weight rows (read from memory once), interleaves them 8 rows at a time and runs the tiled
// 8-row x 3-column micro-kernels of qtile_avx2.cpp over every column. All of them follow one
// arithmetic to the bit (qgemm.h), so a column's result does not depend on the batch around it.
// Other types (F32/F16/BF16, or no AVX2) dequantize one row at a time into an L1-resident buffer
// and take FP32 dot products.
#include "backends/cpu/kernels/kernels.h"

#include <algorithm>
#include <vector>

#include "backends/cpu/kernels/qgemm.h"
#include "backends/cpu/simd.h"
#include "backends/ref/ops_ref.h"

namespace kestrel::cpu {
namespace {

constexpr int64_t kRowChunk = 16;  // rows unpacked together (a multiple of 8): 16 x K bytes stays in L2
constexpr int64_t kOwnActsCols = 4;  // up to this many columns every thread quantizes them itself

[[maybe_unused]] void matmul_quantized(const Node& n, ThreadPool& pool) {
  const Tensor *w = n.src[0], *x = n.src[1];
  const int64_t K = w->ne[0], N = w->ne[1], M = x->ne[1];
  const DType vdt = dtype_info(w->type).vec_dot_type;
  const int64_t x_stride = static_cast<int64_t>(x->nb[1] / sizeof(float));
  const int64_t y_stride = static_cast<int64_t>(n.dst->nb[1] / sizeof(float));
  auto quantize = [&](QuantizedActs& acts, int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) qgemm_quantize_acts(vdt, x->f32(0) + c * x_stride, K, acts, c);
  };
  // Up to a type's crossover (decode, speculative verification, short prompts) the fused kernels:
  // they read the weights once and write nothing. Larger batches reuse each unpacked chunk across
  // all columns, which measured faster there (docs/PERF.md).
  const bool fused = M <= qdirect_max_cols(w->type) && qdirect_supports(w->type, K, static_cast<int64_t>(w->nb[1]));
  // Whole groups of 8 rows (the kernels' unit), in chunks that a thread done early can take
  // over: decode is bound by memory, and a thread left waiting at the end wastes it.
  const int64_t groups = (N + 7) / 8;
  ChunkedSplit work(groups, pool.size(), std::max<int64_t>(1, groups / (16 * pool.size())));
  auto fused_rows = [&](int ith, const QuantizedActs& acts) {
    qdirect_prepare(w->type, acts, M);
    int64_t g0, g1;
    while (work.next(ith, &g0, &g1))
      qdirect_rows(w->type, static_cast<const uint8_t*>(w->data), static_cast<int64_t>(w->nb[1]), 8 * g0,
                   std::min(N, 8 * g1), acts, M, n.dst->f32(0), y_stride);
  };
  // Decode: each thread quantizes the few columns for itself (a microsecond) in the same pass as
  // its rows: one barrier per matmul instead of two.
  if (fused && M <= kOwnActsCols) {
    pool.run([&](int ith, int) {
      thread_local QuantizedActs mine;
      mine.resize(K, M);
      quantize(mine, 0, M);
      fused_rows(ith, mine);
    });
    return;
  }
  static thread_local QuantizedActs xa;  // owned by the calling thread, read by all
  xa.resize(K, M);
  QuantizedActs& acts = xa;
  pool.run([&](int ith, int nth) {
    int64_t c0, c1;
    ThreadPool::split(M, ith, nth, &c0, &c1);
    quantize(acts, c0, c1);
  });
  if (fused) {
    pool.run([&](int ith, int) { fused_rows(ith, acts); });
    return;
  }
  // Prefill: each thread unpacks chunks of its rows (weights read from memory once), interleaves
  // them 8 rows at a time and runs the 8-row x 3-column micro-kernels over every column. Rows past
  // the last multiple of 8 take the untiled dot products.
  const int64_t n_groups = N / 8;
  pool.run([&](int ith, int nth) {
    thread_local UnpackedRows wu;
    thread_local InterleavedRows wi;
    wu.resize(kRowChunk, K);
    wi.resize(kRowChunk / 8, K);
    int64_t g0, g1;
    ThreadPool::split(n_groups, ith, nth, &g0, &g1);
    for (int64_t r = 8 * g0; r < 8 * g1; r += kRowChunk) {
      const int64_t nr = std::min(kRowChunk, 8 * g1 - r);
      qgemm_unpack(w->type, static_cast<const uint8_t*>(w->data), static_cast<int64_t>(w->nb[1]), r, nr, wu);
      qgemm_interleave(wu, nr / 8, wi);
      qgemm_tiles(qgemm_arith_type(w->type), wi, nr / 8, acts, 0, M, n.dst->f32(0) + r, y_stride);
    }
    if (ith == nth - 1 && N % 8 != 0) {
      const int64_t r = 8 * n_groups, nr = N - r;
      qgemm_unpack(w->type, static_cast<const uint8_t*>(w->data), static_cast<int64_t>(w->nb[1]), r, nr, wu);
      qgemm_dot(qgemm_arith_type(w->type), wu, nr, acts, 0, M, n.dst->f32(0) + r, y_stride);
    }
  });
}

}  // namespace

void matmul(const Node& n, ThreadPool& pool) {
  const Tensor *w = n.src[0], *x = n.src[1];
  const int64_t K = w->ne[0], N = w->ne[1], M = x->ne[1];
#if defined(__x86_64__)
  if (has_avx2_fma() && qgemm_supports(w->type, K)) {
    matmul_quantized(n, pool);
    return;
  }
#endif
  const DTypeInfo& ti = dtype_info(w->type);
  static thread_local std::vector<float> xr;  // owned by the calling thread, read by all
  xr.resize(static_cast<size_t>(K * M));
  float* xr_data = xr.data();
  const DotF32Fn dot = dot_f32_kernel();
  pool.run([&](int ith, int nth) {
    int64_t m0, m1;
    ThreadPool::split(M, ith, nth, &m0, &m1);
    for (int64_t m = m0; m < m1; ++m) ref::round_activations(ti.vec_dot_type, x->f32(m), xr_data + m * K, K);
  });
  pool.run([&](int ith, int nth) {
    thread_local std::vector<float> wrow;
    wrow.resize(static_cast<size_t>(K));
    int64_t r0, r1;
    ThreadPool::split(N, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r) {
      const float* wr = w->type == DType::F32 ? reinterpret_cast<const float*>(w->row(r)) : wrow.data();
      if (w->type != DType::F32) ti.to_float(w->row(r), wrow.data(), K);
      for (int64_t m = 0; m < M; ++m) n.dst->f32(m)[r] = dot(wr, xr_data + m * K, K);
    }
  });
}

}  // namespace kestrel::cpu
