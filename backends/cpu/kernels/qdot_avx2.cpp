// The integer dot products of qgemm.h (AVX2) and the activation quantizers they read.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/kernels/hsum_avx2.h"
#include "backends/cpu/kernels/qgemm.h"
#include "backends/ref/quant_blocks.h"
#include "backends/ref/quants.h"
#include "core/fp16.h"

namespace kestrel::cpu {
namespace {

// Eight int32 partial sums of one 32-value unit: products of adjacent pairs (maddubs), then
// pairs of those weighted by the halves' sub-scales (madd): lanes 0-3 cover values 0-15.
template <bool kSigned, bool kSub>
inline __m256i unit_sums(const uint8_t* qw, const int8_t* qx, const int16_t* sub) {
  const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qw));
  const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx));
  __m256i p;
  if constexpr (kSigned) p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
  else p = _mm256_maddubs_epi16(w, x);
  const __m256i s = kSub ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sub)) : _mm256_set1_epi16(1);
  return _mm256_madd_epi16(p, s);
}

// The eight units' totals, one per lane, from their partial-sum vectors.
inline __m256i totals8(__m256i s0, __m256i s1, __m256i s2, __m256i s3, __m256i s4, __m256i s5, __m256i s6,
                       __m256i s7) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(s0, s1), _mm256_hadd_epi32(s2, s3));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(s4, s5), _mm256_hadd_epi32(s6, s7));
  const __m128i ta = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
  const __m128i tb = _mm_add_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
  return _mm256_set_m128i(tb, ta);
}

template <bool kSigned, bool kSub, bool kMn>
float dot_row(const uint8_t* qw, const float* dw, const int16_t* sub, const float* mn, const int8_t* qx,
              const float* dx, const float* xs, int64_t K) {
  const int64_t nu = K / 32;
  __m256 acc = _mm256_setzero_ps();
  int64_t u = 0;
  for (; u + 8 <= nu; u += 8) {
    const uint8_t* w = qw + 32 * u;
    const int8_t* x = qx + 32 * u;
    const int16_t* s = sub + 16 * u;
    const __m256i t = totals8(unit_sums<kSigned, kSub>(w, x, s), unit_sums<kSigned, kSub>(w + 32, x + 32, s + 16),
                              unit_sums<kSigned, kSub>(w + 64, x + 64, s + 32),
                              unit_sums<kSigned, kSub>(w + 96, x + 96, s + 48),
                              unit_sums<kSigned, kSub>(w + 128, x + 128, s + 64),
                              unit_sums<kSigned, kSub>(w + 160, x + 160, s + 80),
                              unit_sums<kSigned, kSub>(w + 192, x + 192, s + 96),
                              unit_sums<kSigned, kSub>(w + 224, x + 224, s + 112));
    const __m256 scale = _mm256_mul_ps(_mm256_loadu_ps(dw + u), _mm256_loadu_ps(dx + u));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), scale, acc);
  }
  float r = hsum(acc);
  for (; u < nu; ++u)
    r += dw[u] * dx[u] * static_cast<float>(hsum_i32(unit_sums<kSigned, kSub>(qw + 32 * u, qx + 32 * u, sub + 16 * u)));
  if constexpr (kMn) {
    const int64_t ng = K / 16;
    __m256 am = _mm256_setzero_ps();
    int64_t g = 0;
    for (; g + 8 <= ng; g += 8) am = _mm256_fmadd_ps(_mm256_loadu_ps(mn + g), _mm256_loadu_ps(xs + g), am);
    r += hsum(am);
    for (; g < ng; ++g) r += mn[g] * xs[g];
  }
  return r;
}

using DotRowFn = float (*)(const uint8_t*, const float*, const int16_t*, const float*, const int8_t*, const float*,
                           const float*, int64_t);

DotRowFn pick(const UnpackedRows& w) {
  if (w.is_signed) return w.has_sub ? dot_row<true, true, false> : dot_row<true, false, false>;
  if (w.has_sub) return w.has_mn ? dot_row<false, true, true> : dot_row<false, true, false>;
  return w.has_mn ? dot_row<false, false, true> : dot_row<false, false, false>;
}

}  // namespace

void QuantizedActs::resize(int64_t k, int64_t cols) {
  K = k;
  q.resize(static_cast<size_t>(k * cols));
  dx.resize(static_cast<size_t>(k / 32 * cols));
  xs.resize(static_cast<size_t>(k / 16 * cols));
  bs.resize(static_cast<size_t>(k / 16 * cols));
}

void qgemm_quantize_acts(DType vdt, const float* xc, int64_t K, QuantizedActs& out, int64_t c) {
  {
    int8_t* q = out.q.data() + c * K;
    float* dx = out.dx.data() + c * K / 32;
    float* xs = out.xs.data() + c * K / 16;
    int32_t* bs = out.bs.data() + c * K / 16;
    if (vdt == DType::Q8_K) {
      for (int64_t s = 0; s < K / QK_K; ++s) {
        block_q8_K b;
        ref::quantize_q8_k(xc + s * QK_K, &b, QK_K);
        std::memcpy(q + s * QK_K, b.qs, QK_K);
        for (int j = 0; j < 8; ++j) dx[8 * s + j] = b.d;
        for (int g = 0; g < 16; ++g) xs[16 * s + g] = b.d * b.bsums[g], bs[16 * s + g] = b.bsums[g];
      }
      return;
    }
    // Q8_0 / Q8_1: llama.cpp's x86 activation quantizer, exactly as ref::round_activations.
    for (int64_t u = 0; u < K / 32; ++u) {
      const float* xb = xc + 32 * u;
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
      const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
      const float dh = round_fp16(amax / 127.0f);
      int sum[2] = {0, 0};
      for (int j = 0; j < 32; ++j) {
        const int v = static_cast<int>(std::nearbyint(xb[j] * id));
        q[32 * u + j] = static_cast<int8_t>(v);
        sum[j / 16] += v;
      }
      dx[u] = dh;
      xs[2 * u] = dh * static_cast<float>(sum[0]);
      xs[2 * u + 1] = dh * static_cast<float>(sum[1]);
      bs[2 * u] = sum[0];
      bs[2 * u + 1] = sum[1];
    }
  }
}

void qgemm_dot(const UnpackedRows& w, int64_t n_rows, const QuantizedActs& x, int64_t c0, int64_t c1, float* y,
               int64_t y_stride) {
  const int64_t K = w.K;
  const DotRowFn dot = pick(w);
  for (int64_t c = c0; c < c1; ++c) {
    const int8_t* qx = x.q.data() + c * K;
    const float* dx = x.dx.data() + c * K / 32;
    const float* xs = x.xs.data() + c * K / 16;
    float* yc = y + c * y_stride;
    for (int64_t r = 0; r < n_rows; ++r)
      yc[r] = dot(w.q.data() + r * K, w.d.data() + r * K / 32, w.sub.data() + r * K / 2, w.mn.data() + r * K / 16,
                  qx, dx, xs, K);
  }
}

}  // namespace kestrel::cpu
#endif
