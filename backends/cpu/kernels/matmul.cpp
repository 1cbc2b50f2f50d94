// MATMUL on the CPU. Quantized weights take the integer path of qgemm.h when the CPU has AVX2:
// activations are quantized once per call; for batches up to a per-type size (decode, speculative
// verification, short prompts), every type but Q2_K/Q3_K takes a fused kernel that decodes the
// blocks in registers; otherwise each thread unpacks a chunk
// of its weight rows (read from memory once), interleaves them 8 rows at a time and runs the tiled
// 8-row x 3-column micro-kernels of qtile_avx2.cpp over every column. All of them follow one
// arithmetic to the bit (qgemm.h), so a column's result does not depend on the batch around it.
// Other types (F32/F16/BF16 and the rest) convert rows to F32 (F16 and BF16 eight values at a
// time: convert_avx2.cpp) a few at a time and take FP32 products in the register-blocked kernels
// of gemm_f32.h, each result dot_f32_avx2's bits; without AVX2, one row at a time and a portable
// dot per column.
#include "backends/cpu/kernels/kernels.h"

#include <algorithm>
#include <span>
#include <vector>

#include "backends/cpu/kernels/gemm_f32.h"
#include "backends/cpu/kernels/qgemm.h"
#include "backends/cpu/repacked.h"
#include "backends/cpu/simd.h"
#include "backends/ref/ops_ref.h"

namespace kestrel::cpu {
namespace {

constexpr int64_t kRowChunk = 16;  // rows unpacked together (a multiple of 8): 16 x K bytes stays in L2
constexpr int64_t kOwnActsCols = 4;  // up to this many columns every thread quantizes them itself

// Up to a type's crossover (decode, speculative verification, short prompts) the fused kernels:
// they read the weights once and write nothing. Larger batches reuse each unpacked chunk across
// all columns, which measured faster there (docs/PERF.md).
[[maybe_unused]] bool fused_fits(const Node& n) {
  const Tensor* w = n.src[0];
  return n.src[1]->ne[1] <= qdirect_max_cols(kernel_type(*w)) &&
         qdirect_supports(kernel_type(*w), w->ne[0], static_cast<int64_t>(w->nb[1]));
}
// True when a MATMUL takes fused_pass with each thread quantizing x itself: few columns (decode),
// a fused kernel for its type.
[[maybe_unused]] bool decode_pass_fits(const Node& n) {
  return has_avx2_fma() && qgemm_supports(kernel_type(*n.src[0]), n.src[0]->ne[0]) && n.src[1]->ne[1] <= kOwnActsCols &&
         fused_fits(n);
}

// The fused kernels over matmuls of one input x and one weight type (q, k, v; gate, up) as one
// pass: chunks of 8-row groups across the matrices in order, each thread its own share first
// (ChunkedSplit). Decode is bound by memory, and a thread left waiting at a barrier, or starting
// a new stream, wastes it: one barrier serves all the matrices. With `shared` null (a few
// columns) every thread quantizes and arranges x for itself, a microsecond, in the same pass;
// `shared` (a prompt's columns) comes quantized and arranged once for all threads.
[[maybe_unused]] void fused_pass(std::span<const Node* const> nodes, ThreadPool& pool, const QuantizedActs* shared) {
  const Tensor* x = nodes[0]->src[1];
  const DType type = kernel_type(*nodes[0]->src[0]);
  const DType vdt = dtype_info(nodes[0]->src[0]->type).vec_dot_type;
  const int64_t K = x->ne[0], M = x->ne[1];
  const int64_t x_stride = static_cast<int64_t>(x->nb[1] / sizeof(float));
  std::vector<int64_t> first(nodes.size() + 1, 0);  // group index where each matrix starts
  for (size_t j = 0; j < nodes.size(); ++j) first[j + 1] = first[j] + (nodes[j]->src[0]->ne[1] + 7) / 8;
  const int64_t groups = first.back();
  ChunkedSplit work(groups, pool.size(), std::max<int64_t>(1, groups / (16 * pool.size())));
  pool.run([&](int ith, int) {
    thread_local QuantizedActs mine;
    if (!shared) {
      mine.resize(K, M);
      for (int64_t c = 0; c < M; ++c) qgemm_quantize_acts(vdt, x->f32(0) + c * x_stride, K, mine, c);
      qdirect_prepare(type, mine, M);
      qdirect_arrange(type, mine, 0, M);
    }
    const QuantizedActs& acts = shared ? *shared : mine;
    int64_t g0, g1;
    while (work.next(ith, &g0, &g1)) {
      while (g0 < g1) {  // the piece of [g0, g1) in each matrix it crosses
        const size_t j = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), g0) - first.begin()) - 1;
        const Node& n = *nodes[j];
        const Tensor* w = n.src[0];
        const int64_t end = std::min(g1, first[j + 1]);
        qdirect_rows(type, static_cast<const uint8_t*>(w->data), static_cast<int64_t>(w->nb[1]), 8 * (g0 - first[j]),
                     std::min(w->ne[1], 8 * (end - first[j])), acts, M, n.dst->f32(0),
                     static_cast<int64_t>(n.dst->nb[1] / sizeof(float)));
        g0 = end;
      }
    }
  });
}

[[maybe_unused]] void matmul_quantized(const Node& n, ThreadPool& pool) {
  const Tensor *w = n.src[0], *x = n.src[1];
  const int64_t K = w->ne[0], N = w->ne[1], M = x->ne[1];
  const DType vdt = dtype_info(w->type).vec_dot_type;
  const DType wt = kernel_type(*w);
  const int64_t x_stride = static_cast<int64_t>(x->nb[1] / sizeof(float));
  const int64_t y_stride = static_cast<int64_t>(n.dst->nb[1] / sizeof(float));
  const bool fused = fused_fits(n);
  const Node* one[] = {&n};
  if (fused && M <= kOwnActsCols) return fused_pass(one, pool, nullptr);
  static thread_local QuantizedActs xa;  // owned by the calling thread, read by all
  xa.resize(K, M);
  QuantizedActs& acts = xa;
  if (fused) qdirect_prepare(wt, acts, M);  // one arrangement for all threads, made with the codes
  pool.run([&](int ith, int nth) {
    int64_t c0, c1;
    ThreadPool::split(M, ith, nth, &c0, &c1);
    for (int64_t c = c0; c < c1; ++c) qgemm_quantize_acts(vdt, x->f32(0) + c * x_stride, K, acts, c);
    if (fused) qdirect_arrange(wt, acts, c0, c1);
  });
  if (fused) return fused_pass(one, pool, &acts);
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
      qgemm_unpack(wt, static_cast<const uint8_t*>(w->data), static_cast<int64_t>(w->nb[1]), r, nr, wu);
      qgemm_interleave(wu, nr / 8, wi);
      qgemm_tiles(qgemm_arith_type(wt), wi, nr / 8, acts, 0, M, n.dst->f32(0) + r, y_stride);
    }
    if (ith == nth - 1 && N % 8 != 0) {
      const int64_t r = 8 * n_groups, nr = N - r;
      qgemm_unpack(wt, static_cast<const uint8_t*>(w->data), static_cast<int64_t>(w->nb[1]), r, nr, wu);
      qgemm_dot(qgemm_arith_type(wt), wu, nr, acts, 0, M, n.dst->f32(0) + r, y_stride);
    }
  });
}

// The float path with a blocked kernel (gemm_f32.h): each thread's rows kGemmF32Rows at a time.
// F32 rows are read in place; F16 and BF16 rows too, converted in registers, up to
// kReadAsStoredCols columns (decode: nothing written and read back); otherwise rows are converted
// to F32 once per panel of columns, whose activations (about 1 MiB) stay in the core's L2 while
// every row block of the thread passes over them.
void float_gemm(const Node& n, GemmF32Fn gemm, ToFloatFn to_float, const float* xr, ThreadPool& pool) {
  constexpr int64_t kReadAsStoredCols = 4;
  const Tensor* w = n.src[0];
  const int64_t K = w->ne[0], N = w->ne[1], M = n.src[1]->ne[1];
  const int64_t y_stride = static_cast<int64_t>(n.dst->nb[1] / sizeof(float));
  const bool as_stored = w->type == DType::F32 ||
                         ((w->type == DType::F16 || w->type == DType::BF16) && M <= kReadAsStoredCols);
  const DType wt = as_stored ? w->type : DType::F32;
  const int64_t panel = as_stored ? M : std::clamp<int64_t>((int64_t{1} << 20) / (4 * K) / 4 * 4, 4, 64);
  pool.run([&](int ith, int nth) {
    thread_local std::vector<float> wbuf;
    if (!as_stored) wbuf.resize(static_cast<size_t>(kGemmF32Rows * K));
    int64_t r0, r1;
    ThreadPool::split(N, ith, nth, &r0, &r1);
    for (int64_t c0 = 0; c0 < M; c0 += panel) {
      const int64_t nc = std::min(panel, M - c0);
      for (int64_t r = r0; r < r1; r += kGemmF32Rows) {
        const int nr = static_cast<int>(std::min<int64_t>(kGemmF32Rows, r1 - r));
        const void* rows[kGemmF32Rows];
        for (int j = 0; j < nr; ++j) {
          if (as_stored) {
            rows[j] = w->row(r + j);
          } else {
            to_float(w->row(r + j), wbuf.data() + j * K, K);
            rows[j] = wbuf.data() + j * K;
          }
        }
        gemm(wt, rows, nr, xr + c0 * K, K, nc, K, n.dst->f32(c0) + r, y_stride);
      }
    }
  });
}

}  // namespace

size_t matmuls(const std::vector<Node>& nodes, size_t i, size_t end, ThreadPool& pool) {
#if defined(__x86_64__)
  const Node& n = nodes[i];
  if (decode_pass_fits(n)) {
    std::vector<const Node*> run = {&n};
    while (i + run.size() < end) {
      const Node& m = nodes[i + run.size()];
      if (m.op != Op::MATMUL || m.src[1] != n.src[1] || kernel_type(*m.src[0]) != kernel_type(*n.src[0]) || !decode_pass_fits(m)) break;
      run.push_back(&m);
    }
    fused_pass(run, pool, nullptr);
    return run.size();
  }
#endif
  matmul(nodes[i], pool);
  return 1;
}

void matmul(const Node& n, ThreadPool& pool) {
  const Tensor *w = n.src[0], *x = n.src[1];
  const int64_t K = w->ne[0], N = w->ne[1], M = x->ne[1];
#if defined(__x86_64__)
  if (has_avx2_fma() && qgemm_supports(kernel_type(*w), K)) {
    matmul_quantized(n, pool);
    return;
  }
#endif
  const DTypeInfo& ti = dtype_info(w->type);
  ToFloatFn to_float = ti.to_float;  // the same values, eight at a time where the CPU can
#if defined(__x86_64__)
  if (has_avx2_fma() && w->type == DType::F16) to_float = f16_to_f32_avx2;
  if (has_avx2_fma() && w->type == DType::BF16) to_float = bf16_to_f32_avx2;
#endif
  static thread_local std::vector<float> xr;  // owned by the calling thread, read by all
  xr.resize(static_cast<size_t>(K * M));
  float* xr_data = xr.data();
  pool.run([&](int ith, int nth) {
    int64_t m0, m1;
    ThreadPool::split(M, ith, nth, &m0, &m1);
    for (int64_t m = m0; m < m1; ++m) ref::round_activations(ti.vec_dot_type, x->f32(m), xr_data + m * K, K);
  });
  if (const GemmF32Fn gemm = gemm_f32_kernel()) {
    float_gemm(n, gemm, to_float, xr_data, pool);
    return;
  }
  const DotF32Fn dot = dot_f32_kernel();
  pool.run([&](int ith, int nth) {
    thread_local std::vector<float> wrow;
    wrow.resize(static_cast<size_t>(K));
    int64_t r0, r1;
    ThreadPool::split(N, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r) {
      const float* wr = w->type == DType::F32 ? reinterpret_cast<const float*>(w->row(r)) : wrow.data();
      if (w->type != DType::F32) to_float(w->row(r), wrow.data(), K);
      for (int64_t m = 0; m < M; ++m) n.dst->f32(m)[r] = dot(wr, xr_data + m * K, K);
    }
  });
}

}  // namespace kestrel::cpu
