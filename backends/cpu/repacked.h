// Grouped layouts: weights regrouped eight rows at a time, the layouts the CPU backend repacks 2-D
// matrices into at load (weights_cpu.cpp). Private to the CPU backend: such a tensor keeps its
// file type and says Tensor::layout == kLayoutGrouped8; the kernels dispatch on kernel_type(),
// which names the grouped layouts with ids of their own (Q4_0_R8, ...) that no file or other
// backend ever sees. The bytes are the file's, moved. Rows are cut into units (Q4_0: a pair of
// 32-value blocks, 36 bytes; Q8_0: a pair of blocks, 68 bytes; Q4_K: one 256-value super-block,
// 144 bytes; Q6_K: one super-block, 210 bytes); group g (rows 8g..8g+7) starts where row 8g did
// and holds its units in order, each unit field by field with the eight rows' copies of a field
// side by side:
//   Q4_0_R8, 288 bytes per unit:  8 scales (fp16) of the first block | 8 scales of the second |
//                                 per row, the 16 code bytes of the first block then the second's
//   Q8_0_R8, 544 bytes per unit:  8 scales of the first block | 8 of the second |
//                                 for word k = 0..7 (codes 4k..4k+3): per row, the first
//                                 block's word k then the second's (the "word order": in
//                                 64 bytes k, 32-bit word 2r + b is row r's block b's word k)
//   Q4_K_R8, 1152 bytes per unit: 8 d | 8 dmin (fp16) | 8 x scale bytes 0-3 | 8 x bytes 4-7 |
//                                 8 x bytes 8-11 | for m = 0, 1 and word k = 0..7: per row,
//                                 word k of code group 2m (bytes 32 * 2m.. of its 128), then of
//                                 group 2m + 1 (word order: in 64 bytes (m, k), word 2r + b is
//                                 row r's group 2m + b's word k; low nibbles sub-block 4m + 2b,
//                                 high nibbles 4m + 2b + 1)
//   Q6_K_R8, 1680 bytes per unit: 8 d (fp16) | for p = 0..3: per row, scales 2p, 2p + 1 of half
//                                 0 (scales[2p..]) then of half 1 (scales[8 + 2p..]) | for word
//                                 k = 0..7: per row, ql word k of half 0 then of half 1 (A_k;
//                                 low nibbles: values 4k.. of the half, high: 64 + 4k..) | ql
//                                 word 8 + k of both halves (B_k; values 32 + 4k.., 96 + 4k..) |
//                                 qh word k of both halves (H_k: the top bits of A_k's and B_k's
//                                 codes). Word order: in each 64 bytes, word 2r + b is row r's
//                                 half b's word; the scales as int16 pairs, lane 2r + b)
// so a decode kernel reads one contiguous stream, gets eight rows' scales with one load (no
// gather) and codes with whole-register loads (Q4_0_R8: a row's two blocks; the word orders: one
// word of every row's two blocks or groups, which vpdpbusd / vpmaddubsw then sum per lane with no
// reduction across lanes). A row is no longer contiguous: only code that knows these layouts may
// read such a tensor (the CPU kernels, and get_rows).
#pragma once
#include <cstdint>

#include "tensor/tensor.h"

namespace kestrel::cpu {

constexpr uint32_t kLayoutGrouped8 = 1;  // Tensor::layout of a regrouped matrix

// The kernels' names for the grouped layouts (backend-private ids: dtype_info() knows none).
constexpr DType Q4_0_R8 = DType::BACKEND_PRIVATE_0;
constexpr DType Q4_K_R8 = DType::BACKEND_PRIVATE_1;
constexpr DType Q8_0_R8 = DType::BACKEND_PRIVATE_2;
constexpr DType Q6_K_R8 = DType::BACKEND_PRIVATE_3;

constexpr int64_t kQ4_0R8UnitBytes = 8 * 36;    // one pair of Q4_0 blocks of one 8-row group
constexpr int64_t kQ4_KR8UnitBytes = 8 * 144;   // one Q4_K super-block of one 8-row group
constexpr int64_t kQ8_0R8UnitBytes = 8 * 68;    // one pair of Q8_0 blocks of one 8-row group
constexpr int64_t kQ6_KR8UnitBytes = 8 * 210;   // one Q6_K super-block of one 8-row group

// The grouped layout of a file type (Q4_0 -> Q4_0_R8, Q4_K -> Q4_K_R8, Q8_0 -> Q8_0_R8, Q6_K ->
// Q6_K_R8); the type itself if none.
DType grouped_type(DType plain);
// The file type a grouped layout holds (itself for any other type).
DType plain_type(DType t);
inline bool is_grouped(DType t) { return plain_type(t) != t; }
// True when a [K, n_rows] matrix of `plain` can take its grouped layout: whole units, whole groups.
bool grouped_fits(DType plain, int64_t K, int64_t n_rows);
// Rearranges n_rows (a multiple of 8) rows of K values of type `plain` from src into its grouped
// layout in dst (the same size; src and dst must not overlap).
void to_grouped(DType plain, const uint8_t* src, int64_t K, int64_t n_rows, uint8_t* dst);
// Copies row r of a grouped matrix of type `grouped` (base `data`) out in its plain layout.
void grouped_row(DType grouped, const uint8_t* data, int64_t K, int64_t r, uint8_t* out);

// What a kernel dispatches on: the grouped id for a regrouped tensor, its type otherwise.
inline DType kernel_type(const Tensor& t) { return t.layout == kLayoutGrouped8 ? grouped_type(t.type) : t.type; }

}  // namespace kestrel::cpu
