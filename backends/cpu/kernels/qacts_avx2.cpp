// The activation quantizer of qgemm.h: one column rounded to Q8_0/Q8_1/Q8_K codes, with their
// scales and the integer sums of each 16 values.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/kernels/qgemm.h"
#include "tensor/quants/quant_blocks.h"
#include "tensor/quants/quants.h"
#include "core/fp16.h"

namespace kestrel::cpu {

void QuantizedActs::resize(int64_t k, int64_t cols) {
  K = k;
  q.resize(static_cast<size_t>(k * cols));
  dx.resize(static_cast<size_t>(k / 32 * cols));
  bs.resize(static_cast<size_t>(k / 16 * cols));
}

void qgemm_quantize_acts(DType vdt, const float* xc, int64_t K, QuantizedActs& out, int64_t c) {
  int8_t* q = out.q.data() + c * K;
  float* dx = out.dx.data() + c * K / 32;
  int32_t* bs = out.bs.data() + c * K / 16;
  if (vdt == DType::Q8_K) {
    for (int64_t s = 0; s < K / QK_K; ++s) {
      block_q8_K b;
      quants::quantize_q8_k(xc + s * QK_K, &b, QK_K);
      std::memcpy(q + s * QK_K, b.qs, QK_K);
      for (int j = 0; j < 8; ++j) dx[8 * s + j] = b.d;
      for (int g = 0; g < 16; ++g) bs[16 * s + g] = b.bsums[g];
    }
    return;
  }
  // Q8_0 / Q8_1: llama.cpp's x86 activation quantizer, exactly as ref::round_activations (the
  // conversion rounds to nearest even, as nearbyint does; the plain loop was not vectorized and
  // cost 4% of decode, once per matmul).
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t u = 0; u < K / 32; ++u) {
    const float* xb = xc + 32 * u;
    __m256 v[4], m = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(xb + 8 * i), m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    const float amax = _mm_cvtss_f32(h);
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    __m256i n[4];
    for (int i = 0; i < 4; ++i) n[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], id));
    // Codes in order: packs interleave 128-bit lanes, the permute puts them back.
    const __m256i w01 = _mm256_packs_epi32(n[0], n[1]), w23 = _mm256_packs_epi32(n[2], n[3]);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i b = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w01, w23), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * u), b);
    const __m256i s01 = _mm256_add_epi32(n[0], n[1]), s23 = _mm256_add_epi32(n[2], n[3]);
    const __m128i s0 = _mm_add_epi32(_mm256_castsi256_si128(s01), _mm256_extracti128_si256(s01, 1));
    const __m128i s1 = _mm_add_epi32(_mm256_castsi256_si128(s23), _mm256_extracti128_si256(s23, 1));
    const __m128i t = _mm_hadd_epi32(_mm_hadd_epi32(s0, s1), _mm_setzero_si128());  // [sum 0-15, sum 16-31, 0, 0]
    dx[u] = round_fp16(amax / 127.0f);
    bs[2 * u] = _mm_cvtsi128_si32(t);
    bs[2 * u + 1] = _mm_extract_epi32(t, 1);
  }
}

}  // namespace kestrel::cpu
#endif
