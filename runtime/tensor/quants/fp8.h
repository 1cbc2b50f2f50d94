// OCP FP8 E4M3 ("E4M3FN": bias 7, no infinities, S.1111.111 is NaN, largest finite 448, smallest
// subnormal 2^-9), as Hopper's and Blackwell's tensor cores read it. Conversions work on the IEEE
// binary32 bit pattern with integers only, so the same constexpr code serves the host reference,
// the CUDA kernels (nvcc --expt-relaxed-constexpr) and the SIMT emulator, bit for bit.
#pragma once
#include <cstdint>

namespace kestrel {

inline constexpr float kFp8E4M3Max = 448.0f;

// Round to nearest, ties to even; finite values beyond 448 (and infinities) saturate to ±448, as
// PTX cvt.rn.satfinite.e4m3x2.f32 does; NaN stays NaN.
constexpr uint8_t e4m3_from_fp32_bits(uint32_t u) {
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7F;
  if (a >= 0x43E00000u) return sign | 0x7E;  // >= 448
  if (a < 0x3C800000u) {                     // below 2^-6: subnormal steps of 2^-9
    const uint32_t e = a >> 23;
    if (e == 0) return sign;  // a binary32 subnormal is far below 2^-10
    const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 141 - e;  // a * 2^9 = mant * 2^(e - 127 - 23 + 9)
    if (shift > 25) return sign;
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return sign | static_cast<uint8_t>(q);  // q = 8 is the smallest normal, code 0x08
  }
  const uint32_t r = (a + 0x7FFFFu + ((a >> 20) & 1)) >> 20;  // exponent and 3 mantissa bits
  return sign | static_cast<uint8_t>(r - (120u << 3));         // rebias 127 -> 7
}

// Exact: every E4M3 value is a binary32 value.
constexpr uint32_t e4m3_to_fp32_bits(uint8_t c) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80) << 24;
  const uint32_t e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return sign | 0x7FC00000u;
  if (e == 0) {
    if (m == 0) return sign;
    const uint32_t sh = m >= 4 ? 0 : m >= 2 ? 1 : 2;  // m * 2^-9 = 1.f * 2^(p - 9), p = 2 - sh
    return sign | ((2 - sh - 9 + 127) << 23) | (((m << (sh + 1)) & 7) << 20);
  }
  return sign | ((e + 120) << 23) | (m << 20);
}

// NVFP4's sub-block scale byte (GGML's "UE4M3", ggml_ue4m3_to_fp32), as binary32 bits: bits 6..0
// read as an E4M3 magnitude, bit 7 ignored, then halved (it pairs with the doubled E2M1 levels
// of kvalues_mxfp4). 0x7F (the NaN pattern) reads as 0; 0xFF, which GGML's decoder lets through
// as exponent 15, mantissa 7, reads as 480 / 2.
constexpr uint32_t ue4m3_half_bits(uint8_t x) {
  if (x == 0x7F) return 0;
  if (x == 0xFF) return 0x43700000u;  // 240
  const uint32_t b = e4m3_to_fp32_bits(x & 0x7F);
  return b == 0 ? 0 : b - (1u << 23);  // every nonzero magnitude is a normal float: halve it
}

}  // namespace kestrel
