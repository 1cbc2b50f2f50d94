// Quantized block layouts, bit-compatible with GGML's (ggml-common.h), so GGUF tensor bytes can
// be read as arrays of these structs. Half-precision fields are stored as raw IEEE-754 binary16
// bits (uint16_t); decode them with fp16_to_fp32 from core/fp16.h. Every layout assumes a
// little-endian host, as GGUF files do.
//
// Element order inside a block (the part that is easy to get wrong):
//  - 32-value types with nibbles (q4_0, q4_1, q5_0, q5_1, iq4_nl, mxfp4): byte j holds element j
//    in its low nibble and element j+16 in its high nibble. For q5_x, bit j of qh is the 5th bit
//    of element j (j < 32).
//  - K-quants (256 values, sub-blocks of 16 or 32) are documented at each struct below.
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>

namespace kestrel {

static_assert(std::endian::native == std::endian::little, "GGUF block layouts are little-endian");

constexpr int QK4_0 = 32;
constexpr int QK4_1 = 32;
constexpr int QK5_0 = 32;
constexpr int QK5_1 = 32;
constexpr int QK8_0 = 32;
constexpr int QK8_1 = 32;
constexpr int QK4_NL = 32;
constexpr int QK_MXFP4 = 32;
constexpr int QK_FP8 = 128;
constexpr int QK_NVFP4 = 64;
constexpr int QK_NVFP4_SUB = 16;  // values per UE4M3 scale
constexpr int QK_K = 256;        // values per K-quant super-block
constexpr int K_SCALE_SIZE = 12;  // bytes of packed 6-bit scales+mins in q4_K / q5_K

// value = (q - 8) * d, q in [0, 15]
struct block_q4_0 {
  uint16_t d;
  uint8_t qs[QK4_0 / 2];
};
// value = q * d + m, q in [0, 15]
struct block_q4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[QK4_1 / 2];
};
// value = (q - 16) * d, q in [0, 31]: low 4 bits in qs, 5th bit in qh (a little-endian uint32)
struct block_q5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[QK5_0 / 2];
};
// value = q * d + m, q in [0, 31]
struct block_q5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[QK5_1 / 2];
};
// value = q * d
struct block_q8_0 {
  uint16_t d;
  int8_t qs[QK8_0];
};
// value = q * d; s = d * sum(q) (used by q4_1/q5_1 dot products)
struct block_q8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[QK8_1];
};

// Q2_K: 16 sub-blocks of 16. scales[i] = scale (low nibble) | min (high nibble) of sub-block i.
// value = d * scale * q - dmin * min, q in [0, 3]. Element e: half h = e / 128, within it
// r = e % 128, shift = 2 * (r / 32), byte qs[32 * h + r % 32]; sub-block = e / 16.
struct block_q2_K {
  uint8_t scales[QK_K / 16];
  uint8_t qs[QK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
// Q3_K: 16 sub-blocks of 16 with signed 6-bit scales (stored +32): low 4 bits of scale i are
// nibble (i / 8) of scales[i % 8]; high 2 bits are bits 2*(i / 4).. of scales[8 + i % 4].
// value = d * (scale - 32) * (q - (hmask bit set ? 0 : 4)), low 2 bits of q as in Q2_K; the
// high bit of element e is bit (e / 32) of hmask[e % 32].
struct block_q3_K {
  uint8_t hmask[QK_K / 8];
  uint8_t qs[QK_K / 4];
  uint8_t scales[12];
  uint16_t d;
};
// Q4_K: 8 sub-blocks of 32, 6-bit scale and min each (see get_scale_min_k4).
// value = d * scale * q - dmin * min, q in [0, 15]. Element e: chunk c = e / 64 uses bytes
// qs[32c .. 32c+31]: low nibbles are elements 64c..64c+31, high nibbles 64c+32..64c+63.
struct block_q4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qs[QK_K / 2];
};
// Q5_K: Q4_K plus a 5th bit: bit (e / 32) of qh[e % 32] is the high bit of element e.
struct block_q5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[K_SCALE_SIZE];
  uint8_t qh[QK_K / 8];
  uint8_t qs[QK_K / 2];
};
// Q6_K: 16 sub-blocks of 16 with int8 scales. value = d * scale * (q - 32), q in [0, 63].
// Element e: half h = e / 128, r = e % 128, quarter k = r / 32, l = r % 32:
// low 4 bits = nibble (k / 2) of ql[64h + 32(k % 2) + l], high 2 bits = bits 2k.. of qh[32h + l].
struct block_q6_K {
  uint8_t ql[QK_K / 2];
  uint8_t qh[QK_K / 4];
  int8_t scales[QK_K / 16];
  uint16_t d;
};
// Q8_K (activations only): float scale, bsums[i] = sum of qs[16i .. 16i+15].
struct block_q8_K {
  float d;
  int8_t qs[QK_K];
  int16_t bsums[QK_K / 16];
};
// value = kvalues_iq4nl[q] * d
struct block_iq4_nl {
  uint16_t d;
  uint8_t qs[QK4_NL / 2];
};
// OCP MX FP4: e is an E8M0 exponent, each nibble an E2M1 value.
// value = kvalues_mxfp4[q] * e8m0_to_fp32_half(e) (= E2M1 value * 2^(e - 127)).
struct block_mxfp4 {
  uint8_t e;
  uint8_t qs[QK_MXFP4 / 2];
};

// NVFP4 (GGML type 40): four sub-blocks of 16, each with a UE4M3 scale byte (fp8.h,
// ue4m3_half_bits) and 8 bytes of E2M1 nibbles: byte qs[8 s + j] holds element 16 s + j in its low
// nibble and 16 s + j + 8 in its high nibble. value = kvalues_mxfp4[q] * ue4m3_half(d[s]).
// A file may carry a second, per-tensor scale as a separate "<name>.scale" tensor (ModelOpt's
// weight_scale_2), which llama.cpp multiplies into the matmul's output.
struct block_nvfp4 {
  uint8_t d[QK_NVFP4 / QK_NVFP4_SUB];
  uint8_t qs[QK_NVFP4 / 2];
};

// Kestrel's own FP8 type (no GGML equivalent; docs/LOW_PRECISION.md): 128 OCP E4M3 codes
// (tensor/quants/fp8.h) under one binary32 scale. value = d * e4m3(qs[j]); d = amax / 448 of the
// block.
struct block_fp8 {
  float d;
  uint8_t qs[QK_FP8];
};

static_assert(sizeof(block_q4_0) == 18);
static_assert(sizeof(block_q4_1) == 20);
static_assert(sizeof(block_q5_0) == 22);
static_assert(sizeof(block_q5_1) == 24);
static_assert(sizeof(block_q8_0) == 34);
static_assert(sizeof(block_q8_1) == 36);
static_assert(sizeof(block_q2_K) == 84);
static_assert(sizeof(block_q3_K) == 110);
static_assert(sizeof(block_q4_K) == 144);
static_assert(sizeof(block_q5_K) == 176);
static_assert(sizeof(block_q6_K) == 210);
static_assert(sizeof(block_q8_K) == 292);
static_assert(sizeof(block_iq4_nl) == 18);
static_assert(sizeof(block_mxfp4) == 17);
static_assert(sizeof(block_fp8) == 132);
static_assert(sizeof(block_nvfp4) == 36);

// The IQ4_NL non-linear levels.
inline constexpr int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                             1,    13,   25,  38,  53,  69,  89,  113};
// E2M1 values doubled (so they are integers), as GGML stores them; pair with
// e8m0_to_fp32_half, which is half the E8M0 scale.
inline constexpr int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128), i.e. half of the E8M0 scale 2^(e - 127); exact for every e (e 0 and 1 are
// subnormal floats). GGML gives e = 255 no NaN meaning, and neither do we.
inline float e8m0_to_fp32_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e) - 1) << 23;
  return std::bit_cast<float>(bits);
}

// Unpacks the 6-bit scale and min of sub-block j (0..7) of a q4_K / q5_K block: sub-blocks 0-3
// keep both in the low 6 bits of scales[j] / scales[j+4]; sub-blocks 4-7 keep their low 4 bits in
// the nibbles of scales[j+4] and their top 2 bits in the top bits of scales[j-4] / scales[j].
inline void get_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Block i of a row, copied out with memcpy so callers need not align src.
template <class B>
B load_block(const void* src, int64_t i) {
  B b;
  std::memcpy(&b, static_cast<const uint8_t*>(src) + i * static_cast<int64_t>(sizeof(B)), sizeof(B));
  return b;
}

}  // namespace kestrel
