#include "backends/cpu/simd.h"

namespace kestrel::cpu {

bool has_avx2_fma() {
#if defined(__x86_64__)
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return yes;
#else
  return false;
#endif
}

float dot_f32_portable(const float* a, const float* b, int64_t n) {
  // Eight partial sums, like the vector version, so both round alike.
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = 0;
  for (int j = 0; j < 8; ++j) s += acc[j];
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

DotF32Fn dot_f32_kernel() {
#if defined(__x86_64__)
  if (has_avx2_fma()) return dot_f32_avx2;
#endif
  return dot_f32_portable;
}

}  // namespace kestrel::cpu
