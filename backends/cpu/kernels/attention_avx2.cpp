// ATTENTION on the CPU (AVX2/FMA/F16C): the reference's semantics (F16-rounded queries and
// probabilities for an F16, FP8, Q8_0 or Q4_0 cache, sinks, soft-capping, sliding window) in
// tiles of queries against blocks of cells, with FP32 accumulation; quantized caches are
// converted a block of rows at a time. Tiles go to threads as they free up, kv head by kv head,
// the latest (longest) tokens first.
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/kernels/attention_tiles.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/simd.h"
#include "backends/cpu/kernels/hsum_avx2.h"
#include "core/fp16.h"
#include "tensor/quants/fp8.h"
#include "tensor/quants/quant_blocks.h"

namespace kestrel::cpu {
namespace {

// Cache element types: F32, F16, F8_E4M3 (one byte, read through a table of its 256 values),
// and the block types Q8_0 and Q4_0: each token's row in blocks of 32 values with an F16 scale,
// the blocks running across the row's heads. Every kernel below addresses a row by element index,
// so a head's slice may start inside a block; eight elements at a time (a multiple of 8 offset)
// never leave their block.
constexpr int kF32 = 0, kF16 = 1, kF8 = 2, kQ8 = 3, kQ4 = 4;
int kt_of(DType t) {
  switch (t) {
    case DType::F16: return kF16;
    case DType::F8_E4M3: return kF8;
    case DType::Q8_0: return kQ8;
    case DType::Q4_0: return kQ4;
    default: return kF32;
  }
}

struct E4M3Table {
  float v[256];
  E4M3Table() {
    for (int c = 0; c < 256; ++c) v[c] = fp32_from_bits(e4m3_to_fp32_bits(static_cast<uint8_t>(c)));
  }
};
const E4M3Table kE4M3;

// Elements i .. i+7 of a row (for the block types, i % 8 == 0), as floats.
template <int kT>
inline __m256 load8(const void* p, int64_t i) {
  if constexpr (kT == kF16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i)));
  } else if constexpr (kT == kF8) {
    return _mm256_i32gather_ps(kE4M3.v, _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(p) + i))), 4);
  } else if constexpr (kT == kQ8) {
    const block_q8_0& b = static_cast<const block_q8_0*>(p)[i / QK8_0];
    const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + i % QK8_0)));
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b.d)), _mm256_cvtepi32_ps(q));
  } else if constexpr (kT == kQ4) {
    // Byte j of a block holds values j (low nibble) and j + 16 (high): values 8k .. 8k+7 are the
    // low (k < 2) or high (k >= 2) nibbles of bytes 8(k%2) .. 8(k%2)+7.
    const block_q4_0& b = static_cast<const block_q4_0*>(p)[i / QK4_0];
    const int j = static_cast<int>(i % QK4_0);
    __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + j % 16)));
    q = _mm256_and_si256(_mm256_srli_epi32(q, j >= 16 ? 4 : 0), _mm256_set1_epi32(0xF));
    q = _mm256_sub_epi32(q, _mm256_set1_epi32(8));
    return _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(b.d)), _mm256_cvtepi32_ps(q));
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  }
}

template <int kT>
inline float load1(const void* p, int64_t i) {
  if constexpr (kT == kF16) {
    return _cvtsh_ss(static_cast<const uint16_t*>(p)[i]);
  } else if constexpr (kT == kF8) {
    return kE4M3.v[static_cast<const uint8_t*>(p)[i]];
  } else if constexpr (kT == kQ8) {
    const block_q8_0& b = static_cast<const block_q8_0*>(p)[i / QK8_0];
    return _cvtsh_ss(b.d) * static_cast<float>(b.qs[i % QK8_0]);
  } else if constexpr (kT == kQ4) {
    const block_q4_0& b = static_cast<const block_q4_0*>(p)[i / QK4_0];
    const int j = static_cast<int>(i % QK4_0);
    const int q = j < 16 ? b.qs[j] & 0xF : b.qs[j - 16] >> 4;
    return _cvtsh_ss(b.d) * static_cast<float>(q - 8);
  } else {
    return static_cast<const float*>(p)[i];
  }
}

// The kernel works on tiles: up to kMaxTileTokens tokens of one sequence (they share its block
// table) and some query heads of one kv head's group, the tile's "rows" (token-major). The
// sequence's cells are taken kBC at a time (two such blocks at a time for the scores): their K
// rows converted to F32 once and transposed (kt[d][cell]), so that a row's 16 scores grow in
// vectors of FMAs along the head dimension with no horizontal sums, for every row of the tile at
// once; V rows likewise (an F16 cache's read in place, converted as they load), P·V as 16 output
// values in registers per row (attention_tiles.h: the inner loops, AVX2 here, AVX-512 in
// attention_avx512.cpp, with the softmax's row passes). Scores live in a per-tile buffer (the
// two-pass softmax below).
//
// Every value a row computes goes through the same operations in the same order whatever the
// tile holds, how the batch is cut into tiles, and how many cells past the token's reach its
// sequence's table has: a score is FMA chains of kChain dimensions summed in order (chains of the
// whole head were less exact: gpt-oss's FP8 model moved past its 1e-6 bound against the
// reference), the sum of exp runs in eight lanes by cell index (then a fixed horizontal sum),
// and an output value is one FMA chain over the cells in table order (a cell no row of the tile
// can see has p = 0 and a zeroed V row, and exact zeros change no sum). So a token's attention
// is bit for bit the same in a prompt, in a decode step or beside other sequences
// (test_attention_invariance.cpp; the engine's batch-invariance test relies on it).
// The softmax keeps the reference's rounding: max, then sum of exp(s - max), then the normalised
// p (F16-rounded for a non-F32 V cache) times V.
using attn::kBC;
using attn::kChain;
constexpr int kMaxTileTokens = 32;            // tokens per tile
constexpr int64_t kScoreBudget = 512 * 1024;  // floats of scores a tile keeps (2 MiB)
constexpr int kRowBlock = 4;                  // rows per AVX2 microkernel call
constexpr int32_t kPrefetchBlocks = 4;        // how far ahead the passes prefetch the cache
constexpr int64_t kBlockInPlaceRows = 8;      // P·V reads a Q8_0/Q4_0 V cache in place up to this many rows

using ConvertFn = void (*)(const void* row, int64_t e0, int64_t n, float* out);

// n values of a cache row from element e0 (a multiple of 8 for the block types), as floats.
template <int kT>
void convert_row(const void* row, int64_t e0, int64_t n, float* out) {
  int64_t d = 0;
  for (; d + 8 <= n; d += 8) _mm256_storeu_ps(out + d, load8<kT>(row, e0 + d));
  for (; d < n; ++d) out[d] = load1<kT>(row, e0 + d);
}

inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20), r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20), r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31), r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31), r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// K rows of a block (rows[j], a row of the cache for every cell: a cell no row sees may take any,
// its scores are masked), values [e0, e0 + hd) of each, converted and transposed to
// kt[d * kBC + j] for d < hdk8 (zeros past hd): eight cells' eight values at a time, loaded
// straight from the cache into registers and transposed there.
using KBlockFn = void (*)(const void* const* rows, int64_t e0, int64_t hd, int64_t hdk8, float* kt);
template <int kT>
void k_block(const void* const* rows, int64_t e0, int64_t hd, int64_t hdk8, float* kt) {
  const int64_t full = hd / 8 * 8;
  for (int64_t d0 = 0; d0 < full; d0 += 8)
    for (int h = 0; h < kBC; h += 8) {
      __m256 r8[8];
      for (int k = 0; k < 8; ++k) r8[k] = load8<kT>(rows[h + k], e0 + d0);
      transpose8(r8);
      for (int k = 0; k < 8; ++k) _mm256_storeu_ps(kt + (d0 + k) * kBC + h, r8[k]);
    }
  if (full < hdk8)  // a head size that is not a multiple of 8 (F32 and F16 caches only)
    for (int h = 0; h < kBC; h += 8) {
      __m256 r8[8];
      for (int k = 0; k < 8; ++k) {
        alignas(32) float f[8] = {};
        for (int64_t d = full; d < hd; ++d) f[d - full] = load1<kT>(rows[h + k], e0 + d);
        r8[k] = _mm256_load_ps(f);
      }
      transpose8(r8);
      for (int k = 0; k < 8; ++k) _mm256_storeu_ps(kt + (full + k) * kBC + h, r8[k]);
    }
}

// A cache type's two readers: K blocks transposed (scores), V rows as they are (P·V).
struct CacheReaders {
  KBlockFn k_block;
  ConvertFn rows;
};
template <int kT>
constexpr CacheReaders kReaders{k_block<kT>, convert_row<kT>};

CacheReaders readers(int kt) {
  switch (kt) {
    case kF16: return kReaders<kF16>;
    case kF8: return kReaders<kF8>;
    case kQ8: return kReaders<kQ8>;
    case kQ4: return kReaders<kQ4>;
    default: return kReaders<kF32>;
  }
}

// exp(x) for x <= 0 (attention_tiles.h: ExpConstants).
inline __m256 exp_nonpositive(__m256 x) {
  using E = attn::ExpConstants;
  const __m256 lo = _mm256_set1_ps(E::kExpFloor);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(x, lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(E::kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(E::kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(E::kLn2Lo), r);
  __m256 y = _mm256_set1_ps(E::kPoly[0]);
  for (int k = 1; k < 6; ++k) y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(E::kPoly[k]));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

attn::InPlace in_place_type(int kt) {
  return kt == kQ8 ? attn::InPlace::Q8_0 : kt == kQ4 ? attn::InPlace::Q4_0 : attn::InPlace::F16;
}

// The AVX2 inner loops (attention_tiles.h): a block's 16 cells are two 256-bit registers per row,
// four rows at a time; fewer rows take CH chains (or DC runs of 16 output values) at a time, so
// that 8 independent FMA chains hide the FMA's latency (a decode tile has 1-4 rows a kv head).
template <int NR, int CH>
void scores_rows(const float* q, int64_t ldq, const float* kt, int64_t hdk, float* s, int64_t lds) {
  __m256 tot[NR][2];
  for (int r = 0; r < NR; ++r) tot[r][0] = tot[r][1] = _mm256_setzero_ps();  // each set by its first chain
  int64_t d0 = 0;
  for (; d0 + CH * kChain <= hdk; d0 += CH * kChain) {
    __m256 a[NR][CH][2];
    for (int r = 0; r < NR; ++r)
      for (int c = 0; c < CH; ++c) a[r][c][0] = a[r][c][1] = _mm256_setzero_ps();
    for (int64_t d = 0; d < kChain; ++d)
      for (int c = 0; c < CH; ++c) {
        const int64_t dd = d0 + c * kChain + d;
        const __m256 k0 = _mm256_loadu_ps(kt + dd * kBC), k1 = _mm256_loadu_ps(kt + dd * kBC + 8);
        for (int r = 0; r < NR; ++r) {
          const __m256 qb = _mm256_broadcast_ss(q + r * ldq + dd);
          a[r][c][0] = _mm256_fmadd_ps(qb, k0, a[r][c][0]);
          a[r][c][1] = _mm256_fmadd_ps(qb, k1, a[r][c][1]);
        }
      }
    for (int c = 0; c < CH; ++c)
      for (int r = 0; r < NR; ++r)
        for (int h = 0; h < 2; ++h) tot[r][h] = d0 + c * kChain == 0 ? a[r][c][h] : _mm256_add_ps(tot[r][h], a[r][c][h]);
  }
  for (; d0 < hdk; d0 += kChain) {
    __m256 a[NR][2];
    for (int r = 0; r < NR; ++r) a[r][0] = a[r][1] = _mm256_setzero_ps();
    for (int64_t d = d0, e = std::min(hdk, d0 + kChain); d < e; ++d) {
      const __m256 k0 = _mm256_loadu_ps(kt + d * kBC), k1 = _mm256_loadu_ps(kt + d * kBC + 8);
      for (int r = 0; r < NR; ++r) {
        const __m256 qb = _mm256_broadcast_ss(q + r * ldq + d);
        a[r][0] = _mm256_fmadd_ps(qb, k0, a[r][0]);
        a[r][1] = _mm256_fmadd_ps(qb, k1, a[r][1]);
      }
    }
    for (int r = 0; r < NR; ++r)
      for (int h = 0; h < 2; ++h) tot[r][h] = d0 == 0 ? a[r][h] : _mm256_add_ps(tot[r][h], a[r][h]);
  }
  for (int r = 0; r < NR; ++r) _mm256_storeu_ps(s + r * lds, tot[r][0]), _mm256_storeu_ps(s + r * lds + 8, tot[r][1]);
}

void scores_avx2(const float* q, int64_t ldq, int64_t nr, const float* kt, int nb, int64_t hdk, float* s, int64_t lds) {
  for (int b = 0; b < nb; ++b, kt += hdk * kBC, s += kBC) {  // a block at a time: 16 registers hold no more
    int64_t r = 0;
    for (; r + kRowBlock <= nr; r += kRowBlock) scores_rows<kRowBlock, 1>(q + r * ldq, ldq, kt, hdk, s + r * lds, lds);
    for (; r + 2 <= nr; r += 2) scores_rows<2, 2>(q + r * ldq, ldq, kt, hdk, s + r * lds, lds);
    for (; r < nr; ++r) scores_rows<1, 4>(q + r * ldq, ldq, kt, hdk, s + r * lds, lds);
  }
}

void mask_max_avx2(float* s, int64_t lds, int64_t nr, int nb, const uint32_t* tmask, int64_t rows_per_head,
                   int64_t heads, float scale, float* mx) {
  const __m256 vs = _mm256_set1_ps(scale), ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t r = 0; r < nr; ++r) {
    const uint32_t m = tmask[r % rows_per_head / heads];
    float* sr = s + r * lds;
    __m256 top = _mm256_loadu_ps(mx + r * 16);
    for (int h = 0; h < 2 * nb; ++h) {
      // Lane l of this half: bit 8h + l of the mask, as a sign bit.
      const __m256i bit = _mm256_sllv_epi32(_mm256_set1_epi32(static_cast<int32_t>(m >> (8 * h))),
                                            _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24));
      const __m256 v = _mm256_blendv_ps(ninf, _mm256_mul_ps(_mm256_loadu_ps(sr + 8 * h), vs), _mm256_castsi256_ps(bit));
      _mm256_storeu_ps(sr + 8 * h, v);
      top = _mm256_max_ps(top, v);
    }
    _mm256_storeu_ps(mx + r * 16, top);
  }
}

void exp_row_avx2(float* s, int32_t nblk, const uint32_t* any, float mx, float* sum8) {
  const __m256 vmx = _mm256_set1_ps(mx);
  __m256 sum = _mm256_setzero_ps();
  for (int32_t bk = 0; bk < nblk; ++bk) {
    if (!any[bk]) continue;
    for (int h = 0; h < kBC; h += 8) {
      const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + bk * kBC + h), vmx));
      _mm256_storeu_ps(s + bk * kBC + h, e);
      sum = _mm256_add_ps(sum, e);
    }
  }
  _mm256_storeu_ps(sum8, sum);
}

void norm_row_avx2(float* s, int32_t nblk, const uint32_t* any, float inv, bool round) {
  const __m256 vinv = _mm256_set1_ps(inv);
  for (int32_t bk = 0; bk < nblk; ++bk) {
    if (!any[bk]) continue;
    for (int h = 0; h < kBC; h += 8) {
      __m256 p = _mm256_mul_ps(_mm256_loadu_ps(s + bk * kBC + h), vinv);
      if (round) p = _mm256_cvtph_ps(_mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      _mm256_storeu_ps(s + bk * kBC + h, p);
    }
  }
}

// V rows as F32 (vb: row j at vb + j * ldv), F16, Q8_0 or Q4_0 (rows[j] from element e0, a
// multiple of 8 for the block types: load8), 8 values from d.
struct F32Rows {
  const float* vb;
  int64_t ldv;
  __m256 load(int j, int64_t d) const { return _mm256_loadu_ps(vb + j * ldv + d); }
};
template <int kT>
struct CacheRows {
  const void* const* rows;
  int64_t e0;
  __m256 load(int j, int64_t d) const { return load8<kT>(rows[j], e0 + d); }
};

template <int NR, int DC, class V>
void pv_rows(const float* p, int64_t lds, const V& vb, float* o, int64_t ldo, int64_t hdv8) {
  int64_t d0 = 0;
  for (; d0 + 16 * DC <= hdv8; d0 += 16 * DC) {
    __m256 a[NR][2 * DC];
    for (int r = 0; r < NR; ++r)
      for (int c = 0; c < 2 * DC; ++c) a[r][c] = _mm256_loadu_ps(o + r * ldo + d0 + 8 * c);
    for (int j = 0; j < kBC; ++j) {
      __m256 v[2 * DC];
      for (int c = 0; c < 2 * DC; ++c) v[c] = vb.load(j, d0 + 8 * c);
      for (int r = 0; r < NR; ++r) {
        const __m256 pb = _mm256_broadcast_ss(p + r * lds + j);
        for (int c = 0; c < 2 * DC; ++c) a[r][c] = _mm256_fmadd_ps(pb, v[c], a[r][c]);
      }
    }
    for (int r = 0; r < NR; ++r)
      for (int c = 0; c < 2 * DC; ++c) _mm256_storeu_ps(o + r * ldo + d0 + 8 * c, a[r][c]);
  }
  for (; d0 + 16 <= hdv8; d0 += 16) {
    __m256 a[NR][2];
    for (int r = 0; r < NR; ++r)
      a[r][0] = _mm256_loadu_ps(o + r * ldo + d0), a[r][1] = _mm256_loadu_ps(o + r * ldo + d0 + 8);
    for (int j = 0; j < kBC; ++j) {
      const __m256 v0 = vb.load(j, d0), v1 = vb.load(j, d0 + 8);
      for (int r = 0; r < NR; ++r) {
        const __m256 pb = _mm256_broadcast_ss(p + r * lds + j);
        a[r][0] = _mm256_fmadd_ps(pb, v0, a[r][0]);
        a[r][1] = _mm256_fmadd_ps(pb, v1, a[r][1]);
      }
    }
    for (int r = 0; r < NR; ++r)
      _mm256_storeu_ps(o + r * ldo + d0, a[r][0]), _mm256_storeu_ps(o + r * ldo + d0 + 8, a[r][1]);
  }
  if (d0 < hdv8) {
    __m256 a[NR];
    for (int r = 0; r < NR; ++r) a[r] = _mm256_loadu_ps(o + r * ldo + d0);
    for (int j = 0; j < kBC; ++j) {
      const __m256 v0 = vb.load(j, d0);
      for (int r = 0; r < NR; ++r) a[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + r * lds + j), v0, a[r]);
    }
    for (int r = 0; r < NR; ++r) _mm256_storeu_ps(o + r * ldo + d0, a[r]);
  }
}

template <class V>
void pv_any(const float* p, int64_t lds, int64_t nr, const V& vb, float* o, int64_t ldo, int64_t hdv8) {
  int64_t r = 0;
  for (; r + kRowBlock <= nr; r += kRowBlock) pv_rows<kRowBlock, 1>(p + r * lds, lds, vb, o + r * ldo, ldo, hdv8);
  for (; r + 2 <= nr; r += 2) pv_rows<2, 2>(p + r * lds, lds, vb, o + r * ldo, ldo, hdv8);
  for (; r < nr; ++r) pv_rows<1, 4>(p + r * lds, lds, vb, o + r * ldo, ldo, hdv8);
}

void pv_avx2(const float* p, int64_t lds, int64_t nr, const float* vb, int64_t ldv, float* o, int64_t ldo,
             int64_t hdv8) {
  pv_any(p, lds, nr, F32Rows{vb, ldv}, o, ldo, hdv8);
}

void pv_cache_avx2(const float* p, int64_t lds, int64_t nr, const void* const* vrows, int64_t e0, attn::InPlace t,
                   float* o, int64_t ldo, int64_t hdv8) {
  switch (t) {
    case attn::InPlace::Q8_0: return pv_any(p, lds, nr, CacheRows<kQ8>{vrows, e0}, o, ldo, hdv8);
    case attn::InPlace::Q4_0: return pv_any(p, lds, nr, CacheRows<kQ4>{vrows, e0}, o, ldo, hdv8);
    default: return pv_any(p, lds, nr, CacheRows<kF16>{vrows, e0}, o, ldo, hdv8);
  }
}

const attn::Microkernels kAvx2{scores_avx2,   mask_max_avx2, exp_row_avx2, norm_row_avx2,
                               pv_avx2,       pv_cache_avx2, nullptr};

// A tile: tokens [t0, t1) of one sequence, kv heads [kv0, kv1), and query heads [g0, g1) of
// each one's group (the group's own indices). Its rows: kv head by kv head, then token, then
// query head.
struct Tile {
  int32_t t0, t1;
  int64_t kv0, kv1, g0, g1;
};

struct Scratch {
  std::vector<float> q, s, kt, vb, o, mxv;
  std::vector<uint8_t> zeros;  // a V row of zero bytes (zeros in F16, Q8_0 and Q4_0: scale 0), for unseen cells
  std::vector<int32_t> cells, cpos;
  std::vector<uint32_t> any;  // per block: the cells some token of the tile sees
};

inline int64_t round8(int64_t n) { return (n + 7) / 8 * 8; }

struct TileKernel {
  const Node& n;
  AttentionBatch b;
  KBlockFn k_block;
  ConvertFn conv_v;
  bool round_q, round_p;
  // The K and V caches when read in place (F16, Q8_0 or Q4_0; for P·V heads a multiple of 8, or
  // of 16 for the block types; K where the ISA has a loop for it, heads a multiple of 16), and
  // whether they are.
  attn::InPlace k_type, v_type;
  bool k_in_place, v_in_place;
  int64_t hd_k, hd_v, hdk8, hdv8, group;
  float scale, softcap;
  int32_t window;
  const float* sinks;

  void run(const Tile& tl, const attn::Microkernels& mk, Scratch& w) const {
    const Tensor *q = n.src[0], *kc = n.src[1], *vc = n.src[2];
    // RH rows a kv head (token-major), R in all.
    const int64_t nh = tl.g1 - tl.g0, nt = tl.t1 - tl.t0, nkv = tl.kv1 - tl.kv0, RH = nh * nt, R = nkv * RH;
    auto head_of = [&](int64_t r) { return (tl.kv0 + r / RH) * group + tl.g0 + r % nh; };
    const int32_t nc = b.n_cells_of(tl.t0), nblk = (nc + kBC - 1) / kBC;
    // Rows of scores 64 bytes longer than the blocks: at a power-of-two stride the block's rows
    // would share a few L1 sets (4 KiB aliasing), and the scores' reload right after the inner
    // loop's stores missed.
    const int64_t lds = static_cast<int64_t>(nblk + 1) * kBC;
    w.q.assign(static_cast<size_t>(R * hdk8), 0.0f);
    w.s.resize(static_cast<size_t>(R * lds));
    w.o.assign(static_cast<size_t>(R * hdv8), 0.0f);
    w.cells.resize(static_cast<size_t>(nc));
    w.kt.resize(static_cast<size_t>(2 * hdk8 * kBC));
    w.vb.resize(static_cast<size_t>(kBC * hdv8));
    w.zeros.assign(vc->row_bytes(), 0);
    const attn::KCacheFn k_cache = k_in_place ? mk.k_cache : nullptr;
    b.for_each_cell(tl.t0, [&](int32_t i, int32_t c) { w.cells[static_cast<size_t>(i)] = c; });
    for (int64_t r = 0; r < R; ++r) {
      const float* qp = q->f32(head_of(r), tl.t0 + r % RH / nh);
      float* qr = w.q.data() + r * hdk8;
      if (!round_q) {
        std::copy(qp, qp + hd_k, qr);
        continue;
      }
      int64_t d = 0;  // F16-rounded: F16C's conversion rounds to nearest even, as round_fp16 does
      for (; d + 8 <= hd_k; d += 8)
        _mm256_storeu_ps(qr + d, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(qp + d),
                                                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
      for (; d < hd_k; ++d) qr[d] = round_fp16(qp[d]);
    }
    // Pass 1: the scores, masked to -inf where a row's token cannot see the cell, two blocks at a
    // time (the AVX-512 loops reuse each query value for both). A token's visible cells of the
    // pair as a bit mask: a cell position p (-1: empty, as past the table's end) is seen from
    // position tp when 0 <= p <= tp and, with a window W, p > tp - W. A block no token sees is
    // skipped here and in every pass after.
    w.cpos.resize(static_cast<size_t>(lds));  // a pair may take the block past the last (empty cells)
    for (int64_t i = 0; i < lds; ++i) w.cpos[static_cast<size_t>(i)] = i < nc ? b.cell_pos[w.cells[static_cast<size_t>(i)]] : -1;
    w.any.assign(static_cast<size_t>(nblk + 1), 0);
    w.mxv.assign(static_cast<size_t>(R * 16), -std::numeric_limits<float>::infinity());
    uint32_t tmask[kMaxTileTokens];
    // The K (pass 1) and V (pass 2) bytes of the tile's kv heads in the cells kPrefetchBlocks
    // blocks ahead, asked for before they are needed: at depth a decode step's blocks come from
    // DRAM, and the hardware prefetcher alone left the loops waiting on them.
    int32_t tp_max = -1;
    for (int32_t t = tl.t0; t < tl.t1; ++t) tp_max = std::max(tp_max, b.token_pos[t]);
    struct Bytes {  // of a cache row: the tile's kv heads, from a cache line's start
      int64_t b0, b1;
    };
    auto head_bytes = [&](const Tensor* t, int64_t hd) {
      return Bytes{static_cast<int64_t>(dtype_row_size(t->type, tl.kv0 * hd)) & ~int64_t{63},
                   static_cast<int64_t>(dtype_row_size(t->type, tl.kv1 * hd))};
    };
    const Bytes kbytes = head_bytes(kc, hd_k), vbytes = head_bytes(vc, hd_v);
    auto prefetch = [&](const Tensor* t, Bytes by, int32_t i0) {
      const int32_t ahead = i0 + kPrefetchBlocks * kBC;
      if (ahead >= nc || w.cpos[static_cast<size_t>(ahead)] > tp_max) return;  // (a prompt's later blocks: unseen)
      const int64_t b0 = by.b0, b1 = by.b1;
      for (int32_t i = ahead, e = std::min(i + 2 * kBC, nc); i < e; ++i) {
        const uint8_t* r = t->row(w.cells[static_cast<size_t>(i)]);
        for (int64_t o = b0; o < b1; o += 64) _mm_prefetch(reinterpret_cast<const char*>(r + o), _MM_HINT_T0);
      }
    };
    for (int32_t bk = 0; bk < nblk; bk += 2) {
      const int32_t i0 = bk * kBC;
      uint32_t any = 0;
      prefetch(kc, kbytes, i0);
      for (int64_t ti = 0; ti < nt; ++ti) {
        const int32_t tp = b.token_pos[tl.t0 + ti];
        const __m256i lo = _mm256_set1_epi32(window > 0 ? std::max(-1, tp - window) : -1), hi = _mm256_set1_epi32(tp + 1);
        uint32_t m = 0;
        for (int h = 0; h < 4; ++h) {
          const __m256i p = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.cpos.data() + i0 + 8 * h));
          const __m256i in = _mm256_and_si256(_mm256_cmpgt_epi32(p, lo), _mm256_cmpgt_epi32(hi, p));
          m |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(in))) << (8 * h);
        }
        tmask[ti] = m;
        any |= m;
      }
      w.any[static_cast<size_t>(bk)] = any & 0xFFFF;
      w.any[static_cast<size_t>(bk + 1)] = any >> 16;
      if (!any) continue;
      // The pair's visible blocks (one, or both), their K rows (a cell no token sees reads the
      // block's first seen one: its scores are masked), transposed to kt[b][d][j].
      const int first = any & 0xFFFF ? 0 : 1, nb = (any & 0xFFFF) && (any >> 16) ? 2 : 1;
      for (int64_t ti = 0; ti < nt; ++ti) tmask[ti] >>= kBC * first;
      float* sblk = w.s.data() + i0 + kBC * first;
      for (int64_t kv = 0; kv < nkv; ++kv) {
        for (int bb = 0; bb < nb; ++bb) {
          const int32_t c0 = i0 + kBC * (first + bb);
          const uint32_t seen = any >> (kBC * (first + bb)) & 0xFFFF;
          const void* rows[kBC];
          const void* fallback = kc->row(w.cells[static_cast<size_t>(c0 + __builtin_ctz(seen))]);
          for (int j = 0; j < kBC; ++j)
            rows[j] = seen >> j & 1 ? kc->row(w.cells[static_cast<size_t>(c0 + j)]) : fallback;
          float* kt = w.kt.data() + bb * hdk8 * kBC;
          if (k_cache) {
            k_cache(rows, (tl.kv0 + kv) * hd_k, k_type, hd_k, kt);
          } else {
            k_block(rows, (tl.kv0 + kv) * hd_k, hd_k, hdk8, kt);
          }
        }
        mk.scores(w.q.data() + kv * RH * hdk8, hdk8, RH, w.kt.data(), nb, hdk8, sblk + kv * RH * lds, lds);
      }
      if (softcap > 0)
        for (int64_t r = 0; r < R; ++r)
          for (int j = 0; j < nb * kBC; ++j) {
            float& f = sblk[r * lds + j];
            f = softcap * std::tanh(f * scale / softcap);
          }
      // Scale (already done by the soft-cap: times 1 is exact), mask, and each row's running max.
      mk.mask_max(sblk, lds, R, nb, tmask, RH, nh, softcap > 0 ? 1.0f : scale, w.mxv.data());
    }
    // Softmax: exp(s - max) (the sink joins the max and the sum), the sum in lanes by cell index,
    // then p = e / sum, F16-rounded for a non-F32 V cache.
    for (int64_t r = 0; r < R; ++r) {
      float* sr = w.s.data() + r * lds;
      const float sink = sinks ? sinks[head_of(r)] : -std::numeric_limits<float>::infinity();
      const float* mr = w.mxv.data() + r * 16;
      const float mx = std::max(hmax(_mm256_max_ps(_mm256_loadu_ps(mr), _mm256_loadu_ps(mr + 8))), sink);
      if (mx == -std::numeric_limits<float>::infinity()) {  // nothing visible, no sink: zeros
        std::fill(sr, sr + lds, 0.0f);
        continue;
      }
      alignas(32) float sum8[8];
      mk.exp(sr, nblk, w.any.data(), mx, sum8);
      const float sum = hsum(_mm256_load_ps(sum8)) + (sinks ? std::exp(sink - mx) : 0.0f);
      mk.norm(sr, nblk, w.any.data(), sum > 0 ? 1.0f / sum : 0.0f, round_p);
    }
    // Pass 2: O += P V over the blocks some row can see. A Q8_0 or Q4_0 V row costs a multiply a
    // vector to convert: read in place for a few rows (a decode step), converted once for many.
    const bool v_direct = v_in_place && (v_type == attn::InPlace::F16 || RH <= kBlockInPlaceRows);
    for (int32_t bk = 0; bk < nblk; ++bk) {
      const uint32_t any = w.any[static_cast<size_t>(bk)];
      if (!any) continue;
      const int32_t i0 = bk * kBC;
      if (bk % 2 == 0) prefetch(vc, vbytes, i0);  // a pair of blocks at a time, as pass 1
      for (int64_t kv = 0; kv < nkv; ++kv) {
        if (v_direct) {  // V straight from the cache (a cell no row sees: zeros)
          const void* vrows[kBC];
          for (int j = 0; j < kBC; ++j)
            vrows[j] = any >> j & 1 ? vc->row(w.cells[static_cast<size_t>(i0 + j)]) : w.zeros.data();
          mk.pv_cache(w.s.data() + kv * RH * lds + i0, lds, RH, vrows, (tl.kv0 + kv) * hd_v, v_type,
                      w.o.data() + kv * RH * hdv8, hdv8, hdv8);
          continue;
        }
        for (int j = 0; j < kBC; ++j) {
          float* v = w.vb.data() + j * hdv8;
          if (any >> j & 1) {
            conv_v(vc->row(w.cells[static_cast<size_t>(i0 + j)]), (tl.kv0 + kv) * hd_v, hd_v, v);
            std::fill(v + hd_v, v + hdv8, 0.0f);
          } else {
            std::fill(v, v + hdv8, 0.0f);
          }
        }
        mk.pv(w.s.data() + kv * RH * lds + i0, lds, RH, w.vb.data(), hdv8, w.o.data() + kv * RH * hdv8, hdv8, hdv8);
      }
    }
    for (int64_t r = 0; r < R; ++r) {
      const float* o = w.o.data() + r * hdv8;
      std::copy(o, o + hd_v, n.dst->f32(head_of(r), tl.t0 + r % RH / nh));
    }
  }
};

// The batch's tiles: runs of tokens of one sequence, cut so that a tile's scores fit the budget,
// times each kv head, times pieces of its group (when the group's rows alone exceed the budget,
// or when there are too few tiles to keep every thread busy). Within a kv head, the longest
// (latest) tiles first.
//
// A sequence whose tokens make one run (a decode step, a short chunk) takes several kv heads a
// tile where that still leaves a tile for every thread: its tile then reads a contiguous part of
// each cell's row (4 of 8 kv heads: 1 KiB of F16 at head 128) instead of a head's 256 bytes every
// row, which the hardware prefetcher streams, and a decode step at depth reads at memory's pace.
// The rows and each row's arithmetic are the same either way.
std::vector<Tile> make_tiles(const AttentionBatch& b, int64_t n_kv, int64_t group, int nth) {
  struct Run {
    int32_t t0, t1;
    int64_t hs, lds;
    bool whole;  // the sequence's only run
    int64_t kvs = 1;  // kv heads a tile
  };
  std::vector<Run> runs;
  for (int32_t t = 0; t < b.n_tokens;) {
    int32_t e = t + 1;
    while (e < b.n_tokens && b.token_seq[e] == b.token_seq[t]) ++e;
    const int64_t lds = (b.n_cells_of(t) + kBC - 1) / kBC * kBC;
    int64_t hs = group;
    while (hs > 1 && hs * lds > kScoreBudget) hs = (hs + 1) / 2;
    const int32_t tq = static_cast<int32_t>(std::clamp<int64_t>(kScoreBudget / (hs * lds), 1, kMaxTileTokens));
    for (int32_t t0 = t; t0 < e; t0 += tq) runs.push_back({t0, std::min(e, t0 + tq), hs, lds, e - t <= tq});
    t = e;
  }
  // Pieces of n_kv a whole run is cut into: the fewest that deal the tiles evenly to the threads
  // (or make plenty of them).
  const int64_t n_runs = static_cast<int64_t>(runs.size());
  int64_t pieces = n_kv;
  for (int64_t p = 1; p < n_kv; ++p)
    if (n_kv % p == 0 && ((n_runs * p) % nth == 0 || n_runs * p >= 8 * nth)) {
      pieces = p;
      break;
    }
  for (Run& r : runs) {
    if (!r.whole || r.hs < group) continue;
    r.kvs = n_kv / pieces;
    while (r.kvs > 1 && r.kvs * group * r.lds * (r.t1 - r.t0) > kScoreBudget) {
      --r.kvs;
      while (n_kv % r.kvs) --r.kvs;  // a divisor of n_kv
    }
  }
  size_t n_items = 0;
  for (const Run& r : runs) n_items += static_cast<size_t>(n_kv / r.kvs * ((group + r.hs - 1) / r.hs));
  // Kv head by kv head, so that consecutive tiles read the same K and V rows (from L2, not L3).
  std::vector<Tile> tiles;
  for (int64_t kvh = 0; kvh < n_kv; ++kvh)
    for (auto it = runs.rbegin(); it != runs.rend(); ++it) {
      if (kvh % it->kvs) continue;
      int64_t hs = it->hs;
      if (n_items < static_cast<size_t>(nth)) {  // decode with fewer kv heads than threads (MLA: one)
        const int64_t split = (nth + static_cast<int64_t>(n_items) - 1) / static_cast<int64_t>(n_items);
        hs = (hs + split - 1) / split;  // every piece converts the same K and V rows: no more than needed
      }
      for (int64_t h = 0; h < group; h += hs) tiles.push_back({it->t0, it->t1, kvh, kvh + it->kvs, h, std::min(group, h + hs)});
    }
  return tiles;
}

}  // namespace

bool attention_supported(const Node& n) {
  // K and V pairs the dispatch below instantiates; a block type needs head slices on 8-element
  // boundaries (load8), which every model's head size gives.
  const DType k = n.src[1]->type, v = n.src[2]->type;
  auto plain = [](DType t) { return t == DType::F16 || t == DType::F32; };
  auto block = [](DType t) { return t == DType::Q8_0 || t == DType::Q4_0; };
  const bool pairs = (plain(k) && plain(v)) || (k == DType::F8_E4M3 && v == DType::F8_E4M3) ||
                     ((block(k) || k == DType::F16) && (block(v) || v == DType::F16) && (block(k) || block(v)));
  const bool aligned = n.src[0]->ne[0] % 8 == 0 && n.dst->ne[0] % 8 == 0;
  return pairs && (aligned || (!block(k) && !block(v))) && n.src[4] != nullptr;
}

void attention(const Node& n, ThreadPool& pool) {
  const int kt = kt_of(n.src[1]->type), vt = kt_of(n.src[2]->type);
  const AttentionParams& ap = n.param<AttentionParams>();
  const int64_t hd_k = n.src[0]->ne[0], n_head = n.src[0]->ne[1], hd_v = n.dst->ne[0];
  const int64_t n_kv = n.src[1]->ne[0] / hd_k, group = n_head / n_kv;
  const TileKernel k{.n = n,
                     .b = AttentionBatch::view(static_cast<const int32_t*>(n.src[4]->data)),
                     .k_block = readers(kt).k_block,
                     .conv_v = readers(vt).rows,
                     .round_q = kt != kF32,
                     .round_p = vt != kF32,
                     .k_type = in_place_type(kt),
                     .v_type = in_place_type(vt),
                     .k_in_place = kt != kF32 && kt != kF8 && hd_k % 16 == 0,
                     .v_in_place = (vt == kF16 && hd_v % 8 == 0) || ((vt == kQ8 || vt == kQ4) && hd_v % 16 == 0),
                     .hd_k = hd_k,
                     .hd_v = hd_v,
                     .hdk8 = round8(hd_k),
                     .hdv8 = round8(hd_v),
                     .group = group,
                     .scale = ap.scale,
                     .softcap = ap.softcap,
                     .window = ap.window,
                     .sinks = n.src[3] ? static_cast<const float*>(n.src[3]->data) : nullptr};
  const std::vector<Tile> tiles = make_tiles(k.b, n_kv, group, pool.size());
  std::atomic<size_t> next{0};
  const attn::Microkernels& mk = use_avx512() && attn::avx512_microkernels() ? *attn::avx512_microkernels() : kAvx2;
  pool.run([&](int, int) {
    thread_local Scratch w;  // kept between calls: a decode step's 2 x layers calls allocate nothing
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < tiles.size();) k.run(tiles[i], mk, w);
  });
}

}  // namespace kestrel::cpu
#endif
