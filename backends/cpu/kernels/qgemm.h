// Integer-dot matrix multiplication for quantized weights (AVX2).
//
// Every weight type is first unpacked, one row at a time, into one canonical form: 8-bit codes
// q (unsigned, or signed for Q8_0/IQ4_NL/MXFP4), a float scale d per 32 values, an int16
// sub-scale per 16 values (1 for types without sub-blocks) and a float offset mn per 16 values:
//     w[e] = d[e/32] * sub[e/16] * q[e] + mn[e/16].
// Activations are rounded to the weight type's vec_dot type (Q8_0, Q8_1 or Q8_K, exactly as the
// reference does) and kept as int8 codes with a float scale per 32 and the scaled sums of each 16:
//     x[e] = dx[e/32] * qx[e],   xs[g] = dx[g/2] * sum(qx[16g .. 16g+15]).
// Then  w . x = sum_u d[u] dx[u] (sum_e sub q qx)  +  sum_g mn[g] xs[g],
// where the inner sums are exact integers (maddubs/madd) and only one float multiply-add per
// 32 values remains. The unpacked row is reused for every activation column.
#pragma once
#include <cstdint>
#include <vector>

#include "tensor/dtype.h"

namespace kestrel::cpu {

struct UnpackedRows {
  int64_t K = 0;         // values per row (multiple of 32)
  bool is_signed = false; // q holds int8 (else uint8 in [0, 63])
  bool has_sub = false;   // sub-scales differ from 1
  bool has_mn = false;    // offsets are not all zero
  bool int_mins = false;  // mn = -dm * mq with integer mq (Q2_K, Q4_K, Q5_K: 4- or 6-bit mins)
  std::vector<uint8_t> q;  // [rows][K]
  std::vector<float> d;    // [rows][K/32]
  std::vector<int16_t> sub;  // [rows][K/32][16]: sub-scales of the unit's two halves, 8 copies each
  std::vector<float> mn;   // [rows][K/16]
  std::vector<int16_t> mq;  // [rows][K/16] (int_mins only)
  std::vector<float> dm;    // [rows][K/32] (int_mins only)
  void resize(int64_t rows, int64_t k);
};

struct QuantizedActs {
  int64_t K = 0;
  std::vector<int8_t> q;  // [cols][K]
  std::vector<float> dx;  // [cols][K/32]
  std::vector<float> xs;  // [cols][K/16]
  std::vector<int32_t> bs;  // [cols][K/16]: the integer sums of qx behind xs (xs = dx * bs)
  void resize(int64_t k, int64_t cols);
};

// True when the integer path handles weights of this type (and K is a multiple of its block).
bool qgemm_supports(DType w, int64_t K);
// Unpacks rows [r0, r0 + n) of a weight matrix (row stride `row_bytes`) into rows [0, n) of out.
void qgemm_unpack(DType w, const uint8_t* data, int64_t row_bytes, int64_t r0, int64_t n, UnpackedRows& out);
// Rounds one activation column x[0, K) to the vec_dot type `vdt`, into column `c` of out.
void qgemm_quantize_acts(DType vdt, const float* x, int64_t K, QuantizedActs& out, int64_t c);
// y[c * y_stride + r] = row r of w . column c of x, for rows [0, n_rows) and columns [c0, c1).
void qgemm_dot(const UnpackedRows& w, int64_t n_rows, const QuantizedActs& x, int64_t c0, int64_t c1,
               float* y, int64_t y_stride);

// Tiled prefill GEMM (qtile_avx2.cpp): groups of 8 unpacked rows interleaved 4 values at a time, so
// one register holds the same 4 positions of 8 rows and a micro-kernel computes 8 rows x 3 columns.
struct InterleavedRows {
  int64_t K = 0;
  std::vector<uint8_t> q;    // [groups][K/4][8 rows][4]
  std::vector<float> d;      // [groups][K/32][8 rows]
  std::vector<int16_t> sub;  // [groups][K/16][8 rows][2 copies]
  std::vector<float> mn;     // [groups][K/16][8 rows]
  std::vector<int16_t> mq;   // [groups][K/16][8 rows][2 copies]
  std::vector<float> dm;     // [groups][K/32][8 rows]
  void resize(int64_t groups, int64_t k);
};
// Interleaves rows [0, 8 * n_groups) of w (same K) into groups [0, n_groups) of out.
void qgemm_interleave(const UnpackedRows& w, int64_t n_groups, InterleavedRows& out);
// y[c * y_stride + 8 * g + r] = row r of group g . column c, for groups [0, n_groups), columns [c0, c1);
// `type` is the weight type the rows were unpacked from (it bounds the int16 partial sums).
void qgemm_tiles(DType type, const InterleavedRows& w, int64_t n_groups, const QuantizedActs& x, int64_t c0,
                 int64_t c1, float* y, int64_t y_stride);

// Fused kernels (qdirect_avx2.cpp) for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL and
// MXFP4: no unpacked copy of the weights. y[c * y_stride + r] = row r of w . column c of x, rows [r0, r1), columns [0, n_cols);
// x was quantized by qgemm_quantize_acts to the type's vec_dot type.
bool qdirect_supports(DType w, int64_t K);
void qdirect_dot(DType w, const uint8_t* data, int64_t row_bytes, int64_t r0, int64_t r1, const QuantizedActs& x,
                 int64_t n_cols, float* y, int64_t y_stride);

}  // namespace kestrel::cpu
