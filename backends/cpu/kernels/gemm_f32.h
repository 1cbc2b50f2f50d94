// MATMUL's float path (F32, F16, BF16, and every type without an integer kernel, its rows
// converted to F32 first): a few weight rows times many columns, register-blocked, each result
// dot_f32_avx2 (simd.h) of the row's F32 values and the column, bit for bit. dot_f32_avx2 keeps
// two chains of eight lanes (values i mod 16 < 8 and >= 8); these kernels keep the same chains for
// several rows and columns at once, so a loaded row or column feeds several FMAs instead of one
// and the chains of different pairs overlap instead of waiting on each other. F16 and BF16 rows
// can also be read as stored and converted in registers (exactly), which decode prefers: no
// converted copy is written and read back.
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace kestrel::cpu {

// y[c * ldy + r] = dot_f32_avx2(row r as F32, x + c * ldx, K) for r < nr (1..kGemmF32Rows) and
// c < nc; rows[r] holds K values of type wt: F32, F16 or BF16.
constexpr int kGemmF32Rows = 4;
using GemmF32Fn = void (*)(DType wt, const void* const* rows, int nr, const float* x, int64_t ldx, int64_t nc,
                           int64_t K, float* y, int64_t ldy);
void gemm_f32_avx2(DType wt, const void* const* rows, int nr, const float* x, int64_t ldx, int64_t nc, int64_t K,
                   float* y, int64_t ldy);    // 2 rows x 2 columns a pass, in 256-bit registers
void gemm_f32_avx512(DType wt, const void* const* rows, int nr, const float* x, int64_t ldx, int64_t nc, int64_t K,
                     float* y, int64_t ldy);  // 4 x 4, one 512-bit register holding both chains of a pair
GemmF32Fn gemm_f32_kernel();  // for this CPU (use_avx512()); nullptr without AVX2/FMA

}  // namespace kestrel::cpu
