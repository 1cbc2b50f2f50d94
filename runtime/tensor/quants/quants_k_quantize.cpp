// Reference quantizers for the K-quants (Q2_K .. Q6_K) and the Q8_K activation format. Each
// repeats the arithmetic of GGML's quantize_row_*_ref (what llama-quantize uses when no importance
// matrix is given) operation for operation, so the bytes match the files llama.cpp writes:
//  - Q2_K, Q4_K, Q5_K: per sub-block an asymmetric fit (scale and min) found by a grid search over
//    candidate scales with a weighted least-squares refit; scales and mins are then quantized to
//    4 bits (Q2_K) or 6 bits (Q4_K/Q5_K) against the block maximum, and values re-rounded with the
//    quantized scales.
//  - Q3_K: a symmetric fit refined by coordinate descent, 6-bit signed sub-block scales.
//  - Q6_K: a symmetric fit searched over 18 nearby scales, 8-bit sub-block scales.
// Layouts are documented in quant_blocks.h.
#include <cmath>
#include <cstring>

#include "tensor/quants/quant_blocks.h"
#include "tensor/quants/quants.h"
#include "core/fp16.h"

// Byte-exact rounding needs every multiply and add rounded on its own: no fused multiply-add
// (GCC already keeps them apart in ISO C++ mode; clang contracts by default).
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace kestrel::quants {
namespace {

// Below this largest magnitude a group counts as all zero (GGML's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// GGML's nearest_int: round half to even through the 1.5 * 2^23 trick, with the input clamped
// to the range where the trick is exact (|v| <= 2^22 - 1) and NaN mapped to 0, so no input can
// make it undefined.
int nearest_int(float v) {
  if (!(v == v)) return 0;
  v = v > 4194303.0f ? 4194303.0f : (v < -4194303.0f ? -4194303.0f : v);
  const float t = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &t, 4);
  return (i & 0x007fffff) - 0x00400000;
}

int clamp_int(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

template <class B>
void store_block(void* dst, int64_t i, const B& b) {
  std::memcpy(static_cast<uint8_t*>(dst) + i * static_cast<int64_t>(sizeof(B)), &b, sizeof(B));
}

// Signed value of largest magnitude (the first one on ties) and that magnitude.
void signed_absmax(const float* x, int n, float* amax, float* max) {
  *amax = 0.0f;
  *max = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > *amax) {
      *amax = ax;
      *max = x[i];
    }
  }
}

// Symmetric fit with levels l in [-nmax, nmax - 1] and weights x^2 (GGML's make_qx_quants with
// rmse_type 1 and no importance weights): start from the scale that maps the signed maximum to
// -nmax, least-squares refit, then try 18 nearby inverse scales and keep the best fit. Writes
// L = l + nmax and returns the scale.
float fit_symmetric_searched(int n, int nmax, const float* x, int8_t* L) {
  float amax, max;
  signed_absmax(x, n, &amax, &max);
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  // Sums of w*x*l and w*l*l for the levels given by iscale (levels into lv).
  auto fit = [&](float iscale, int* lv, float* sumlx, float* suml2) {
    *sumlx = 0;
    *suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
      lv[i] = l;
      const float w = x[i] * x[i];
      *sumlx += w * x[i] * l;
      *suml2 += w * l * l;
    }
  };
  int lv[QK_K];
  float sumlx, suml2;
  fit(-nmax / max, lv, &sumlx, &suml2);
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(lv[i] + nmax);
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    fit(-(nmax + 0.1f * is) / max, lv, &sumlx, &suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(lv[i] + nmax);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Symmetric fit for Q3_K (GGML's make_q3_quants with do_rmse): levels in [-nmax, nmax - 1] from
// the signed maximum, then up to 5 rounds of coordinate descent, moving one value to the level
// its least-squares scale wants whenever that improves the weighted (x^2) fit. Writes
// L = l + nmax and returns the scale.
float fit_symmetric_descent(int n, int nmax, const float* x, int8_t* L) {
  float amax, max;
  signed_absmax(x, n, &amax, &max);
  if (amax < kGroupMaxEps) {
    std::memset(L, 0, static_cast<size_t>(n));
    return 0.0f;
  }
  const float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (!(slx > 0)) continue;
      float sl2 = suml2 - w * L[i] * L[i];
      const int new_l = clamp_int(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (new_l == L[i]) continue;
      slx += w * x[i] * new_l;
      sl2 += w * new_l * new_l;
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<int8_t>(new_l);
        sumlx = slx;
        suml2 = sl2;
        ++n_changed;
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Search parameters of the asymmetric fit: candidate inverse scales (rmin + rdelta * k + nmax) /
// (max - min) for k = 0..nstep; the error is weighted |diff| (use_mad) or weighted diff^2.
struct AsymSearch {
  float rmin, rdelta;
  int nstep;
  bool use_mad;
};

// Asymmetric fit value = scale * l - the_min with l in [0, nmax] (GGML's make_qkx2_quants): the
// min is clamped to <= 0, each candidate inverse scale gives levels whose weighted least-squares
// scale and min are computed in closed form, and the candidate with the smallest weighted error
// wins. Writes L and *the_min (a non-negative offset) and returns the scale.
float fit_asymmetric(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                     float* the_min, const AsymSearch& s) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::memset(L, 0, static_cast<size_t>(n));
    *the_min = -min;
    return 0.0f;
  }
  auto error_term = [&](float diff) { return s.use_mad ? std::fabs(diff) : diff * diff; };
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = nearest_int(iscale * (x[i] - min));
    L[i] = static_cast<uint8_t>(clamp_int(l, 0, nmax));
    const float diff = scale * L[i] + min - x[i];
    best_error += weights[i] * error_term(diff);
  }
  uint8_t Laux[QK_K];
  for (int is = 0; is <= s.nstep; ++is) {
    iscale = (s.rmin + s.rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (!(D > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float cur_error = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * Laux[i] + this_min - x[i];
      cur_error += weights[i] * error_term(diff);
    }
    if (cur_error < best_error) {
      std::memcpy(L, Laux, static_cast<size_t>(n));
      best_error = cur_error;
      scale = this_scale;
      min = this_min;
    }
  }
  *the_min = -min;
  return scale;
}

// Q4_K / Q5_K share everything but the level count, the search grid and the bit packing:
// 8 sub-blocks of 32 fitted with weights rms(sub-block) + |x|, 6-bit scales and mins relative to
// the block maxima, then every value re-rounded with the quantized scale and min.
void fit_q45_k(const float* x, int nmax, const AsymSearch& search, uint8_t* scales_out,
               uint16_t* d_out, uint16_t* dmin_out, uint8_t* L) {
  float scales[QK_K / 32], mins[QK_K / 32];
  float max_scale = 0, max_min = 0;  // scales are positive: the min is subtracted
  for (int j = 0; j < QK_K / 32; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    float weights[32];
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = fit_asymmetric(32, nmax, xs, weights, L + 32 * j, &mins[j], search);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(scales_out, 0, K_SCALE_SIZE);
  for (int j = 0; j < QK_K / 32; ++j) {
    // Stored as uint8 first (GGML's conversion wraps), then capped at 63.
    uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    if (ls > 63) ls = 63;
    if (lm > 63) lm = 63;
    if (j < 4) {
      scales_out[j] = ls;
      scales_out[j + 4] = lm;
    } else {
      scales_out[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      scales_out[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      scales_out[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  *d_out = fp32_to_fp16(max_scale / 63.f);
  *dmin_out = fp32_to_fp16(max_min / 63.f);
  for (int j = 0; j < QK_K / 32; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, scales_out, &sc, &m);
    const float d = fp16_to_fp32(*d_out) * sc;
    if (d == 0.0f) continue;  // keep the fit's levels (they dequantize to -dm anyway)
    const float dm = fp16_to_fp32(*dmin_out) * m;
    for (int ii = 0; ii < 32; ++ii)
      L[32 * j + ii] = static_cast<uint8_t>(clamp_int(nearest_int((x[32 * j + ii] + dm) / d), 0, nmax));
  }
}

// 2-bit levels of 256 values into 64 bytes: byte 32h + l holds elements 128h + l + 32k in bits 2k.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < QK_K; j += 128)
    for (int l = 0; l < 32; ++l)
      qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) |
                                           (L[j + l + 96] << 6));
}

}  // namespace

void quantize_q2_k(const float* src, void* dst, int64_t n) {
  constexpr float q4scale = 15.f;
  const AsymSearch search{-0.5f, 0.1f, 15, true};
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float* x = src + i * QK_K;
    block_q2_K b;
    uint8_t L[QK_K];
    float scales[QK_K / 16], mins[QK_K / 16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
      float weights[16];
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = fit_asymmetric(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], search);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < QK_K / 16; ++j) b.scales[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      b.d = fp32_to_fp16(max_scale / q4scale);
    } else {
      std::memset(b.scales, 0, sizeof b.scales);
      b.d = fp32_to_fp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < QK_K / 16; ++j)
        b.scales[j] |= static_cast<uint8_t>(nearest_int(iscale * mins[j]) << 4);
      b.dmin = fp32_to_fp16(max_min / q4scale);
    } else {
      b.dmin = fp32_to_fp16(0.f);
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = fp16_to_fp32(b.d) * (b.scales[j] & 0xF);
      if (d == 0.0f) continue;
      const float dm = fp16_to_fp32(b.dmin) * (b.scales[j] >> 4);
      for (int ii = 0; ii < 16; ++ii)
        L[16 * j + ii] = static_cast<uint8_t>(clamp_int(nearest_int((x[16 * j + ii] + dm) / d), 0, 3));
    }
    pack_2bit(L, b.qs);
    store_block(dst, i, b);
  }
}

void quantize_q3_k(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float* x = src + i * QK_K;
    block_q3_K b;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < QK_K / 16; ++j) {
      scales[j] = fit_symmetric_descent(16, 4, x + 16 * j, L + 16 * j);
      const float a = std::fabs(scales[j]);
      if (a > amax) {
        amax = a;
        max_scale = scales[j];
      }
    }
    std::memset(b.scales, 0, sizeof b.scales);
    if (max_scale != 0.0f) {
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < QK_K / 16; ++j) {
        // 6-bit scale + 32: low 4 bits in nibble j / 8 of scales[j % 8], high 2 bits in bits
        // 2 * (j / 4) of scales[8 + j % 4].
        const int l = clamp_int(static_cast<int8_t>(nearest_int(iscale * scales[j])), -32, 31) + 32;
        if (j < 8)
          b.scales[j] = static_cast<uint8_t>(l & 0xF);
        else
          b.scales[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
        b.scales[j % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
      }
      b.d = fp32_to_fp16(1 / iscale);
    } else {
      b.d = fp32_to_fp16(0.f);
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      const int lo = j < 8 ? b.scales[j] & 0xF : b.scales[j - 8] >> 4;
      const int sc = (lo | (((b.scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
      const float d = fp16_to_fp32(b.d) * sc;
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii)
        L[16 * j + ii] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
    }
    // High bit of element j into bit j / 32 of hmask[j % 32]; the low 2 bits as in Q2_K.
    std::memset(b.hmask, 0, sizeof b.hmask);
    uint8_t low[QK_K];
    for (int j = 0; j < QK_K; ++j) {
      low[j] = static_cast<uint8_t>(L[j] & 3);
      if (L[j] > 3) b.hmask[j % 32] |= static_cast<uint8_t>(1u << (j / 32));
    }
    pack_2bit(low, b.qs);
    store_block(dst, i, b);
  }
}

void quantize_q4_k(const float* src, void* dst, int64_t n) {
  const AsymSearch search{-1.f, 0.1f, 20, false};
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float* x = src + i * QK_K;
    block_q4_K b;
    uint8_t L[QK_K];
    fit_q45_k(x, 15, search, b.scales, &b.d, &b.dmin, L);
    for (int c = 0; c < QK_K / 64; ++c)
      for (int l = 0; l < 32; ++l)
        b.qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + l + 32] << 4));
    store_block(dst, i, b);
  }
}

void quantize_q5_k(const float* src, void* dst, int64_t n) {
  const AsymSearch search{-0.5f, 0.1f, 15, false};
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float* x = src + i * QK_K;
    block_q5_K b;
    uint8_t L[QK_K];
    fit_q45_k(x, 31, search, b.scales, &b.d, &b.dmin, L);
    std::memset(b.qh, 0, sizeof b.qh);
    for (int c = 0; c < QK_K / 64; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int l1 = L[64 * c + l], l2 = L[64 * c + l + 32];
        if (l1 > 15) b.qh[l] |= static_cast<uint8_t>(1u << (2 * c));
        if (l2 > 15) b.qh[l] |= static_cast<uint8_t>(1u << (2 * c + 1));
        b.qs[32 * c + l] = static_cast<uint8_t>((l1 & 0xF) | ((l2 & 0xF) << 4));
      }
    }
    store_block(dst, i, b);
  }
}

void quantize_q6_k(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float* x = src + i * QK_K;
    block_q6_K b;
    int8_t L[QK_K];
    float scales[QK_K / 16];
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < QK_K / 16; ++ib) {
      scales[ib] = fit_symmetric_searched(16, 32, x + 16 * ib, L + 16 * ib);
      const float a = std::fabs(scales[ib]);
      if (a > max_abs_scale) {
        max_abs_scale = a;
        max_scale = scales[ib];
      }
    }
    std::memset(&b, 0, sizeof b);
    if (max_abs_scale < kGroupMaxEps) {  // an all-zero block
      b.d = fp32_to_fp16(0.f);
      store_block(dst, i, b);
      continue;
    }
    const float iscale = -128.f / max_scale;
    b.d = fp32_to_fp16(1 / iscale);
    for (int ib = 0; ib < QK_K / 16; ++ib) {
      const int s = nearest_int(iscale * scales[ib]);
      b.scales[ib] = static_cast<int8_t>(s > 127 ? 127 : s);
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      const float d = fp16_to_fp32(b.d) * b.scales[j];
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii)
        L[16 * j + ii] = static_cast<int8_t>(clamp_int(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
    }
    // Low 4 bits: elements 128h + l (+64) in the nibbles of ql[64h + l], elements 128h + 32 + l
    // (+64) in ql[64h + 32 + l]; the top 2 bits of elements 128h + 32k + l in bits 2k of qh[32h + l].
    for (int h = 0; h < QK_K / 128; ++h) {
      const int8_t* Lh = L + 128 * h;
      uint8_t* ql = b.ql + 64 * h;
      uint8_t* qh = b.qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) |
                                     ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
      }
    }
    store_block(dst, i, b);
  }
}

// GGML's quantize_row_q8_K_ref: scale from the signed value of largest magnitude, iscale =
// -127 / max, q = min(127, nearest_int(iscale * x)) (round half to even), d = 1 / iscale (a
// float, not fp16), bsums = sums of 16.
void quantize_q8_k(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float* x = src + i * QK_K;
    block_q8_K b;
    std::memset(&b, 0, sizeof b);
    float max = 0, amax = 0;
    for (int j = 0; j < QK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax != 0.0f) {
      const float iscale = -127.f / max;
      for (int j = 0; j < QK_K; ++j) {
        const int v = nearest_int(iscale * x[j]);
        b.qs[j] = static_cast<int8_t>(v > 127 ? 127 : (v < -128 ? -128 : v));
      }
      for (int j = 0; j < QK_K / 16; ++j) {
        int sum = 0;
        for (int l = 0; l < 16; ++l) sum += b.qs[16 * j + l];
        b.bsums[j] = static_cast<int16_t>(sum);
      }
      b.d = 1 / iscale;
    }
    store_block(dst, i, b);
  }
}

}  // namespace kestrel::quants
