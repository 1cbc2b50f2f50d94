// Runtime-dispatched SIMD primitives of the CPU backend. Each has a portable version and, where
// the CPU supports it, an AVX2+FMA version compiled in a *_avx2.cpp file (no -march=native).
#pragma once
#include <cstdint>

namespace kestrel::cpu {

bool has_avx2_fma();  // checked once
// AVX-512 F/BW/VL with VNNI (Ice Lake, Zen 4 and later), checked once: the fused decode kernels
// of the types that gain (qdirect_avx512.cpp). KESTREL_NO_AVX512=1 in the environment leaves them
// off; tests and benchmarks switch them per run with allow_avx512 (the AVX2 kernels stay, and
// both give the same bits).
bool has_avx512_vnni();
bool use_avx512();  // has_avx512_vnni() and allowed
void allow_avx512(bool on);

using DotF32Fn = float (*)(const float* a, const float* b, int64_t n);
float dot_f32_portable(const float* a, const float* b, int64_t n);
float dot_f32_avx2(const float* a, const float* b, int64_t n);
DotF32Fn dot_f32_kernel();  // the best for this CPU

// A row of n F16 (BF16) values as floats, as dequantize_f16 (_bf16) gives them (the conversions
// are exact): AVX2/F16C versions, for CPUs with has_avx2_fma().
void f16_to_f32_avx2(const void* src, float* dst, int64_t n);
void bf16_to_f32_avx2(const void* src, float* dst, int64_t n);

}  // namespace kestrel::cpu
