// The fused decode kernels' table, by instruction set: what qdirect_dot (qdirect_avx2.cpp)
// chooses from. No intrinsics here, so files compiled for different targets can share it.
#pragma once
#include <cstdint>

#include "backends/cpu/kernels/qgemm.h"

namespace kestrel::cpu::qdirect {

// Rows [0, 8) from `w` (row stride row_bytes; a grouped layout's group start) times columns
// [c0, c0 + NC) of x, into y[c * y_stride + r].
using Rows8Fn = void (*)(const uint8_t* w, int64_t row_bytes, const QuantizedActs& x, int64_t c0, float* y,
                         int64_t y_stride);
// The kernels of a type (1-4 columns; 1-8 for some AVX-512 types), from the file that has
// them; nullptr if none.
const Rows8Fn* block32_kernels(DType t);    // AVX2, qdirect_avx2.cpp
const Rows8Fn* kquant_kernels(DType t);     // AVX2, qdirect_k_avx2.cpp
const Rows8Fn* avx512_kernels(DType t);     // AVX-512 VNNI, qdirect_avx512.cpp (the types that gain)
// How many kernels avx512_kernels(t) has (1 to n columns a call): 8 or 4.
int avx512_cols_per_call(DType t);
// Arranges the current call's activations for the AVX-512 kernels of type t that read them in an
// order of their own (the grouped 32-value layouts); before any such kernel runs, per thread.
void avx512_prepare(DType t, const QuantizedActs& x, int64_t n_cols);
// The current call's activations in the 4-bit kernels' pair order (qdirect_avx2.cpp's
// PairedActs), column c; built by qdirect_prepare before any 4-bit kernel runs.
const int8_t* paired_acts(int64_t c, int64_t K);

}  // namespace kestrel::cpu::qdirect
