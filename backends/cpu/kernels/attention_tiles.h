// The inner loops of the CPU's tiled ATTENTION (attention_avx2.cpp drives them): scores of a
// tile's query rows against one or two blocks of kBC cells, their scale, mask and running max,
// the softmax's exponentials and normalisation over a row, and P·V over a block. AVX2 versions
// there, AVX-512 versions in attention_avx512.cpp. Both do the same arithmetic per value (a
// score: FMA chains over kChain dimensions each, summed in order; a row's sum of exponentials:
// eight lanes by cell index, each block's cells 0-7 then 8-15; an output value: one FMA chain
// over the block's cells in order), so they give the same bits and a tile may take either.
#pragma once
#include <cstdint>

namespace kestrel::cpu::attn {

constexpr int kBC = 16;          // cells per block
constexpr int64_t kChain = 16;   // dimensions per FMA chain of a score

// exp(x) for x <= 0, the softmax's, in both ISAs' exp_nonpositive (one table, so one set of
// bits): Cephes' expf polynomial on r = x - n ln2 (ln2 in two parts), scaled by 2^n; 0 below
// kExpFloor, where exp leaves the normal floats (and for the masked scores' -inf).
struct ExpConstants {
  static constexpr float kExpFloor = -87.3f;
  static constexpr float kLog2e = 1.44269504088896341f;
  static constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  // y = ((((p0 r + p1) r + p2) r + p3) r + p4) r + p5, then exp(r) = y r^2 + r + 1.
  static constexpr float kPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                     4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
};

// s[r * lds + b * kBC + j] = q_r . k_bj for rows r < nr (q_r at q + r * ldq, hdk values, a
// multiple of 8, zero-padded), blocks b < nb (1 or 2) and cells j < kBC, K transposed: block b's
// kt[b * hdk * kBC + d * kBC + j].
using ScoresFn = void (*)(const float* q, int64_t ldq, int64_t nr, const float* kt, int nb, int64_t hdk, float* s,
                          int64_t lds);
// For rows r < nr and cells j < nb * kBC of s (row r at s + r * lds): s = s * scale where bit j
// of row r's mask is set, -inf where not; then mx[r * 16 + l] = max(itself, those values) for
// some lanes l (which lane takes which value is the ISA's: a max is exact in any order). Row r's
// mask is tmask[r % rows_per_head / heads] (rows run kv head, token, query head).
using MaskMaxFn = void (*)(float* s, int64_t lds, int64_t nr, int nb, const uint32_t* tmask, int64_t rows_per_head,
                           int64_t heads, float scale, float* mx);
// A row's exponentials: s = exp(s - mx) in place over the blocks b < nblk with any[b] != 0 (the
// others untouched), and sum8[l] = the sum of those of cell index l mod 8, in cell order.
using ExpFn = void (*)(float* s, int32_t nblk, const uint32_t* any, float mx, float* sum8);
// s *= inv over the same blocks, then F16-rounded when round.
using NormFn = void (*)(float* s, int32_t nblk, const uint32_t* any, float inv, bool round);
// o[r * ldo + d] += sum over j < kBC, in order, of p[r * lds + j] * vb[j * ldv + d], for rows
// r < nr and d < hdv8 (a multiple of 8).
using PvFn = void (*)(const float* p, int64_t lds, int64_t nr, const float* vb, int64_t ldv, float* o, int64_t ldo,
                      int64_t hdv8);
// Cache types the two loops below read in place.
enum class InPlace { F16, Q8_0, Q4_0 };
// P·V with V read straight from the cache: vb[j * ldv + d] is element e0 + d of cell j's row at
// vrows[j], of type t (converting an F16 value, or a Q8_0 or Q4_0 code times its scale, to F32 is
// exact, so the same bits as converting the rows first). For the block types, e0 and hdv8 are
// multiples of 16.
using PvCacheFn = void (*)(const float* p, int64_t lds, int64_t nr, const void* const* vrows, int64_t e0, InPlace t,
                           float* o, int64_t ldo, int64_t hdv8);
// A block's K rows from the cache, transposed: kt[d * kBC + j] = element e0 + d of krows[j] for
// d < hd (e0 and hd multiples of 16).
using KCacheFn = void (*)(const void* const* krows, int64_t e0, InPlace t, int64_t hd, float* kt);

struct Microkernels {
  ScoresFn scores;
  MaskMaxFn mask_max;
  ExpFn exp;
  NormFn norm;
  PvFn pv;
  PvCacheFn pv_cache;
  KCacheFn k_cache;  // nullptr: the caller's own transposition
};
// The AVX-512 set (F/VL), or nullptr where the compiler did not build it.
const Microkernels* avx512_microkernels();

}  // namespace kestrel::cpu::attn
