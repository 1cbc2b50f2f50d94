// Reference dequantization of the K-quants (256-value super-blocks; layouts in quant_blocks.h).
// The quantizers (and Q8_K's) are in quants_k_quantize.cpp.
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

void dequantize_q2_k(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const auto b = load_block<block_q2_K>(src, i);
    const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
    // 16 sub-blocks of 16 values; sub-block s lives in the 2-bit field (s % 8) / 2 of bytes
    // qs[32 * (s / 8) + 16 * (s % 2) ..][16].
    for (int s = 0; s < QK_K / 16; ++s) {
      const float dl = d * (b.scales[s] & 0xF);
      const float ml = dmin * (b.scales[s] >> 4);
      const uint8_t* q = b.qs + 32 * (s / 8) + 16 * (s % 2);
      const int shift = 2 * ((s % 8) / 2);
      for (int l = 0; l < 16; ++l) *dst++ = dl * ((q[l] >> shift) & 3) - ml;
    }
  }
}

void dequantize_q3_k(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const auto b = load_block<block_q3_K>(src, i);
    const float d_all = fp16_to_fp32(b.d);
    for (int s = 0; s < QK_K / 16; ++s) {
      const int lo = (b.scales[s % 8] >> (4 * (s / 8))) & 0xF;
      const int hi = (b.scales[8 + s % 4] >> (2 * (s / 4))) & 3;
      const float dl = d_all * ((lo | (hi << 4)) - 32);
      const int first = 16 * s;  // index of the sub-block's first value
      for (int l = 0; l < 16; ++l) {
        const int e = first + l;
        const int r = e % 128;
        const int low = (b.qs[32 * (e / 128) + r % 32] >> (2 * (r / 32))) & 3;
        const int high = (b.hmask[e % 32] >> (e / 32)) & 1;
        *dst++ = dl * (low - (high ? 0 : 4));
      }
    }
  }
}

void dequantize_q4_k(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const auto b = load_block<block_q4_K>(src, i);
    const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
    for (int c = 0; c < QK_K / 64; ++c) {
      const uint8_t* q = b.qs + 32 * c;
      uint8_t sc, m;
      get_scale_min_k4(2 * c, b.scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      get_scale_min_k4(2 * c + 1, b.scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *dst++ = d1 * (q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *dst++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

void dequantize_q5_k(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const auto b = load_block<block_q5_K>(src, i);
    const float d = fp16_to_fp32(b.d), dmin = fp16_to_fp32(b.dmin);
    for (int c = 0; c < QK_K / 64; ++c) {
      const uint8_t* q = b.qs + 32 * c;
      uint8_t sc, m;
      get_scale_min_k4(2 * c, b.scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      get_scale_min_k4(2 * c + 1, b.scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l)
        *dst++ = d1 * ((q[l] & 0xF) + (((b.qh[l] >> (2 * c)) & 1) << 4)) - m1;
      for (int l = 0; l < 32; ++l)
        *dst++ = d2 * ((q[l] >> 4) + (((b.qh[l] >> (2 * c + 1)) & 1) << 4)) - m2;
    }
  }
}

void dequantize_q6_k(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const auto b = load_block<block_q6_K>(src, i);
    const float d = fp16_to_fp32(b.d);
    for (int h = 0; h < QK_K / 128; ++h, dst += 128) {
      const uint8_t* ql = b.ql + 64 * h;
      const uint8_t* qh = b.qh + 32 * h;
      const int8_t* sc = b.scales + 8 * h;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        dst[l] = d * sc[is + 0] * q1;
        dst[l + 32] = d * sc[is + 2] * q2;
        dst[l + 64] = d * sc[is + 4] * q3;
        dst[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

void dequantize_q8_k(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i, dst += QK_K) {
    const auto b = load_block<block_q8_K>(src, i);
    for (int j = 0; j < QK_K; ++j) dst[j] = b.d * b.qs[j];
  }
}

}  // namespace kestrel::quants
