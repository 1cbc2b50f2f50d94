// The tiled ATTENTION's inner loops for AVX-512 (attention_tiles.h): a block's 16 cells are one
// 512-bit register. Scores: eight rows against two blocks at a time, 16 accumulators (the query
// value broadcast from memory into the FMA, two K loads for 16 FMAs), each chain's sum added to
// the score in memory; P·V: six rows' 64 output values in 24 registers (four V loads and six
// broadcasts for 24 FMAs). Fewer rows take several chains (runs of output values) at a time, so
// that 8 or more independent FMA chains hide the FMA's latency. The softmax's row passes run 16
// cells a vector. Same arithmetic per value as the AVX2 loops, so the same bits. Self-contained
// (no inline helper shared with the AVX2 files: the linker may keep either target's copy).
#include "backends/cpu/kernels/attention_tiles.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512VL__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <limits>

#include "tensor/quants/quant_blocks.h"

namespace kestrel::cpu::attn {
namespace {

// NR rows' scores against NB blocks (block b's K at kt + b * ldk), CH chains of kChain
// dimensions at a time: NR x NB x CH independent FMA chains. Chain c of a score is added to the
// score in s (the first one stored) in order, as the AVX2 loops add theirs.
template <int NR, int NB, int CH>
void scores_rows(const float* q, int64_t ldq, const float* kt, int64_t ldk, int64_t hdk, float* s, int64_t lds) {
  auto put = [&](int r, int b, __m512 a, int64_t at) {
    float* p = s + r * lds + b * kBC;
    _mm512_storeu_ps(p, at == 0 ? a : _mm512_add_ps(_mm512_loadu_ps(p), a));
  };
  int64_t d0 = 0;
  for (; d0 + CH * kChain <= hdk; d0 += CH * kChain) {
    __m512 a[NR][NB][CH];
    for (int r = 0; r < NR; ++r)
      for (int b = 0; b < NB; ++b)
        for (int c = 0; c < CH; ++c) a[r][b][c] = _mm512_setzero_ps();
    for (int64_t d = 0; d < kChain; ++d)
      for (int c = 0; c < CH; ++c) {
        const int64_t dd = d0 + c * kChain + d;
        __m512 k[NB];
        for (int b = 0; b < NB; ++b) k[b] = _mm512_loadu_ps(kt + b * ldk + dd * kBC);
        for (int r = 0; r < NR; ++r) {
          const __m512 qb = _mm512_set1_ps(q[r * ldq + dd]);
          for (int b = 0; b < NB; ++b) a[r][b][c] = _mm512_fmadd_ps(qb, k[b], a[r][b][c]);
        }
      }
    for (int c = 0; c < CH; ++c)
      for (int r = 0; r < NR; ++r)
        for (int b = 0; b < NB; ++b) put(r, b, a[r][b][c], d0 + c * kChain);
  }
  for (; d0 < hdk; d0 += kChain) {
    __m512 a[NR][NB];
    for (int r = 0; r < NR; ++r)
      for (int b = 0; b < NB; ++b) a[r][b] = _mm512_setzero_ps();
    for (int64_t d = d0, e = std::min(hdk, d0 + kChain); d < e; ++d) {
      __m512 k[NB];
      for (int b = 0; b < NB; ++b) k[b] = _mm512_loadu_ps(kt + b * ldk + d * kBC);
      for (int r = 0; r < NR; ++r) {
        const __m512 qb = _mm512_set1_ps(q[r * ldq + d]);
        for (int b = 0; b < NB; ++b) a[r][b] = _mm512_fmadd_ps(qb, k[b], a[r][b]);
      }
    }
    for (int r = 0; r < NR; ++r)
      for (int b = 0; b < NB; ++b) put(r, b, a[r][b], d0);
  }
}

template <int NB>
void scores_nb(const float* q, int64_t ldq, int64_t nr, const float* kt, int64_t hdk, float* s, int64_t lds) {
  const int64_t ldk = hdk * kBC;
  int64_t r = 0;
  for (; r + 8 <= nr; r += 8) scores_rows<8, NB, 1>(q + r * ldq, ldq, kt, ldk, hdk, s + r * lds, lds);
  for (; r + 4 <= nr; r += 4) scores_rows<4, NB, 2 / NB>(q + r * ldq, ldq, kt, ldk, hdk, s + r * lds, lds);
  for (; r + 2 <= nr; r += 2) scores_rows<2, NB, 4 / NB>(q + r * ldq, ldq, kt, ldk, hdk, s + r * lds, lds);
  for (; r < nr; ++r) scores_rows<1, NB, 4 / NB>(q + r * ldq, ldq, kt, ldk, hdk, s + r * lds, lds);
}

void scores(const float* q, int64_t ldq, int64_t nr, const float* kt, int nb, int64_t hdk, float* s, int64_t lds) {
  if (nb == 2)
    scores_nb<2>(q, ldq, nr, kt, hdk, s, lds);
  else
    scores_nb<1>(q, ldq, nr, kt, hdk, s, lds);
}

void mask_max(float* s, int64_t lds, int64_t nr, int nb, const uint32_t* tmask, int64_t rows_per_head, int64_t heads,
              float scale, float* mx) {
  const __m512 vs = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t r = 0; r < nr; ++r) {
    const uint32_t m = tmask[r % rows_per_head / heads];
    float* sr = s + r * lds;
    __m512 top = _mm512_loadu_ps(mx + r * 16);
    for (int b = 0; b < nb; ++b) {
      const __mmask16 seen = static_cast<__mmask16>(m >> (16 * b));
      const __m512 v = _mm512_mask_mul_ps(ninf, seen, _mm512_loadu_ps(sr + b * kBC), vs);
      _mm512_storeu_ps(sr + b * kBC, v);
      top = _mm512_max_ps(top, v);
    }
    _mm512_storeu_ps(mx + r * 16, top);
  }
}

// exp(x) for x <= 0 (attention_tiles.h: ExpConstants), the AVX2 file's steps lane for lane.
inline __m512 exp_nonpositive(__m512 x) {
  using E = ExpConstants;
  const __m512 lo = _mm512_set1_ps(E::kExpFloor);
  const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_max_ps(x, lo);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(E::kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(E::kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(E::kLn2Lo), r);
  __m512 y = _mm512_set1_ps(E::kPoly[0]);
  for (int k = 1; k < 6; ++k) y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(E::kPoly[k]));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(static_cast<__mmask16>(~under), y, _mm512_castsi512_ps(e));
}

void exp_row(float* s, int32_t nblk, const uint32_t* any, float mx, float* sum8) {
  const __m512 vmx = _mm512_set1_ps(mx);
  __m256 sum = _mm256_setzero_ps();
  for (int32_t bk = 0; bk < nblk; ++bk) {
    if (!any[bk]) continue;
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(s + bk * kBC), vmx));
    _mm512_storeu_ps(s + bk * kBC, e);
    sum = _mm256_add_ps(sum, _mm512_castps512_ps256(e));
    sum = _mm256_add_ps(sum, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
  }
  _mm256_storeu_ps(sum8, sum);
}

void norm_row(float* s, int32_t nblk, const uint32_t* any, float inv, bool round) {
  const __m512 vinv = _mm512_set1_ps(inv);
  for (int32_t bk = 0; bk < nblk; ++bk) {
    if (!any[bk]) continue;
    __m512 p = _mm512_mul_ps(_mm512_loadu_ps(s + bk * kBC), vinv);
    if (round) p = _mm512_cvtph_ps(_mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    _mm512_storeu_ps(s + bk * kBC, p);
  }
}

// V rows as F32 (vb: row j at vb + j * ldv), F16, Q8_0 or Q4_0 (rows[j] from element e0,
// converted on load), 16 values (or 8, mask 0xFF) from d.
struct F32Rows {
  const float* vb;
  int64_t ldv;
  __m512 load(int j, int64_t d) const { return _mm512_loadu_ps(vb + j * ldv + d); }
  __m512 load(int j, int64_t d, __mmask16 m) const { return _mm512_maskz_loadu_ps(m, vb + j * ldv + d); }
};
struct F16Rows {
  const void* const* rows;
  int64_t e0;
  __m512 load(int j, int64_t d) const { return load(j, d, 0xFFFF); }
  __m512 load(int j, int64_t d, __mmask16 m) const {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(rows[j]) + e0 + d));
  }
};
struct Q8Rows {  // blocks of 32: values e0 + d .. + 15 lie in one block's half (e0 + d a multiple of 16)
  const void* const* rows;
  int64_t e0;
  __m512 load(int j, int64_t d) const { return load(j, d, 0xFFFF); }
  __m512 load(int j, int64_t d, __mmask16 m) const {
    const int64_t i = e0 + d;
    const block_q8_0& b = static_cast<const block_q8_0*>(rows[j])[i / QK8_0];
    const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, b.qs + i % QK8_0)));
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b.d)), q);
  }
};

struct Q4Rows {  // byte k of a block holds values k (low nibble) and k + 16 (high): a half is 16 nibbles
  const void* const* rows;
  int64_t e0;
  __m512 load(int j, int64_t d) const { return load(j, d, 0xFFFF); }
  __m512 load(int j, int64_t d, __mmask16 m) const {
    const int64_t i = e0 + d;
    const block_q4_0& b = static_cast<const block_q4_0*>(rows[j])[i / QK4_0];
    __m512i q = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, b.qs));
    q = _mm512_and_si512(_mm512_srli_epi32(q, i % QK4_0 >= 16 ? 4 : 0), _mm512_set1_epi32(0xF));
    const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(q, _mm512_set1_epi32(8)));
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(b.d)), v);
  }
};

// NR rows' output values, DC runs of 16 at a time (NR x DC independent chains), then the rest 16
// (or 8: mask 0xFF) at a time.
template <int NR, int DC, class V>
void pv_rows(const float* p, int64_t lds, const V& vb, float* o, int64_t ldo, int64_t hdv8) {
  int64_t d0 = 0;
  for (; d0 + 16 * DC <= hdv8; d0 += 16 * DC) {
    __m512 a[NR][DC];
    for (int r = 0; r < NR; ++r)
      for (int c = 0; c < DC; ++c) a[r][c] = _mm512_loadu_ps(o + r * ldo + d0 + 16 * c);
    for (int j = 0; j < kBC; ++j) {
      __m512 v[DC];
      for (int c = 0; c < DC; ++c) v[c] = vb.load(j, d0 + 16 * c);
      for (int r = 0; r < NR; ++r) {
        const __m512 pb = _mm512_set1_ps(p[r * lds + j]);
        for (int c = 0; c < DC; ++c) a[r][c] = _mm512_fmadd_ps(pb, v[c], a[r][c]);
      }
    }
    for (int r = 0; r < NR; ++r)
      for (int c = 0; c < DC; ++c) _mm512_storeu_ps(o + r * ldo + d0 + 16 * c, a[r][c]);
  }
  for (; d0 < hdv8; d0 += 16) {
    const __mmask16 m = hdv8 - d0 >= 16 ? 0xFFFF : 0x00FF;
    __m512 a[NR];
    for (int r = 0; r < NR; ++r) a[r] = _mm512_maskz_loadu_ps(m, o + r * ldo + d0);
    for (int j = 0; j < kBC; ++j) {
      const __m512 v = vb.load(j, d0, m);
      for (int r = 0; r < NR; ++r) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(p[r * lds + j]), v, a[r]);
    }
    for (int r = 0; r < NR; ++r) _mm512_mask_storeu_ps(o + r * ldo + d0, m, a[r]);
  }
}

template <class V>
void pv_any(const float* p, int64_t lds, int64_t nr, const V& vb, float* o, int64_t ldo, int64_t hdv8) {
  int64_t r = 0;
  for (; r + 6 <= nr; r += 6) pv_rows<6, 4>(p + r * lds, lds, vb, o + r * ldo, ldo, hdv8);
  for (; r + 4 <= nr; r += 4) pv_rows<4, 4>(p + r * lds, lds, vb, o + r * ldo, ldo, hdv8);
  for (; r + 2 <= nr; r += 2) pv_rows<2, 4>(p + r * lds, lds, vb, o + r * ldo, ldo, hdv8);
  for (; r < nr; ++r) pv_rows<1, 4>(p + r * lds, lds, vb, o + r * ldo, ldo, hdv8);
}

void pv(const float* p, int64_t lds, int64_t nr, const float* vb, int64_t ldv, float* o, int64_t ldo, int64_t hdv8) {
  pv_any(p, lds, nr, F32Rows{vb, ldv}, o, ldo, hdv8);
}

void pv_cache(const float* p, int64_t lds, int64_t nr, const void* const* vrows, int64_t e0, InPlace t, float* o,
              int64_t ldo, int64_t hdv8) {
  switch (t) {
    case InPlace::Q8_0: return pv_any(p, lds, nr, Q8Rows{vrows, e0}, o, ldo, hdv8);
    case InPlace::Q4_0: return pv_any(p, lds, nr, Q4Rows{vrows, e0}, o, ldo, hdv8);
    default: return pv_any(p, lds, nr, F16Rows{vrows, e0}, o, ldo, hdv8);
  }
}

// 16 K rows' 16 values at a time converted and transposed in registers: interleave pairs of
// rows, then pairs of pairs, then 128-bit quarters twice.
template <class Rows>
void k_rows(const Rows& rows, int64_t hd, float* kt) {
  for (int64_t d0 = 0; d0 < hd; d0 += 16) {
    __m512 r[16], t[16];
    for (int j = 0; j < 16; ++j) r[j] = rows.load(j, d0);
    for (int j = 0; j < 16; j += 2) {
      t[j] = _mm512_unpacklo_ps(r[j], r[j + 1]);
      t[j + 1] = _mm512_unpackhi_ps(r[j], r[j + 1]);
    }
    for (int j = 0; j < 16; j += 4)
      for (int h = 0; h < 2; ++h) {
        const __m512d a = _mm512_castps_pd(t[j + h]), b = _mm512_castps_pd(t[j + 2 + h]);
        r[j + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));  // each 128-bit lane: 4 rows' dim 2h
        r[j + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));  // and dim 2h + 1
      }
    for (int j = 0; j < 4; ++j) {  // quarters: rows j, j+4 and j+8, j+12
      t[j] = _mm512_shuffle_f32x4(r[j], r[j + 4], 0x88);
      t[j + 4] = _mm512_shuffle_f32x4(r[j], r[j + 4], 0xDD);
      t[j + 8] = _mm512_shuffle_f32x4(r[j + 8], r[j + 12], 0x88);
      t[j + 12] = _mm512_shuffle_f32x4(r[j + 8], r[j + 12], 0xDD);
    }
    for (int j = 0; j < 4; ++j) {
      r[j] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0x88);
      r[j + 8] = _mm512_shuffle_f32x4(t[j], t[j + 8], 0xDD);
      r[j + 4] = _mm512_shuffle_f32x4(t[j + 4], t[j + 12], 0x88);
      r[j + 12] = _mm512_shuffle_f32x4(t[j + 4], t[j + 12], 0xDD);
    }
    for (int j = 0; j < 16; ++j) _mm512_storeu_ps(kt + (d0 + j) * kBC, r[j]);
  }
}

void k_cache(const void* const* krows, int64_t e0, InPlace t, int64_t hd, float* kt) {
  switch (t) {
    case InPlace::Q8_0: return k_rows(Q8Rows{krows, e0}, hd, kt);
    case InPlace::Q4_0: return k_rows(Q4Rows{krows, e0}, hd, kt);
    default: return k_rows(F16Rows{krows, e0}, hd, kt);
  }
}

const Microkernels kAvx512{scores, mask_max, exp_row, norm_row, pv, pv_cache, k_cache};

}  // namespace

const Microkernels* avx512_microkernels() { return &kAvx512; }

}  // namespace kestrel::cpu::attn

#else

namespace kestrel::cpu::attn {
const Microkernels* avx512_microkernels() { return nullptr; }
}  // namespace kestrel::cpu::attn

#endif
