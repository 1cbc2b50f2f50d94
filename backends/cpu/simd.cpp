#include "backends/cpu/simd.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "backends/cpu/kernels/gemm_f32.h"

namespace kestrel::cpu {

bool has_avx2_fma() {
#if defined(__x86_64__)
  static const bool yes = [] {
    // F16C from CPUID leaf 1 (ECX): clang does not know "f16c" in __builtin_cpu_supports.
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  }();
  return yes;
#else
  return false;
#endif
}

bool has_avx512_vnni() {
#if defined(__x86_64__)
  // libgcc's checks include the OS saving the zmm state (XCR0).
  static const bool yes = has_avx2_fma() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return yes;
#else
  return false;
#endif
}

namespace {
std::atomic<bool>& avx512_allowed() {
  static std::atomic<bool> on{[] {
    const char* v = std::getenv("KESTREL_NO_AVX512");
    return !(v && *v && std::strcmp(v, "0") != 0);
  }()};
  return on;
}
}  // namespace

bool use_avx512() { return has_avx512_vnni() && avx512_allowed().load(std::memory_order_relaxed); }
void allow_avx512(bool on) { avx512_allowed().store(on, std::memory_order_relaxed); }

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

GemmF32Fn gemm_f32_kernel() {
#if defined(__x86_64__)
  if (use_avx512()) return gemm_f32_avx512;
  if (has_avx2_fma()) return gemm_f32_avx2;
#endif
  return nullptr;
}

DotF32Fn dot_f32_kernel() {
#if defined(__x86_64__)
  if (has_avx2_fma()) return dot_f32_avx2;
#endif
  return dot_f32_portable;
}

}  // namespace kestrel::cpu
