// SILU and SWIGLU (AVX2): eight lanes per step with a polynomial exp. Decode runs them on one
// row (a single thread) per layer, where the scalar std::exp loop cost ~2% of a token.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cmath>

#include "backends/cpu/kernels/kernels.h"

namespace kestrel::cpu {
namespace {

// exp(x) for x in [-87.3, 88.7] (clamped outside): x = n ln2 + r with |r| <= ln2/2, a degree-6
// Taylor polynomial for exp(r) (relative error ~2e-7, that of expf), then 2^n in the exponent bits.
inline __m256 exp256(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.7f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);  // ln2 split in two: exact high part
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  // n in [-126, 128]: 2^n as two factors so n = 128 does not overflow the exponent field.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
  const __m256 s2 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), _mm256_set1_epi32(127)), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

inline __m256 silu256(__m256 a) {
  const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), a));
  return _mm256_div_ps(a, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

}  // namespace

bool gated_unary_supported(const Node& n) {
  if (n.op != Op::SILU && n.op != Op::SWIGLU) return false;
  const Tensor* a = n.src[0];
  auto packed = [&](const Tensor* t) {
    return t->type == DType::F32 && t->ne[0] == a->ne[0] && t->n_rows() == a->n_rows() && t->is_contiguous();
  };
  return packed(a) && packed(n.dst) && (n.op == Op::SILU || packed(n.src[1]));
}

void gated_unary(const Node& n, int64_t r0, int64_t r1) {
  // Row by row, and a row's last < 8 values through the same polynomial (padded), so that every
  // value is computed the same way however rows are split across threads or batched.
  const int64_t K = n.src[0]->ne[0];
  const bool gated = n.op == Op::SWIGLU;
  for (int64_t r = r0; r < r1; ++r) {
    const float* a = n.src[0]->f32(0) + r * K;
    const float* b = gated ? n.src[1]->f32(0) + r * K : nullptr;
    float* y = n.dst->f32(0) + r * K;
    int64_t i = 0;
    for (; i + 8 <= K; i += 8) {
      __m256 v = silu256(_mm256_loadu_ps(a + i));
      if (b) v = _mm256_mul_ps(v, _mm256_loadu_ps(b + i));
      _mm256_storeu_ps(y + i, v);
    }
    if (i < K) {
      alignas(32) float ta[8] = {0}, tb[8] = {0}, ty[8];
      for (int64_t j = i; j < K; ++j) ta[j - i] = a[j], tb[j - i] = b ? b[j] : 1.0f;
      _mm256_store_ps(ty, _mm256_mul_ps(silu256(_mm256_load_ps(ta)), _mm256_load_ps(tb)));
      for (int64_t j = i; j < K; ++j) y[j] = ty[j - i];
    }
  }
}

}  // namespace kestrel::cpu
#endif
