// Q4_0_R8: Q4_0 weights regrouped eight rows at a time, the layout the CPU backend repacks 2-D
// Q4_0 matrices into at load (runtime/model/repack.cpp). The bytes are the file's, moved: group g
// (rows 8g..8g+7) starts where row 8g did, and holds, for each pair of blocks (2p, 2p+1), 288 bytes:
//     the 8 rows' fp16 scales of block 2p | the 8 rows' fp16 scales of block 2p+1 |
//     for each row r: the 16 code bytes of block 2p, then those of block 2p+1
// so a decode kernel reads one contiguous stream, gets eight rows' scales with one load (no
// gather) and one row's two blocks of codes with one 32-byte load. A row is no longer contiguous:
// only code that knows this layout may read such a tensor (the CPU kernels, and get_rows here).
#pragma once
#include <cstdint>

namespace kestrel::ref {

constexpr int64_t kQ4_0R8PairBytes = 2 * 8 * 18;  // one pair of blocks of one 8-row group

// True when a [K, n_rows] Q4_0 matrix can take the layout: whole pairs of blocks, whole groups.
inline bool q4_0_r8_fits(int64_t K, int64_t n_rows) { return K % 64 == 0 && n_rows % 8 == 0; }
// Rearranges n_rows (a multiple of 8) rows of K values from Q4_0 (src) into Q4_0_R8 (dst, the
// same size; src and dst must not overlap).
void q4_0_to_r8(const uint8_t* src, int64_t K, int64_t n_rows, uint8_t* dst);
// Copies row r of a Q4_0_R8 matrix (base `data`, K values per row) out as a plain Q4_0 row.
void q4_0_r8_row(const uint8_t* data, int64_t K, int64_t r, uint8_t* out);

}  // namespace kestrel::ref
