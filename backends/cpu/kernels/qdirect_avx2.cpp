// Fused integer dot products for the common weight types (AVX2): the packed blocks are
// decoded in registers and multiplied with the quantized activations directly, for up to four
// activation columns per pass over a weight row. Decode reads each weight byte exactly once and
// writes nothing back, so it can run at memory speed; the canonical-unpack path (qgemm.h) stays
// for the other types (Q2_K, Q3_K).
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels/hsum_avx2.h"
#include "backends/cpu/kernels/qgemm.h"
#include "backends/ref/quant_blocks.h"

namespace kestrel::cpu {
namespace {

inline float f16(uint16_t h) { return _cvtsh_ss(h); }

inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// v minus the integer k in lane 0: takes an exact integer offset off a vector of partial sums.
inline __m256i minus_lane0(__m256i v, int32_t k) { return _mm256_sub_epi32(v, _mm256_setr_epi32(k, 0, 0, 0, 0, 0, 0, 0)); }

// 32 unsigned 4-bit codes (GGML's Q4_0 order: low nibbles are values 0-15, high 16-31).
inline __m256i nibbles_q4_0(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), m), _mm_and_si128(b, m));
}

// Eight int32 sums of u8 x s8 products of 32 values.
inline __m256i dot_u8s8(__m256i w, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

// Q4_0 x Q8_0:  sum_u dw dx sum((q - 8) qx) = sum_u dw dx (sum(q qx) - 8 sum(qx)), the bracket an
// exact integer as in llama.cpp (a float offset would cancel most of the main term).
// Blocks go eight at a time: two blocks' nibbles share one register (low nibbles of both, then
// high nibbles of both), against activations permuted to match once per call (PermutedActs);
// three hadds leave the eight blocks' integer sums in the order kOrder, and one gather fetches
// their eight fp16 scales in the same order. About 8 instructions per block instead of ~20.
constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};

struct PermutedActs {
  int64_t n8 = 0;           // groups of 8 blocks per column
  std::vector<int8_t> q;    // [cols][n8][4 pairs][lo halves of both | hi halves of both]
  std::vector<float> dx;    // [cols][n8][8] in kOrder
  std::vector<int32_t> bsum;  // [cols][n8][8] in kOrder: 8 * sum(qx) of the block (the codes' centre)
  void build(const QuantizedActs& x, int64_t n_cols) {
    const int64_t K = x.K, nb = K / 32;
    n8 = nb / 8;
    q.resize(static_cast<size_t>(n_cols * n8 * 256));
    dx.resize(static_cast<size_t>(n_cols * n8 * 8));
    bsum.resize(dx.size());
    for (int64_t c = 0; c < n_cols; ++c)
      for (int64_t g = 0; g < n8; ++g) {
        const int8_t* src = x.q.data() + c * K + g * 256;
        int8_t* dst = q.data() + (c * n8 + g) * 256;
        for (int p = 0; p < 4; ++p)
          for (int half = 0; half < 2; ++half)
            for (int blk = 0; blk < 2; ++blk)
              std::memcpy(dst + 64 * p + 32 * half + 16 * blk, src + 32 * (2 * p + blk) + 16 * half, 16);
        for (int i = 0; i < 8; ++i) {
          const int64_t u = 8 * g + kOrder[i];
          dx[static_cast<size_t>((c * n8 + g) * 8 + i)] = x.dx[static_cast<size_t>(c * nb + u)];
          const int32_t* bs = x.bs.data() + c * (K / 16) + 2 * u;
          bsum[static_cast<size_t>((c * n8 + g) * 8 + i)] = 8 * (bs[0] + bs[1]);
        }
      }
  }
};

thread_local PermutedActs tl_q4_acts;

template <int NC>
void rows_q4_0(const uint8_t* w, int64_t K, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  const auto* b = reinterpret_cast<const block_q4_0*>(w);
  const PermutedActs& px = tl_q4_acts;
  const int64_t nb = K / 32, n8 = px.n8;
  const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  const __m256i gather_idx = _mm256_setr_epi32(0, 36, 72, 108, 18, 54, 90, 126);  // 18 * kOrder
  __m256 acc[NC];
  for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t g = 0; g < n8; ++g) {
    const block_q4_0* bg = b + 8 * g;
    __m256i h[2][NC];
    for (int pp = 0; pp < 2; ++pp) {
      __m256i v[2][NC];
      for (int k = 0; k < 2; ++k) {
        const int p = 2 * pp + k;
        const __m256i raw = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bg[2 * p + 1].qs)),
                                             _mm_loadu_si128(reinterpret_cast<const __m128i*>(bg[2 * p].qs)));
        const __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        for (int c = 0; c < NC; ++c) {
          const int8_t* xq = px.q.data() + ((c0 + c) * n8 + g) * 256 + 64 * p;
          const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, load32(xq)),
                                               _mm256_maddubs_epi16(hi, load32(xq + 32)));
          v[k][c] = _mm256_madd_epi16(s16, ones);
        }
      }
      for (int c = 0; c < NC; ++c) h[pp][c] = _mm256_hadd_epi32(v[0][c], v[1][c]);
    }
    // The eight fp16 scales, in kOrder.
    __m256i d32 = _mm256_i32gather_epi32(reinterpret_cast<const int*>(bg), gather_idx, 1);
    d32 = _mm256_and_si256(d32, _mm256_set1_epi32(0xFFFF));
    const __m256i d16 = _mm256_permute4x64_epi64(_mm256_packus_epi32(d32, d32), 0x08);
    const __m256 dw = _mm256_cvtph_ps(_mm256_castsi256_si128(d16));
    for (int c = 0; c < NC; ++c) {
      const size_t o = static_cast<size_t>(((c0 + c) * n8 + g) * 8);
      const __m256i t = _mm256_sub_epi32(_mm256_hadd_epi32(h[0][c], h[1][c]),
                                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(px.bsum.data() + o)));
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(dw, _mm256_loadu_ps(px.dx.data() + o)), acc[c]);
    }
  }
  for (int c = 0; c < NC; ++c) {
    const int64_t col = c0 + c;
    float r = hsum(acc[c]);
    for (int64_t u = 8 * n8; u < nb; ++u) {  // the last nb % 8 blocks
      const __m256i qx = load32(x.q.data() + col * K + 32 * u);
      const float dw = f16(b[u].d), dx = x.dx[static_cast<size_t>(col * nb + u)];
      const int32_t* bs = x.bs.data() + col * (K / 16) + 2 * u;
      const int32_t t = hsum_i32(dot_u8s8(nibbles_q4_0(b[u].qs), qx)) - 8 * (bs[0] + bs[1]);
      r += dw * dx * static_cast<float>(t);
    }
    y[col * y_stride] = r;
  }
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

// Q4_1, Q5_1 (x Q8_1): unsigned codes q, value d q + m, so
//   w . x = sum_u d dx sum(q qx) + m (xs[2u] + xs[2u+1]);
// Q5_0 (x Q8_0): value d (q - 16), the centre taken off the integer sum.   One block per step.
template <class Block>
constexpr bool kHasMin = std::is_same_v<Block, block_q4_1> || std::is_same_v<Block, block_q5_1>;
template <class Block>
constexpr bool kHasFifth = std::is_same_v<Block, block_q5_0> || std::is_same_v<Block, block_q5_1>;

template <class Block, int NC>
void rows_legacy(const uint8_t* w, int64_t K, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  const auto* b = reinterpret_cast<const Block*>(w);
  const int64_t nb = K / 32;
  __m256 acc[NC];
  float offs[NC];
  for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps(), offs[c] = 0;
  for (int64_t u = 0; u < nb; ++u) {
    __m256i q = nibbles_q4_0(b[u].qs);
    if constexpr (kHasFifth<Block>) q = _mm256_or_si256(q, fifth_bits(b[u].qh));
    const float d = f16(b[u].d);
    for (int c = 0; c < NC; ++c) {
      const int64_t col = c0 + c;
      const __m256i qx = load32(x.q.data() + col * K + 32 * u);
      const float dx = x.dx[static_cast<size_t>(col * nb + u)];
      __m256i t = dot_u8s8(q, qx);
      if constexpr (kHasMin<Block>) {
        const float* xs = x.xs.data() + col * (K / 16) + 2 * u;
        offs[c] += f16(b[u].m) * (xs[0] + xs[1]);
      } else {
        const int32_t* bs = x.bs.data() + col * (K / 16) + 2 * u;
        t = minus_lane0(t, 16 * (bs[0] + bs[1]));
      }
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_set1_ps(d * dx), acc[c]);
    }
  }
  for (int c = 0; c < NC; ++c) y[(c0 + c) * y_stride] = hsum(acc[c]) + offs[c];
}

// Q8_0 x Q8_0: signed x signed through |w| and sign(x, w).
template <int NC>
void rows_q8_0(const uint8_t* w, int64_t K, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  const auto* b = reinterpret_cast<const block_q8_0*>(w);
  const int64_t nb = K / 32;
  __m256 acc[NC];
  for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t u = 0; u < nb; ++u) {
    const __m256i q = load32(b[u].qs);
    const __m256i aq = _mm256_sign_epi8(q, q);
    const float dw = f16(b[u].d);
    for (int c = 0; c < NC; ++c) {
      const int64_t col = c0 + c;
      const __m256i qx = _mm256_sign_epi8(load32(x.q.data() + col * K + 32 * u), q);
      const float dx = x.dx[static_cast<size_t>(col * nb + u)];
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(aq, qx)), _mm256_set1_ps(dw * dx), acc[c]);
    }
  }
  for (int c = 0; c < NC; ++c) y[(c0 + c) * y_stride] = hsum(acc[c]);
}

// Q4_K x Q8_K: per super-block  d dx sum_j sc_j sum(q qx)  -  dmin dx sum_j m_j sum_j(qx), both sums
// exact integers.
// The twelve scale bytes are unpacked a 32-bit word at a time (sub-blocks 0-3 keep 6 bits in
// bytes 0-3 / 4-7; 4-7 keep 4 bits in bytes 8-11 and their top 2 in the top bits of bytes 0-7);
// each sub-block's scale reaches the int16 lanes with one shuffle, and the mins term is eight
// integer products of mins and the activations' block sums, converted once.
struct Q4kScales {
  uint32_t sc[2], mn[2];  // eight 6-bit scales, eight 6-bit mins, one per byte
  explicit Q4kScales(const uint8_t* q) {
    uint32_t w[3];
    std::memcpy(w, q, 12);
    constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
    sc[0] = w[0] & k6;
    sc[1] = (w[2] & k4) | (((w[0] >> 6) & k2) << 4);
    mn[0] = w[1] & k6;
    mn[1] = ((w[2] >> 4) & k4) | (((w[1] >> 6) & k2) << 4);
  }
};

// Pair sums bs[2j] + bs[2j+1], j = 0..7, in order.
inline __m256i pair_sums(const int32_t* bs) {
  const __m256i h = _mm256_hadd_epi32(load32(bs), load32(bs + 8));  // 0 1 4 5 | 2 3 6 7
  return _mm256_permute4x64_epi64(h, 0xD8);
}

// Q5_K is Q4_K with a fifth bit per value: bit j of qh[l] is the high bit of value 32j + l.
template <class Block, int NC>
void rows_k_4or5(const uint8_t* w, int64_t K, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  constexpr bool kFive = std::is_same_v<Block, block_q5_K>;
  const auto* b = reinterpret_cast<const Block*>(w);
  const int64_t nsb = K / QK_K;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[NC], mins[NC];
  for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps(), mins[c] = _mm256_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const Q4kScales sm(b[s].scales);
    const __m256i sc = _mm256_broadcastsi128_si256(
        _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, static_cast<int>(sm.sc[1]), static_cast<int>(sm.sc[0]))));
    const float d = f16(b[s].d), dmin = f16(b[s].dmin);
    const __m256i mn = _mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, static_cast<int>(sm.mn[1]), static_cast<int>(sm.mn[0])));
    __m256i isum[NC];
    for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kFive) qh = load32(b[s].qh);
    for (int j = 0; j < 4; ++j) {
      const __m256i raw = load32(b[s].qs + 32 * j);
      __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
      if constexpr (kFive) {  // bits 2j and 2j+1 of qh, moved to bit 4 of each byte
        const __m256i one = _mm256_set1_epi8(1);
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(qh, one), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 1), one), 4));
        qh = _mm256_srli_epi16(qh, 2);
      }
      // int16 element k of sc into every lane: shuffle bytes 2k, 2k+1.
      const __m256i slo = _mm256_shuffle_epi8(sc, _mm256_set1_epi16(static_cast<int16_t>((4 * j + 1) << 8 | 4 * j)));
      const __m256i shi =
          _mm256_shuffle_epi8(sc, _mm256_set1_epi16(static_cast<int16_t>((4 * j + 3) << 8 | (4 * j + 2))));
      for (int c = 0; c < NC; ++c) {
        const int8_t* qx = x.q.data() + (c0 + c) * K + s * QK_K + 64 * j;
        const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load32(qx)), slo);
        const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load32(qx + 32)), shi);
        isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(plo, phi));
      }
    }
    for (int c = 0; c < NC; ++c) {
      const int64_t col = c0 + c;
      const float dx = x.dx[static_cast<size_t>(col * (K / 32) + s * 8)];
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_set1_ps(d * dx), acc[c]);
      const __m256i m = _mm256_mullo_epi32(mn, pair_sums(x.bs.data() + col * (K / 16) + s * 16));
      mins[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(dmin * dx), mins[c]);
    }
  }
  for (int c = 0; c < NC; ++c) y[(c0 + c) * y_stride] = hsum(acc[c]) - hsum(mins[c]);
}

// Q6_K x Q8_K: 6-bit codes q - 32 (q in [0, 63]) with an int8 scale per 16 values:
//   d dx (sum_g sc_g sum(q qx)  -  32 sum_g sc_g sum(qx)), the bracket an exact integer.
template <int NC>
void rows_q6_k(const uint8_t* w, int64_t K, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  const auto* b = reinterpret_cast<const block_q6_K*>(w);
  const int64_t nsb = K / QK_K;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
  __m256 acc[NC];
  for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const float d = f16(b[s].d);
    const int8_t* sc = b[s].scales;
    __m256i isum[NC];
    for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {  // two halves of 128 values
      const uint8_t* ql = b[s].ql + 64 * h;
      const uint8_t* qh = b[s].qh + 32 * h;
      const __m256i l0 = load32(ql), l1 = load32(ql + 32), hb = load32(qh);
      // Values 32i .. 32i+31 of this half, i = 0..3.
      __m256i q[4];
      q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4));
      for (int i = 0; i < 4; ++i) {
        // Scales of the two 16-value groups of these 32 values, 8 copies each (lanes 0-3, 4-7).
        const int g = 8 * h + 2 * i;
        const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[g + 1]), _mm_set1_epi16(sc[g]));
        for (int c = 0; c < NC; ++c) {
          const int8_t* qx = x.q.data() + (c0 + c) * K + s * QK_K + 128 * h + 32 * i;
          isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(_mm256_maddubs_epi16(q[i], load32(qx)), scv));
        }
      }
    }
    for (int c = 0; c < NC; ++c) {
      const int64_t col = c0 + c;
      const float dx = x.dx[static_cast<size_t>(col * (K / 32) + s * 8)];
      const int32_t* bs = x.bs.data() + col * (K / 16) + s * 16;
      int32_t o = 0;
      for (int g = 0; g < 16; ++g) o += sc[g] * bs[g];
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(minus_lane0(isum[c], 32 * o)), _mm256_set1_ps(d * dx), acc[c]);
    }
  }
  for (int c = 0; c < NC; ++c) y[(c0 + c) * y_stride] = hsum(acc[c]);
}

// IQ4_NL and MXFP4 x Q8_0: 4-bit indices into a 16-entry int8 table (one pshufb per half), a
// scale per 32 values (fp16 for IQ4_NL, E8M0 for MXFP4), then signed x signed as for Q8_0.
struct Iq4nlFormat {
  using Block = block_iq4_nl;
  static const int8_t* table() { return kvalues_iq4nl; }
  static float scale(const Block& b) { return f16(b.d); }
};
struct Mxfp4Format {
  using Block = block_mxfp4;
  static const int8_t* table() { return kvalues_mxfp4; }
  static float scale(const Block& b) { return e8m0_to_fp32_half(b.e); }
};

template <class F>
struct RowsLut4 {
  template <int NC>
  static void rows(const uint8_t* w, int64_t K, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
    const auto* b = reinterpret_cast<const typename F::Block*>(w);
    const int64_t nb = K / 32;
    const __m128i lut = _mm_loadu_si128(reinterpret_cast<const __m128i*>(F::table()));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m256 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t u = 0; u < nb; ++u) {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[u].qs));
      const __m256i q = _mm256_set_m128i(_mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(raw, 4), m4)),
                                         _mm_shuffle_epi8(lut, _mm_and_si128(raw, m4)));
      const __m256i aq = _mm256_sign_epi8(q, q);
      const float dw = F::scale(b[u]);
      for (int c = 0; c < NC; ++c) {
        const int64_t col = c0 + c;
        const __m256i qx = _mm256_sign_epi8(load32(x.q.data() + col * K + 32 * u), q);
        const float dx = x.dx[static_cast<size_t>(col * nb + u)];
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(aq, qx)), _mm256_set1_ps(dw * dx), acc[c]);
      }
    }
    for (int c = 0; c < NC; ++c) y[(c0 + c) * y_stride] = hsum(acc[c]);
  }
};

using RowsFn = void (*)(const uint8_t*, int64_t, const QuantizedActs&, int64_t, float*, int64_t);

#define KS_DIRECT_TABLE(fn) {fn<1>, fn<2>, fn<3>, fn<4>}
const RowsFn* table_for(DType t) {
  static const RowsFn q4_0[4] = KS_DIRECT_TABLE(rows_q4_0);
  static const RowsFn q8_0[4] = KS_DIRECT_TABLE(rows_q8_0);
  static const RowsFn q4_k[4] = {rows_k_4or5<block_q4_K, 1>, rows_k_4or5<block_q4_K, 2>, rows_k_4or5<block_q4_K, 3>,
                                 rows_k_4or5<block_q4_K, 4>};
  static const RowsFn q5_k[4] = {rows_k_4or5<block_q5_K, 1>, rows_k_4or5<block_q5_K, 2>, rows_k_4or5<block_q5_K, 3>,
                                 rows_k_4or5<block_q5_K, 4>};
  static const RowsFn q6_k[4] = KS_DIRECT_TABLE(rows_q6_k);
  static const RowsFn q4_1[4] = {rows_legacy<block_q4_1, 1>, rows_legacy<block_q4_1, 2>, rows_legacy<block_q4_1, 3>,
                                 rows_legacy<block_q4_1, 4>};
  static const RowsFn q5_0[4] = {rows_legacy<block_q5_0, 1>, rows_legacy<block_q5_0, 2>, rows_legacy<block_q5_0, 3>,
                                 rows_legacy<block_q5_0, 4>};
  static const RowsFn q5_1[4] = {rows_legacy<block_q5_1, 1>, rows_legacy<block_q5_1, 2>, rows_legacy<block_q5_1, 3>,
                                 rows_legacy<block_q5_1, 4>};
  static const RowsFn iq4_nl[4] = KS_DIRECT_TABLE(RowsLut4<Iq4nlFormat>::template rows);
  static const RowsFn mxfp4[4] = KS_DIRECT_TABLE(RowsLut4<Mxfp4Format>::template rows);
  switch (t) {
    case DType::Q4_0: return q4_0;
    case DType::Q8_0: return q8_0;
    case DType::Q4_1: return q4_1;
    case DType::Q5_0: return q5_0;
    case DType::Q5_1: return q5_1;
    case DType::Q4_K: return q4_k;
    case DType::Q5_K: return q5_k;
    case DType::Q6_K: return q6_k;
    case DType::IQ4_NL: return iq4_nl;
    case DType::MXFP4: return mxfp4;
    default: return nullptr;
  }
}
#undef KS_DIRECT_TABLE

}  // namespace

bool qdirect_supports(DType w, int64_t K) { return table_for(w) && K % dtype_info(w).block_size == 0; }

void qdirect_dot(DType w, const uint8_t* data, int64_t row_bytes, int64_t r0, int64_t r1, const QuantizedActs& x,
                 int64_t n_cols, float* y, int64_t y_stride) {
  const RowsFn* fns = table_for(w);
  if (w == DType::Q4_0) tl_q4_acts.build(x, n_cols);
  // Columns in groups of four; inside a group the rows of [r0, r1) in blocks of 16, so a group's
  // activations and a block of weight rows both stay in L1/L2.
  constexpr int64_t kRows = 16;
  for (int64_t rb = r0; rb < r1; rb += kRows) {
    const int64_t re = std::min(r1, rb + kRows);
    for (int64_t c = 0; c < n_cols; c += 4) {
      const int nc = static_cast<int>(std::min<int64_t>(4, n_cols - c));
      for (int64_t r = rb; r < re; ++r) fns[nc - 1](data + r * row_bytes, x.K, x, c, y + r, y_stride);
    }
  }
}

}  // namespace kestrel::cpu
#endif
