// Fused decode kernels for AVX-512 with VNNI (F/BW/VL/VNNI: Ice Lake, Zen 4 and later) for the
// types decode spends its time on: Q4_0, Q8_0, Q4_K and Q6_K in their grouped layouts (Q4_0_R8,
// Q8_0_R8, Q4_K_R8, Q6_K_R8: Q6_K is the output head and some layers of every Q4_K_M file), and
// Q8_0, Q4_K, Q5_K, Q6_K, IQ4_NL and MXFP4 as in the file (Q5_K: the Q5_K_M files; MXFP4:
// GPT-OSS's experts).
// Same contract and the same bits as the AVX2 kernels (qdirect_avx2.h; qgemm.h's arithmetic):
// only the exact integer sums are formed differently. What they buy (docs/PERF.md): a 512-bit
// register holds two rows' codes (or two sub-block pairs), and vpdpbusd / vpdpwssd fold the
// multiply, the widening and the accumulate into one instruction, so a byte of weights costs
// about half the instructions; the float steps per block stay per row, in order.
// Self-contained on purpose: no inline helper shared with the AVX2 files, since the linker may
// keep either target's copy of such a function for both.
#include "backends/cpu/kernels/qdirect.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
// GCC 12's avx512fintrin.h trips its own -W(maybe-)uninitialized on its _mm*_undefined_* (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <cstring>
#include <type_traits>

#include "backends/cpu/kernels/q4k_scales.h"
#include "tensor/quants/quant_blocks.h"
#include "backends/cpu/repacked.h"

namespace kestrel::cpu::qdirect {
namespace {

__m256i ld32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m512i ld64(const void* p) { return _mm512_loadu_si512(p); }
__m512i dup32(const void* p) { return _mm512_broadcast_i64x4(ld32(p)); }  // [p | p]
__m512i two32(const void* lo, const void* hi) {                           // [lo | hi]
  return _mm512_inserti64x4(_mm512_castsi256_si512(ld32(lo)), ld32(hi), 1);
}
__m256 lower(__m512 v) { return _mm512_castps512_ps256(v); }
__m256 upper(__m512 v) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }

// The grouped layouts are one stream per thread, which the hardware prefetchers follow, but they
// ramp up too slowly for these kernels: each unit also asks for the lines kAhead bytes on
// (6-12 KiB measured best of 1-24 KiB, 6-9% faster decode than none; docs/PERF.md item 14).
// Prefetches past the end of a matrix are harmless (they never fault).
constexpr int64_t kAhead = 8192;
template <int64_t kUnitBytes>
void ahead(const uint8_t* unit) {
  const char* p = reinterpret_cast<const char*>(unit) + kAhead;
  for (int64_t o = 0; o < kUnitBytes; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
}

// Lane 4k + j of the result = the sum of 128-bit lane k of v_j.
__m512i lane_sums4(__m512i v0, __m512i v1, __m512i v2, __m512i v3) {
  const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(v0, v1), _mm512_unpackhi_epi32(v0, v1));
  const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(v2, v3), _mm512_unpackhi_epi32(v2, v3));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
}

// Eight rows' 16-lane sums, given two rows at a time (rows 2p, 2p+1), reduced to one lane per
// row: Rows8Sums::total() lane r = row r's sum.
struct Rows8Sums {
  __m512i t[4];  // per pair, 128-bit lanes of [a0+a2, b0+b2, a1+a3, b1+b3]
  void pair(int p, __m512i a, __m512i b) {
    t[p] = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
  }
  // Each row's two halves (lanes 0-7, 8-15) summed apart, rows in order:
  // [rows 0-3 first half | rows 4-7 first half | rows 0-3 second half | rows 4-7 second half].
  __m512i halves() const {
    // Per 128-bit lane: [row 0, 1, 2, 3] (u0) and [row 4, 5, 6, 7] (u1) partials.
    const __m512i u0 = _mm512_add_epi32(_mm512_unpacklo_epi64(t[0], t[1]), _mm512_unpackhi_epi64(t[0], t[1]));
    const __m512i u1 = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2], t[3]), _mm512_unpackhi_epi64(t[2], t[3]));
    // [u0 l0+l1, u0 l2+l3, u1 l0+l1, u1 l2+l3], then in row order.
    const __m512i r = _mm512_add_epi32(_mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(u0, u1, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm512_shuffle_i32x4(r, r, _MM_SHUFFLE(3, 1, 2, 0));
  }
  __m256i total() const {
    const __m512i h = halves();
    const __m512i swapped = _mm512_shuffle_i32x4(h, h, _MM_SHUFFLE(1, 0, 3, 2));
    return _mm256_add_epi32(_mm512_castsi512_si256(h), _mm512_castsi512_si256(swapped));
  }
};

// Where lane_sums4 leaves rows r of two interleaved halves: rows 0, 2, 4, 6 in lanes 0-3 and
// rows 1, 3, 5, 7 in lanes 8-11 (and the second block's in 4-7 / 12-15), back in row order.
// (A function, not a constant: a namespace-scope vector would be built at program start, on
// CPUs without AVX-512 too.)
__m512i row_order() { return _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15); }

// A kernel call's columns: each one's activation codes, scales per 32 and sums per 16, and its
// accumulator of eight row results.
template <int NC>
struct Columns {
  const int8_t* q[NC];
  const float* dx[NC];
  const int32_t* bs[NC];
  __m256 acc[NC];
  Columns(const QuantizedActs& x, int64_t c0) {
    for (int c = 0; c < NC; ++c) {
      q[c] = x.q.data() + (c0 + c) * x.K;
      dx[c] = x.dx.data() + (c0 + c) * (x.K / 32);
      bs[c] = x.bs.data() + (c0 + c) * (x.K / 16);
      acc[c] = _mm256_setzero_ps();
    }
  }
  void store(float* y, int64_t c0, int64_t y_stride) const {
    for (int c = 0; c < NC; ++c) _mm256_storeu_ps(y + (c0 + c) * y_stride, acc[c]);
  }
};

// The grouped 32-value layouts (Q4_0_R8, Q8_0_R8) are read one 32-bit word of codes per row and
// block per lane: lane 2r + b of code register k holds word k of row r's block u + b (Q8_0_R8 is
// stored so, cpu/repacked.h; Q4_0_R8's registers are regrouped in-register, eight vpermt2d a unit
// shared by all columns). vpdpbusd against a 64-bit broadcast of [block u's word k | block u+1's]
// (arrange_words, into QuantizedActs::arranged) then leaves each lane a whole block's exact sum
// after the last word, with no reduction across lanes. Per column and block pair that is the dot
// products plus the float steps of qgemm.h (one convert, one multiply, two masked FMAs in the
// even lanes, two shifts bringing the odd lanes down), where the lane-sum forms took about twenty
// instructions, half of them shuffles. These kernels take up to 8 columns a call (docs/PERF.md,
// "Q4_0 and Q8_0 prefill in word order", "Q8_0_R8 stored in word order").
//
// Permutation indices (vpermt2d: 0-15 pick from the first source, 16-31 from the second).
struct Idx16 {
  alignas(64) int32_t v[16];
};
template <class F>
constexpr Idx16 make_idx(F f) {
  Idx16 r{};
  for (int i = 0; i < 16; ++i) r.v[i] = f(i);
  return r;
}
__m512i ld_idx(const Idx16& i) { return _mm512_load_si512(i.v); }

// Q4_0_R8: raw register p (rows 2p, 2p+1) holds in 128-bit lane j = 2 (r & 1) + b the 16 code bytes
// of row r's block u + b, so word k of (row r, block b) is its dword 4j + k, and the target
// W_k[4p + j] = R_p[4j + k]. Step 1 gathers words {2h, 2h + 1} of two raw registers (h = 0, 1):
// X[8 kk + 4 pp + j] = R_{2q + pp}[4j + 2h + kk]; step 2 joins rows 0-3 and 4-7.
constexpr Idx16 kQ4Step1[2] = {make_idx([](int i) { return 16 * (i / 4 % 2) + 4 * (i % 4) + 0 + i / 8; }),
                               make_idx([](int i) { return 16 * (i / 4 % 2) + 4 * (i % 4) + 2 + i / 8; })};
constexpr Idx16 kQ4Step2[2] = {make_idx([](int i) { return 16 * (i / 8) + 0 + i % 8; }),
                               make_idx([](int i) { return 16 * (i / 8) + 8 + i % 8; })};
// A unit's scales ([block u, rows 0-7 | block u + 1, rows 0-7]) in lanes 2r + b: lane 2i from
// lane i, lane 2i + 1 from lane 8 + i.
__m512 word_scales(const uint8_t* unit) {
  const __m512i order = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  return _mm512_permutexvar_ps(order, _mm512_cvtph_ps(ld32(unit)));
}

__m512i bcast64(const int8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm512_set1_epi64(v);
}

// A call's columns for the word-order kernels: activations, starting values, scales, accumulators.
template <int NC>
struct WordColumns {
  const int8_t* q[NC];
  const int64_t* init[NC];
  const float* dx[NC];
  __m512 acc[NC];  // row r in lane 2r (the odd lanes stay 0)
  WordColumns(const QuantizedActs& x, int64_t c0) {
    const int64_t K = x.K;
    for (int c = 0; c < NC; ++c) {
      q[c] = x.arranged.data() + (c0 + c) * K;  // the word order (arrange_words)
      init[c] = x.arranged_init.data() + (c0 + c) * (K / 64);
      dx[c] = x.dx.data() + (c0 + c) * (K / 32);
      acc[c] = _mm512_setzero_ps();
    }
  }
  // Pair g's products: the eight word registers against the column's words, lanes 2r + b. Two
  // chains of four (one of eight waited on vpdpbusd's latency), joined by one exact add.
  __m512i sums(int c, int64_t g, const __m512i* W, const int (&word)[8]) const {
    const int8_t* a = q[c] + 64 * g;
    __m512i T0 = _mm512_set1_epi64(init[c][g]), T1 = _mm512_setzero_si512();
    for (int k = 0; k < 8; k += 2) {
      T0 = _mm512_dpbusd_epi32(T0, W[k], bcast64(a + 8 * word[k]));
      T1 = _mm512_dpbusd_epi32(T1, W[k + 1], bcast64(a + 8 * word[k + 1]));
    }
    return _mm512_add_epi32(T0, T1);
  }
  // acc += float(T) * s, lanes 2r + b, block u (b = 0) before u + 1 in each row: qgemm.h's two
  // steps, both in the even lanes (the odd ones brought down by a 32-bit shift).
  void fma_pair(int c, __m512i T, __m512 s) {
    const __m512 f = _mm512_cvtepi32_ps(T);
    acc[c] = _mm512_mask3_fmadd_ps(f, s, acc[c], 0x5555);
    const __m512 f1 = _mm512_castsi512_ps(_mm512_srli_epi64(_mm512_castps_si512(f), 32));
    const __m512 s1 = _mm512_castsi512_ps(_mm512_srli_epi64(_mm512_castps_si512(s), 32));
    acc[c] = _mm512_mask3_fmadd_ps(f1, s1, acc[c], 0x5555);
  }
  // [dx of block 2g | of block 2g + 1] in every pair of lanes.
  __m512 dx_pair(int c, int64_t g) const {
    double v;
    std::memcpy(&v, dx[c] + 2 * g, 8);
    return _mm512_castpd_ps(_mm512_set1_pd(v));
  }
  void store(float* y, int64_t c0, int64_t y_stride) const {
    for (int c = 0; c < NC; ++c)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + (c0 + c) * y_stride), _mm512_cvtepi64_epi32(_mm512_castps_si512(acc[c])));
  }
};

// Q4_0_R8's code registers of a unit (cpu/repacked.h): four registers of raw code bytes
// regrouped to word order, then split: a word's low nibbles are codes 4k..4k+3 of the block, its
// high nibbles codes 16+4k.., i.e. word k + 4 of the activations.
struct Q4Words {
  static constexpr int64_t kUnitBytes = cpu::kQ4_0R8UnitBytes;
  static constexpr int kWords[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // the activation word of W[k]
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i s1a = ld_idx(kQ4Step1[0]), s1b = ld_idx(kQ4Step1[1]);
  const __m512i s2a = ld_idx(kQ4Step2[0]), s2b = ld_idx(kQ4Step2[1]);
  void codes(const uint8_t* unit, __m512i* W) const {
    const __m512i R0 = ld64(unit + 32), R1 = ld64(unit + 96), R2 = ld64(unit + 160), R3 = ld64(unit + 224);
    const __m512i Xa = _mm512_permutex2var_epi32(R0, s1a, R1), Xb = _mm512_permutex2var_epi32(R0, s1b, R1);
    const __m512i Ya = _mm512_permutex2var_epi32(R2, s1a, R3), Yb = _mm512_permutex2var_epi32(R2, s1b, R3);
    const __m512i Wr[4] = {_mm512_permutex2var_epi32(Xa, s2a, Ya), _mm512_permutex2var_epi32(Xa, s2b, Ya),
                           _mm512_permutex2var_epi32(Xb, s2a, Yb), _mm512_permutex2var_epi32(Xb, s2b, Yb)};
    for (int k = 0; k < 4; ++k) {
      W[2 * k] = _mm512_and_si512(Wr[k], m4);
      W[2 * k + 1] = _mm512_and_si512(_mm512_srli_epi16(Wr[k], 4), m4);
    }
  }
};

// Q8_0_R8's code registers of a unit (cpu/repacked.h): stored in word order, so eight plain
// loads. vpdpbusd multiplies unsigned by signed bytes, so the codes go in offset by 128 (one XOR)
// and 128 sum(qx) comes off through the starting value.
struct Q8Words {
  static constexpr int64_t kUnitBytes = cpu::kQ8_0R8UnitBytes;
  static constexpr int kWords[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  void codes(const uint8_t* unit, __m512i* W) const {
    for (int k = 0; k < 8; ++k) W[k] = _mm512_xor_si512(ld64(unit + 32 + 64 * k), flip);
  }
};

// The word-order kernel of a grouped 32-value layout: per unit, its code registers (C), then per
// column the word products and the float steps.
template <class C, int NC>
void words(const uint8_t* w, int64_t, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  const int64_t units = x.K / 64;
  const C layout;
  WordColumns<NC> col(x, c0);
  for (int64_t g = 0; g < units; ++g) {
    const uint8_t* unit = w + g * C::kUnitBytes;
    ahead<C::kUnitBytes>(unit);
    __m512i W[8];
    layout.codes(unit, W);
    const __m512 d = word_scales(unit);
    for (int c = 0; c < NC; ++c) col.fma_pair(c, col.sums(c, g, W, C::kWords), _mm512_mul_ps(d, col.dx_pair(c, g)));
  }
  col.store(y, c0, y_stride);
}

// The row-major kernels' eight row streams, which the prefetchers do not follow: step i asks for
// the i-th slice of the next group's eight rows (two groups ahead), so a group's bytes are in
// cache when its turn comes.
class RowsAhead {
 public:
  RowsAhead(const uint8_t* w, int64_t rb, int64_t steps)
      : next_(reinterpret_cast<const char*>(w + 16 * rb)), slice_((8 * rb + 64 * steps - 1) / (64 * steps) * 64) {}
  void step(int64_t i) const {
    for (int64_t o = 0; o < slice_; o += 64) _mm_prefetch(next_ + i * slice_ + o, _MM_HINT_T0);
  }

 private:
  const char* next_;
  int64_t slice_;
};

// fp16 values in the low halves of eight 32-bit lanes, as floats.
__m256 f16_low(__m256i w) {
  const __m256i lo = _mm256_and_si256(w, _mm256_set1_epi32(0xFFFF));
  return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(lo, lo), 0x08)));
}

// fp16 values in the high halves of eight 32-bit lanes, as floats.
__m256 f16_high(__m256i w) { return f16_low(_mm256_srli_epi32(w, 16)); }
// The byte offsets of eight rows row_bytes apart, for the scale gathers.
__m256i row_offsets(int64_t row_bytes) {
  const int rb = static_cast<int>(row_bytes);
  return _mm256_setr_epi32(0, rb, 2 * rb, 3 * rb, 4 * rb, 5 * rb, 6 * rb, 7 * rb);
}

// Q8_0 (the file's row-major layout): one register holds block u of rows 2p and 2p+1. vpdpbusd
// multiplies unsigned by signed bytes, so the codes go in offset by 128 (one XOR) and
// 128 sum(qx) comes off through the starting value. Rows are streamed into cache two groups
// ahead, as in the AVX2 kernel (the prefetchers do not follow eight row streams).
template <int NC>
void q8_0(const uint8_t* w, int64_t rb, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  constexpr int64_t kB = sizeof(block_q8_0);
  const int64_t K = x.K, nb = K / 32;
  const __m256i off = row_offsets(rb);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80)), order = row_order();
  const RowsAhead pf(w, rb, nb);
  Columns<NC> col(x, c0);
  for (int64_t u = 0; u < nb; ++u) {
    pf.step(u);
    __m512i xv[NC], init[NC];
    for (int c = 0; c < NC; ++c) {
      xv[c] = dup32(col.q[c] + 32 * u);
      init[c] = _mm512_maskz_set1_epi32(0x0101, -128 * (col.bs[c][2 * u] + col.bs[c][2 * u + 1]));
    }
    __m512i v[4][NC];
    const uint8_t* b = w + u * kB + 2;
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      const __m512i q = _mm512_xor_si512(two32(b + 2 * p * rb, b + (2 * p + 1) * rb), flip);
      for (int c = 0; c < NC; ++c) v[p][c] = _mm512_dpbusd_epi32(init[c], q, xv[c]);
    }
    const __m256 d = f16_low(_mm256_i32gather_epi32(reinterpret_cast<const int*>(w + u * kB), off, 1));
    for (int c = 0; c < NC; ++c) {
      // lane_sums4: rows 0, 2, 4, 6 in 128-bit lanes 0 and 1, rows 1, 3, 5, 7 in 2 and 3.
      const __m512i s = lane_sums4(v[0][c], v[1][c], v[2][c], v[3][c]);
      const __m512i t = _mm512_add_epi32(s, _mm512_shuffle_i32x4(s, s, _MM_SHUFFLE(2, 3, 0, 1)));
      const __m256i T = _mm512_castsi512_si256(_mm512_permutexvar_epi32(order, t));
      col.acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(T), _mm256_mul_ps(d, _mm256_set1_ps(col.dx[c][u])), col.acc[c]);
    }
  }
  col.store(y, c0, y_stride);
}

// int16 element i of a 128-bit lane into lanes 0-1, element j into lanes 2-3 (vpshufb picks per lane).
__m512i pick16(int i, int j) {
  return _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi16(static_cast<int16_t>((2 * i + 1) << 8 | 2 * i)),
                                 _mm512_set1_epi16(static_cast<int16_t>((2 * j + 1) << 8 | 2 * j)));
}
// A super-block's activations q for the K-quants' code registers [sub-block i | i + 2] (32 values
// each): [0 | 2], [1 | 3], [4 | 6], [5 | 7].
void kquant_acts(const int8_t* q, __m512i* v) {
  v[0] = two32(q, q + 64), v[1] = two32(q + 32, q + 96);
  v[2] = two32(q + 128, q + 192), v[3] = two32(q + 160, q + 224);
}

// A row's 128 Q4_K/Q5_K code bytes as the registers [sub-block i | i + 2]: the low and high
// nibbles of its two 64-byte halves.
void k4_codes(const uint8_t* qs, __m512i* code) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), A = ld64(qs), B = ld64(qs + 64);
  code[0] = _mm512_and_si512(A, m4), code[1] = _mm512_and_si512(_mm512_srli_epi16(A, 4), m4);
  code[2] = _mm512_and_si512(B, m4), code[3] = _mm512_and_si512(_mm512_srli_epi16(B, 4), m4);
}
// One row's super-block against NC columns: sum_j sc_j sum(q qx) as 16-lane partials (vpmaddubsw
// for the code products, vpdpwssd weighting them by the row's eight scales, one byte each in
// `scales`, picked per register by pk).
template <int NC>
void k4_isum(uint64_t scales, const __m512i* code, const __m512i (*xs)[4], const __m512i* pk, __m512i* isum) {
  const __m512i sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(scales))));
  for (int c = 0; c < NC; ++c) isum[c] = _mm512_setzero_si512();
  for (int i = 0; i < 4; ++i) {
    const __m512i scv = _mm512_shuffle_epi8(sc, pk[i]);
    for (int c = 0; c < NC; ++c) isum[c] = _mm512_dpwssd_epi32(isum[c], _mm512_maddubs_epi16(code[i], xs[c][i]), scv);
  }
}

// Q4_K_R8 (cpu/repacked.h), stored in word order: lane 2r + b of a unit's register (m, k) holds
// word k of row r's code group 2m + b, whose low nibbles are sub-block 4m + 2b's codes 4k..4k+3
// and high nibbles sub-block 4m + 2b + 1's. Against [sub-block 4m + h's word k | 4m + h + 2's]
// (arrange_words), vpdpbusd leaves each lane one sub-block's exact sum after eight words; vpmulld
// by the sub-block scales, the lanes of a row added; then the mins and qgemm.h's float steps, as
// every Q4_K kernel: the same bits. (The per-row vpmaddubsw / vpdpwssd form k45 uses below ran
// 1.44x slower at 8 columns than this kernel did with its word order still made in registers.)
//
// A unit's scales and mins of all eight rows, straight from its three scale planes (as Q4kScales
// unpacks one row's): the scales in the kernel's lanes, the mins as int16 pairs for vpdpwssd.
struct Q4kR8Planes {
  __m512i sc[2][2];  // [m][h]: lane 2r + b = row r's scale of sub-block 4m + 2b + h
  __m256i mins[4];   // int16 pairs of sub-blocks (0, 2), (1, 3), (4, 6), (5, 7), one row per 32-bit lane
  explicit Q4kR8Planes(const uint8_t* unit) {
    const __m256i k6 = _mm256_set1_epi8(0x3F), k4 = _mm256_set1_epi8(0x0F), k2 = _mm256_set1_epi8(0x03);
    const __m256i even = _mm256_set1_epi32(0x00FF00FF);
    const __m256i w0 = ld32(unit + 32), w1 = ld32(unit + 64), w2 = ld32(unit + 96);
    auto top = [&](__m256i v) { return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 6), k2), 4); };
    // Sub-blocks 0-3 (the bytes of word 0 / 1) and 4-7 (word 2's low / high nibbles with word
    // 0's / 1's top bits), one row per 32-bit lane.
    const __m256i S[2] = {_mm256_and_si256(w0, k6), _mm256_or_si256(_mm256_and_si256(w2, k4), top(w0))};
    const __m256i mA = _mm256_and_si256(w1, k6);
    const __m256i mB = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(w2, 4), k4), top(w1));
    for (int m = 0; m < 2; ++m) {
      sc[m][0] = _mm512_cvtepu16_epi32(_mm256_and_si256(S[m], even));
      sc[m][1] = _mm512_cvtepu16_epi32(_mm256_and_si256(_mm256_srli_epi16(S[m], 8), even));
    }
    mins[0] = _mm256_and_si256(mA, even), mins[1] = _mm256_and_si256(_mm256_srli_epi16(mA, 8), even);
    mins[2] = _mm256_and_si256(mB, even), mins[3] = _mm256_and_si256(_mm256_srli_epi16(mB, 8), even);
  }
  // sum_j m_j sum_j(qx) of each row: four vpdpwssd against p, q4k_min_pairs of one column's sums
  // (arrange_words keeps them in QuantizedActs::arranged_init).
  __m256i min_dot(const int64_t* p) const {
    __m256i M = _mm256_setzero_si256();
    for (int i = 0; i < 4; ++i) M = _mm256_dpwssd_epi32(M, mins[i], _mm256_set1_epi32(static_cast<int32_t>(p[i])));
    return M;
  }
};

template <int NC>
void q4_k_words(const uint8_t* w, int64_t, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  const int64_t K = x.K, nsb = K / QK_K;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m256 acc[NC], accm[NC];
  for (int c = 0; c < NC; ++c) acc[c] = accm[c] = _mm256_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* unit = w + s * cpu::kQ4_KR8UnitBytes;
    ahead<cpu::kQ4_KR8UnitBytes>(unit);
    const Q4kR8Planes pl(unit);
    __m512i S[NC];
    for (int c = 0; c < NC; ++c) S[c] = _mm512_setzero_si512();
    for (int m = 0; m < 2; ++m) {
      __m512i W[8];
      for (int k = 0; k < 8; ++k) W[k] = ld64(unit + 128 + 512 * m + 64 * k);
      for (int h = 0; h < 2; ++h) {
        __m512i N[8];
        for (int k = 0; k < 8; ++k) N[k] = _mm512_and_si512(h ? _mm512_srli_epi16(W[k], 4) : W[k], m4);
        for (int c = 0; c < NC; ++c) {
          const int8_t* a = x.arranged.data() + (c0 + c) * K + s * QK_K + 64 * (2 * m + h);
          __m512i T0 = _mm512_setzero_si512(), T1 = _mm512_setzero_si512();
          for (int k = 0; k < 8; k += 2) {
            T0 = _mm512_dpbusd_epi32(T0, N[k], bcast64(a + 8 * k));
            T1 = _mm512_dpbusd_epi32(T1, N[k + 1], bcast64(a + 8 * k + 8));
          }
          S[c] = _mm512_add_epi32(S[c], _mm512_mullo_epi32(_mm512_add_epi32(T0, T1), pl.sc[m][h]));
        }
      }
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(unit)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(unit + 16)));
    for (int c = 0; c < NC; ++c) {
      // Row r's sum in lane 2r, then the rows in order.
      const __m256i T = _mm512_cvtepi64_epi32(_mm512_add_epi32(S[c], _mm512_srli_epi64(S[c], 32)));
      const __m256 dxv = _mm256_set1_ps(x.dx.data()[(c0 + c) * (K / 32) + 8 * s]);
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(T), _mm256_mul_ps(d, dxv), acc[c]);
      const __m256i M = pl.min_dot(x.arranged_init.data() + (c0 + c) * (K / 64) + 4 * s);
      accm[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(M), _mm256_mul_ps(dmin, dxv), accm[c]);
    }
  }
  for (int c = 0; c < NC; ++c) _mm256_storeu_ps(y + (c0 + c) * y_stride, _mm256_add_ps(acc[c], accm[c]));
}

// Q6_K_R8 (cpu/repacked.h), stored in word order: lane 2r + b of a unit's registers A_k, B_k and
// H_k holds row r's half b's ql words k and 8 + k and qh word k. A word's codes (qh's bit pairs set
// above the nibbles by vpternlogd) are four registers: A_k's low nibbles (values 4k..4k+3 of the
// half's 32-value chunk 0), B_k's (chunk 1), A_k's high nibbles (chunk 2) and B_k's (chunk 3).
// Against [chunk t's word k of half 0 | of half 1] (arrange_words), vpdpbusd over words 4j..4j+3
// leaves each lane one 16-value group's exact sum(q qx) (group 8b + 2t + j), and vpmulld weights it
// by the group's scale. The centre, -32 sum_g sc_g sum_g(qx), is four vpdpwssd of the scale pairs
// times 4 against the column's -8 sum_g(qx) pairs (arranged_init; int16 for any int8 codes). A
// row's two lanes added, then q6_k's float steps: the same bits.
template <int NC>
void q6_k_words(const uint8_t* w, int64_t, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  const int64_t K = x.K, nsb = K / QK_K;
  const __m512i m4 = _mm512_set1_epi8(0x0F), m33 = _mm512_set1_epi8(0x33);
  __m256 acc[NC];
  for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const uint8_t* unit = w + s * cpu::kQ6_KR8UnitBytes;
    ahead<cpu::kQ6_KR8UnitBytes>(unit);
    __m512i sc[8], S[NC];  // sc[g]: lane 2r + b = row r's scale of group 8b + g
    for (int p = 0; p < 4; ++p) {
      const __m512i pairs = _mm512_cvtepi8_epi16(ld32(unit + 16 + 32 * p));  // lane 2r + b: scales 2p, 2p + 1
      sc[2 * p] = _mm512_srai_epi32(_mm512_slli_epi32(pairs, 16), 16);
      sc[2 * p + 1] = _mm512_srai_epi32(pairs, 16);
      const __m512i four = _mm512_slli_epi16(pairs, 2);
      for (int c = 0; c < NC; ++c) {
        const int64_t v = x.arranged_init[static_cast<size_t>((c0 + c) * (K / 64) + 4 * s + p)];
        S[c] = _mm512_dpwssd_epi32(p ? S[c] : _mm512_setzero_si512(), four, _mm512_set1_epi64(v));
      }
    }
    for (int j = 0; j < 2; ++j)
      for (int src = 0; src < 2; ++src) {  // A (chunks 0 and 2) or B (chunks 1 and 3)
        __m512i lo[4], hi[4];
        for (int i = 0; i < 4; ++i) {
          const uint8_t* wk = unit + 144 + 192 * (4 * j + i);
          const __m512i Q = ld64(wk + 64 * src), H = ld64(wk + 128);
          // A's top bits are H's bit pairs 0 (low nibbles) and 4 (high), B's 2 and 6.
          const __m512i h = _mm512_and_si512(src ? _mm512_srli_epi16(H, 2) : H, m33);
          lo[i] = _mm512_ternarylogic_epi32(m4, Q, _mm512_slli_epi16(h, 4), 0xCA);  // m4 ? Q : h << 4
          hi[i] = _mm512_ternarylogic_epi32(m4, _mm512_srli_epi16(Q, 4), h, 0xCA);
        }
        const int tl = src, th = src + 2;
        for (int c = 0; c < NC; ++c) {
          const int8_t* a = x.arranged.data() + (c0 + c) * K + s * QK_K + 32 * j;
          __m512i TL = _mm512_setzero_si512(), TH = _mm512_setzero_si512();
          for (int i = 0; i < 4; ++i) {
            TL = _mm512_dpbusd_epi32(TL, lo[i], bcast64(a + 64 * tl + 8 * i));
            TH = _mm512_dpbusd_epi32(TH, hi[i], bcast64(a + 64 * th + 8 * i));
          }
          S[c] = _mm512_add_epi32(S[c], _mm512_add_epi32(_mm512_mullo_epi32(TL, sc[2 * tl + j]),
                                                         _mm512_mullo_epi32(TH, sc[2 * th + j])));
        }
      }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(unit)));
    for (int c = 0; c < NC; ++c) {
      const __m256i T = _mm512_cvtepi64_epi32(_mm512_add_epi32(S[c], _mm512_srli_epi64(S[c], 32)));  // row order
      const __m256 dxv = _mm256_set1_ps(x.dx.data()[(c0 + c) * (K / 32) + 8 * s]);
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(T), _mm256_mul_ps(d, dxv), acc[c]);
    }
  }
  const __m256 zero = _mm256_setzero_ps();  // as q6_k
  for (int c = 0; c < NC; ++c) _mm256_storeu_ps(y + (c0 + c) * y_stride, _mm256_add_ps(acc[c], zero));
}

// Q4_K and Q5_K in the file's layout, eight rows gathered: per row, the code products by
// vpmaddubsw weighted by the sub-block scales with vpdpwssd (k4_isum), on the row's own 128 code
// bytes. Q5_K's fifth bits: bit j of qh[l] belongs to sub-block j, so each code register
// [sub-block i | i + 2] takes bits i and i + 2 by one vptestmb and a masked add of 16. The mins:
// the eight rows' min bytes, a row per qword, shuffled into int16 pairs (0, 2), (1, 3) and (4, 6),
// (5, 7) per 32-bit lane, and taken by vpdpwssd against the activations' sub-block sums paired
// the same way.
template <class B, int NC>
void k45(const uint8_t* w, int64_t rb, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  constexpr bool kFive = std::is_same_v<B, block_q5_K>;
  constexpr int64_t kB = sizeof(B);
  const int64_t K = x.K, nsb = K / QK_K;
  const __m256i off = row_offsets(rb);
  const __m512i sixteen = _mm512_set1_epi8(16);
  const __m512i pk[4] = {pick16(0, 2), pick16(1, 3), pick16(4, 6), pick16(5, 7)};
  auto bits = [](int i, int j) {
    return _mm512_mask_blend_epi64(0xF0, _mm512_set1_epi8(static_cast<char>(1 << i)),
                                   _mm512_set1_epi8(static_cast<char>(1 << j)));
  };
  const __m512i fifth[4] = {bits(0, 2), bits(1, 3), bits(4, 6), bits(5, 7)};
  // Per qword (a row's mins m0..m7): [m0, m2 | m1, m3] and [m4, m6 | m5, m7] as int16.
  // (vpshufb bytes per 128-bit lane, 0xFF for a zero: 0, _, 2, _, 1, _, 3, _, 8, _, 10, _, ...)
  const __m512i mins_lo = _mm512_set4_epi32(static_cast<int>(0xFF0BFF09), static_cast<int>(0xFF0AFF08),
                                            static_cast<int>(0xFF03FF01), static_cast<int>(0xFF02FF00));
  const __m512i mins_hi = _mm512_set4_epi32(static_cast<int>(0xFF0FFF0D), static_cast<int>(0xFF0EFF0C),
                                            static_cast<int>(0xFF07FF05), static_cast<int>(0xFF06FF04));
  __m256 acc[NC], accm[NC];
  for (int c = 0; c < NC; ++c) acc[c] = accm[c] = _mm256_setzero_ps();
  const RowsAhead pf(w, rb, nsb);
  for (int64_t s = 0; s < nsb; ++s) {
    pf.step(s);
    const uint8_t* blk = w + s * kB;
    __m512i xs[NC][4], pairs_lo[NC], pairs_hi[NC];
    for (int c = 0; c < NC; ++c) {
      kquant_acts(x.q.data() + (c0 + c) * K + s * QK_K, xs[c]);
      const int32_t* b = x.bs.data() + (c0 + c) * (K / 16) + 16 * s;
      uint64_t ps[8];
      for (int j = 0; j < 8; ++j) ps[j] = static_cast<uint16_t>(b[2 * j] + b[2 * j + 1]);
      pairs_lo[c] = _mm512_set1_epi64(static_cast<int64_t>(ps[0] | ps[2] << 16 | ps[1] << 32 | ps[3] << 48));
      pairs_hi[c] = _mm512_set1_epi64(static_cast<int64_t>(ps[4] | ps[6] << 16 | ps[5] << 32 | ps[7] << 48));
    }
    uint64_t mins8[8];
    Rows8Sums rs[NC];
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      __m512i isum[2][NC];
      for (int k = 0; k < 2; ++k) {
        const int r = 2 * p + k;
        const B& b = *reinterpret_cast<const B*>(blk + r * rb);
        const Q4kScales sm(b.scales);
        mins8[r] = sm.mins();
        __m512i code[4];
        k4_codes(b.qs, code);
        if constexpr (kFive) {
          const __m512i qh = dup32(b.qh);
          for (int i = 0; i < 4; ++i)
            code[i] = _mm512_mask_add_epi8(code[i], _mm512_test_epi8_mask(qh, fifth[i]), code[i], sixteen);
        }
        k4_isum<NC>(sm.scales(), code, xs, pk, isum[k]);
      }
      for (int c = 0; c < NC; ++c) rs[c].pair(p, isum[0][c], isum[1][c]);
    }
    const __m512i mn = _mm512_loadu_si512(mins8);
    const __m512i mlo = _mm512_shuffle_epi8(mn, mins_lo), mhi = _mm512_shuffle_epi8(mn, mins_hi);
    const __m256i words = _mm256_i32gather_epi32(reinterpret_cast<const int*>(blk), off, 1);  // d | dmin << 16
    const __m256 d = f16_low(words), dmin = f16_high(words);
    for (int c = 0; c < NC; ++c) {
      const __m512i m2 = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(_mm512_setzero_si512(), mlo, pairs_lo[c]), mhi, pairs_hi[c]);
      const __m256i M = _mm512_cvtepi64_epi32(_mm512_add_epi64(m2, _mm512_srli_epi64(m2, 32)));  // lane r: row r
      const __m256 dxv = _mm256_set1_ps(x.dx.data()[(c0 + c) * (K / 32) + 8 * s]);
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rs[c].total()), _mm256_mul_ps(d, dxv), acc[c]);
      accm[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(M), _mm256_mul_ps(dmin, dxv), accm[c]);
    }
  }
  for (int c = 0; c < NC; ++c) _mm256_storeu_ps(y + (c0 + c) * y_stride, _mm256_add_ps(acc[c], accm[c]));
}

// Q6_K x Q8_K in the file's layout, eight rows gathered: d dx (sum_g sc_g sum(q qx) - 32 sum_g
// sc_g sum_g(qx)), the bracket an exact integer. Per row and half (128 values), one register of
// 6-bit codes holds values [0, 64) and one [64, 128): the low nibbles of ql's 64 bytes with qh's
// bit pairs 0 and 2 (4 and 6 for the high nibbles) above them. Each 128-bit lane then covers one
// 16-value group, whose int16 scale vpermw spreads over it.
template <int NC>
void q6_k(const uint8_t* w, int64_t rb, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  constexpr int64_t kB = sizeof(block_q6_K);
  const int64_t K = x.K, nsb = K / QK_K;
  const __m256i off = row_offsets(rb);
  const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x03);
  const __m512i shift_lo = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2), shift_hi = _mm512_setr_epi64(4, 4, 4, 4, 6, 6, 6, 6);
  // vpermw indices: the int16 scale of group 4q + k into 128-bit lane k (q: the register's quarter).
  __m512i group[4];
  for (int q = 0; q < 4; ++q) {
    alignas(64) int16_t idx[32];
    for (int i = 0; i < 32; ++i) idx[i] = static_cast<int16_t>(4 * q + i / 8);
    group[q] = _mm512_load_si512(idx);
  }
  __m256 acc[NC];
  for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
  const RowsAhead pf(w, rb, nsb);
  for (int64_t s = 0; s < nsb; ++s) {
    pf.step(s);
    const uint8_t* blk = w + s * kB;
    __m512i xq[NC][4];
    __m256i bs16[NC];  // the 16 activation sums as int16 (|sum| <= 16 * 128)
    for (int c = 0; c < NC; ++c) {
      const int8_t* q = x.q.data() + (c0 + c) * K + s * QK_K;
      for (int i = 0; i < 4; ++i) xq[c][i] = ld64(q + 64 * i);
      const int32_t* bs = x.bs.data() + (c0 + c) * (K / 16) + 16 * s;
      bs16[c] = _mm256_permute4x64_epi64(_mm256_packs_epi32(ld32(bs), ld32(bs + 8)), 0xD8);
    }
    Rows8Sums rs[NC];
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      __m512i isum[2][NC];
      for (int k = 0; k < 2; ++k) {
        const block_q6_K& b = *reinterpret_cast<const block_q6_K*>(blk + (2 * p + k) * rb);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
        const __m512i sc = _mm512_castsi256_si512(sc16);  // vpermw reads only the low 16 elements
        // The centre, 32 sum_g sc_g sum_g(qx), taken off the sums' starting value.
        for (int c = 0; c < NC; ++c)
          isum[k][c] = _mm512_zextsi256_si512(
              _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sc16, bs16[c]), 5)));
        for (int h = 0; h < 2; ++h) {
          const __m512i L = ld64(b.ql + 64 * h), H = dup32(b.qh + 32 * h);
          const __m512i qlo = _mm512_or_si512(_mm512_and_si512(L, m4),
                                              _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(H, shift_lo), m2), 4));
          const __m512i qhi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L, 4), m4),
                                              _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(H, shift_hi), m2), 4));
          const __m512i slo = _mm512_permutexvar_epi16(group[2 * h], sc);
          const __m512i shi = _mm512_permutexvar_epi16(group[2 * h + 1], sc);
          for (int c = 0; c < NC; ++c) {
            isum[k][c] = _mm512_dpwssd_epi32(isum[k][c], _mm512_maddubs_epi16(qlo, xq[c][2 * h]), slo);
            isum[k][c] = _mm512_dpwssd_epi32(isum[k][c], _mm512_maddubs_epi16(qhi, xq[c][2 * h + 1]), shi);
          }
        }
      }
      for (int c = 0; c < NC; ++c) rs[c].pair(p, isum[0][c], isum[1][c]);
    }
    // d is the block's last two bytes: the high half of the word at offset kB - 4.
    const __m256 d = f16_high(_mm256_i32gather_epi32(reinterpret_cast<const int*>(blk + kB - 4), off, 1));
    for (int c = 0; c < NC; ++c) {
      const __m256 dxv = _mm256_set1_ps(x.dx.data()[(c0 + c) * (K / 32) + 8 * s]);
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(rs[c].total()), _mm256_mul_ps(d, dxv), acc[c]);
    }
  }
  const __m256 zero = _mm256_setzero_ps();  // -0 + 0: the AVX2 kernel's +0 for an all-zero row
  for (int c = 0; c < NC; ++c) _mm256_storeu_ps(y + (c0 + c) * y_stride, _mm256_add_ps(acc[c], zero));
}

// The 4-bit types with a value table (IQ4_NL: fp16 scale; MXFP4: E8M0 exponent), for nl4.
struct Iq4nlT {
  using Block = block_iq4_nl;
  static constexpr int kQs = 2;
  static const int8_t* table() { return kvalues_iq4nl; }
  static __m256 scale(__m256i words) { return f16_low(words); }
};
struct Mxfp4T {
  using Block = block_mxfp4;
  static constexpr int kQs = 1;
  static const int8_t* table() { return kvalues_mxfp4; }
  // 2^(e - 128) from the exponent bytes e in the low bytes of the lanes (e8m0_to_fp32_half).
  static __m256 scale(__m256i words) {
    const __m256i e = _mm256_and_si256(words, _mm256_set1_epi32(0xFF));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_mask_blend_epi32(_mm256_cmplt_epu32_mask(e, _mm256_set1_epi32(2)), normal, subnormal));
  }
};

// IQ4_NL and MXFP4 in the file's layout, eight rows gathered: per pair of blocks (u, u + 1), one
// register holds rows 2p and 2p+1's codes as q4_0_r8's unit does ([row 2p: block u, block u + 1 |
// row 2p+1: the same], 16 bytes each); vpshufb maps the nibbles through the type's table plus 128
// (unsigned bytes, for vpdpbusd) and 128 sum(qx) per block comes off through the starting value.
// An odd last block goes alone, the other block's activations zero.
template <class T, int NC>
void nl4(const uint8_t* w, int64_t rb, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  constexpr int64_t kB = sizeof(typename T::Block);
  const int64_t K = x.K, nb = K / 32;
  const __m256i off = row_offsets(rb);
  const __m512i m4 = _mm512_set1_epi8(0x0F), order = row_order();
  const __m512i lut = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(T::table()))),
                                       _mm512_set1_epi8(static_cast<char>(0x80)));
  Columns<NC> col(x, c0);
  const RowsAhead pf(w, rb, (nb + 1) / 2);
  // Rows 2p and 2p+1's codes of blocks u and u + 1 (or u twice), as table values plus 128.
  auto codes = [&](int p, int64_t u, int64_t u1, __m512i& lo, __m512i& hi) {
    const uint8_t* a = w + 2 * p * rb + T::kQs;
    const __m256i ra = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(a + u1 * kB),
                                           reinterpret_cast<const __m128i*>(a + u * kB));
    const __m256i rb2 = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(a + rb + u1 * kB),
                                            reinterpret_cast<const __m128i*>(a + rb + u * kB));
    const __m512i raw = _mm512_inserti64x4(_mm512_castsi256_si512(ra), rb2, 1);
    lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(raw, m4));
    hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4));
  };
  int64_t u = 0;
  for (; u + 2 <= nb; u += 2) {
    pf.step(u / 2);
    __m512i xa[NC], xb[NC], init[NC];
    for (int c = 0; c < NC; ++c) {
      const int8_t* q = x.arranged.data() + (c0 + c) * K + 32 * u;  // the pair order (qdirect.h)
      xa[c] = dup32(q), xb[c] = dup32(q + 32);
      const int32_t* b = col.bs[c] + 2 * u;
      init[c] = _mm512_mask_set1_epi32(_mm512_maskz_set1_epi32(0x0101, -128 * (b[0] + b[1])), 0x1010, -128 * (b[2] + b[3]));
    }
    __m512i v[4][NC];
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      __m512i lo, hi;
      codes(p, u, u + 1, lo, hi);
      for (int c = 0; c < NC; ++c) v[p][c] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(init[c], lo, xa[c]), hi, xb[c]);
    }
    const __m256 d0 = T::scale(_mm256_i32gather_epi32(reinterpret_cast<const int*>(w + u * kB), off, 1));
    const __m256 d1 = T::scale(_mm256_i32gather_epi32(reinterpret_cast<const int*>(w + (u + 1) * kB), off, 1));
    for (int c = 0; c < NC; ++c) {
      const __m512 f = _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(order, lane_sums4(v[0][c], v[1][c], v[2][c], v[3][c])));
      col.acc[c] = _mm256_fmadd_ps(lower(f), _mm256_mul_ps(d0, _mm256_set1_ps(col.dx[c][u])), col.acc[c]);
      col.acc[c] = _mm256_fmadd_ps(upper(f), _mm256_mul_ps(d1, _mm256_set1_ps(col.dx[c][u + 1])), col.acc[c]);
    }
  }
  if (u < nb) {
    pf.step(u / 2);
    __m512i xa[NC], xb[NC], init[NC];
    for (int c = 0; c < NC; ++c) {  // block u's activations in 128-bit lanes 0 and 2, zero in 1 and 3
      const int8_t* q = col.q[c] + 32 * u;
      xa[c] = _mm512_maskz_broadcast_i32x4(0x0F0F, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
      xb[c] = _mm512_maskz_broadcast_i32x4(0x0F0F, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16)));
      init[c] = _mm512_maskz_set1_epi32(0x0101, -128 * (col.bs[c][2 * u] + col.bs[c][2 * u + 1]));
    }
    __m512i v[4][NC];
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {
      __m512i lo, hi;
      codes(p, u, u, lo, hi);
      for (int c = 0; c < NC; ++c) v[p][c] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(init[c], lo, xa[c]), hi, xb[c]);
    }
    const __m256 d0 = T::scale(_mm256_i32gather_epi32(reinterpret_cast<const int*>(w + u * kB), off, 1));
    for (int c = 0; c < NC; ++c) {
      const __m512 f = _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(order, lane_sums4(v[0][c], v[1][c], v[2][c], v[3][c])));
      col.acc[c] = _mm256_fmadd_ps(lower(f), _mm256_mul_ps(d0, _mm256_set1_ps(col.dx[c][u])), col.acc[c]);
    }
  }
  col.store(y, c0, y_stride);
}

constexpr Rows8Fn kQ4_0R8[8] = {words<Q4Words, 1>, words<Q4Words, 2>, words<Q4Words, 3>, words<Q4Words, 4>,
                                words<Q4Words, 5>, words<Q4Words, 6>, words<Q4Words, 7>, words<Q4Words, 8>};
constexpr Rows8Fn kQ8_0[4] = {q8_0<1>, q8_0<2>, q8_0<3>, q8_0<4>};
constexpr Rows8Fn kQ8_0R8[8] = {words<Q8Words, 1>, words<Q8Words, 2>, words<Q8Words, 3>, words<Q8Words, 4>,
                                words<Q8Words, 5>, words<Q8Words, 6>, words<Q8Words, 7>, words<Q8Words, 8>};
constexpr Rows8Fn kQ4_KR8[8] = {q4_k_words<1>, q4_k_words<2>, q4_k_words<3>, q4_k_words<4>,
                                q4_k_words<5>, q4_k_words<6>, q4_k_words<7>, q4_k_words<8>};
constexpr Rows8Fn kQ6_KR8[8] = {q6_k_words<1>, q6_k_words<2>, q6_k_words<3>, q6_k_words<4>,
                                q6_k_words<5>, q6_k_words<6>, q6_k_words<7>, q6_k_words<8>};
template <class B>
constexpr Rows8Fn kK45[4] = {k45<B, 1>, k45<B, 2>, k45<B, 3>, k45<B, 4>};
constexpr Rows8Fn kQ6K[4] = {q6_k<1>, q6_k<2>, q6_k<3>, q6_k<4>};
template <class T>
constexpr Rows8Fn kNl4[4] = {nl4<T, 1>, nl4<T, 2>, nl4<T, 3>, nl4<T, 4>};

}  // namespace

bool avx512_word_order(DType t) {
  return t == cpu::Q4_0_R8 || t == cpu::Q8_0_R8 || t == cpu::Q4_K_R8 || t == cpu::Q6_K_R8;
}

int avx512_cols_per_call(DType t) { return avx512_word_order(t) ? 8 : 4; }

const Rows8Fn* avx512_kernels(DType t) {
  switch (t) {
    case cpu::Q4_0_R8: return kQ4_0R8;
    case DType::Q8_0: return kQ8_0;
    case cpu::Q8_0_R8: return kQ8_0R8;
    case cpu::Q4_K_R8: return kQ4_KR8;
    case cpu::Q6_K_R8: return kQ6_KR8;
    case DType::Q4_K: return kK45<block_q4_K>;
    case DType::Q5_K: return kK45<block_q5_K>;
    case DType::Q6_K: return kQ6K;
    case DType::IQ4_NL: return kNl4<Iq4nlT>;
    case DType::MXFP4: return kNl4<Mxfp4T>;
    default: return nullptr;
  }
}

}  // namespace kestrel::cpu::qdirect

#else  // a compiler or target without these instructions: the AVX2 kernels serve

namespace kestrel::cpu::qdirect {
const Rows8Fn* avx512_kernels(DType) { return nullptr; }
int avx512_cols_per_call(DType) { return 4; }
bool avx512_word_order(DType) { return false; }
}  // namespace kestrel::cpu::qdirect

#endif
