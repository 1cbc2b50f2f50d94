// Rows of F16 and BF16 values as floats, eight at a time (F16C's vcvtph2ps; BF16 is the upper
// half of an F32). Both conversions are exact, so these give the portable dequantize_f16/bf16's
// values bit for bit. Compiled with -mavx2 -mfma -mf16c (see CMakeLists.txt); only called when
// the CPU has them.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/simd.h"
#include "core/fp16.h"

namespace kestrel::cpu {

void f16_to_f32_avx2(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  for (; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, h + i, 2);
    dst[i] = fp16_to_fp32(v);
  }
}

void bf16_to_f32_avx2(const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i)));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  for (; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, h + i, 2);
    dst[i] = bf16_to_fp32(v);
  }
}

}  // namespace kestrel::cpu
#endif
