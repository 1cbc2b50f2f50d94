// Integer-dot matrix multiplication for quantized weights (AVX2).
//
// Every weight type is first unpacked, one row at a time, into one canonical form: 8-bit codes
// q (unsigned, or signed for Q8_0/IQ4_NL/MXFP4), a float scale d per 32 values, an int16
// sub-scale per 16 values (1 for types without sub-blocks), integer K-quant mins mq per 16 with
// their float dmin per 32, and Q4_1/Q5_1's float offset m (in mn, per 16).
// Activations are rounded to the weight type's vec_dot type (Q8_0, Q8_1 or Q8_K, exactly as the
// reference does) and kept as int8 codes with a float scale per 32 and the integer sums of each 16.
//
// Batch invariance. Three kernels compute the same products: the fused decode kernels
// (qdirect_*_avx2.cpp, <= 4 columns), the tiled GEMM (qtile_avx2.cpp, more columns) and the
// scalar qgemm_dot below (rows past the last multiple of 8). All three follow one arithmetic, to
// the bit, so a column's result never depends on how many other columns share the call (the
// engine batches requests; a request's logits must not change with the batch). For one row and
// one column, with "units" the scale blocks (32 values, or a K-quant's 256-value super-block):
//     acc = 0, accm = 0
//     for each unit s, in order:
//       T = exact integer sum of sub * code * qx over the unit, minus 2^z * sub * sum(qx) for
//           types whose codes are centred on 2^z (Q4_0 8, Q5_0 16, Q3_K 4, Q6_K 32)
//       acc = fma(float(T), d_s * dx_s, acc)
//       K-quant mins (Q2_K, Q4_K, Q5_K): M = sum mq * sum(qx);  accm = fma(-float(M), dmin_s * dx_s, accm)
//       Q4_1/Q5_1:                       accm = fma(m_s * float(sum(qx)), dx_s, accm)
//     y = acc + accm
// Every product and fma above rounds once (no contraction beyond the fmas written); integer sums
// are exact in any order, so each kernel may sum them however it likes.
#pragma once
#include <cstdint>
#include <vector>

#include "backends/cpu/repacked.h"
#include "tensor/dtype.h"

namespace kestrel::cpu {

struct UnpackedRows {
  int64_t K = 0;            // values per row (multiple of 32)
  bool is_signed = false;   // q holds int8 (else uint8 in [0, 63])
  bool has_sub = false;     // sub-scales differ from 1
  bool has_m = false;       // Q4_1/Q5_1: a float offset m per 32 values (in mn)
  bool int_mins = false;    // K-quant mins: integer mq per 16 times dmin (Q2_K, Q4_K, Q5_K)
  int centre_shift = 0;     // > 0: codes centred on 2^centre_shift (Q4_0 3, Q5_0 4, Q3_K 2, Q6_K 5)
  std::vector<uint8_t> q;   // [rows][K]
  std::vector<float> d;     // [rows][K/32]
  std::vector<int16_t> sub;  // [rows][K/32][16]: sub-scales of the unit's two halves, 8 copies each
  std::vector<float> mn;    // [rows][K/16] (has_m only)
  std::vector<int16_t> mq;  // [rows][K/16] (int_mins only)
  std::vector<float> dm;    // [rows][K/32] (int_mins only)
  void resize(int64_t rows, int64_t k);
};

struct QuantizedActs {
  int64_t K = 0;
  std::vector<int8_t> q;    // [cols][K]
  std::vector<float> dx;    // [cols][K/32]
  std::vector<int32_t> bs;  // [cols][K/16]: sum of the 16 codes qx
  // The codes again in the order a weight type's fused kernels read them, where that is an order
  // of their own (qdirect_prepare / qdirect_arrange): [cols][K], and for the word order each
  // block pair's starting values (Q4_K_R8: its mins' activation pairs), [cols][K/64]. One copy,
  // however many threads read it.
  std::vector<int8_t> arranged;
  std::vector<int64_t> arranged_init;
  void resize(int64_t k, int64_t cols);
};

// True when the integer path handles weights of this type (and K is a multiple of its block).
bool qgemm_supports(DType w, int64_t K);
// The type whose arithmetic a weight type follows once unpacked (Q4_0 for the repacked Q4_0_R8,
// Q4_K for Q4_K_R8): what qgemm_dot, qgemm_dot_canonical and qgemm_tiles take.
inline DType qgemm_arith_type(DType w) { return cpu::plain_type(w); }
// Unpacks rows [r0, r0 + n) of a weight matrix (row stride `row_bytes`) into rows [0, n) of out.
// For a grouped layout (cpu/repacked.h), `data` is the matrix's start (rows found through it).
void qgemm_unpack(DType w, const uint8_t* data, int64_t row_bytes, int64_t r0, int64_t n, UnpackedRows& out);
// Rounds one activation column x[0, K) to the vec_dot type `vdt`, into column `c` of out.
void qgemm_quantize_acts(DType vdt, const float* x, int64_t K, QuantizedActs& out, int64_t c);
// The arithmetic above in plain scalar code: row r of w . column c of x. `type` is the weight type
// the rows were unpacked from. The oracle of the SIMD kernels' tests, and the kernel for tail rows.
float qgemm_dot_canonical(DType type, const UnpackedRows& w, int64_t r, const QuantizedActs& x, int64_t c);
// y[c * y_stride + r] = row r of w . column c of x, for rows [0, n_rows) and columns [c0, c1).
void qgemm_dot(DType type, const UnpackedRows& w, int64_t n_rows, const QuantizedActs& x, int64_t c0, int64_t c1,
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

// Fused decode kernels (qdirect_avx2.cpp, qdirect_k_avx2.cpp) for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// IQ4_NL, MXFP4, Q4_K, Q5_K and Q6_K: the packed blocks are decoded in registers, eight rows at a
// time, nothing is written back, four columns per pass over an 8-row group (more columns take
// more passes over the group, from L1). y[c * y_stride + r] = row r of w . column c of x for
// rows [r0, r1) and columns [0, n_cols); x was quantized by qgemm_quantize_acts to the type's
// vec_dot type.
bool qdirect_supports(DType w, int64_t K, int64_t row_bytes);
// The most columns for which the fused kernels beat unpack + tiles (measured per type and
// instruction set, K 2048: docs/PERF.md); 0 for types without fused kernels. The AVX-512 kernels
// of the grouped layouts, Q5_K and Q6_K win at every batch measured: kMaxFusedCols.
constexpr int64_t kMaxFusedCols = 4096;
int64_t qdirect_max_cols(DType w);
void qdirect_dot(DType w, const uint8_t* data, int64_t row_bytes, int64_t r0, int64_t r1, QuantizedActs& x,
                 int64_t n_cols, float* y, int64_t y_stride);
// qdirect_dot in steps, for threads that share the activations and take rows in pieces: once per
// call qdirect_prepare (sizes x's arrangement for type w and the instruction set now chosen), then
// qdirect_arrange over all columns (in parallel pieces if wished: it writes only columns
// [c0, c1)), then qdirect_rows per piece of rows.
void qdirect_prepare(DType w, QuantizedActs& x, int64_t n_cols);
void qdirect_arrange(DType w, QuantizedActs& x, int64_t c0, int64_t c1);
void qdirect_rows(DType w, const uint8_t* data, int64_t row_bytes, int64_t r0, int64_t r1, const QuantizedActs& x,
                  int64_t n_cols, float* y, int64_t y_stride);

}  // namespace kestrel::cpu
