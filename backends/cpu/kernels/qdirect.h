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
// Whether the AVX-512 kernels of type t read the activations in word order (x.arranged and
// x.arranged_init; the AVX2 kernels of Q8_0_R8 and Q4_K_R8, stored so, do too).
bool avx512_word_order(DType t);
// Columns [c0, c1) of x into the word order: per pair of blocks (2g, 2g+1), 64 bytes [2g's word k |
// 2g+1's word k] for words k = 0..7 (codes 4k..4k+3), and the pair's starting values for the
// AVX-512 kernels' codes offset to unsigned, [-centre sum(qx) of 2g | of 2g+1] (Q4_0_R8's
// nibbles: centre 8; Q8_0_R8's flipped bytes: 128). Q4_K_R8 pairs a super-block's sub-blocks
// (4m + h, 4m + h + 2) for 2m + h = 0..3 instead, and keeps its mins' activation pairs
// (q4k_min_pairs) where the others keep starting values (qdirect_avx2.cpp).
void arrange_words(DType t, QuantizedActs& x, int64_t c0, int64_t c1);
// Columns [c0, c1) of x into the 4-bit kernels' pair order (x.arranged): per pair of blocks
// (2g, 2g+1), the 64 codes [2g: 0-15 | 2g+1: 0-15 | 2g: 16-31 | 2g+1: 16-31] (qdirect_avx2.cpp).
void arrange_pairs(QuantizedActs& x, int64_t c0, int64_t c1);

}  // namespace kestrel::cpu::qdirect
