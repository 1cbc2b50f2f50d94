// Fused decode kernels for the 32-value block types (AVX2): Q4_0 (also in its repacked layout
// Q4_0_R8), Q4_1, IQ4_NL and MXFP4 two blocks per register, Q8_0, Q5_0 and Q5_1 one block per
// register, Q8_0_R8 one word of eight rows' two blocks per register; eight rows per pass with
// one row per float lane (qdirect_avx2.h), for up to four activation columns. Decode reads each weight byte once and
// writes nothing back, so it can run at memory speed. Also the entry points of qgemm.h for every
// fused type (qdirect_supports, _max_cols, _prepare, _arrange, _rows, _dot), which pick the
// AVX-512 kernels (qdirect_avx512.cpp) where the CPU has them; the K-quants are in
// qdirect_k_avx2.cpp.
#if defined(__x86_64__)
#include <algorithm>
#include <climits>
#include <type_traits>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels/q4k_scales.h"
#include "backends/cpu/kernels/qdirect_avx2.h"
#include "backends/cpu/simd.h"
#include "tensor/quants/quant_blocks.h"
#include "backends/cpu/repacked.h"

namespace kestrel::cpu::qdirect {
namespace {

// 32 4-bit codes of one block as [low nibbles = values 0-15 | high nibbles = values 16-31].
inline __m256i nibbles(const uint8_t* qs) {
  const __m128i b = load16(qs), m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

// Byte j = 0x10 where bit j of qh is set (the fifth bit of Q5_0/Q5_1 value j).
inline __m256i fifth_bits(const uint8_t* qh_bytes) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(qh)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

// Eight int32 partial sums of codes w times activation codes x (32 values): unsigned codes take
// maddubs directly, signed ones go through |w| and sign(x, w).
template <bool kSigned>
inline __m256i dot32(__m256i w, __m256i x) {
  if constexpr (kSigned) return widen_pairs(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)));
  return widen_pairs(_mm256_maddubs_epi16(w, x));
}

// 2^(e - 128) from E8M0 exponents e in the low bytes of the lanes (ref's e8m0_to_fp32_half).
inline __m256 e8m0_half(__m256i words) {
  const __m256i e = _mm256_and_si256(words, _mm256_set1_epi32(0xFF));
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
  const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, small));
}

// The block formats. kQs: offset of the codes; kCentre: codes centred on 2^kCentre (0: none);
// kM: Q4_1/Q5_1's offset m (fp16 right after d); scale(): the eight rows' scales from the
// 32-bit words at each block's start.
struct Q4_0F {
  using Block = block_q4_0;
  static constexpr int kQs = 2, kCentre = 3;
  static constexpr bool kSigned = false, kM = false;
  static __m256 scale(__m256i w) { return f16_low(w); }
};
struct Q4_1F {
  using Block = block_q4_1;
  static constexpr int kQs = 4, kCentre = 0;
  static constexpr bool kSigned = false, kM = true;
  static __m256 scale(__m256i w) { return f16_low(w); }
};
struct Iq4nlF {
  using Block = block_iq4_nl;
  static constexpr int kQs = 2, kCentre = 0;
  static constexpr bool kSigned = true, kM = false;
  static const int8_t* table() { return kvalues_iq4nl; }
  static __m256 scale(__m256i w) { return f16_low(w); }
};
struct Mxfp4F {
  using Block = block_mxfp4;
  static constexpr int kQs = 1, kCentre = 0;
  static constexpr bool kSigned = true, kM = false;
  static const int8_t* table() { return kvalues_mxfp4; }
  static __m256 scale(__m256i w) { return e8m0_half(w); }
};
struct Q8_0F {
  using Block = block_q8_0;
  static constexpr int kCentre = 0;
  static constexpr bool kSigned = true, kM = false;
  static __m256i codes(const uint8_t* b) { return load32(b + 2); }
  static __m256 scale(__m256i w) { return f16_low(w); }
};
struct Q5_0F {
  using Block = block_q5_0;
  static constexpr int kCentre = 4;
  static constexpr bool kSigned = false, kM = false;
  static __m256i codes(const uint8_t* b) { return _mm256_or_si256(nibbles(b + 6), fifth_bits(b + 2)); }
  static __m256 scale(__m256i w) { return f16_low(w); }
};
struct Q5_1F {
  using Block = block_q5_1;
  static constexpr int kCentre = 0;
  static constexpr bool kSigned = false, kM = true;
  static __m256i codes(const uint8_t* b) { return _mm256_or_si256(nibbles(b + 8), fifth_bits(b + 4)); }
  static __m256 scale(__m256i w) { return f16_low(w); }
};

// The finishing steps of block u for one column: the codes' centre off the integer sums, the
// block's FMA, and Q4_1/Q5_1's m term.
template <class F>
struct Column {
  const int8_t* q;
  const float* dx;
  const int32_t* bs;
  Column(const QuantizedActs& x, int64_t col)
      : q(x.q.data() + col * x.K), dx(x.dx.data() + col * (x.K / 32)), bs(x.bs.data() + col * (x.K / 16)) {}
  void block(int64_t u, __m256i T, __m256 d, __m256i words, __m256& acc, __m256& accm) const {
    if constexpr (F::kCentre > 0) T = _mm256_sub_epi32(T, _mm256_set1_epi32((bs[2 * u] + bs[2 * u + 1]) << F::kCentre));
    acc = fma_block(T, d, dx[u], acc);
    if constexpr (F::kM) {
      const __m256 t = _mm256_mul_ps(f16_high(words), _mm256_set1_ps(static_cast<float>(bs[2 * u] + bs[2 * u + 1])));
      accm = _mm256_fmadd_ps(t, _mm256_set1_ps(dx[u]), accm);
    }
  }
};

// Where the 4-bit kernels find blocks u, u + 1 of their eight rows. RowMajor: the file's layout,
// eight row streams, the scales gathered. Grouped8: Q4_0_R8 (cpu/repacked.h), one stream, the
// eight rows' scales of a block in one 16-byte load.
template <class F>
struct RowMajor {
  static constexpr bool kGrouped = false;
  static constexpr int64_t kB = sizeof(typename F::Block);
  static __m256i codes(const uint8_t* w, int64_t rb, int row, int64_t u) {
    const uint8_t* p = w + row * rb + u * kB + F::kQs;
    return _mm256_set_m128i(load16(p + kB), load16(p));
  }
  static void scales(const uint8_t* w, __m256i off, int64_t u, __m256& d0, __m256& d1, __m256i& w0, __m256i& w1) {
    w0 = gather_words(w + u * kB, off), w1 = gather_words(w + (u + 1) * kB, off);
    d0 = F::scale(w0), d1 = F::scale(w1);
  }
};
struct Grouped8 {
  static constexpr bool kGrouped = true;
  static __m256i codes(const uint8_t* w, int64_t, int row, int64_t u) {
    return load32(w + (u / 2) * cpu::kQ4_0R8UnitBytes + 32 + 32 * row);
  }
  static void scales(const uint8_t* w, __m256i, int64_t u, __m256& d0, __m256& d1, __m256i& w0, __m256i& w1) {
    const uint8_t* p = w + (u / 2) * cpu::kQ4_0R8UnitBytes;
    d0 = _mm256_cvtph_ps(load16(p)), d1 = _mm256_cvtph_ps(load16(p + 16));
    w0 = w1 = _mm256_setzero_si256();  // only Q4_1's m reads the words
  }
};

// 4-bit types: per row and pair of blocks, one 32-byte register holds both blocks' codes; the
// row sums then come out as [block 2g | block 2g+1] halves (RowSums::lower/upper).
template <class F, class L, int NC>
void rows8_pairs(const uint8_t* w, int64_t rb, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  static_assert(!L::kGrouped || std::is_same_v<F, Q4_0F>, "only Q4_0 has a grouped layout");
  using B = typename F::Block;
  constexpr int64_t kB = sizeof(B);
  const int64_t K = x.K, nb = K / 32;
  const __m256i off = row_offsets(rb), m4 = _mm256_set1_epi8(0x0F);
  __m256i lut = _mm256_setzero_si256();
  if constexpr (F::kSigned) lut = _mm256_broadcastsi128_si256(load16(F::table()));
  // 4-bit codes: two products of codes <= 15 fit one int16 lane; IQ4_NL's (<= 127) do not.
  constexpr bool kWide = std::is_same_v<F, Iq4nlF>;
  const int8_t* xp[NC];
  __m256 acc[NC], accm[NC];
  for (int c = 0; c < NC; ++c) {
    xp[c] = x.arranged.data() + (c0 + c) * K;  // the pair order (qdirect.h)
    acc[c] = accm[c] = _mm256_setzero_ps();
  }
  const GroupPrefetch pf(w, rb, (nb + 1) / 2);
  int64_t u = 0;
  for (; u + 2 <= nb; u += 2) {
    // One contiguous stream: the hardware prefetchers follow the grouped layout by themselves
    // (software prefetch there measured 10% slower from DRAM, docs/PERF.md).
    if constexpr (!L::kGrouped) pf.step(u / 2);
    RowSums rs[NC];
#pragma GCC unroll 4
    for (int rp = 0; rp < 4; ++rp) {
      __m256i v[2][NC];
      for (int k = 0; k < 2; ++k) {
        const __m256i raw = L::codes(w, rb, 2 * rp + k, u);
        __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        if constexpr (F::kSigned) lo = _mm256_shuffle_epi8(lut, lo), hi = _mm256_shuffle_epi8(lut, hi);
        for (int c = 0; c < NC; ++c) {
          const __m256i xa = load32(xp[c] + 32 * u), xb = load32(xp[c] + 32 * u + 32);
          if constexpr (F::kSigned) {
            const __m256i plo = _mm256_maddubs_epi16(_mm256_sign_epi8(lo, lo), _mm256_sign_epi8(xa, lo));
            const __m256i phi = _mm256_maddubs_epi16(_mm256_sign_epi8(hi, hi), _mm256_sign_epi8(xb, hi));
            v[k][c] = kWide ? _mm256_add_epi32(widen_pairs(plo), widen_pairs(phi)) : widen_pairs(_mm256_add_epi16(plo, phi));
          } else {
            v[k][c] = widen_pairs(_mm256_add_epi16(_mm256_maddubs_epi16(lo, xa), _mm256_maddubs_epi16(hi, xb)));
          }
        }
      }
      for (int c = 0; c < NC; ++c) rs[c].pair(rp, v[0][c], v[1][c]);
    }
    __m256i w0, w1;
    __m256 d0, d1;
    L::scales(w, off, u, d0, d1, w0, w1);
    for (int c = 0; c < NC; ++c) {
      const Column<F> col(x, c0 + c);
      col.block(u, rs[c].lower(), d0, w0, acc[c], accm[c]);
      col.block(u + 1, rs[c].upper(), d1, w1, acc[c], accm[c]);
    }
  }
  if constexpr (!L::kGrouped) {
    if (u < nb) {  // an odd block count: the last block alone (the grouped layout has none)
      pf.step(u / 2);
      RowSums rs[NC];
#pragma GCC unroll 4
      for (int rp = 0; rp < 4; ++rp) {
        __m256i v[2][NC];
        for (int k = 0; k < 2; ++k) {
          __m256i q = nibbles(w + (2 * rp + k) * rb + u * kB + F::kQs);
          if constexpr (F::kSigned) q = _mm256_shuffle_epi8(lut, q);
          for (int c = 0; c < NC; ++c) v[k][c] = dot32<F::kSigned>(q, load32(x.q.data() + (c0 + c) * K + 32 * u));
        }
        for (int c = 0; c < NC; ++c) rs[c].pair(rp, v[0][c], v[1][c]);
      }
      const __m256i w0 = gather_words(w + u * kB, off);
      const __m256 d0 = F::scale(w0);
      for (int c = 0; c < NC; ++c) Column<F>(x, c0 + c).block(u, rs[c].total(), d0, w0, acc[c], accm[c]);
    }
  }
  for (int c = 0; c < NC; ++c) _mm256_storeu_ps(y + (c0 + c) * y_stride, _mm256_add_ps(acc[c], accm[c]));
}

// Where rows8_single finds block u of its eight rows: the file's layout, eight row streams, the
// scales gathered.
template <class F>
struct SingleRowMajor {
  static constexpr int64_t kB = sizeof(typename F::Block);
  static __m256i codes(const uint8_t* w, int64_t rb, int row, int64_t u) { return F::codes(w + row * rb + u * kB); }
  static __m256 scales(const uint8_t* w, __m256i off, int64_t u, __m256i& words) {
    words = gather_words(w + u * kB, off);
    return F::scale(words);
  }
};

// Q8_0, Q5_0, Q5_1: one block per register.
template <class F, class L, int NC>
void rows8_single(const uint8_t* w, int64_t rb, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  const int64_t K = x.K, nb = K / 32;
  const __m256i off = row_offsets(rb);
  __m256 acc[NC], accm[NC];
  for (int c = 0; c < NC; ++c) acc[c] = accm[c] = _mm256_setzero_ps();
  const GroupPrefetch pf(w, rb, nb);
  for (int64_t u = 0; u < nb; ++u) {
    pf.step(u);
    RowSums rs[NC];
#pragma GCC unroll 4
    for (int rp = 0; rp < 4; ++rp) {
      __m256i v[2][NC];
      for (int k = 0; k < 2; ++k) {
        const __m256i q = L::codes(w, rb, 2 * rp + k, u);
        for (int c = 0; c < NC; ++c) v[k][c] = dot32<F::kSigned>(q, load32(x.q.data() + (c0 + c) * K + 32 * u));
      }
      for (int c = 0; c < NC; ++c) rs[c].pair(rp, v[0][c], v[1][c]);
    }
    __m256i words;
    const __m256 d = L::scales(w, off, u, words);
    for (int c = 0; c < NC; ++c) Column<F>(x, c0 + c).block(u, rs[c].total(), d, words, acc[c], accm[c]);
  }
  for (int c = 0; c < NC; ++c) _mm256_storeu_ps(y + (c0 + c) * y_stride, _mm256_add_ps(acc[c], accm[c]));
}

// Q8_0_R8 (cpu/repacked.h), stored in word order: per unit and word k, one register holds word k
// of rows 0-3's two blocks (lane 2r + b), another rows 4-7's. Against [block u's word k |
// block u+1's] of the column (arrange_words), each lane ends the eight words with its block's
// exact sum, with no reduction across lanes (the AVX-512 kernel's scheme, qdirect_avx512.cpp).
// qgemm.h's float steps then run in the even lanes (blends): block u, then u + 1 brought down
// by a shift, so the same bits as every other Q8_0 kernel.
template <int NC>
void q8_0_r8_words(const uint8_t* w, int64_t, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  const int64_t K = x.K, units = K / 64;
  const int8_t* q[NC];
  const float* dx[NC];
  __m256 acc[NC][2];  // row 4h + r in lane 2r of acc[c][h]; the odd lanes stay 0
  for (int c = 0; c < NC; ++c) {
    q[c] = x.arranged.data() + (c0 + c) * K;
    dx[c] = x.dx.data() + (c0 + c) * (K / 32);
    acc[c][0] = acc[c][1] = _mm256_setzero_ps();
  }
  for (int64_t g = 0; g < units; ++g) {
    const uint8_t* unit = w + g * cpu::kQ8_0R8UnitBytes;
    __m256i T[NC][2];
    for (int c = 0; c < NC; ++c) T[c][0] = T[c][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      __m256i xk[NC];
      for (int c = 0; c < NC; ++c) {
        int64_t v;
        std::memcpy(&v, q[c] + 64 * g + 8 * k, 8);
        xk[c] = _mm256_set1_epi64x(v);
      }
      for (int h = 0; h < 2; ++h) {
        const __m256i W = load32(unit + 32 + 64 * k + 32 * h);
        for (int c = 0; c < NC; ++c) T[c][h] = _mm256_add_epi32(T[c][h], dot32<true>(W, xk[c]));
      }
    }
    // The scales [block u, rows 0-7] and [block u+1, rows 0-7] in lanes 2r + b of each half.
    const __m256 d0 = _mm256_cvtph_ps(load16(unit)), d1 = _mm256_cvtph_ps(load16(unit + 16));
    const __m256 lo = _mm256_unpacklo_ps(d0, d1), hi = _mm256_unpackhi_ps(d0, d1);  // rows 0, 1, 4, 5 / 2, 3, 6, 7
    const __m256 d[2] = {_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31)};
    for (int c = 0; c < NC; ++c) {
      double pair;  // [dx of block 2g | of 2g + 1] in every pair of lanes
      std::memcpy(&pair, dx[c] + 2 * g, 8);
      const __m256 dxp = _mm256_castpd_ps(_mm256_set1_pd(pair));
      for (int h = 0; h < 2; ++h) {
        const __m256 f = _mm256_cvtepi32_ps(T[c][h]), s = _mm256_mul_ps(d[h], dxp);
        __m256 a = _mm256_blend_ps(acc[c][h], _mm256_fmadd_ps(f, s, acc[c][h]), 0x55);
        const __m256 f1 = _mm256_castsi256_ps(_mm256_srli_epi64(_mm256_castps_si256(f), 32));
        const __m256 s1 = _mm256_castsi256_ps(_mm256_srli_epi64(_mm256_castps_si256(s), 32));
        acc[c][h] = _mm256_blend_ps(a, _mm256_fmadd_ps(f1, s1, a), 0x55);
      }
    }
  }
  for (int c = 0; c < NC; ++c) _mm256_storeu_ps(y + (c0 + c) * y_stride, even_lanes(acc[c][0], acc[c][1]));
}

template <class F, class L = RowMajor<F>>
constexpr Rows8Fn kPairs[4] = {rows8_pairs<F, L, 1>, rows8_pairs<F, L, 2>, rows8_pairs<F, L, 3>, rows8_pairs<F, L, 4>};
template <class F, class L = SingleRowMajor<F>>
constexpr Rows8Fn kSingle[4] = {rows8_single<F, L, 1>, rows8_single<F, L, 2>, rows8_single<F, L, 3>,
                                rows8_single<F, L, 4>};
constexpr Rows8Fn kQ8Words[4] = {q8_0_r8_words<1>, q8_0_r8_words<2>, q8_0_r8_words<3>, q8_0_r8_words<4>};

bool uses_pairs(DType t) {
  return t == DType::Q4_0 || t == cpu::Q4_0_R8 || t == DType::Q4_1 || t == DType::IQ4_NL || t == DType::MXFP4;
}

}  // namespace

void arrange_pairs(QuantizedActs& x, int64_t c0, int64_t c1) {
  const int64_t K = x.K;
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t g = 0; g < K / 64; ++g) {
      const int8_t* src = x.q.data() + c * K + 64 * g;
      int8_t* dst = x.arranged.data() + c * K + 64 * g;
      std::memcpy(dst, src, 16);
      std::memcpy(dst + 16, src + 32, 16);
      std::memcpy(dst + 32, src + 16, 16);
      std::memcpy(dst + 48, src + 48, 16);
    }
}

void arrange_words(DType t, QuantizedActs& x, int64_t c0, int64_t c1) {
  const int64_t K = x.K, pairs = K / 64;
  const bool k4 = t == cpu::Q4_K_R8, k6 = t == cpu::Q6_K_R8;
  const int32_t centre = t == cpu::Q4_0_R8 ? 8 : 128;
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t g = 0; g < pairs; ++g) {
      // The pair's two 32-value sub-blocks: 2g and 2g + 1; or Q4_K's 4m + h and 4m + h + 2 of
      // super-block g / 4 (g % 4 = 2m + h); or Q6_K's chunk t of each 128-value half (g % 4 = t).
      const int64_t first = k4 ? 8 * (g / 4) + 4 * (g % 4 / 2) + g % 2 : k6 ? 8 * (g / 4) + g % 4 : 2 * g;
      const int64_t second = first + (k4 ? 2 : k6 ? 4 : 1);
      const int8_t* src = x.q.data() + c * K;
      int8_t* dst = x.arranged.data() + c * K + 64 * g;
      const __m256i b0 = load32(src + 32 * first), b1 = load32(src + 32 * second);
      // [words 0, 1 | 4, 5] and [2, 3 | 6, 7] of both, word by word.
      const __m256i lo = _mm256_unpacklo_epi32(b0, b1), hi = _mm256_unpackhi_epi32(b0, b1);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_permute2x128_si256(lo, hi, 0x20));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32), _mm256_permute2x128_si256(lo, hi, 0x31));
      if (k4) {  // Q4_K's codes are unsigned nibbles as they are: no starting values, but the mins' pairs
        if (g % 4 == 0) q4k_min_pairs(x.bs.data() + c * (K / 16) + 4 * g, x.arranged_init.data() + c * pairs + g);
        continue;
      }
      if (k6) {  // Q6_K's centre: per pair p, int16 -8 sum(qx) of groups 2p, 2p + 1 of half 0, then of half 1
        const int32_t* b = x.bs.data() + c * (K / 16) + 16 * (g / 4);  // the super-block's 16 group sums
        const int p = static_cast<int>(g % 4);
        uint64_t v = 0;
        const int group[4] = {2 * p, 2 * p + 1, 8 + 2 * p, 9 + 2 * p};
        for (int i = 0; i < 4; ++i) v |= static_cast<uint64_t>(static_cast<uint16_t>(-8 * b[group[i]])) << (16 * i);
        x.arranged_init[static_cast<size_t>(c * pairs + g)] = static_cast<int64_t>(v);
        continue;
      }
      const int32_t* b = x.bs.data() + c * (K / 16) + 4 * g;
      const uint32_t s0 = static_cast<uint32_t>(-centre * (b[0] + b[1]));
      const uint32_t s1 = static_cast<uint32_t>(-centre * (b[2] + b[3]));
      x.arranged_init[static_cast<size_t>(c * pairs + g)] = static_cast<int64_t>(s0 | static_cast<uint64_t>(s1) << 32);
    }
}

const Rows8Fn* block32_kernels(DType t) {
  switch (t) {
    case DType::Q4_0: return kPairs<Q4_0F>;
    case cpu::Q4_0_R8: return kPairs<Q4_0F, Grouped8>;
    case DType::Q4_1: return kPairs<Q4_1F>;
    case DType::IQ4_NL: return kPairs<Iq4nlF>;
    case DType::MXFP4: return kPairs<Mxfp4F>;
    case DType::Q8_0: return kSingle<Q8_0F>;
    case cpu::Q8_0_R8: return kQ8Words;
    case DType::Q5_0: return kSingle<Q5_0F>;
    case DType::Q5_1: return kSingle<Q5_1F>;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu::qdirect

namespace kestrel::cpu {

bool qdirect_supports(DType w, int64_t K, int64_t row_bytes) {
  const bool fused = qdirect::block32_kernels(w) || qdirect::kquant_kernels(w);
  // The scale gathers address the eight rows by 32-bit byte offsets.
  return fused && K % dtype_info(plain_type(w)).block_size == 0 && row_bytes < INT32_MAX / 8;
}

int64_t qdirect_max_cols(DType w) {
  // Where unpack + tiles caught up, one thread, K 2048 (tiled time / fused time = 1), rounded down:
  // the 4-bit types decode cheapest and share it over most columns.
  // The AVX-512 kernels of the grouped layouts beat unpack + tiles at every batch measured
  // (pp512 Q4_0 57 -> 175 tokens/s, Q8_0 85 -> 124, Q4_K 87 -> 118, docs/PERF.md item 18; at
  // 2048 columns, one step of a 2048-token prompt, Q4_0 47-61 -> 90-103), and so do Q5_K's and
  // Q6_K's in the file's layout (pp512 Q6_K 51-54 -> 76-79, Q5_K 61-85 -> 96-98): they serve
  // every batch a step takes (n_batch up to 4096).
  if (use_avx512() && (cpu::is_grouped(w) || w == DType::Q5_K || w == DType::Q6_K) && qdirect::avx512_kernels(w))
    return kMaxFusedCols;
  switch (w) {
    case DType::Q4_0: case cpu::Q4_0_R8: return 128;
    case DType::Q4_1: return 112;
    case DType::IQ4_NL: case DType::MXFP4: return 64;
    case DType::Q4_K: case cpu::Q4_K_R8: case DType::Q5_K: return 48;
    case DType::Q5_0: case DType::Q6_K: case cpu::Q6_K_R8: return 40;
    case DType::Q5_1: case DType::Q8_0: case cpu::Q8_0_R8: return 32;
    default: return 0;
  }
}

namespace {
// Which order the kernels qdirect_rows picks for w read the activations in (with the
// instruction set chosen now).
enum class Order { kPlain, kPairs, kWords };
Order order_of(DType w) {
  // Stored in word order: both instruction sets read them so.
  if (w == cpu::Q8_0_R8 || w == cpu::Q4_K_R8 || w == cpu::Q6_K_R8) return Order::kWords;
  if (use_avx512() && qdirect::avx512_kernels(w) && qdirect::avx512_word_order(w)) return Order::kWords;
  return qdirect::uses_pairs(w) ? Order::kPairs : Order::kPlain;
}
}  // namespace

void qdirect_prepare(DType w, QuantizedActs& x, int64_t n_cols) {
  const Order o = order_of(w);
  if (o != Order::kPlain) x.arranged.resize(static_cast<size_t>(n_cols * x.K));
  if (o == Order::kWords) x.arranged_init.resize(static_cast<size_t>(n_cols * (x.K / 64)));
}

void qdirect_arrange(DType w, QuantizedActs& x, int64_t c0, int64_t c1) {
  switch (order_of(w)) {
    case Order::kWords: qdirect::arrange_words(w, x, c0, c1); break;
    case Order::kPairs: qdirect::arrange_pairs(x, c0, c1); break;
    case Order::kPlain: break;
  }
}

void qdirect_dot(DType w, const uint8_t* data, int64_t row_bytes, int64_t r0, int64_t r1, QuantizedActs& x,
                 int64_t n_cols, float* y, int64_t y_stride) {
  qdirect_prepare(w, x, n_cols);
  qdirect_arrange(w, x, 0, n_cols);
  qdirect_rows(w, data, row_bytes, r0, r1, x, n_cols, y, y_stride);
}

void qdirect_rows(DType w, const uint8_t* data, int64_t row_bytes, int64_t r0, int64_t r1, const QuantizedActs& x,
                  int64_t n_cols, float* y, int64_t y_stride) {
  const qdirect::Rows8Fn* fns = use_avx512() ? qdirect::avx512_kernels(w) : nullptr;
  const int64_t per_call = fns ? qdirect::avx512_cols_per_call(w) : 4;
  if (!fns) fns = qdirect::block32_kernels(w);
  if (!fns) fns = qdirect::kquant_kernels(w);
  // Columns in panels whose activations (K int8 codes and 1.5 bytes of scales and sums per 8
  // values: about 1.2 K bytes a column) fit in 512 KiB, so they stay in L2 while each 8-row group
  // passes over them; one pass over all columns per group streamed a long prompt's activations
  // (4 MiB at K 8192 x 512 columns) from L3 once per 8 rows. Multiples of 8: the same kernel calls.
  const int64_t panel = std::max<int64_t>(8, (int64_t{512} << 10) / (x.K + x.K / 4) / 8 * 8);
  int64_t r = r0;
  for (int64_t p0 = 0; p0 < n_cols; p0 += panel) {
    const int64_t p1 = std::min(n_cols, p0 + panel);
    for (r = r0; r + 8 <= r1; r += 8)
      for (int64_t c = p0; c < p1; c += per_call) {
        const int nc = static_cast<int>(std::min<int64_t>(per_call, p1 - c));
        fns[nc - 1](data + r * row_bytes, row_bytes, x, c, y + r, y_stride);
      }
  }
  if (r < r1) {  // fewer than 8 rows left: the scalar form of the same arithmetic
    thread_local UnpackedRows wu;
    wu.resize(r1 - r, x.K);
    qgemm_unpack(w, data, row_bytes, r, r1 - r, wu);
    qgemm_dot(qgemm_arith_type(w), wu, r1 - r, x, 0, n_cols, y + r, y_stride);
  }
}

}  // namespace kestrel::cpu
#endif
