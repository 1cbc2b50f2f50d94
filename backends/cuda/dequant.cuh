// Device-side decoding of every weight type the CUDA backend reads (runtime/tensor/quants/
// quant_blocks.h documents each layout element by element; these follow that text). A row is
// decoded in chunks of 32 values: chunk c of a row holds elements 32c .. 32c + 31 (a K-quant
// super-block is 8 chunks), so a kernel can give each lane whole chunks of any type.
#pragma once
#include <type_traits>

#include "backends/cuda/common.cuh"
#include "backends/cuda/kernels.h"
#include "tensor/dtype.h"
#include "tensor/quants/fp8.h"
#include "tensor/quants/quant_blocks.h"

namespace kestrel::cuda {

__device__ __forceinline__ float e8m0_half(uint8_t e) {  // 2^(e - 128), exact (quant_blocks.h)
  return bits_to_float(e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e) - 1) << 23);
}
__device__ __forceinline__ int iq4nl_level(int q) {
  constexpr int8_t v[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  return v[q];
}
__device__ __forceinline__ int mxfp4_level(int q) {  // E2M1 doubled
  constexpr int8_t v[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  return v[q];
}
// Nibble of element j of a 32-value block with packed nibbles: byte j % 16, low half first.
__device__ __forceinline__ int nibble32(const uint8_t* qs, int j) { return (qs[j & 15] >> ((j >> 4) * 4)) & 15; }
__device__ __forceinline__ uint32_t load_u32(const uint8_t* p) {  // unaligned little-endian
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// The 6-bit scale and min of sub-block `sub` (0..7) of a Q4_K / Q5_K super-block's 12 scale bytes.
__device__ __forceinline__ void k4_scale_min(const uint8_t* scales, int sub, int& sc, int& m) {
  if (sub < 4) {
    sc = scales[sub] & 63, m = scales[sub + 4] & 63;
  } else {
    sc = (scales[sub + 4] & 0xF) | ((scales[sub - 4] >> 6) << 4);
    m = (scales[sub + 4] >> 4) | ((scales[sub] >> 6) << 4);
  }
}

__device__ __forceinline__ float e4m3_to_float(uint8_t c) { return bits_to_float(e4m3_to_fp32_bits(c)); }
// The four E4M3 codes of w (lowest byte first) as floats, exactly, in about 3 operations each: a
// code's sign, exponent and mantissa placed at the top of a binary32 make the value times 2^-120
// (a subnormal code becomes a subnormal float, exactly), and one multiply restores it. A word
// holding a NaN code (S.1111.111, which that placement would read as 240) takes fp8.h's decoding.
__device__ __forceinline__ void e4m3x4_to_float(uint32_t w, float out[4]) {
  if ((((w & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u) != 0) {
    for (int i = 0; i < 4; ++i) out[i] = e4m3_to_float(static_cast<uint8_t>(w >> (8 * i)));
    return;
  }
  for (int i = 0; i < 4; ++i) {
    const uint32_t c = w >> (8 * i);
    out[i] = bits_to_float(((c & 0x7Fu) << 20) | ((c & 0x80u) << 24)) * 0x1p120f;
  }
}
// One 128-value FP8 block of x as quantize_fp8_e4m3 makes it: the codes into q[128]; returns d.
__device__ __forceinline__ float fp8_quantize_block(const float* x, uint8_t* q) {
  float amax = 0;
  for (int j = 0; j < 128; ++j) amax = fmaxf(amax, fabsf(x[j]));
  const float id = amax != 0.0f ? kFp8E4M3Max / amax : 0.0f;
  for (int j = 0; j < 128; ++j) q[j] = e4m3_from_fp32_bits(float_to_bits(x[j] * id));
  return amax / kFp8E4M3Max;
}

// Decodes chunk c (32 values) of a row of type T into out[32].
template <DType T>
__device__ __forceinline__ void dequant_chunk(const uint8_t* row, int64_t c, float* out) {
  if constexpr (T == DType::Q4_0) {
    const auto* b = reinterpret_cast<const block_q4_0*>(row) + c;
    const float d = half_to_float(b->d);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(nibble32(b->qs, j) - 8) * d;
  } else if constexpr (T == DType::Q4_1) {
    const auto* b = reinterpret_cast<const block_q4_1*>(row) + c;
    const float d = half_to_float(b->d), m = half_to_float(b->m);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(nibble32(b->qs, j)) * d + m;
  } else if constexpr (T == DType::Q5_0) {
    const auto* b = reinterpret_cast<const block_q5_0*>(row) + c;
    const float d = half_to_float(b->d);
    const uint32_t qh = load_u32(b->qh);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>((nibble32(b->qs, j) | (static_cast<int>((qh >> j) & 1) << 4)) - 16) * d;
  } else if constexpr (T == DType::Q5_1) {
    const auto* b = reinterpret_cast<const block_q5_1*>(row) + c;
    const float d = half_to_float(b->d), m = half_to_float(b->m);
    const uint32_t qh = load_u32(b->qh);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(nibble32(b->qs, j) | (static_cast<int>((qh >> j) & 1) << 4)) * d + m;
  } else if constexpr (T == DType::Q8_0) {
    const auto* b = reinterpret_cast<const block_q8_0*>(row) + c;
    const float d = half_to_float(b->d);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(b->qs[j]) * d;
  } else if constexpr (T == DType::Q8_1) {
    const auto* b = reinterpret_cast<const block_q8_1*>(row) + c;
    const float d = half_to_float(b->d);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(b->qs[j]) * d;
  } else if constexpr (T == DType::IQ4_NL) {
    const auto* b = reinterpret_cast<const block_iq4_nl*>(row) + c;
    const float d = half_to_float(b->d);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(iq4nl_level(nibble32(b->qs, j))) * d;
  } else if constexpr (T == DType::MXFP4) {
    const auto* b = reinterpret_cast<const block_mxfp4*>(row) + c;
    const float d = e8m0_half(b->e);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(mxfp4_level(nibble32(b->qs, j))) * d;
  } else if constexpr (T == DType::NVFP4) {
    // Chunk c is half a block: sub-blocks 2 (c % 2) and 2 (c % 2) + 1.
    const auto* b = reinterpret_cast<const block_nvfp4*>(row) + c / 2;
    for (int h = 0; h < 2; ++h) {
      const int s = 2 * static_cast<int>(c % 2) + h;
      const float d = bits_to_float(ue4m3_half_bits(b->d[s]));
      for (int j = 0; j < 8; ++j) {
        const uint8_t q = b->qs[8 * s + j];
        out[16 * h + j] = static_cast<float>(mxfp4_level(q & 15)) * d;
        out[16 * h + j + 8] = static_cast<float>(mxfp4_level(q >> 4)) * d;
      }
    }
  } else if constexpr (T == DType::FP8_E4M3) {
    const auto* b = reinterpret_cast<const block_fp8*>(row) + c / 4;  // 4 chunks per block
    const uint8_t* q = b->qs + (c % 4) * 32;
    for (int j = 0; j < 32; j += 4) {
      float v[4];
      e4m3x4_to_float(load_u32(q + j), v);
      for (int i = 0; i < 4; ++i) out[j + i] = b->d * v[i];
    }
  } else if constexpr (T == DType::Q2_K) {
    const auto* b = reinterpret_cast<const block_q2_K*>(row) + c / 8;
    const float d = half_to_float(b->d), dmin = half_to_float(b->dmin);
    for (int j = 0; j < 32; ++j) {
      const int e = static_cast<int>(c % 8) * 32 + j, h = e / 128, r = e % 128;
      const int q = (b->qs[32 * h + r % 32] >> (2 * (r / 32))) & 3;
      const int sc = b->scales[e / 16];
      out[j] = d * static_cast<float>(sc & 15) * static_cast<float>(q) - dmin * static_cast<float>(sc >> 4);
    }
  } else if constexpr (T == DType::Q3_K) {
    const auto* b = reinterpret_cast<const block_q3_K*>(row) + c / 8;
    const float d = half_to_float(b->d);
    for (int j = 0; j < 32; ++j) {
      const int e = static_cast<int>(c % 8) * 32 + j, h = e / 128, r = e % 128, i = e / 16;
      const int q = (b->qs[32 * h + r % 32] >> (2 * (r / 32))) & 3;
      const int s = ((b->scales[i % 8] >> (4 * (i / 8))) & 15) | (((b->scales[8 + i % 4] >> (2 * (i / 4))) & 3) << 4);
      const int hbit = (b->hmask[e % 32] >> (e / 32)) & 1;
      out[j] = d * static_cast<float>(s - 32) * static_cast<float>(q - (hbit ? 0 : 4));
    }
  } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    using B = std::conditional_t<T == DType::Q4_K, block_q4_K, block_q5_K>;
    const auto* b = reinterpret_cast<const B*>(row) + c / 8;
    const int sub = static_cast<int>(c % 8);  // a chunk is one sub-block of 32
    int sc, m;
    k4_scale_min(b->scales, sub, sc, m);
    const float d = half_to_float(b->d) * static_cast<float>(sc), mn = half_to_float(b->dmin) * static_cast<float>(m);
    const uint8_t* qs = b->qs + 32 * (sub / 2);
    for (int j = 0; j < 32; ++j) {
      int q = (qs[j] >> (4 * (sub % 2))) & 15;
      if constexpr (T == DType::Q5_K) q |= ((b->qh[j] >> sub) & 1) << 4;
      out[j] = d * static_cast<float>(q) - mn;
    }
  } else if constexpr (T == DType::Q6_K) {
    const auto* b = reinterpret_cast<const block_q6_K*>(row) + c / 8;
    const float d = half_to_float(b->d);
    for (int j = 0; j < 32; ++j) {
      const int e = static_cast<int>(c % 8) * 32 + j, h = e / 128, r = e % 128, k = r / 32, l = r % 32;
      const int lo = (b->ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 15;
      const int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
      out[j] = d * static_cast<float>(b->scales[e / 16]) * static_cast<float>((lo | (hi << 4)) - 32);
    }
  } else if constexpr (T == DType::Q8_K) {
    const auto* b = reinterpret_cast<const block_q8_K*>(row) + c / 8;
    for (int j = 0; j < 32; ++j) out[j] = b->d * static_cast<float>(b->qs[(c % 8) * 32 + j]);
  }
}

// Element k of a row of a plain (one value per element) type.
template <DType T>
__device__ __forceinline__ float load_elem(const uint8_t* row, int64_t k) {
  if constexpr (T == DType::F32) return reinterpret_cast<const float*>(row)[k];
  else if constexpr (T == DType::F16) return half_to_float(reinterpret_cast<const uint16_t*>(row)[k]);
  else return bf16_to_float(reinterpret_cast<const uint16_t*>(row)[k]);
}
template <DType T>
constexpr bool is_plain() { return T == DType::F32 || T == DType::F16 || T == DType::BF16; }

// Calls f.template operator()<T>() for the weight type t; false when the backend cannot read t.
template <class F>
bool with_weight_type(DType t, F&& f) {
  switch (t) {
#define KS_CASE(T) \
  case DType::T: f.template operator()<DType::T>(); return true;
    KS_CASE(F32) KS_CASE(F16) KS_CASE(BF16) KS_CASE(Q4_0) KS_CASE(Q4_1) KS_CASE(Q5_0) KS_CASE(Q5_1)
    KS_CASE(Q8_0) KS_CASE(Q8_1) KS_CASE(Q2_K) KS_CASE(Q3_K) KS_CASE(Q4_K) KS_CASE(Q5_K) KS_CASE(Q6_K)
    KS_CASE(Q8_K) KS_CASE(IQ4_NL) KS_CASE(MXFP4) KS_CASE(NVFP4) KS_CASE(FP8_E4M3)
#undef KS_CASE
    default: return false;
  }
}

// Chunk c of a row as dequant_chunk decodes it, the row in the file layout or, with split_nb > 0
// (Q4_0, Q8_0 only), in the split-rows layout (kernels.h), its block put back together first.
template <DType T>
__device__ __forceinline__ void dequant_row_chunk(const uint8_t* row, int64_t c, int64_t split_nb, float* out) {
  if constexpr (T == DType::Q4_0 || T == DType::Q8_0) {
    if (split_nb > 0) {  // file order: the fp16 scale, then the codes
      alignas(4) uint8_t one[sizeof(block_q8_0)];
      reinterpret_cast<uint16_t*>(one)[0] = reinterpret_cast<const uint16_t*>(row + kSplitCodeBytes<T> * split_nb)[c];
      for (int j = 0; j < kSplitCodeBytes<T>; ++j) one[2 + j] = row[kSplitCodeBytes<T> * c + j];
      dequant_chunk<T>(one, 0, out);
      return;
    }
  }
  dequant_chunk<T>(row, c, out);
}

}  // namespace kestrel::cuda
