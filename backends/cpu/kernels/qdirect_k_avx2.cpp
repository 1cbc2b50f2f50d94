// Fused decode kernels for the K-quants (AVX2): Q4_K and Q6_K (also in their repacked layouts
// Q4_K_R8 and Q6_K_R8, read in word order) and Q5_K against Q8_K activations, eight rows per pass
// with one row per float lane (qdirect_avx2.h), for up to four columns.
// Per super-block and row the integer sums stay in registers; the eight rows' totals then take
// one convert and one FMA per column (and one more for Q4_K/Q5_K's mins), qgemm.h's arithmetic.
#if defined(__x86_64__)
#include <cstring>
#include <type_traits>

#include "backends/cpu/kernels/q4k_scales.h"
#include "backends/cpu/kernels/qdirect_avx2.h"
#include "tensor/quants/quant_blocks.h"
#include "backends/cpu/repacked.h"

namespace kestrel::cpu::qdirect {
namespace {

inline __m128i bytes8(uint64_t v) { return _mm_cvtsi64_si128(static_cast<int64_t>(v)); }

// The activations' sums of the eight 32-value sub-blocks, bs[2j] + bs[2j+1], in order.
inline __m256i pair_sums(const int32_t* bs) {
  const __m256i h = _mm256_hadd_epi32(load32(bs), load32(bs + 8));  // 0 1 4 5 | 2 3 6 7
  return _mm256_permute4x64_epi64(h, 0xD8);
}

// One super-block of one Q4_K/Q5_K row against NC columns: the scale-weighted code sums (isum)
// and the mins times the sub-blocks' activation sums (mins), as lane partials.
// sc8/mn8: the row's eight scales and mins, one per byte, in the low 64 bits; qs its 128 code
// bytes, qh (Q5_K) its fifth bits.
template <bool kFive, int NC>
inline void k45_row(__m128i sc8, __m128i mn8, const uint8_t* qs, const uint8_t* qh_bytes, const int8_t* const* qx,
                    const __m256i* ps, __m256i* isum, __m256i* mins) {
  const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc8));
  const __m256i mn = _mm256_cvtepu8_epi32(mn8);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256(), mins[c] = _mm256_mullo_epi32(mn, ps[c]);
  __m256i qh = _mm256_setzero_si256();
  if constexpr (kFive) qh = load32(qh_bytes);
  for (int j = 0; j < 4; ++j) {
    const __m256i raw = load32(qs + 32 * j);
    __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
    if constexpr (kFive) {  // bits 2j and 2j+1 of qh, moved to bit 4 of each byte
      const __m256i one = _mm256_set1_epi8(1);
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(qh, one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4));
      qh = _mm256_srli_epi16(qh, 2);
    }
    // int16 element k of sc into every lane: shuffle bytes 2k, 2k+1.
    const __m256i slo = _mm256_shuffle_epi8(sc, _mm256_set1_epi16(static_cast<int16_t>((4 * j + 1) << 8 | 4 * j)));
    const __m256i shi = _mm256_shuffle_epi8(sc, _mm256_set1_epi16(static_cast<int16_t>((4 * j + 3) << 8 | (4 * j + 2))));
    for (int c = 0; c < NC; ++c) {
      const int8_t* x = qx[c] + 64 * j;
      const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load32(x)), slo);
      const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load32(x + 32)), shi);
      isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(plo, phi));
    }
  }
}

// Q4_K/Q5_K x Q8_K, per super-block:  d dx sum_j sc_j sum(q qx)  -  dmin dx sum_j m_j sum_j(qx).
template <class B, int NC>
void rows8_k45(const uint8_t* w, int64_t rb, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  constexpr bool kFive = std::is_same_v<B, block_q5_K>;
  constexpr int64_t kB = sizeof(B);
  const int64_t K = x.K, nsb = K / QK_K;
  const __m256i off = row_offsets(rb);
  __m256 acc[NC], accm[NC];
  for (int c = 0; c < NC; ++c) acc[c] = accm[c] = _mm256_setzero_ps();
  const GroupPrefetch pf(w, rb, nsb);
  for (int64_t s = 0; s < nsb; ++s) {
    pf.step(s);
    const int8_t* qx[NC];
    __m256i ps[NC];
    for (int c = 0; c < NC; ++c) {
      qx[c] = x.q.data() + (c0 + c) * K + s * QK_K;
      ps[c] = pair_sums(x.bs.data() + (c0 + c) * (K / 16) + 16 * s);
    }
    RowSums ri[NC], rm[NC];
#pragma GCC unroll 4
    for (int rp = 0; rp < 4; ++rp) {
      __m256i isum[2][NC], mins[2][NC];
      for (int k = 0; k < 2; ++k) {
        const int r = 2 * rp + k;
        const B& b = *reinterpret_cast<const B*>(w + r * rb + s * kB);
        const Q4kScales sm(b.scales);
        const uint8_t* qh = nullptr;
        if constexpr (kFive) qh = b.qh;
        k45_row<kFive, NC>(bytes8(sm.scales()), bytes8(sm.mins()), b.qs, qh, qx, ps, isum[k], mins[k]);
      }
      for (int c = 0; c < NC; ++c) {
        ri[c].pair(rp, isum[0][c], isum[1][c]);
        rm[c].pair(rp, mins[0][c], mins[1][c]);
      }
    }
    const __m256i words = gather_words(w + s * kB, off);  // d | dmin << 16
    const __m256 d = f16_low(words), dmin = f16_high(words);
    for (int c = 0; c < NC; ++c) {
      const float dx = x.dx[static_cast<size_t>((c0 + c) * (K / 32) + 8 * s)];
      acc[c] = fma_block(ri[c].total(), d, dx, acc[c]);
      accm[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(rm[c].total()), _mm256_mul_ps(dmin, _mm256_set1_ps(dx)), accm[c]);
    }
  }
  for (int c = 0; c < NC; ++c) _mm256_storeu_ps(y + (c0 + c) * y_stride, _mm256_add_ps(acc[c], accm[c]));
}

// Q4_K_R8 (cpu/repacked.h), stored in word order: lane 2r + b of a unit's 64 bytes (m, k) holds
// word k of row r's code group 2m + b (low nibbles: sub-block 4m + 2b's codes 4k..4k+3; high
// nibbles: 4m + 2b + 1's); one register holds rows 0-3 of it, another rows 4-7. Against
// [sub-block 4m + h's word k | 4m + h + 2's] (arrange_words), vpmaddubsw's int16 pairs add up over
// the eight words without overflow (8 x 2 x 15 x 127 < 2^15), so one vpmaddwd leaves each lane one
// sub-block's exact sum; vpmulld by the scales and a row's two lanes added give rows8_k45's
// integer sums with no reduction across rows, in about half its instructions a super-block. The
// mins (vpmaddwd of int16 pairs against the column's paired sub-block sums, q4k_min_pairs) and
// the float steps as in rows8_k45: the same bits.
template <int NC>
void q4_k_r8_words(const uint8_t* w, int64_t, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  const int64_t K = x.K, nsb = K / QK_K;
  const __m256i m4 = _mm256_set1_epi8(0x0F), k6 = _mm256_set1_epi8(0x3F), k2 = _mm256_set1_epi8(0x03);
  const __m256i even = _mm256_set1_epi32(0x00FF00FF);
  __m256 acc[NC], accm[NC];
  for (int c = 0; c < NC; ++c) acc[c] = accm[c] = _mm256_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* unit = w + s * cpu::kQ4_KR8UnitBytes;
    // The eight rows' scales and mins of sub-blocks 0-3 and 4-7, one row per 32-bit lane, as
    // Q4kScales unpacks them from the three scale planes.
    const __m256i w0 = load32(unit + 32), w1 = load32(unit + 64), w2 = load32(unit + 96);
    auto high_bits = [&](__m256i v) { return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 6), k2), 4); };
    const __m256i sc[2] = {_mm256_and_si256(w0, k6), _mm256_or_si256(_mm256_and_si256(w2, m4), high_bits(w0))};
    const __m256i mA = _mm256_and_si256(w1, k6);
    const __m256i mB = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(w2, 4), m4), high_bits(w1));
    // int16 pairs of mins (0, 2), (1, 3), (4, 6), (5, 7) per row.
    const __m256i mins[4] = {_mm256_and_si256(mA, even), _mm256_and_si256(_mm256_srli_epi16(mA, 8), even),
                             _mm256_and_si256(mB, even), _mm256_and_si256(_mm256_srli_epi16(mB, 8), even)};
    __m256i R[2][NC];  // per half e, row 4e + r's integer sum in lane 2r
    for (int e = 0; e < 2; ++e) {
      __m256i S[NC];
      for (int c = 0; c < NC; ++c) S[c] = _mm256_setzero_si256();
      for (int m = 0; m < 2; ++m)
        for (int h = 0; h < 2; ++h) {
          // Lane 2r + b: row 4e + r's scale of sub-block 4m + 2b + h.
          const __m256i E = _mm256_and_si256(_mm256_srli_epi16(sc[m], 8 * h), even);
          const __m256i scv = _mm256_cvtepu16_epi32(e ? _mm256_extracti128_si256(E, 1) : _mm256_castsi256_si128(E));
          __m256i P[NC];
          for (int c = 0; c < NC; ++c) P[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
          for (int k = 0; k < 8; ++k) {
            const __m256i W = load32(unit + 128 + 512 * m + 64 * k + 32 * e);
            const __m256i N = _mm256_and_si256(h ? _mm256_srli_epi16(W, 4) : W, m4);
            for (int c = 0; c < NC; ++c) {
              int64_t v;
              std::memcpy(&v, x.arranged.data() + (c0 + c) * K + s * QK_K + 64 * (2 * m + h) + 8 * k, 8);
              P[c] = _mm256_add_epi16(P[c], _mm256_maddubs_epi16(N, _mm256_set1_epi64x(v)));
            }
          }
          for (int c = 0; c < NC; ++c)
            S[c] = _mm256_add_epi32(S[c], _mm256_mullo_epi32(widen_pairs(P[c]), scv));
        }
      for (int c = 0; c < NC; ++c) R[e][c] = _mm256_add_epi32(S[c], _mm256_srli_epi64(S[c], 32));
    }
    const __m256 d = _mm256_cvtph_ps(load16(unit)), dmin = _mm256_cvtph_ps(load16(unit + 16));
    for (int c = 0; c < NC; ++c) {
      const __m256i T = _mm256_castps_si256(even_lanes(_mm256_castsi256_ps(R[0][c]), _mm256_castsi256_ps(R[1][c])));
      const int64_t* p = x.arranged_init.data() + (c0 + c) * (K / 64) + 4 * s;
      __m256i M = _mm256_setzero_si256();
      for (int i = 0; i < 4; ++i)
        M = _mm256_add_epi32(M, _mm256_madd_epi16(mins[i], _mm256_set1_epi32(static_cast<int32_t>(p[i]))));
      const float dx = x.dx[static_cast<size_t>((c0 + c) * (K / 32) + 8 * s)];
      acc[c] = fma_block(T, d, dx, acc[c]);
      accm[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(M), _mm256_mul_ps(dmin, _mm256_set1_ps(dx)), accm[c]);
    }
  }
  for (int c = 0; c < NC; ++c) _mm256_storeu_ps(y + (c0 + c) * y_stride, _mm256_add_ps(acc[c], accm[c]));
}

// Q6_K_R8 is one stream, which the hardware prefetchers follow but, at its 1680-byte units, ramp up
// on too slowly: each unit also asks for the lines 8 KiB on, as the AVX-512 kernels do (AVX2
// Q4_K_M generation 48-49 -> 57 tokens/s; the same for Q4_K_R8 and Q8_0_R8 measured 4-6% slower).
constexpr int64_t kQ6AheadBytes = 8192;
inline void q6_unit_ahead(const uint8_t* unit) {
  const char* p = reinterpret_cast<const char*>(unit) + kQ6AheadBytes;
  for (int64_t o = 0; o < cpu::kQ6_KR8UnitBytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}

// Q6_K_R8 (cpu/repacked.h), stored in word order, as the AVX-512 kernel q6_k_words reads it: lane
// 2r + b of a unit's 64 bytes A_k, B_k, H_k holds row r's half b's ql words k, 8 + k and qh word
// k; one register holds rows 0-3, another rows 4-7. Codes: A_k's low nibbles (with H's bit pair
// 0) are the half's chunk 0, B_k's (pair 2) chunk 1, A_k's high nibbles (pair 4) chunk 2, B_k's
// (pair 6) chunk 3. Against [chunk t's word k of half 0 | of half 1] (arrange_words), two
// vpmaddubsw added stay in int16 (2 x 2 x 63 x 128 < 2^15), and vpmaddwd by the group's scale in
// both halves of a lane gives sc_g sum(q qx) of two words; four words make the group. The centre
// is vpmaddwd of the scale pairs times 4 against the column's -8 sum_g(qx) pairs (arranged_init).
// The float steps as rows8_q6_k: the same bits.
template <int NC>
void q6_k_r8_words(const uint8_t* w, int64_t, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  const int64_t K = x.K, nsb = K / QK_K;
  const __m256i m4 = _mm256_set1_epi8(0x0F), k30 = _mm256_set1_epi8(0x30);
  // int16 element 0 (1) of each 32-bit lane into both of its halves.
  const __m256i dup[2] = {_mm256_setr_epi8(0, 1, 0, 1, 4, 5, 4, 5, 8, 9, 8, 9, 12, 13, 12, 13, 0, 1, 0, 1, 4, 5, 4,
                                           5, 8, 9, 8, 9, 12, 13, 12, 13),
                          _mm256_setr_epi8(2, 3, 2, 3, 6, 7, 6, 7, 10, 11, 10, 11, 14, 15, 14, 15, 2, 3, 2, 3, 6, 7,
                                           6, 7, 10, 11, 10, 11, 14, 15, 14, 15)};
  __m256 acc[NC];
  for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* unit = w + s * cpu::kQ6_KR8UnitBytes;
    q6_unit_ahead(unit);
    __m256i R[2][NC];  // per half e, row 4e + r's integer sum in lane 2r
    for (int e = 0; e < 2; ++e) {
      __m256i pr[4], S[NC];  // pr[p]: lane 2r + b = row 4e + r's scales 2p, 2p + 1 of half b (int16)
      for (int p = 0; p < 4; ++p) {
        pr[p] = _mm256_cvtepi8_epi16(load16(unit + 16 + 32 * p + 16 * e));
        const __m256i four = _mm256_slli_epi16(pr[p], 2);
        for (int c = 0; c < NC; ++c) {
          const int64_t v = x.arranged_init[static_cast<size_t>((c0 + c) * (K / 64) + 4 * s + p)];
          const __m256i m = _mm256_madd_epi16(four, _mm256_set1_epi64x(v));
          S[c] = p ? _mm256_add_epi32(S[c], m) : m;
        }
      }
      for (int j = 0; j < 2; ++j)
        for (int src = 0; src < 2; ++src) {  // A (chunks 0 and 2) or B (chunks 1 and 3)
          __m256i lo[4], hi[4];
          for (int i = 0; i < 4; ++i) {
            const uint8_t* wk = unit + 144 + 192 * (4 * j + i) + 32 * e;
            const __m256i Q = load32(wk + 64 * src), H = load32(wk + 128);
            const __m256i hl = _mm256_and_si256(_mm256_slli_epi16(H, src ? 2 : 4), k30);
            const __m256i hh = _mm256_and_si256(src ? _mm256_srli_epi16(H, 2) : H, k30);
            lo[i] = _mm256_or_si256(_mm256_and_si256(Q, m4), hl);
            hi[i] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(Q, 4), m4), hh);
          }
          const int tl = src, th = src + 2;
          const __m256i sl = _mm256_shuffle_epi8(pr[tl], dup[j]), sh = _mm256_shuffle_epi8(pr[th], dup[j]);
          for (int c = 0; c < NC; ++c) {
            const int8_t* a = x.arranged.data() + (c0 + c) * K + s * QK_K + 32 * j;
            auto word = [&](int t, int i) {
              int64_t v;
              std::memcpy(&v, a + 64 * t + 8 * i, 8);
              return _mm256_set1_epi64x(v);
            };
            // Two words' int16 products of one chunk: (code register pair i, i + 1).
            auto two = [&](const __m256i* q, int t, int i) {
              return _mm256_add_epi16(_mm256_maddubs_epi16(q[i], word(t, i)), _mm256_maddubs_epi16(q[i + 1], word(t, i + 1)));
            };
            const __m256i lsum = _mm256_add_epi32(_mm256_madd_epi16(two(lo, tl, 0), sl), _mm256_madd_epi16(two(lo, tl, 2), sl));
            const __m256i hsum = _mm256_add_epi32(_mm256_madd_epi16(two(hi, th, 0), sh), _mm256_madd_epi16(two(hi, th, 2), sh));
            S[c] = _mm256_add_epi32(S[c], _mm256_add_epi32(lsum, hsum));
          }
        }
      for (int c = 0; c < NC; ++c) R[e][c] = _mm256_add_epi32(S[c], _mm256_srli_epi64(S[c], 32));
    }
    const __m256 d = _mm256_cvtph_ps(load16(unit));
    for (int c = 0; c < NC; ++c) {
      const __m256i T = _mm256_castps_si256(even_lanes(_mm256_castsi256_ps(R[0][c]), _mm256_castsi256_ps(R[1][c])));
      acc[c] = fma_block(T, d, x.dx[static_cast<size_t>((c0 + c) * (K / 32) + 8 * s)], acc[c]);
    }
  }
  const __m256 zero = _mm256_setzero_ps();
  for (int c = 0; c < NC; ++c) _mm256_storeu_ps(y + (c0 + c) * y_stride, _mm256_add_ps(acc[c], zero));
}

// Q6_K x Q8_K: 6-bit codes q - 32 with an int8 scale per 16 values:
//   d dx (sum_g sc_g sum(q qx)  -  32 sum_g sc_g sum(qx)), the bracket an exact integer.
template <int NC>
inline void q6k_row(const block_q6_K& b, const int8_t* const* qx, const __m256i* bs16, __m256i* isum) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
  const __m256i sc16 = _mm256_cvtepi8_epi16(load16(b.scales));
  // The centre: 32 sc_g sum_g(qx), as lane partials taken off the sums.
  for (int c = 0; c < NC; ++c) isum[c] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sc16, bs16[c]), 5));
  for (int h = 0; h < 2; ++h) {  // two halves of 128 values
    // This half's eight int16 scales in both 128-bit lanes.
    const __m256i sch = h == 0 ? _mm256_permute4x64_epi64(sc16, 0x44) : _mm256_permute4x64_epi64(sc16, 0xEE);
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    const __m256i l0 = load32(ql), l1 = load32(ql + 32), hb = load32(qh);
    // Values 32i .. 32i+31 of this half, i = 0..3.
    __m256i q[4];
    q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4));
    q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4));
    for (int i = 0; i < 4; ++i) {
      // Scales of the two 16-value groups of these 32 values, 8 copies each (lanes 0-3, 4-7):
      // int16 element 2i of sch into the low lane, 2i + 1 into the high lane.
      const int lo = 4 * i, hi = 4 * i + 2;
      const __m256i pick = _mm256_setr_epi8(lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo,
                                            lo + 1, lo, lo + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1, hi,
                                            hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1);
      const __m256i scv = _mm256_shuffle_epi8(sch, pick);
      for (int c = 0; c < NC; ++c)
        isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(_mm256_maddubs_epi16(q[i], load32(qx[c] + 128 * h + 32 * i)), scv));
    }
  }
}

template <int NC>
void rows8_q6_k(const uint8_t* w, int64_t rb, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  constexpr int64_t kB = sizeof(block_q6_K);
  const int64_t K = x.K, nsb = K / QK_K;
  const __m256i off = row_offsets(rb);
  __m256 acc[NC];
  for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
  const GroupPrefetch pf(w, rb, nsb);
  for (int64_t s = 0; s < nsb; ++s) {
    pf.step(s);
    const int8_t* qx[NC];
    __m256i bs16[NC];  // the 16 activation sums as int16 (|sum| <= 16 * 128)
    for (int c = 0; c < NC; ++c) {
      qx[c] = x.q.data() + (c0 + c) * K + s * QK_K;
      const int32_t* bs = x.bs.data() + (c0 + c) * (K / 16) + 16 * s;
      bs16[c] = _mm256_permute4x64_epi64(_mm256_packs_epi32(load32(bs), load32(bs + 8)), 0xD8);
    }
    RowSums rs[NC];
#pragma GCC unroll 4
    for (int rp = 0; rp < 4; ++rp) {
      __m256i isum[2][NC];
      for (int k = 0; k < 2; ++k)
        q6k_row<NC>(*reinterpret_cast<const block_q6_K*>(w + (2 * rp + k) * rb + s * kB), qx, bs16, isum[k]);
      for (int c = 0; c < NC; ++c) rs[c].pair(rp, isum[0][c], isum[1][c]);
    }
    // d is the block's last two bytes: the high half of the word at offset kB - 4.
    const __m256 d = f16_high(gather_words(w + s * kB + kB - 4, off));
    for (int c = 0; c < NC; ++c)
      acc[c] = fma_block(rs[c].total(), d, x.dx[static_cast<size_t>((c0 + c) * (K / 32) + 8 * s)], acc[c]);
  }
  const __m256 zero = _mm256_setzero_ps();
  for (int c = 0; c < NC; ++c) _mm256_storeu_ps(y + (c0 + c) * y_stride, _mm256_add_ps(acc[c], zero));
}

template <class B>
constexpr Rows8Fn kK45[4] = {rows8_k45<B, 1>, rows8_k45<B, 2>, rows8_k45<B, 3>, rows8_k45<B, 4>};
constexpr Rows8Fn kQ4KWords[4] = {q4_k_r8_words<1>, q4_k_r8_words<2>, q4_k_r8_words<3>, q4_k_r8_words<4>};
constexpr Rows8Fn kQ6K[4] = {rows8_q6_k<1>, rows8_q6_k<2>, rows8_q6_k<3>, rows8_q6_k<4>};
constexpr Rows8Fn kQ6KWords[4] = {q6_k_r8_words<1>, q6_k_r8_words<2>, q6_k_r8_words<3>, q6_k_r8_words<4>};

}  // namespace

const Rows8Fn* kquant_kernels(DType t) {
  switch (t) {
    case DType::Q4_K: return kK45<block_q4_K>;
    case cpu::Q4_K_R8: return kQ4KWords;
    case DType::Q5_K: return kK45<block_q5_K>;
    case DType::Q6_K: return kQ6K;
    case cpu::Q6_K_R8: return kQ6KWords;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu::qdirect
#endif
