// IEEE half and bfloat16 <-> float conversions (portable scalar; round to nearest even).
#pragma once
#include <cstdint>
#include <cstring>

namespace kestrel {

inline float fp32_from_bits(uint32_t w) { float f; std::memcpy(&f, &w, 4); return f; }
inline uint32_t fp32_to_bits(float f) { uint32_t w; std::memcpy(&w, &f, 4); return w; }

inline float fp16_to_fp32(uint16_t h) {
  // Exact for every half value, subnormals included (the classic exponent-rebias trick).
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const uint32_t exp_offset = 0xE0u << 23;
  const float exp_scale = fp32_from_bits(0x7800000u);
  const float normalized = fp32_from_bits((two_w >> 4) + exp_offset) * exp_scale;
  const uint32_t magic_mask = 126u << 23;
  const float magic_bias = 0.5f;
  const float denormalized = fp32_from_bits((two_w >> 17) | magic_mask) - magic_bias;
  const uint32_t denormalized_cutoff = 1u << 27;
  const uint32_t result =
      sign | (two_w < denormalized_cutoff ? fp32_to_bits(denormalized) : fp32_to_bits(normalized));
  return fp32_from_bits(result);
}

inline uint16_t fp32_to_fp16(float f) {
  const float scale_to_inf = fp32_from_bits(0x77800000u);
  const float scale_to_zero = fp32_from_bits(0x08800000u);
  float base = (f < 0 ? -f : f) * scale_to_inf * scale_to_zero;
  const uint32_t w = fp32_to_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = fp32_from_bits((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = fp32_to_bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

inline float bf16_to_fp32(uint16_t h) { return fp32_from_bits(static_cast<uint32_t>(h) << 16); }

inline uint16_t fp32_to_bf16(float f) {
  uint32_t u = fp32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64);  // quiet NaN
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

// Round a float through half precision (what llama.cpp does to activations before F16 dots).
inline float round_fp16(float f) { return fp16_to_fp32(fp32_to_fp16(f)); }

}  // namespace kestrel
