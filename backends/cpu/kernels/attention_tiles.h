// The inner loops of the CPU's tiled ATTENTION (attention_avx2.cpp drives them): scores of a
// tile's query rows against a block of kBC cells, and P·V over such a block. AVX2 versions there,
// AVX-512 versions in attention_avx512.cpp. Both do the same arithmetic per value (a score: FMA
// chains over kChain dimensions each, summed in order; an output value: one FMA chain over the
// block's cells in order), so they give the same bits and a tile may take either.
#pragma once
#include <cstdint>

namespace kestrel::cpu::attn {

constexpr int kBC = 16;          // cells per block
constexpr int64_t kChain = 16;   // dimensions per FMA chain of a score

// s[r * lds + j] = q_r . k_j for rows r < nr (q_r at q + r * ldq, hdk values, a multiple of 8,
// zero-padded) and the block's cells j < kBC, K transposed: kt[d * kBC + j].
using ScoresFn = void (*)(const float* q, int64_t ldq, int64_t nr, const float* kt, int64_t hdk, float* s,
                          int64_t lds);
// o[r * ldo + d] += sum over j < kBC, in order, of p[r * lds + j] * vb[j * ldv + d], for rows
// r < nr and d < hdv8 (a multiple of 8).
using PvFn = void (*)(const float* p, int64_t lds, int64_t nr, const float* vb, int64_t ldv, float* o, int64_t ldo,
                      int64_t hdv8);

struct Microkernels {
  ScoresFn scores;
  PvFn pv;
};
// The AVX-512 pair (F/VL), or nullptr where the compiler did not build it.
const Microkernels* avx512_microkernels();

}  // namespace kestrel::cpu::attn
