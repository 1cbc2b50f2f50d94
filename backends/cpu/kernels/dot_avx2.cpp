// Compiled with -mavx2 -mfma -mf16c (see CMakeLists.txt); only called when the CPU has them.
#if defined(__x86_64__)
#include <cmath>

#include "backends/cpu/kernels/dot_avx2.h"
#include "backends/cpu/simd.h"

namespace kestrel::cpu {

float dot_f32_avx2_finish(__m256 acc0, __m256 acc1, const float* a, const float* b, int64_t n) {
  acc0 = _mm256_add_ps(acc0, acc1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc0), _mm256_extractf128_ps(acc0, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  float r = _mm_cvtss_f32(s);
  for (int64_t j = 0; j < n; ++j) r = std::fma(a[j], b[j], r);  // spelled out: one rounding, whatever the flags
  return r;
}

float dot_f32_avx2(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  return dot_f32_avx2_finish(acc0, acc1, a + i, b + i, n - i);
}

}  // namespace kestrel::cpu
#endif
