// Runtime-dispatched SIMD primitives of the CPU backend. Each has a portable version and, where
// the CPU supports it, an AVX2+FMA version compiled in a *_avx2.cpp file (no -march=native).
#pragma once
#include <cstdint>

namespace kestrel::cpu {

bool has_avx2_fma();  // checked once

using DotF32Fn = float (*)(const float* a, const float* b, int64_t n);
float dot_f32_portable(const float* a, const float* b, int64_t n);
float dot_f32_avx2(const float* a, const float* b, int64_t n);
DotF32Fn dot_f32_kernel();  // the best for this CPU

}  // namespace kestrel::cpu
