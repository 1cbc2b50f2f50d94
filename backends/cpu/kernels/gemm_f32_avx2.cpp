// gemm_f32.h's AVX2 kernel: 2 rows x 2 columns a pass, each pair's two chains in two 256-bit
// registers (8 accumulators, 4 row and 2 column registers: 14 of AVX2's 16). Compiled with
// -mavx2 -mfma -mf16c (see CMakeLists.txt); only called when the CPU has them.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/kernels/dot_avx2.h"
#include "backends/cpu/kernels/gemm_f32.h"

namespace kestrel::cpu {
namespace {

// Weight rows as stored, eight values (or one) as F32; the conversions are exact.
struct F32W {
  static __m256 load8(const void* r, int64_t i) { return _mm256_loadu_ps(static_cast<const float*>(r) + i); }
  static float value(const void* r, int64_t i) { return static_cast<const float*>(r)[i]; }
};
struct F16W {
  static __m256 load8(const void* r, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(r) + i)));
  }
  static float value(const void* r, int64_t i) { return _cvtsh_ss(static_cast<const uint16_t*>(r)[i]); }
};
struct BF16W {
  static __m256 load8(const void* r, int64_t i) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(r) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float value(const void* r, int64_t i) {
    const uint32_t bits = uint32_t{static_cast<const uint16_t*>(r)[i]} << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};

template <class W, int R, int C>
void block(const void* const* w, const float* const* x, int64_t K, float* y, int64_t ldy) {
  __m256 a0[R][C], a1[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) a0[r][c] = a1[r][c] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= K; i += 16) {
    __m256 wa[R], wb[R];
    for (int r = 0; r < R; ++r) wa[r] = W::load8(w[r], i), wb[r] = W::load8(w[r], i + 8);
    for (int c = 0; c < C; ++c) {
      const __m256 xa = _mm256_loadu_ps(x[c] + i), xb = _mm256_loadu_ps(x[c] + i + 8);
      for (int r = 0; r < R; ++r) {
        a0[r][c] = _mm256_fmadd_ps(wa[r], xa, a0[r][c]);
        a1[r][c] = _mm256_fmadd_ps(wb[r], xb, a1[r][c]);
      }
    }
  }
  if (i + 8 <= K) {
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) a0[r][c] = _mm256_fmadd_ps(W::load8(w[r], i), _mm256_loadu_ps(x[c] + i), a0[r][c]);
    i += 8;
  }
  for (int r = 0; r < R; ++r) {
    float tail[8];
    for (int64_t j = i; j < K; ++j) tail[j - i] = W::value(w[r], j);
    for (int c = 0; c < C; ++c) y[c * ldy + r] = dot_f32_avx2_finish(a0[r][c], a1[r][c], tail, x[c] + i, K - i);
  }
}

template <class W, int R>
void rows(const void* const* w, const float* x, int64_t ldx, int64_t nc, int64_t K, float* y, int64_t ldy) {
  int64_t c = 0;
  for (; c + 2 <= nc; c += 2) {
    const float* xc[2] = {x + c * ldx, x + (c + 1) * ldx};
    block<W, R, 2>(w, xc, K, y + c * ldy, ldy);
  }
  if (c < nc) {
    const float* xc[1] = {x + c * ldx};
    block<W, R, 1>(w, xc, K, y + c * ldy, ldy);
  }
}

template <class W>
void gemm(const void* const* w, int nr, const float* x, int64_t ldx, int64_t nc, int64_t K, float* y, int64_t ldy) {
  int r = 0;
  for (; r + 2 <= nr; r += 2) rows<W, 2>(w + r, x, ldx, nc, K, y + r, ldy);
  if (r < nr) rows<W, 1>(w + r, x, ldx, nc, K, y + r, ldy);
}

}  // namespace

void gemm_f32_avx2(DType wt, const void* const* w, int nr, const float* x, int64_t ldx, int64_t nc, int64_t K,
                   float* y, int64_t ldy) {
  switch (wt) {
    case DType::F16: return gemm<F16W>(w, nr, x, ldx, nc, K, y, ldy);
    case DType::BF16: return gemm<BF16W>(w, nr, x, ldx, nc, K, y, ldy);
    default: return gemm<F32W>(w, nr, x, ldx, nc, K, y, ldy);
  }
}

}  // namespace kestrel::cpu
#endif
