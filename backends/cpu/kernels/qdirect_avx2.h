// Shared pieces of the fused decode kernels (qdirect_avx2.cpp, qdirect_k_avx2.cpp); include
// only where -mavx2 is on.
//
// The kernels follow qgemm.h's arithmetic to the bit, so they run eight weight rows at a time
// with one row per float lane, as the tiled GEMM does: each row's integer block sums are reduced
// across lanes (exact) and land in that row's lane, and each block then costs one convert and
// one FMA per column for all eight rows. Scales of the eight rows come in by one gather.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/kernels/qdirect.h"
#include "backends/cpu/kernels/qgemm.h"

namespace kestrel::cpu::qdirect {

inline __m128i load16(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Sum of int16 pairs into int32 lanes.
inline __m256i widen_pairs(__m256i v) { return _mm256_madd_epi16(v, _mm256_set1_epi16(1)); }

// Byte offsets of rows 0-7 from row 0, for gathers (kernels check row_bytes * 8 fits).
inline __m256i row_offsets(int64_t row_bytes) {
  const int rb = static_cast<int>(row_bytes);
  return _mm256_setr_epi32(0, rb, 2 * rb, 3 * rb, 4 * rb, 5 * rb, 6 * rb, 7 * rb);
}
// The 32-bit words at base + off[r], one per row.
inline __m256i gather_words(const uint8_t* base, __m256i off) {
  return _mm256_i32gather_epi32(reinterpret_cast<const int*>(base), off, 1);
}
// fp16 values in the low (or high) halves of eight 32-bit lanes, as floats.
inline __m256 f16_low(__m256i w) {
  const __m256i lo = _mm256_and_si256(w, _mm256_set1_epi32(0xFFFF));
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, lo), 0x08);
  return _mm256_cvtph_ps(_mm256_castsi256_si128(packed));
}
inline __m256 f16_high(__m256i w) { return f16_low(_mm256_srli_epi32(w, 16)); }

// Eight rows' partial-sum vectors, given two rows at a time (pair rp = rows 2rp, 2rp+1), reduced
// to lane sums: `a` holds rows 0-3 and `b` rows 4-7, each as [4 rows' sums of lanes 0-3 |
// 4 rows' sums of lanes 4-7]. With the pair index a compile-time constant the switch folds away.
struct RowSums {
  __m256i a, b, pend;
  void pair(int rp, __m256i v0, __m256i v1) {
    const __m256i h = _mm256_hadd_epi32(v0, v1);
    switch (rp) {
      case 0: pend = h; break;
      case 1: a = _mm256_hadd_epi32(pend, h); break;
      case 2: pend = h; break;
      default: b = _mm256_hadd_epi32(pend, h); break;
    }
  }
  // Lane r = row r's total over all eight lanes of its vector.
  __m256i total() const { return _mm256_add_epi32(lower(), upper()); }
  // Lane r = row r's sum of lanes 0-3 (lower) or 4-7 (upper): two blocks per vector.
  __m256i lower() const { return _mm256_permute2x128_si256(a, b, 0x20); }
  __m256i upper() const { return _mm256_permute2x128_si256(a, b, 0x31); }
};

// The hardware prefetchers do not follow eight interleaved row streams (decode ran at a third of
// memory speed without this), so each kernel streams the group two ahead into cache itself, in
// address order, one slice per block step.
class GroupPrefetch {
 public:
  GroupPrefetch(const uint8_t* w, int64_t row_bytes, int64_t steps)
      : next_(w + 16 * row_bytes), slice_((8 * row_bytes + 64 * steps - 1) / (64 * steps) * 64) {}
  void step(int64_t i) const {
    const char* p = reinterpret_cast<const char*>(next_ + i * slice_);
    for (int64_t o = 0; o < slice_; o += 64) _mm_prefetch(p + o, _MM_HINT_T0);
  }

 private:
  const uint8_t* next_;
  int64_t slice_;
};

// The word-order kernels' results: rows 0-3 in the even lanes of lo, rows 4-7 in those of hi,
// as one register in row order.
inline __m256 even_lanes(__m256 lo, __m256 hi) {
  const __m256 r = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));  // rows [0, 1, 4, 5 | 2, 3, 6, 7]
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(r), 0xD8));
}

// acc += float(T) * (scales * dx): one scale block of eight rows, qgemm.h's step.
inline __m256 fma_block(__m256i T, __m256 scales, float dx, __m256 acc) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(T), _mm256_mul_ps(scales, _mm256_set1_ps(dx)), acc);
}

}  // namespace kestrel::cpu::qdirect
