// The end of dot_f32_avx2 (simd.h), for the kernels that reproduce its arithmetic (gemm_f32.h):
// the two FMA chains added, the horizontal sum, then a[j] * b[j] for the n (< 8) values after the
// vector steps, one FMA each. Out of line in dot_avx2.cpp, so there is one copy of its rounding.
// Include only from files compiled for AVX2 or later.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace kestrel::cpu {

__attribute__((noinline)) float dot_f32_avx2_finish(__m256 acc0, __m256 acc1, const float* a, const float* b,
                                                    int64_t n);

}  // namespace kestrel::cpu
