// Tiled prefill GEMM (AVX2): 8 weight rows x NC activation columns per micro-kernel.
//
// The rows of one chunk, already unpacked to the canonical form of qgemm.h, are interleaved so
// that one 32-byte register holds 4 consecutive values of each of 8 rows (lane r = row r). A
// column's matching 4 activation codes are broadcast to all lanes, so one `maddubs` + `madd`
// leaves row r's partial dot product in int32 lane r: no horizontal sums, and one weight load
// serves NC columns (the untiled dot_row reloaded both operands from L2 for every row x column
// pair, which bounded it by L2 bandwidth, docs/PERF.md).
//
// Products of unsigned codes are summed in int16 for G groups before widening, as far as the
// largest code allows without overflow (Q4_*: 8 groups, Q5_*: 4, Q6_K: 2; signed types: 1).
// Per scale block and column: one convert and one FMA by (row scales x column scale). Code
// centres and K-quant mins are integer terms against the activations' integer block sums.
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/kernels/qgemm.h"

namespace kestrel::cpu {
namespace {

// Rows [row0, row0 + 8) of `w` interleaved into group `grp` of `out`.
void interleave8(const UnpackedRows& w, int64_t row0, InterleavedRows& out, int64_t grp) {
  const int64_t K = w.K, nu = K / 32;
  uint8_t* q = out.q.data() + grp * 8 * K;
  float* d = out.d.data() + grp * 8 * nu;
  int16_t* sub = out.sub.data() + grp * 8 * (K / 16) * 2;
  float* mn = out.mn.data() + grp * 8 * (K / 16);
  int16_t* mq = out.mq.data() + grp * 8 * (K / 16) * 2;
  float* dm = out.dm.data() + grp * 8 * nu;
  for (int64_t r = 0; r < 8; ++r) {
    const uint8_t* src = w.q.data() + (row0 + r) * K;
    for (int64_t g = 0; g < K / 4; ++g) std::memcpy(q + (8 * g + r) * 4, src + 4 * g, 4);
    for (int64_t u = 0; u < nu; ++u) d[8 * u + r] = w.d[(row0 + r) * nu + u];
    if (w.int_mins)
      for (int64_t u = 0; u < nu; ++u) dm[8 * u + r] = w.dm[(row0 + r) * nu + u];
    for (int64_t h = 0; h < K / 16; ++h) {
      // UnpackedRows.sub holds 8 copies per half; one is enough here.
      const int16_t s = w.sub[(row0 + r) * K / 2 + 8 * h];
      sub[16 * h + 2 * r] = s;
      sub[16 * h + 2 * r + 1] = s;
      mn[8 * h + r] = w.mn[(row0 + r) * K / 16 + h];
      if (w.int_mins) mq[16 * h + 2 * r] = mq[16 * h + 2 * r + 1] = w.mq[(row0 + r) * K / 16 + h];
    }
  }
}

// kZ > 0: codes are centred on 2^kZ (value d sub (q - 2^kZ)); the centre is taken off the integer
// sums exactly, as llama.cpp's kernels do with signed codes, rather than as a float offset that
// cancels most of the main term. kIM: K-quant mins, integers times dmin, summed as integers
// against the activations' integer sums. kMn: Q4_1/Q5_1's float offset m per 32 values.
// The arithmetic is qgemm.h's, to the bit (the decode kernels and qgemm_dot follow it too).
template <bool kSigned, bool kSub, bool kMn, bool kIM, int kZ, int G, int NC>
void tile(const InterleavedRows& w, int64_t grp, const QuantizedActs& x, int64_t c0, float* y, int64_t y_stride) {
  const int64_t K = w.K, nu = K / 32;
  const uint8_t* qw = w.q.data() + grp * 8 * K;
  const float* dw = w.d.data() + grp * 8 * nu;
  const int16_t* sw = w.sub.data() + grp * 8 * (K / 16) * 2;
  const float* mw = w.mn.data() + grp * 8 * (K / 16);
  const int16_t* mqw = w.mq.data() + grp * 8 * (K / 16) * 2;
  const float* dmw = w.dm.data() + grp * 8 * nu;
  const int8_t* qx[NC];
  const float* dx[NC];
  const int32_t* bs[NC];
  for (int c = 0; c < NC; ++c) {
    qx[c] = x.q.data() + (c0 + c) * K;
    dx[c] = x.dx.data() + (c0 + c) * nu;
    bs[c] = x.bs.data() + (c0 + c) * (K / 16);
  }
  const __m256i ones = _mm256_set1_epi16(1);
  // Integer sums are converted once per scale block: 32 values, or a K-quant's 256-value
  // super-block (one d, and one Q8_K activation scale, for all its sub-blocks), as llama.cpp's
  // kernels do. Offsets (times the integer activation sums) go to their own accumulator and are
  // scaled by the activation scale once per scale block too.
  constexpr int64_t kUnitsPerScale = kSub ? 8 : 1;
  __m256 acc[NC], accm[NC];
  __m256i blk[NC], blkm[NC];
  for (int c = 0; c < NC; ++c) acc[c] = accm[c] = _mm256_setzero_ps(), blk[c] = blkm[c] = _mm256_setzero_si256();
  for (int64_t u = 0; u < nu; ++u) {
    __m256i s16[NC];
    for (int c = 0; c < NC; ++c) s16[c] = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) {
      const __m256i wq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qw + (8 * u + g) * 32));
      const __m256i wa = kSigned ? _mm256_sign_epi8(wq, wq) : wq;
      for (int c = 0; c < NC; ++c) {
        int32_t xv;
        std::memcpy(&xv, qx[c] + 32 * u + 4 * g, 4);
        __m256i xb = _mm256_set1_epi32(xv);
        if constexpr (kSigned) xb = _mm256_sign_epi8(xb, wq);
        const __m256i p = _mm256_maddubs_epi16(wa, xb);
        s16[c] = G == 1 ? p : _mm256_add_epi16(s16[c], p);
      }
      const int64_t h = 2 * u + g / 4;  // the 16-value half this group lies in
      const __m256i sv = kSub ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sw + 16 * h)) : ones;
      if ((g + 1) % G == 0) {
        for (int c = 0; c < NC; ++c) {
          blk[c] = _mm256_add_epi32(blk[c], _mm256_madd_epi16(s16[c], sv));
          s16[c] = _mm256_setzero_si256();
        }
      }
      if (g % 4 == 3) {  // the half is complete
        if constexpr (kZ > 0) {  // minus 2^kZ sub sum(qx)
          for (int c = 0; c < NC; ++c) {
            const __m256i b16 = _mm256_set1_epi32(bs[c][h] & 0xFFFF);  // even int16 lanes: sum(qx)
            const __m256i corr = kSub ? _mm256_madd_epi16(sv, b16) : _mm256_set1_epi32(bs[c][h]);
            blk[c] = _mm256_sub_epi32(blk[c], _mm256_slli_epi32(corr, kZ));
          }
        }
        if constexpr (kIM) {  // mq sum(qx)
          const __m256i mv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(mqw + 16 * h));
          for (int c = 0; c < NC; ++c)
            blkm[c] = _mm256_add_epi32(blkm[c], _mm256_madd_epi16(mv, _mm256_set1_epi32(bs[c][h] & 0xFFFF)));
        }
      }
    }
    if constexpr (kMn) {  // m sum(qx) dx, m the same for both halves (Q4_1/Q5_1)
      const __m256 m = _mm256_loadu_ps(mw + 16 * u);
      for (int c = 0; c < NC; ++c) {
        const __m256 t = _mm256_mul_ps(m, _mm256_set1_ps(static_cast<float>(bs[c][2 * u] + bs[c][2 * u + 1])));
        accm[c] = _mm256_fmadd_ps(t, _mm256_set1_ps(dx[c][u]), accm[c]);
      }
    }
    if ((u + 1) % kUnitsPerScale == 0) {
      const __m256 dv = _mm256_loadu_ps(dw + 8 * u);
      for (int c = 0; c < NC; ++c) {
        const __m256 dxc = _mm256_set1_ps(dx[c][u]);
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(blk[c]), _mm256_mul_ps(dv, dxc), acc[c]);
        blk[c] = _mm256_setzero_si256();
        if constexpr (kIM) {
          accm[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(blkm[c]), _mm256_mul_ps(_mm256_loadu_ps(dmw + 8 * u), dxc), accm[c]);
          blkm[c] = _mm256_setzero_si256();
        }
      }
    }
  }
  for (int c = 0; c < NC; ++c) _mm256_storeu_ps(y + (c0 + c) * y_stride, _mm256_add_ps(acc[c], accm[c]));
}

template <bool kSigned, bool kSub, bool kMn, bool kIM, int kZ, int G>
void tiles(const InterleavedRows& w, int64_t grp, const QuantizedActs& x, int64_t c0, int64_t c1, float* y,
           int64_t y_stride) {
  // Accumulators, block sums and int16 sums of a tile stay in the 16 registers: three columns,
  // two where a K-quant's mins add two more vectors per column.
  constexpr int kNC = kIM ? 2 : 3;
  int64_t c = c0;
  for (; c + kNC <= c1; c += kNC) tile<kSigned, kSub, kMn, kIM, kZ, G, kNC>(w, grp, x, c, y, y_stride);
  for (; c < c1; ++c) tile<kSigned, kSub, kMn, kIM, kZ, G, 1>(w, grp, x, c, y, y_stride);
}

using TilesFn = void (*)(const InterleavedRows&, int64_t, const QuantizedActs&, int64_t, int64_t, float*, int64_t);

// G (how many maddubs results an int16 lane sums) follows from the largest code of each type.
TilesFn pick(DType t) {
  //                                  signed sub    mn     int-mins kZ G
  switch (t) {
    case DType::Q4_0: return tiles<false, false, false, false, 3, 8>;
    case DType::Q4_1: return tiles<false, false, true, false, 0, 8>;
    case DType::Q5_0: return tiles<false, false, false, false, 4, 4>;
    case DType::Q5_1: return tiles<false, false, true, false, 0, 4>;
    case DType::Q2_K: case DType::Q4_K: case DType::Q5_K: return tiles<false, true, false, true, 0, 4>;
    case DType::Q3_K: return tiles<false, true, false, false, 2, 4>;
    case DType::Q6_K: return tiles<false, true, false, false, 5, 2>;
    case DType::MXFP4: return tiles<true, false, false, false, 0, 8>;  // |code| <= 12
    case DType::Q8_0: case DType::IQ4_NL: return tiles<true, false, false, false, 0, 1>;
    default: return nullptr;
  }
}

}  // namespace

void InterleavedRows::resize(int64_t groups, int64_t k) {
  K = k;
  q.resize(static_cast<size_t>(groups * 8 * k));
  d.resize(static_cast<size_t>(groups * 8 * k / 32));
  sub.resize(static_cast<size_t>(groups * 8 * k / 16 * 2));
  mn.resize(static_cast<size_t>(groups * 8 * k / 16));
  mq.resize(static_cast<size_t>(groups * 8 * k / 16 * 2));
  dm.resize(static_cast<size_t>(groups * 8 * k / 32));
}

void qgemm_interleave(const UnpackedRows& w, int64_t n_groups, InterleavedRows& out) {
  for (int64_t g = 0; g < n_groups; ++g) interleave8(w, 8 * g, out, g);
}

void qgemm_tiles(DType type, const InterleavedRows& w, int64_t n_groups, const QuantizedActs& x, int64_t c0,
                 int64_t c1, float* y, int64_t y_stride) {
  const TilesFn f = pick(type);
  for (int64_t g = 0; g < n_groups; ++g) f(w, g, x, c0, c1, y + 8 * g, y_stride);
}

}  // namespace kestrel::cpu
#endif
