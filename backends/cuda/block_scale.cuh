// Blackwell's block-scaled warp MMA (sm_120 family: RTX 50xx, DGX Spark; built for sm_120f):
//   mma_mxf4_e4m3   mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X
//                   .f32.e2m1.e4m3.f32.ue8m0
// D (16 x 8 f32) = (scale_A . A) (16 x 32 E2M1) x (scale_B . B) (32 x 8 E4M3) + C, one UE8M0 scale
// (2^(s - 127)) per row of A and per column of B over the instruction's 32 values of K: MXFP4
// weights times MXFP8 activations, their OCP block of 32 exactly one instruction's K.
//
// Facts from the PTX ISA: with .kind::mxf8f6f4 each E2M1 element sits in an 8-bit container, in its
// middle 4 bits (code << 2); A and B then have the 8-bit m16n8k32 fragments of ptx.cuh (E = 4). The
// scale operands are .b32 registers of every lane with selectors {byte-id, thread-id}. Where the
// selected bytes live (not drawn in the ISA for this shape; as measured on sm_120 hardware and
// published): with thread-id 0, row m of A takes byte byte-id of lane 4 (m % 8) + m / 8, column
// n of B byte byte-id of lane 4 n. The kernel puts row scales in lanes l % 4 < 2 (row l / 4 +
// 8 (l % 4)) and column scales in lanes l % 4 == 0 (column l / 4), byte 0; the other lanes'
// registers are not read.
//
// Under KESTREL_CUDA_EMULATE the emulator computes it from those layouts: each sum in double, times
// the two scales (powers of two: exact), rounded once. Only that placement of the scales is not
// from the ISA's text; a GPU of the family checks it (the op test).
#pragma once
#include <cstdint>

#include "backends/cuda/ptx.cuh"

#if defined(__CUDA_ARCH__) && !defined(KESTREL_CUDA_EMULATE) &&                                                     \
    ((defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ == 1200) || defined(__CUDA_ARCH_FEAT_SM120_ALL))
#define KS_HAVE_BLOCK_SCALE_MMA 1
#endif

namespace kestrel::ptx {
#ifdef KESTREL_CUDA_EMULATE
inline namespace emulated {  // as in ptx.cuh
#endif

// The lane whose scale register holds (byte 0) the scale of A's row m, and of B's column n.
__host__ __device__ __forceinline__ unsigned mx_scale_lane_a(unsigned m) { return 4 * (m % 8) + m / 8; }
__host__ __device__ __forceinline__ unsigned mx_scale_lane_b(unsigned n) { return 4 * n; }

#ifdef KESTREL_CUDA_EMULATE
namespace emu {
// An E2M1 code (4 bits: sign, 2 exponent bits, 1 mantissa bit) as a double.
inline double e2m1_value(unsigned code) {
  constexpr double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (code & 8 ? -1 : 1) * mag[code & 7];
}
}  // namespace emu
#endif

// d = the block-scaled product + c (d may be c); sfa, sfb: this lane's scale registers.
__device__ __forceinline__ void mma_mxf4_e4m3(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4],
                                              uint32_t sfa, uint32_t sfb) {
#if defined(KESTREL_CUDA_EMULATE)
  double sa[16], sb[8];
  for (unsigned m = 0; m < 16; ++m)
    sa[m] = std::ldexp(1.0, static_cast<int>(emu::from_lane(sfa, mx_scale_lane_a(m)) & 0xFF) - 127);
  for (unsigned n = 0; n < 8; ++n)
    sb[n] = std::ldexp(1.0, static_cast<int>(emu::from_lane(sfb, mx_scale_lane_b(n)) & 0xFF) - 127);
  emu::mma_m16n8_ab<4>(
      d, a, b, c, [](uint32_t reg, unsigned k) { return emu::e2m1_value((reg >> (8 * k + 2)) & 0xF); },
      [](uint32_t reg, unsigned k) {
        return static_cast<double>(bits_f32(::kestrel::e4m3_to_fp32_bits(static_cast<uint8_t>(reg >> (8 * k)))));
      },
      [&](unsigned row, unsigned col) { return sa[row] * sb[col]; });
#elif defined(KS_HAVE_BLOCK_SCALE_MMA)
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X.f32.e2m1.e4m3.f32.ue8m0 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13}, %14, {0, 0}, %15, {0, 0};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]),
        "r"(sfa), "r"(sfb));
#else
  __trap();  // not the sm_120 family: the host never picks this kernel there
#endif
}

#ifdef KESTREL_CUDA_EMULATE
}  // namespace emulated
#endif
}  // namespace kestrel::ptx
