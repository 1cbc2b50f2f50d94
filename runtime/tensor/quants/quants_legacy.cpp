// Reference (de)quantization of the plain float types, the 32-value block types (q4_0 .. q8_1,
// iq4_nl, mxfp4) and nvfp4. The quantizers repeat GGML's reference arithmetic step by step (same
// operation order, same rounding) so their output is byte-identical to what llama-quantize writes.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "tensor/quants/quant_blocks.h"
#include "tensor/quants/quants.h"
#include "core/fp16.h"
#include "tensor/quants/fp8.h"

// Byte-exact rounding needs every multiply and add rounded on its own: no fused multiply-add
// (GCC already keeps them apart in ISO C++ mode; clang contracts by default).
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace kestrel::quants {
namespace {

// Blocks are copied in and out with memcpy so callers need not align src/dst.
template <class B>
B load_block(const void* src, int64_t i) {
  B b;
  std::memcpy(&b, static_cast<const uint8_t*>(src) + i * static_cast<int64_t>(sizeof(B)), sizeof(B));
  return b;
}
template <class B>
void store_block(void* dst, int64_t i, const B& b) {
  std::memcpy(static_cast<uint8_t*>(dst) + i * static_cast<int64_t>(sizeof(B)), &b, sizeof(B));
}

// C's float -> integer conversion (truncation toward zero), made total: NaN gives 0 and values
// outside int's range saturate instead of being undefined. Finite in-range inputs (everything
// GGML's reference quantizers produce from finite data) convert exactly as a C cast does.
int trunc_to_int(float v) {
  if (!(v == v)) return 0;
  if (v >= 2147483520.0f) return 2147483647;
  if (v <= -2147483648.0f) return -2147483647 - 1;
  return static_cast<int>(v);
}
// (int8_t)(v) as GGML writes it, for the values its quantizers can produce (|v| < 128).
int trunc_to_i8(float v) {
  const int i = trunc_to_int(v);
  return i < -128 ? -128 : (i > 127 ? 127 : i);
}
// roundf (half away from zero) into int8, saturating.
int8_t round_to_i8(float v) { return static_cast<int8_t>(trunc_to_i8(std::roundf(v))); }

// Largest magnitude of the block and the signed value that has it (first one on ties).
void signed_absmax(const float* x, int n, float* amax, float* max) {
  *amax = 0.0f;
  *max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (*amax < std::fabs(x[j])) {
      *amax = std::fabs(x[j]);
      *max = x[j];
    }
  }
}

void min_max(const float* x, int n, float* mn, float* mx) {
  *mn = FLT_MAX;
  *mx = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < *mn) *mn = x[j];
    if (x[j] > *mx) *mx = x[j];
  }
}

// IQ4_NL: index of the level nearest to x (levels ascending; ties go up), as GGML's
// best_index_int8.
int best_index_iq4nl(float x) {
  const int8_t* v = kvalues_iq4nl;
  if (x <= v[0]) return 0;
  if (x >= v[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < v[mid]) hi = mid; else lo = mid;
  }
  return x - v[hi - 1] < v[hi] - x ? hi - 1 : hi;
}

// MXFP4: the level (doubled E2M1 value times half-scale d) nearest to x; the first one on ties.
int best_index_mxfp4(float x, float d) {
  int best = 0;
  float best_err = std::fabs(kvalues_mxfp4[0] * d - x);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(kvalues_mxfp4[i] * d - x);
    if (err < best_err) {
      best = i;
      best_err = err;
    }
  }
  return best;
}

}  // namespace

// ---- plain types --------------------------------------------------------------------------------

void dequantize_f32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void quantize_f32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void dequantize_f16(const void* src, float* dst, int64_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    dst[i] = fp16_to_fp32(h);
  }
}
void quantize_f16(const float* src, void* dst, int64_t n) {
  uint8_t* p = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_fp16(src[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

void dequantize_bf16(const void* src, float* dst, int64_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    dst[i] = bf16_to_fp32(h);
  }
}
void quantize_bf16(const float* src, void* dst, int64_t n) {
  uint8_t* p = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_bf16(src[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

// ---- dequantization -----------------------------------------------------------------------------

void dequantize_q4_0(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK4_0; ++i, dst += QK4_0) {
    const auto b = load_block<block_q4_0>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      dst[j] = ((b.qs[j] & 0x0F) - 8) * d;
      dst[j + QK4_0 / 2] = ((b.qs[j] >> 4) - 8) * d;
    }
  }
}

void dequantize_q4_1(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK4_1; ++i, dst += QK4_1) {
    const auto b = load_block<block_q4_1>(src, i);
    const float d = fp16_to_fp32(b.d), m = fp16_to_fp32(b.m);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      dst[j] = (b.qs[j] & 0x0F) * d + m;
      dst[j + QK4_1 / 2] = (b.qs[j] >> 4) * d + m;
    }
  }
}

void dequantize_q5_0(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK5_0; ++i, dst += QK5_0) {
    const auto b = load_block<block_q5_0>(src, i);
    const float d = fp16_to_fp32(b.d);
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
      dst[j] = (((b.qs[j] & 0x0F) | (h0 << 4)) - 16) * d;
      dst[j + QK5_0 / 2] = (((b.qs[j] >> 4) | (h1 << 4)) - 16) * d;
    }
  }
}

void dequantize_q5_1(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK5_1; ++i, dst += QK5_1) {
    const auto b = load_block<block_q5_1>(src, i);
    const float d = fp16_to_fp32(b.d), m = fp16_to_fp32(b.m);
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const int h0 = (qh >> j) & 1, h1 = (qh >> (j + 16)) & 1;
      dst[j] = ((b.qs[j] & 0x0F) | (h0 << 4)) * d + m;
      dst[j + QK5_1 / 2] = ((b.qs[j] >> 4) | (h1 << 4)) * d + m;
    }
  }
}

void dequantize_q8_0(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK8_0; ++i, dst += QK8_0) {
    const auto b = load_block<block_q8_0>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < QK8_0; ++j) dst[j] = b.qs[j] * d;
  }
}

void dequantize_q8_1(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK8_1; ++i, dst += QK8_1) {
    const auto b = load_block<block_q8_1>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < QK8_1; ++j) dst[j] = b.qs[j] * d;
  }
}

void dequantize_iq4_nl(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK4_NL; ++i, dst += QK4_NL) {
    const auto b = load_block<block_iq4_nl>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int j = 0; j < QK4_NL / 2; ++j) {
      dst[j] = d * kvalues_iq4nl[b.qs[j] & 0x0F];
      dst[j + QK4_NL / 2] = d * kvalues_iq4nl[b.qs[j] >> 4];
    }
  }
}

void dequantize_mxfp4(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK_MXFP4; ++i, dst += QK_MXFP4) {
    const auto b = load_block<block_mxfp4>(src, i);
    const float d = e8m0_to_fp32_half(b.e);
    for (int j = 0; j < QK_MXFP4 / 2; ++j) {
      dst[j] = kvalues_mxfp4[b.qs[j] & 0x0F] * d;
      dst[j + QK_MXFP4 / 2] = kvalues_mxfp4[b.qs[j] >> 4] * d;
    }
  }
}

void dequantize_nvfp4(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK_NVFP4; ++i, dst += QK_NVFP4) {
    const auto b = load_block<block_nvfp4>(src, i);
    for (int s = 0; s < QK_NVFP4 / QK_NVFP4_SUB; ++s) {
      const float d = fp32_from_bits(ue4m3_half_bits(b.d[s]));
      for (int j = 0; j < QK_NVFP4_SUB / 2; ++j) {
        const uint8_t q = b.qs[s * (QK_NVFP4_SUB / 2) + j];
        dst[s * QK_NVFP4_SUB + j] = kvalues_mxfp4[q & 0x0F] * d;
        dst[s * QK_NVFP4_SUB + j + QK_NVFP4_SUB / 2] = kvalues_mxfp4[q >> 4] * d;
      }
    }
  }
}

// ---- quantization -------------------------------------------------------------------------------

// d = max / -8 where max is the signed value of largest magnitude, so that value lands exactly on
// q = 0; q = min(15, trunc(x / d + 8.5)).
void quantize_q4_0(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK4_0; ++i) {
    const float* x = src + i * QK4_0;
    float amax, max;
    signed_absmax(x, QK4_0, &amax, &max);
    const float d = max / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    block_q4_0 b;
    b.d = fp32_to_fp16(d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      const int q0 = std::min(15, trunc_to_i8(x[j] * id + 8.5f));
      const int q1 = std::min(15, trunc_to_i8(x[j + QK4_0 / 2] * id + 8.5f));
      b.qs[j] = static_cast<uint8_t>((q0 & 0x0F) | (q1 << 4));
    }
    store_block(dst, i, b);
  }
}

// d = (max - min) / 15, m = min; q = min(15, trunc((x - min) / d + 0.5)).
void quantize_q4_1(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK4_1; ++i) {
    const float* x = src + i * QK4_1;
    float mn, mx;
    min_max(x, QK4_1, &mn, &mx);
    const float d = (mx - mn) / 15;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    block_q4_1 b;
    b.d = fp32_to_fp16(d);
    b.m = fp32_to_fp16(mn);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      const int q0 = std::min(15, trunc_to_i8((x[j] - mn) * id + 0.5f));
      const int q1 = std::min(15, trunc_to_i8((x[j + QK4_1 / 2] - mn) * id + 0.5f));
      b.qs[j] = static_cast<uint8_t>((q0 & 0x0F) | (q1 << 4));
    }
    store_block(dst, i, b);
  }
}

// d = max / -16; q = min(31, trunc(x / d + 16.5)).
void quantize_q5_0(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK5_0; ++i) {
    const float* x = src + i * QK5_0;
    float amax, max;
    signed_absmax(x, QK5_0, &amax, &max);
    const float d = max / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    block_q5_0 b;
    b.d = fp32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const int q0 = std::min(31, trunc_to_i8(x[j] * id + 16.5f)) & 31;
      const int q1 = std::min(31, trunc_to_i8(x[j + QK5_0 / 2] * id + 16.5f)) & 31;
      b.qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << j;
      qh |= static_cast<uint32_t>(q1 >> 4) << (j + QK5_0 / 2);
    }
    std::memcpy(b.qh, &qh, 4);
    store_block(dst, i, b);
  }
}

// d = (max - min) / 31, m = min; q = trunc((x - min) / d + 0.5) (GGML clamps nothing here; the
// largest value gives exactly 31).
void quantize_q5_1(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK5_1; ++i) {
    const float* x = src + i * QK5_1;
    float mn, mx;
    min_max(x, QK5_1, &mn, &mx);
    const float d = (mx - mn) / 31;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    block_q5_1 b;
    b.d = fp32_to_fp16(d);
    b.m = fp32_to_fp16(mn);
    uint32_t qh = 0;
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const int q0 = trunc_to_int((x[j] - mn) * id + 0.5f) & 0xFF;
      const int q1 = trunc_to_int((x[j + QK5_1 / 2] - mn) * id + 0.5f) & 0xFF;
      b.qs[j] = static_cast<uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
      qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + QK5_1 / 2);
    }
    std::memcpy(b.qh, &qh, 4);
    store_block(dst, i, b);
  }
}

// d = amax / 127; q = roundf(x / d) (half away from zero).
void quantize_q8_0(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK8_0; ++i) {
    const float* x = src + i * QK8_0;
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    block_q8_0 b;
    b.d = fp32_to_fp16(d);
    for (int j = 0; j < QK8_0; ++j) b.qs[j] = round_to_i8(x[j] * id);
    store_block(dst, i, b);
  }
}

// As q8_0, plus s = fp16(sum(q) * d) with the unrounded float d.
void quantize_q8_1(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK8_1; ++i) {
    const float* x = src + i * QK8_1;
    float amax = 0.0f;
    for (int j = 0; j < QK8_1; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    block_q8_1 b;
    b.d = fp32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < QK8_1; ++j) {
      b.qs[j] = round_to_i8(x[j] * id);
      sum += b.qs[j];
    }
    b.s = fp32_to_fp16(static_cast<float>(sum) * d);
    store_block(dst, i, b);
  }
}

// llama-quantize's IQ4_NL path without an importance matrix (GGML quantize_iq4_nl: the search
// over 15 candidate scales, then a final re-assignment), not quantize_row_iq4_nl_ref's
// single-pass variant: this is what makes our output match the files llama.cpp writes.
void quantize_iq4_nl(const float* src, void* dst, int64_t n) {
  constexpr int ntry = 7;
  const int8_t* values = kvalues_iq4nl;
  for (int64_t i = 0; i < n / QK4_NL; ++i) {
    const float* x = src + i * QK4_NL;
    uint8_t L[QK4_NL];
    float weight[QK4_NL];
    for (int j = 0; j < QK4_NL; ++j) weight[j] = x[j] * x[j];
    float amax, max;
    signed_absmax(x, QK4_NL, &amax, &max);
    float scale = 0.0f;
    if (amax >= 1e-15f) {
      float d = -max / values[0];
      float id = 1 / d;
      float sumqx = 0, sumq2 = 0;
      for (int j = 0; j < QK4_NL; ++j) {
        const int l = best_index_iq4nl(id * x[j]);
        const float q = values[l];
        sumqx += weight[j] * q * x[j];
        sumq2 += weight[j] * q * q;
      }
      d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
      float best = d * sumqx;
      // Candidate inverse scales (values[0] + t) / max: note these are negative, mapping max
      // towards the -127 end, which the search may prefer.
      for (int itry = -ntry; itry <= ntry; ++itry) {
        id = (itry + values[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < QK4_NL; ++j) {
          const int l = best_index_iq4nl(id * x[j]);
          const float q = values[l];
          sumqx += weight[j] * q * x[j];
          sumq2 += weight[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
          d = sumqx / sumq2;
          best = d * sumqx;
        }
      }
      scale = d;
    }
    // Re-assign every value with the final scale (GGML does this even for an all-zero block,
    // where every index becomes 8, the level nearest 0).
    const float is = scale != 0.0f ? 1 / scale : 0.0f;
    for (int j = 0; j < QK4_NL; ++j) L[j] = static_cast<uint8_t>(best_index_iq4nl(is * x[j]));
    block_iq4_nl b;
    b.d = fp32_to_fp16(scale);
    for (int j = 0; j < QK4_NL / 2; ++j)
      b.qs[j] = static_cast<uint8_t>(L[j] | (L[j + QK4_NL / 2] << 4));
    store_block(dst, i, b);
  }
}

// GGML's quantize_row_mxfp4_ref: shared exponent e = floor(log2(amax)) - 2 + 127 (so amax lands
// in the top E2M1 binade [4, 8) of the doubled table), each value to its nearest level.
void quantize_mxfp4(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK_MXFP4; ++i) {
    const float* x = src + i * QK_MXFP4;
    float amax = 0.0f;
    for (int j = 0; j < QK_MXFP4; ++j)
      if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    int e = 0;
    if (amax > 0.0f) {
      // GGML uses log2f (not the exact exponent): keep it, values just below a power of two
      // can round up to it. Clamped so huge/tiny/inf inputs cannot overflow the byte.
      const float le = std::floor(std::log2(amax)) - 2 + 127;
      e = le < 0 ? 0 : (le > 254 ? 254 : static_cast<int>(le));
    }
    const float d = e8m0_to_fp32_half(static_cast<uint8_t>(e));
    block_mxfp4 b;
    b.e = static_cast<uint8_t>(e);
    for (int j = 0; j < QK_MXFP4 / 2; ++j) {
      const int q0 = best_index_mxfp4(x[j], d);
      const int q1 = best_index_mxfp4(x[j + QK_MXFP4 / 2], d);
      b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
    store_block(dst, i, b);
  }
}

// GGML's ggml_fp32_to_ue4m3: positive x (else 0) clamped to 448; below 2^-6 the subnormal step
// 2^-9 with x * 512 + 0.5 truncated (at most 7); otherwise the top 3 mantissa bits rounded half up
// on the fourth, saturating at code 0x7E.
static uint8_t ue4m3_from_fp32(float x) {
  if (!(x > 0.0f)) return 0;
  x = std::min(x, 448.0f);
  const uint32_t bits = fp32_to_bits(x);
  int e = static_cast<int>((bits >> 23) & 0xFF) - 127 + 7;
  if (e <= 0) {
    const int m = std::min(static_cast<int>(x * 512.0f + 0.5f), 7);
    return m < 1 ? 0 : static_cast<uint8_t>(m);
  }
  if (e >= 15) return 0x7E;
  int m = static_cast<int>((bits >> 20) & 7) + static_cast<int>((bits >> 19) & 1);
  if (m > 7) {
    m = 0;
    if (++e >= 15) return 0x7E;
  }
  return static_cast<uint8_t>((e << 3) | m);
}

void quantize_nvfp4(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK_NVFP4; ++i) {
    block_nvfp4 b;
    for (int s = 0; s < QK_NVFP4 / QK_NVFP4_SUB; ++s) {
      const float* x = src + i * QK_NVFP4 + s * QK_NVFP4_SUB;
      float amax = 0.0f;
      for (int j = 0; j < QK_NVFP4_SUB; ++j) amax = std::max(amax, std::fabs(x[j]));  // NaN never wins
      b.d[s] = ue4m3_from_fp32(amax / 6.0f);
      const float d = fp32_from_bits(ue4m3_half_bits(b.d[s]));
      for (int j = 0; j < QK_NVFP4_SUB / 2; ++j) {
        const int q0 = best_index_mxfp4(x[j], d), q1 = best_index_mxfp4(x[j + QK_NVFP4_SUB / 2], d);
        b.qs[s * (QK_NVFP4_SUB / 2) + j] = static_cast<uint8_t>(q0 | (q1 << 4));
      }
    }
    store_block(dst, i, b);
  }
}

}  // namespace kestrel::quants
