// gemm_f32.h's AVX-512 kernel: 4 rows x 4 columns a pass. One 512-bit register holds a pair's
// two chains (lanes 0-7: dot_f32_avx2's acc0, 8-15: its acc1), so 16 values take one FMA, and 16
// accumulators, 4 row registers and a column's leave room in the 32 registers. The eight values
// after the last 16 go to the first chain only, by a masked FMA; the finish is dot_f32_avx2's.
#include "backends/cpu/kernels/gemm_f32.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512VL__)
// GCC 12's avx512fintrin.h trips its own -W(maybe-)uninitialized on its _mm*_undefined_* (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstring>

#include "backends/cpu/kernels/dot_avx2.h"

namespace kestrel::cpu {
namespace {

const uint16_t* u16(const void* r) { return static_cast<const uint16_t*>(r); }
__m256i ld16x16(const void* r, int64_t i) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u16(r) + i)); }
__m128i ld16x8(const void* r, int64_t i) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(u16(r) + i)); }

// Weight rows as stored, sixteen, eight or one value(s) as F32; the conversions are exact.
struct F32W {
  static __m512 load16(const void* r, int64_t i) { return _mm512_loadu_ps(static_cast<const float*>(r) + i); }
  static __m256 load8(const void* r, int64_t i) { return _mm256_loadu_ps(static_cast<const float*>(r) + i); }
  static float value(const void* r, int64_t i) { return static_cast<const float*>(r)[i]; }
};
struct F16W {
  static __m512 load16(const void* r, int64_t i) { return _mm512_cvtph_ps(ld16x16(r, i)); }
  static __m256 load8(const void* r, int64_t i) { return _mm256_cvtph_ps(ld16x8(r, i)); }
  static float value(const void* r, int64_t i) { return _cvtsh_ss(u16(r)[i]); }
};
struct BF16W {
  static __m512 load16(const void* r, int64_t i) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(ld16x16(r, i)), 16));
  }
  static __m256 load8(const void* r, int64_t i) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(ld16x8(r, i)), 16));
  }
  static float value(const void* r, int64_t i) {
    const uint32_t bits = uint32_t{u16(r)[i]} << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};

template <class W, int R, int C>
void block(const void* const* w, const float* const* x, int64_t K, float* y, int64_t ldy) {
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= K; i += 16) {
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = W::load16(w[r], i);
    for (int c = 0; c < C; ++c) {
      const __m512 xv = _mm512_loadu_ps(x[c] + i);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(wv[r], xv, acc[r][c]);
    }
  }
  if (i + 8 <= K) {
    constexpr __mmask16 kFirst = 0x00FF;  // the first chain's lanes
    for (int r = 0; r < R; ++r) {
      const __m512 wv = _mm512_zextps256_ps512(W::load8(w[r], i));
      for (int c = 0; c < C; ++c)
        acc[r][c] = _mm512_mask3_fmadd_ps(wv, _mm512_zextps256_ps512(_mm256_loadu_ps(x[c] + i)), acc[r][c], kFirst);
    }
    i += 8;
  }
  for (int r = 0; r < R; ++r) {
    float tail[8];
    for (int64_t j = i; j < K; ++j) tail[j - i] = W::value(w[r], j);
    for (int c = 0; c < C; ++c) {
      const __m256 a0 = _mm512_castps512_ps256(acc[r][c]);
      const __m256 a1 = _mm512_castps512_ps256(_mm512_shuffle_f32x4(acc[r][c], acc[r][c], 0x0E));  // lanes 8-15
      y[c * ldy + r] = dot_f32_avx2_finish(a0, a1, tail, x[c] + i, K - i);
    }
  }
}

template <class W, int R, int C>
void columns_of(const void* const* w, const float* x, int64_t ldx, int64_t c, int64_t K, float* y, int64_t ldy) {
  const float* xc[C];
  for (int j = 0; j < C; ++j) xc[j] = x + (c + j) * ldx;
  block<W, R, C>(w, xc, K, y + c * ldy, ldy);
}

template <class W, int R>
void rows(const void* const* w, const float* x, int64_t ldx, int64_t nc, int64_t K, float* y, int64_t ldy) {
  int64_t c = 0;
  for (; c + 4 <= nc; c += 4) columns_of<W, R, 4>(w, x, ldx, c, K, y, ldy);
  switch (nc - c) {
    case 3: columns_of<W, R, 3>(w, x, ldx, c, K, y, ldy); break;
    case 2: columns_of<W, R, 2>(w, x, ldx, c, K, y, ldy); break;
    case 1: columns_of<W, R, 1>(w, x, ldx, c, K, y, ldy); break;
    default: break;
  }
}

template <class W>
void gemm(const void* const* w, int nr, const float* x, int64_t ldx, int64_t nc, int64_t K, float* y, int64_t ldy) {
  switch (nr) {
    case 4: rows<W, 4>(w, x, ldx, nc, K, y, ldy); break;
    case 3: rows<W, 3>(w, x, ldx, nc, K, y, ldy); break;
    case 2: rows<W, 2>(w, x, ldx, nc, K, y, ldy); break;
    default: rows<W, 1>(w, x, ldx, nc, K, y, ldy); break;
  }
}

}  // namespace

void gemm_f32_avx512(DType wt, const void* const* w, int nr, const float* x, int64_t ldx, int64_t nc, int64_t K,
                     float* y, int64_t ldy) {
  switch (wt) {
    case DType::F16: return gemm<F16W>(w, nr, x, ldx, nc, K, y, ldy);
    case DType::BF16: return gemm<BF16W>(w, nr, x, ldx, nc, K, y, ldy);
    default: return gemm<F32W>(w, nr, x, ldx, nc, K, y, ldy);
  }
}

}  // namespace kestrel::cpu

#elif defined(__x86_64__)  // a compiler without AVX-512: the AVX2 kernel serves

namespace kestrel::cpu {
void gemm_f32_avx512(DType wt, const void* const* w, int nr, const float* x, int64_t ldx, int64_t nc, int64_t K,
                     float* y, int64_t ldy) {
  gemm_f32_avx2(wt, w, nr, x, ldx, nc, K, y, ldy);
}
}  // namespace kestrel::cpu

#endif
