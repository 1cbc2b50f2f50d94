// The tiled ATTENTION's inner loops for AVX-512 (attention_tiles.h): a block's 16 cells are one
// 512-bit register, so a row's scores are one FMA chain per kChain dimensions (the query value
// broadcast from memory into the FMA), eight rows at a time; P·V keeps 16 output values of eight
// rows in registers; fewer rows take several chains (runs of output values) at a time, so that
// 8 independent FMA chains hide the FMA's latency. Same arithmetic per value as the AVX2 loops,
// so the same bits. Self-contained (no inline helper shared with the AVX2 files: the linker may
// keep either target's copy).
#include "backends/cpu/kernels/attention_tiles.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512VL__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>

namespace kestrel::cpu::attn {
namespace {

constexpr int kRows = 8;

// NR rows' scores, CH chains of kChain dimensions at a time (NR x CH independent FMA chains: a
// decode tile's 1-2 rows alone would wait on the FMA's latency), each chain's sum added to the
// row's total in order.
template <int NR, int CH>
void scores_rows(const float* q, int64_t ldq, const float* kt, int64_t hdk, float* s, int64_t lds) {
  __m512 tot[NR];
  for (int r = 0; r < NR; ++r) tot[r] = _mm512_setzero_ps();  // each set by its first chain
  int64_t d0 = 0;
  auto add = [&](int r, __m512 a, int64_t at) { tot[r] = at == 0 ? a : _mm512_add_ps(tot[r], a); };
  for (; d0 + CH * kChain <= hdk; d0 += CH * kChain) {
    __m512 a[NR][CH];
    for (int r = 0; r < NR; ++r)
      for (int c = 0; c < CH; ++c) a[r][c] = _mm512_setzero_ps();
    for (int64_t d = 0; d < kChain; ++d)
      for (int c = 0; c < CH; ++c) {
        const int64_t dd = d0 + c * kChain + d;
        const __m512 k = _mm512_loadu_ps(kt + dd * kBC);
        for (int r = 0; r < NR; ++r) a[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * ldq + dd]), k, a[r][c]);
      }
    for (int c = 0; c < CH; ++c)
      for (int r = 0; r < NR; ++r) add(r, a[r][c], d0 + c * kChain);
  }
  for (; d0 < hdk; d0 += kChain) {
    __m512 a[NR];
    for (int r = 0; r < NR; ++r) a[r] = _mm512_setzero_ps();
    for (int64_t d = d0, e = std::min(hdk, d0 + kChain); d < e; ++d) {
      const __m512 k = _mm512_loadu_ps(kt + d * kBC);
      for (int r = 0; r < NR; ++r) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * ldq + d]), k, a[r]);
    }
    for (int r = 0; r < NR; ++r) add(r, a[r], d0);
  }
  for (int r = 0; r < NR; ++r) _mm512_storeu_ps(s + r * lds, tot[r]);
}

void scores(const float* q, int64_t ldq, int64_t nr, const float* kt, int64_t hdk, float* s, int64_t lds) {
  int64_t r = 0;
  for (; r + kRows <= nr; r += kRows) scores_rows<kRows, 1>(q + r * ldq, ldq, kt, hdk, s + r * lds, lds);
  for (; r + 4 <= nr; r += 4) scores_rows<4, 2>(q + r * ldq, ldq, kt, hdk, s + r * lds, lds);
  for (; r + 2 <= nr; r += 2) scores_rows<2, 4>(q + r * ldq, ldq, kt, hdk, s + r * lds, lds);
  for (; r < nr; ++r) scores_rows<1, 4>(q + r * ldq, ldq, kt, hdk, s + r * lds, lds);
}

// NR rows' output values, DC runs of 16 at a time (NR x DC independent chains, as above), then
// the rest 16 (or 8: mask 0xFF) at a time.
template <int NR, int DC>
void pv_rows(const float* p, int64_t lds, const float* vb, int64_t ldv, float* o, int64_t ldo, int64_t hdv8) {
  int64_t d0 = 0;
  for (; d0 + 16 * DC <= hdv8; d0 += 16 * DC) {
    __m512 a[NR][DC];
    for (int r = 0; r < NR; ++r)
      for (int c = 0; c < DC; ++c) a[r][c] = _mm512_loadu_ps(o + r * ldo + d0 + 16 * c);
    for (int j = 0; j < kBC; ++j) {
      __m512 v[DC];
      for (int c = 0; c < DC; ++c) v[c] = _mm512_loadu_ps(vb + j * ldv + d0 + 16 * c);
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
      const __m512 v = _mm512_maskz_loadu_ps(m, vb + j * ldv + d0);
      for (int r = 0; r < NR; ++r) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(p[r * lds + j]), v, a[r]);
    }
    for (int r = 0; r < NR; ++r) _mm512_mask_storeu_ps(o + r * ldo + d0, m, a[r]);
  }
}

void pv(const float* p, int64_t lds, int64_t nr, const float* vb, int64_t ldv, float* o, int64_t ldo, int64_t hdv8) {
  int64_t r = 0;
  for (; r + kRows <= nr; r += kRows) pv_rows<kRows, 1>(p + r * lds, lds, vb, ldv, o + r * ldo, ldo, hdv8);
  for (; r + 4 <= nr; r += 4) pv_rows<4, 2>(p + r * lds, lds, vb, ldv, o + r * ldo, ldo, hdv8);
  for (; r + 2 <= nr; r += 2) pv_rows<2, 4>(p + r * lds, lds, vb, ldv, o + r * ldo, ldo, hdv8);
  for (; r < nr; ++r) pv_rows<1, 4>(p + r * lds, lds, vb, ldv, o + r * ldo, ldo, hdv8);
}

const Microkernels kAvx512{scores, pv};

}  // namespace

const Microkernels* avx512_microkernels() { return &kAvx512; }

}  // namespace kestrel::cpu::attn

#else

namespace kestrel::cpu::attn {
const Microkernels* avx512_microkernels() { return nullptr; }
}  // namespace kestrel::cpu::attn

#endif
