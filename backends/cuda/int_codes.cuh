// Weight blocks as integer codes, for the integer-dot kernels (gemv_q8.cu for decode, mmq.cu for
// batches). A 32-value chunk of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4, NVFP4 or a K-quant
// (Q2_K .. Q6_K) holds codes c with w = d * c + m, d and m per half of 16 (the scales of Q2_K,
// Q3_K, Q6_K and NVFP4 change every 16). X is quantized once to int8 as the weight type's vec_dot
// type rounds it (Q8_0's blocks of 32 with an fp16 scale, or Q8_K's blocks of 256 with a float
// scale), with the code sums of each 16. A half's dot is then dx * (d * isum + m * sum(qx)) with
// isum an exact integer sum: in double, the reference's double sum of products up to double
// rounding (exactly that for the 32-value-chunk types, whose reference products are exact too).
#pragma once
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/kernels.h"

namespace kestrel::cuda {

// Chunk b (32 values) of column j of X: q[j * K + 32 b ...] int8 codes, d[j * nb + b] its scale
// (a Q8_K scale repeated over its 8 chunks), s[2 (j * nb + b) + h] the code sum of half h.
struct QuantizedX {  // in the stream's scratch
  const int8_t* q;
  const float* d;
  const int32_t* s;
};

// X (F32 [K, M]) quantized into the stream's scratch as `vdt` (Q8_0 or Q8_K) rounds it. With
// extra_bytes, *extra gets that much more scratch (256-byte aligned) behind it, for the caller.
Expected<QuantizedX> quantize_x(const Tensor* x, DType vdt, Stream& s, size_t extra_bytes = 0, void** extra = nullptr);
// Where quantize_x puts X, the key it records, and whether the scratch holds that X already: for
// a kernel that writes X's quantized form itself (the fused norm, norm_rope.cu), which then sets
// s.x_key = key so that the matmuls after it skip quantize_x's launch.
struct XQuantPlan {
  int8_t* q = nullptr;
  float* d = nullptr;
  int32_t* s = nullptr;
  Stream::QuantizedXKey key;
  bool cached = false;
};
Expected<XQuantPlan> plan_quantize_x(const Tensor* x, DType vdt, Stream& s, size_t extra_bytes = 0, void** extra = nullptr);

// One 32-value chunk of X as Q8_0 rounds activations (Q8_1's codes too), a warp per chunk: lane j
// holds element j (v). amax over the chunk, id = 127 / amax, code j rounded half to even into
// q[j], the scale as fp16 into *d, the code sums of each 16 into s2[0..2). The max is exact and
// the sums are integers: the serial loop's bits, whatever the order.
__device__ __forceinline__ void quantize_q8_0_warp(float v, int8_t* q, float* d, int32_t* s2) {
  const unsigned lane = threadIdx.x % 32;
  float amax = fmaxf(0.0f, fabsf(v));  // (a NaN counts as 0, as fmaxf in the serial loop)
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const int8_t c = static_cast<int8_t>(rintf(v * id));
  q[lane] = c;
  int32_t sum = c;
  for (int o = 8; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) *d = round_half(amax / 127.0f);
  if (lane % 16 == 0) s2[lane / 16] = sum;
}
// One 256-value block as GGML's quantize_row_q8_K_ref rounds it, a warp per block: lane j holds
// elements j + 32 i in v[i]. The signed value of largest magnitude (the first of them, as the
// reference's strict > keeps it) sets the scale; codes clamped to [-128, 127] into q[0..256), the
// scale repeated into d8[0..8) (one per 32-value chunk), the code sums of each 16 into s16[0..16).
__device__ __forceinline__ void quantize_q8_K_warp(const float (&v)[8], int8_t* q, float* d8, int32_t* s16) {
  const unsigned lane = threadIdx.x % 32;
  float amax = 0, max = 0;
  int at = 256;
  for (int i = 0; i < 8; ++i)
    if (fabsf(v[i]) > amax) amax = fabsf(v[i]), max = v[i], at = static_cast<int>(lane) + 32 * i;
  for (int o = 16; o > 0; o >>= 1) {
    const float oa = __shfl_xor_sync(0xffffffffu, amax, o), om = __shfl_xor_sync(0xffffffffu, max, o);
    const int oat = __shfl_xor_sync(0xffffffffu, at, o);
    if (oa > amax || (oa == amax && oat < at)) amax = oa, max = om, at = oat;
  }
  const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
  for (int i = 0; i < 8; ++i) {
    const int8_t c = static_cast<int8_t>(fminf(127.0f, fmaxf(-128.0f, rintf(iscale * v[i]))));
    q[lane + 32 * i] = c;
    int32_t sum = c;  // over the 16 lanes of element (lane + 32 i)'s half: sum 2 i + lane / 16
    for (int o = 8; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane % 16 == 0) s16[2 * i + lane / 16] = sum;
  }
  if (lane < 8) d8[lane] = amax != 0.0f ? 1 / iscale : 0.0f;
}
// The same, the block's 256 values read from src.
__device__ __forceinline__ void quantize_q8_K_warp_at(const float* src, int8_t* q, float* d8, int32_t* s16) {
  float v[8];
  for (int i = 0; i < 8; ++i) v[i] = src[threadIdx.x % 32 + 32 * i];
  quantize_q8_K_warp(v, q, d8, s16);
}

// A weight chunk as codes: q[i] packs elements 4i .. 4i + 3 (lowest byte first), and element e
// is d[e / 16] * code + m[e / 16].
struct ChunkCodes {
  int32_t q[8];
  float d[2], m[2];
};

// Four bytes p[0..3] as one int (little-endian), from 2-byte aligned memory (every block here
// starts 2-byte aligned; MXFP4's 17-byte blocks do not, and use byte loads).
__device__ __forceinline__ int32_t load_b2(const uint8_t* p) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<int32_t>(h[0] | (static_cast<uint32_t>(h[1]) << 16));
}
// Packed nibbles q[0..15] (element j in byte j % 16, low half first) as 4-code ints: codes[i]
// holds elements 4i .. 4i + 3 (i < 4 low nibbles, i >= 4 high nibbles), as unsigned bytes.
template <bool kAligned2>
__device__ __forceinline__ void unpack_nibbles(const uint8_t* qs, int32_t* codes) {
  for (int i = 0; i < 4; ++i) {
    const int32_t v = kAligned2 ? load_b2(qs + 4 * i) : static_cast<int32_t>(load_u32(qs + 4 * i));
    codes[i] = v & 0x0F0F0F0F;
    codes[i + 4] = (v >> 4) & 0x0F0F0F0F;
  }
}
// Codes through a 16-entry table of signed levels (IQ4_NL, MXFP4), four per int.
template <class Level>
__device__ __forceinline__ void table_codes(int32_t* codes, Level level) {
  for (int i = 0; i < 8; ++i) {
    uint32_t out = 0;
    for (int b = 0; b < 4; ++b)
      out |= static_cast<uint32_t>(static_cast<uint8_t>(level((codes[i] >> (8 * b)) & 15))) << (8 * b);
    codes[i] = static_cast<int32_t>(out);
  }
}

// Scale and offset shared by both halves.
__device__ __forceinline__ void same_halves(ChunkCodes& k, float d, float m) {
  k.d[0] = k.d[1] = d;
  k.m[0] = k.m[1] = m;
}

// Eight 4-byte words from 16-byte aligned p, in two 16-byte loads.
__device__ __forceinline__ void load_words8(const uint8_t* p, uint32_t* w) {
  const uint4 lo = load_uint4(p), hi = load_uint4(p + 16);
  w[0] = lo.x, w[1] = lo.y, w[2] = lo.z, w[3] = lo.w, w[4] = hi.x, w[5] = hi.y, w[6] = hi.z, w[7] = hi.w;
}

// Chunk c (elements 32c .. 32c + 31) of a row of type T, read as rl says (kernels.h): in the
// split-rows layout, a block's codes come in one or two 16-byte loads; Q4_K and Q5_K rows that
// start 16-byte aligned load theirs 16 bytes at a time too.
template <DType T>
__device__ __forceinline__ void chunk_codes(const uint8_t* row, int64_t c, ChunkCodes& k, const RowLayout& rl = {}) {
  int32_t* codes = k.q;
  if constexpr (T == DType::Q4_0 || T == DType::Q8_0) {
    if (rl.split_nb > 0) {
      const float d = half_to_float(reinterpret_cast<const uint16_t*>(row + rl.split_nb * kSplitCodeBytes<T>)[c]);
      if constexpr (T == DType::Q4_0) {
        const uint4 v = load_uint4(row + 16 * c);
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
        for (int i = 0; i < 4; ++i) {
          codes[i] = static_cast<int32_t>(w[i] & 0x0F0F0F0Fu);
          codes[i + 4] = static_cast<int32_t>((w[i] >> 4) & 0x0F0F0F0Fu);
        }
        same_halves(k, d, -8.0f * d);
      } else {
        uint32_t w[8];
        load_words8(row + 32 * c, w);
        for (int i = 0; i < 8; ++i) codes[i] = static_cast<int32_t>(w[i]);
        same_halves(k, d, 0.0f);
      }
      return;
    }
  }
  if constexpr (T == DType::Q4_0) {
    const auto* b = reinterpret_cast<const block_q4_0*>(row) + c;
    unpack_nibbles<true>(b->qs, codes);
    const float d = half_to_float(b->d);
    same_halves(k, d, -8.0f * d);
  } else if constexpr (T == DType::Q4_1) {
    const auto* b = reinterpret_cast<const block_q4_1*>(row) + c;
    unpack_nibbles<true>(b->qs, codes);
    same_halves(k, half_to_float(b->d), half_to_float(b->m));
  } else if constexpr (T == DType::Q5_0 || T == DType::Q5_1) {
    using B = std::conditional_t<T == DType::Q5_0, block_q5_0, block_q5_1>;
    const auto* b = reinterpret_cast<const B*>(row) + c;
    unpack_nibbles<true>(b->qs, codes);
    const uint32_t qh = static_cast<uint32_t>(load_b2(b->qh));
    for (int i = 0; i < 8; ++i) {  // bit e of qh is the fifth bit of element e
      const uint32_t h = (qh >> (4 * i)) & 15;
      codes[i] |= static_cast<int32_t>(((h & 1) << 4) | ((h & 2) << 11) | ((h & 4) << 18) | ((h & 8) << 25));
    }
    const float d = half_to_float(b->d);
    if constexpr (T == DType::Q5_0) same_halves(k, d, -16.0f * d);
    else same_halves(k, d, half_to_float(b->m));
  } else if constexpr (T == DType::Q8_0) {
    const auto* b = reinterpret_cast<const block_q8_0*>(row) + c;
    const uint8_t* qs = reinterpret_cast<const uint8_t*>(b->qs);
    for (int i = 0; i < 8; ++i) codes[i] = load_b2(qs + 4 * i);
    same_halves(k, half_to_float(b->d), 0.0f);
  } else if constexpr (T == DType::IQ4_NL) {
    const auto* b = reinterpret_cast<const block_iq4_nl*>(row) + c;
    unpack_nibbles<true>(b->qs, codes);
    table_codes(codes, [](int q) { return iq4nl_level(q); });
    same_halves(k, half_to_float(b->d), 0.0f);
  } else if constexpr (T == DType::MXFP4) {
    const auto* b = reinterpret_cast<const block_mxfp4*>(row) + c;
    unpack_nibbles<false>(b->qs, codes);
    table_codes(codes, [](int q) { return mxfp4_level(q); });
    same_halves(k, e8m0_half(b->e), 0.0f);
  } else if constexpr (T == DType::NVFP4) {
    // Half a block: sub-block s = 2 (c % 2) + half, 8 bytes whose low nibbles are its elements
    // 0..7 and high nibbles 8..15; a scale per sub-block, i.e. per half of the chunk.
    const auto* b = reinterpret_cast<const block_nvfp4*>(row) + c / 2;
    for (int half = 0; half < 2; ++half) {
      const int s = 2 * static_cast<int>(c % 2) + half;
      const int32_t lo = load_b2(b->qs + 8 * s), hi = load_b2(b->qs + 8 * s + 4);
      codes[4 * half + 0] = lo & 0x0F0F0F0F, codes[4 * half + 1] = hi & 0x0F0F0F0F;
      codes[4 * half + 2] = (lo >> 4) & 0x0F0F0F0F, codes[4 * half + 3] = (hi >> 4) & 0x0F0F0F0F;
      k.d[half] = bits_to_float(ue4m3_half_bits(b->d[s]));
      k.m[half] = 0.0f;
    }
    table_codes(codes, [](int q) { return mxfp4_level(q); });
  } else if constexpr (T == DType::Q2_K || T == DType::Q3_K) {
    // Elements 32 (c % 8) + j: half hb of the super-block, bit pair p of bytes qs[32 hb + j]; a
    // scale (and for Q2_K a min) per 16. Q3_K's third bit is bit c % 8 of hmask[j]: code q + 4 hbit
    // in 0..7 with w = D (code - 4), D = d (s - 32).
    using B = std::conditional_t<T == DType::Q2_K, block_q2_K, block_q3_K>;
    const auto* b = reinterpret_cast<const B*>(row) + c / 8;
    const int sub = static_cast<int>(c % 8), hb = sub / 4, p = sub % 4;
    for (int i = 0; i < 8; ++i) {
      codes[i] = (load_b2(b->qs + 32 * hb + 4 * i) >> (2 * p)) & 0x03030303;
      if constexpr (T == DType::Q3_K) codes[i] |= ((load_b2(b->hmask + 4 * i) >> sub) & 0x01010101) << 2;
    }
    const float d = half_to_float(b->d);
    for (int half = 0; half < 2; ++half) {
      const int i = 2 * sub + half;  // the 16-value group
      if constexpr (T == DType::Q2_K) {
        k.d[half] = d * static_cast<float>(b->scales[i] & 15);
        k.m[half] = -(half_to_float(b->dmin) * static_cast<float>(b->scales[i] >> 4));
      } else {
        const int sc = ((b->scales[i % 8] >> (4 * (i / 8))) & 15) | (((b->scales[8 + i % 4] >> (2 * (i / 4))) & 3) << 4);
        k.d[half] = d * static_cast<float>(sc - 32);
        k.m[half] = -4.0f * k.d[half];
      }
    }
  } else if constexpr (T == DType::Q4_K || T == DType::Q5_K) {
    // Chunk = sub-block `sub` of the super-block: nibble sub % 2 of bytes qs[32 (sub / 2) ..],
    // 6-bit scale and min (quant_blocks.h); Q5_K's fifth bit is bit `sub` of qh[j].
    using B = std::conditional_t<T == DType::Q4_K, block_q4_K, block_q5_K>;
    const auto* b = reinterpret_cast<const B*>(row) + c / 8;
    const int sub = static_cast<int>(c % 8);
    int sc, mn;
    k4_scale_min(b->scales, sub, sc, mn);
    const uint8_t* qs = b->qs + 32 * (sub / 2);
    if (rl.aligned16) {  // blocks of 144 or 176 bytes, qs (and qh) 16-byte aligned within
      uint32_t q[8], h[8];
      load_words8(qs, q);
      if constexpr (T == DType::Q5_K) load_words8(b->qh, h);
      for (int i = 0; i < 8; ++i) {
        codes[i] = static_cast<int32_t>((q[i] >> (4 * (sub % 2))) & 0x0F0F0F0Fu);
        if constexpr (T == DType::Q5_K) codes[i] |= static_cast<int32_t>(((h[i] >> sub) & 0x01010101u) << 4);
      }
    } else {
      for (int i = 0; i < 8; ++i) {
        codes[i] = (load_b2(qs + 4 * i) >> (4 * (sub % 2))) & 0x0F0F0F0F;
        if constexpr (T == DType::Q5_K) codes[i] |= ((load_b2(b->qh + 4 * i) >> sub) & 0x01010101) << 4;
      }
    }
    same_halves(k, half_to_float(b->d) * static_cast<float>(sc), -(half_to_float(b->dmin) * static_cast<float>(mn)));
  } else if constexpr (T == DType::Q6_K) {
    // Elements 32 (c % 8) + j: half h, quarter q4 of it; low 4 bits from ql, high 2 from qh, the
    // code q - 32 with a signed scale per 16 (q kept in 0..63, the -32 folded into m).
    const auto* b = reinterpret_cast<const block_q6_K*>(row) + c / 8;
    const int e0 = static_cast<int>(c % 8) * 32, h = e0 / 128, q4 = (e0 % 128) / 32;
    const uint8_t* ql = b->ql + 64 * h + 32 * (q4 % 2);
    const uint8_t* qh = b->qh + 32 * h;
    for (int i = 0; i < 8; ++i)
      codes[i] = ((load_b2(ql + 4 * i) >> (4 * (q4 / 2))) & 0x0F0F0F0F) | (((load_b2(qh + 4 * i) >> (2 * q4)) & 0x03030303) << 4);
    const float d = half_to_float(b->d);
    for (int half = 0; half < 2; ++half) {
      k.d[half] = d * static_cast<float>(b->scales[e0 / 16 + half]);
      k.m[half] = -32.0f * k.d[half];
    }
  }
}

template <DType T>
constexpr bool has_codes() {
  return T == DType::Q4_0 || T == DType::Q4_1 || T == DType::Q5_0 || T == DType::Q5_1 || T == DType::Q8_0 ||
         T == DType::IQ4_NL || T == DType::MXFP4 || T == DType::NVFP4 || T == DType::Q2_K || T == DType::Q3_K ||
         T == DType::Q4_K || T == DType::Q5_K || T == DType::Q6_K;
}
// Whether a chunk's halves may have different scales (then an mma over 32 values is split).
template <DType T>
constexpr bool split_halves() {
  return T == DType::Q2_K || T == DType::Q3_K || T == DType::Q6_K || T == DType::NVFP4;
}

// Whether MATMUL or MATMUL_ID node n has the integer-code kernels' types and shape.
bool int_codes_apply(const Node& n);

}  // namespace kestrel::cuda
