// The inline-PTX wrappers Kestrel's CUDA kernels use for tensor cores and asynchronous copies
// (sm_80 and newer), and the packing helpers for their 16-bit operands:
//   mma_m16n8k16_bf16 / _f16  mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32
//   mma_m16n8k32_s8           mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32
//   mma_m16n8k32_e4m3         mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 (sm_89 and newer)
//   ldmatrix_x4 / _x2 / _x4_trans   ldmatrix.sync.aligned.m8n8.{x4,x2}{,.trans}.shared.b16
//   cp_async_16, cp_async_commit, cp_async_wait<N>   cp.async.cg.shared.global (16 bytes)
// Each has two bodies. Under nvcc: the PTX itself. Under KESTREL_CUDA_EMULATE (host C++ on the
// SIMT emulator, backends/cuda/emu): the same operation computed from the fragment layouts the PTX
// ISA documents, the lanes handing each other their registers through warp exchanges, so that an
// mma or ldmatrix is a warp barrier there as on the GPU (a lane that skips it is a launch error,
// not a hang) and a fragment in the wrong register gives a wrong result.
//
// Fragment layouts, from the PTX ISA ("Warp Level Matrix Multiply-Accumulate Instructions"), for
// lane l: groupID g = l >> 2, threadID_in_group t = l % 4. Elements are packed into 32-bit registers
// lowest bits first: a 16-bit pair holds the lower column (or row, for B) index in bits 0-15.
#pragma once
#include <cstdint>
#include <cstring>

#ifndef KESTREL_CUDA_EMULATE
#include <cuda_fp16.h>
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "backends/cuda/ptx.cuh needs sm_80 or newer (bf16 mma, cp.async)"
#endif
#else
#include <stdexcept>
#include <string>
#include <type_traits>

#include "backends/cuda/emu/cuda_shim.h"
#include "core/fp16.h"
#include "tensor/quants/fp8.h"
#endif

namespace kestrel::ptx {
#ifdef KESTREL_CUDA_EMULATE
// The emulated definitions get names of their own: one program may link this header compiled both
// ways (the unit tests beside an nvcc-built backend), and inline functions of one name would merge.
inline namespace emulated {
#endif

// ---- 16-bit operand packing (host and device) ---------------------------------------------------

__host__ __device__ __forceinline__ uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
__host__ __device__ __forceinline__ float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// bfloat16 is the top half of a float: widening is a shift; narrowing rounds to nearest even
// (a NaN stays a NaN: its payload is made quiet so truncation cannot turn it into an infinity).
__host__ __device__ __forceinline__ float bf16_to_f32(uint16_t h) { return bits_f32(uint32_t{h} << 16); }
__host__ __device__ __forceinline__ uint16_t f32_to_bf16(float f) {
  const uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// IEEE half, round to nearest even.
__host__ __device__ __forceinline__ float f16_to_f32(uint16_t h) {
#ifdef KESTREL_CUDA_EMULATE
  return ::kestrel::fp16_to_fp32(h);
#else
  return __half2float(__ushort_as_half(h));
#endif
}
__host__ __device__ __forceinline__ uint16_t f32_to_f16(float f) {
#ifdef KESTREL_CUDA_EMULATE
  return ::kestrel::fp32_to_fp16(f);
#else
  return __half_as_ushort(__float2half_rn(f));
#endif
}

// Two 16-bit elements in one register: `lo` (the lower index) in bits 0-15.
__host__ __device__ __forceinline__ uint32_t pack_b16x2(uint16_t lo, uint16_t hi) {
  return uint32_t{lo} | (uint32_t{hi} << 16);
}
__host__ __device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  return pack_b16x2(f32_to_bf16(lo), f32_to_bf16(hi));
}
__host__ __device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
  return pack_b16x2(f32_to_f16(lo), f32_to_f16(hi));
}
__host__ __device__ __forceinline__ void unpack_bf16x2(uint32_t r, float& lo, float& hi) {
  lo = bf16_to_f32(static_cast<uint16_t>(r));
  hi = bf16_to_f32(static_cast<uint16_t>(r >> 16));
}
__host__ __device__ __forceinline__ void unpack_f16x2(uint32_t r, float& lo, float& hi) {
  lo = f16_to_f32(static_cast<uint16_t>(r));
  hi = f16_to_f32(static_cast<uint16_t>(r >> 16));
}

#ifdef KESTREL_CUDA_EMULATE
// ---- the emulated bodies ------------------------------------------------------------------------
namespace emu {

// Lane `src`'s value of `mine`; every lane of the warp must call it (a warp barrier).
inline uint64_t from_lane(uint64_t mine, unsigned src) {
  return ::kestrel::cuda_emu::warp_exchange(mine, ::kestrel::cuda_emu::src_idx, src, 32);
}

// .sync.aligned instructions need the whole warp; the emulator would hand a partial warp's lanes
// their own values for the missing ones, so a block whose last warp is short is an error here.
inline void require_full_warp(const char* what) {
  if (::kestrel::cuda_emu::warp_ballot(true) != 0xffffffffu)
    throw std::runtime_error(std::string(what) + " needs all 32 lanes of the warp (a partial warp)");
}

struct RowCol {
  unsigned row, col;
};

// The mma fragments, with E elements per 32-bit register (2 for .f16/.bf16, 4 for .s8) and so
// K = 8 * E. PTX ISA "Matrix Fragments for mma.m16n8k16 with floating point type" (E = 2) and
// "Matrix Fragments for mma.m16n8k32" (integer types, E = 4) give, for element i of lane l:
//   A (16 x K, 4 registers, element i in register i / E):
//     row = g for i % (2E) < E, else g + 8;   col = E*t + i % E, plus K/2 for i >= 2E
//   B (K x 8, 2 registers):  row = E*t + i % E, plus K/2 for i >= E;   col = g
//   C, D (16 x 8, 4 values): row = g for i < 2, else g + 8;   col = 2t + i % 2
// (For E = 2: a0,a1 = (g, 2t..2t+1), a2,a3 = (g+8, ...), a4..a7 the same at column + 8.)
template <unsigned E>
inline RowCol mma_a(unsigned lane, unsigned i) {
  constexpr unsigned K = 8 * E;
  return {(lane >> 2) + (i % (2 * E) < E ? 0 : 8), E * (lane % 4) + i % E + (i >= 2 * E ? K / 2 : 0)};
}
template <unsigned E>
inline RowCol mma_b(unsigned lane, unsigned i) {
  constexpr unsigned K = 8 * E;
  return {E * (lane % 4) + i % E + (i >= E ? K / 2 : 0), lane >> 2};
}
inline RowCol mma_cd(unsigned lane, unsigned i) { return {(lane >> 2) + (i < 2 ? 0 : 8), 2 * (lane % 4) + i % 2}; }

// D = A * B + C for the warp; this lane computes its own four values of D. Acc is float (sums in
// double, rounded once: the GPU's order and rounding of the f32 sum are its own, so compare
// float results with a tolerance) or int (exact, wrapping at 32 bits as .s32 without .satfinite).
// (mma_m16n8_ab: A and B decoded each its own way, and each sum multiplied by scale(row, col)
// before C is added: the block-scaled mma of block_scale.cuh.)
template <unsigned E, class Acc, class DecodeA, class DecodeB, class Scale>
inline void mma_m16n8_ab(Acc d[4], const uint32_t a[4], const uint32_t b[2], const Acc c[4], DecodeA decode_a,
                         DecodeB decode_b, Scale scale) {
  constexpr unsigned K = 8 * E;
  using Sum = std::conditional_t<std::is_same_v<Acc, float>, double, int64_t>;
  require_full_warp("mma.sync");
  const unsigned lane = ::kestrel::cuda_emu::lane_id(), g = lane >> 2, t = lane % 4;
  // This lane's D values are rows g, g+8 and columns 2t, 2t+1 (the C/D layout). Rows g and g+8 of
  // A are held by the four lanes of group g; columns 2t and 2t+1 of B by the lanes of groups 2t and
  // 2t+1. Fetch their registers and place each element by the layout above; `have` checks that
  // this choice of lanes covers what the sums below read.
  Sum A[16][K], B[K][8];
  bool haveA[16][K] = {}, haveB[K][8] = {};
  for (unsigned j = 0; j < 4; ++j) {
    const unsigned src = 4 * g + j;
    const uint64_t r01 = from_lane(a[0] | uint64_t{a[1]} << 32, src);
    const uint64_t r23 = from_lane(a[2] | uint64_t{a[3]} << 32, src);
    const uint32_t reg[4] = {uint32_t(r01), uint32_t(r01 >> 32), uint32_t(r23), uint32_t(r23 >> 32)};
    for (unsigned i = 0; i < 4 * E; ++i) {
      const RowCol p = mma_a<E>(src, i);
      A[p.row][p.col] = decode_a(reg[i / E], i % E);
      haveA[p.row][p.col] = true;
    }
  }
  for (unsigned j = 0; j < 8; ++j) {
    const unsigned src = 4 * (2 * t + j / 4) + j % 4;
    const uint64_t r01 = from_lane(b[0] | uint64_t{b[1]} << 32, src);
    const uint32_t reg[2] = {uint32_t(r01), uint32_t(r01 >> 32)};
    for (unsigned i = 0; i < 2 * E; ++i) {
      const RowCol p = mma_b<E>(src, i);
      B[p.row][p.col] = decode_b(reg[i / E], i % E);
      haveB[p.row][p.col] = true;
    }
  }
  Acc out[4];  // c is read in full before d is written: d may be c
  for (unsigned i = 0; i < 4; ++i) {
    const RowCol p = mma_cd(lane, i);
    Sum s = 0;
    for (unsigned k = 0; k < K; ++k) {
      if (!haveA[p.row][k] || !haveB[k][p.col]) throw std::logic_error("ptx.cuh: mma emulation missed a fragment");
      s += A[p.row][k] * B[k][p.col];
    }
    if constexpr (std::is_same_v<Acc, float>) {
      out[i] = static_cast<float>(s * scale(p.row, p.col) + static_cast<double>(c[i]));
    } else {
      out[i] = static_cast<Acc>(static_cast<uint32_t>(static_cast<uint64_t>(s) + static_cast<uint32_t>(c[i])));
    }
  }
  for (unsigned i = 0; i < 4; ++i) d[i] = out[i];
}
template <unsigned E, class Acc, class Decode>
inline void mma_m16n8(Acc d[4], const uint32_t a[4], const uint32_t b[2], const Acc c[4], Decode decode) {
  mma_m16n8_ab<E>(d, a, b, c, decode, decode, [](unsigned, unsigned) { return 1.0; });
}

// One 16-byte shared-memory row of an ldmatrix matrix, or one cp.async chunk.
struct alignas(16) Bytes16 {
  unsigned char b[16];
};

inline uint16_t load_b16(uintptr_t p) {
  uint16_t v;
  std::memcpy(&v, reinterpret_cast<const void*>(p), 2);
  return v;
}

// PTX ISA "Warp-level matrix load instruction: ldmatrix", .m8n8 .b16: N 8x8 matrices of 16-bit
// elements, each row 16 contiguous bytes; lanes 8i..8i+7 give the addresses of rows 0..7 of matrix
// i (lanes from 8N on give none). Register i of lane l holds matrix i's fragment: elements
// (row g, cols 2t, 2t+1), or with .trans (rows 2t, 2t+1, col g), the lower index in bits 0-15.
template <unsigned N, bool Trans>
inline void ldmatrix(uint32_t r[], const void* row_ptr) {
  require_full_warp("ldmatrix");
  const unsigned lane = ::kestrel::cuda_emu::lane_id(), g = lane >> 2, t = lane % 4;
  // A row is one 16-byte access; the GPU faults on a row address that is not 16-byte aligned.
  if (lane < 8 * N) ::kestrel::cuda_emu::check_aligned(static_cast<const Bytes16*>(row_ptr), "ldmatrix row");
  const uint64_t mine = reinterpret_cast<uintptr_t>(row_ptr);
  uint32_t out[N];
  for (unsigned i = 0; i < N; ++i) {
    if (!Trans) {
      const uintptr_t row = from_lane(mine, 8 * i + g);
      out[i] = pack_b16x2(load_b16(row + 4 * t), load_b16(row + 4 * t + 2));
    } else {
      const uintptr_t row0 = from_lane(mine, 8 * i + 2 * t), row1 = from_lane(mine, 8 * i + 2 * t + 1);
      out[i] = pack_b16x2(load_b16(row0 + 2 * g), load_b16(row1 + 2 * g));
    }
  }
  // Every lane has read before any lane goes on (and may store to those rows), as the warp-wide
  // instruction completes before the next one starts.
  ::kestrel::cuda_emu::sync_warp();
  for (unsigned i = 0; i < N; ++i) r[i] = out[i];
}

}  // namespace emu
#endif  // KESTREL_CUDA_EMULATE

// ---- tensor-core mma ----------------------------------------------------------------------------

// D (16x8 f32) = A (16x16 bf16, row-major fragments) * B (16x8 bf16, column fragments) + C.
// d may be c.
__device__ __forceinline__ void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2],
                                                  const float c[4]) {
#ifndef KESTREL_CUDA_EMULATE
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
#else
  emu::mma_m16n8<2>(d, a, b, c, [](uint32_t reg, unsigned k) -> double {
    return bf16_to_f32(static_cast<uint16_t>(reg >> (16 * k)));
  });
#endif
}

// The same with f16 operands.
__device__ __forceinline__ void mma_m16n8k16_f16(float d[4], const uint32_t a[4], const uint32_t b[2],
                                                 const float c[4]) {
#ifndef KESTREL_CUDA_EMULATE
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
#else
  emu::mma_m16n8<2>(d, a, b, c, [](uint32_t reg, unsigned k) -> double {
    return f16_to_f32(static_cast<uint16_t>(reg >> (16 * k)));
  });
#endif
}

// D (16x8 s32) = A (16x32 s8) * B (32x8 s8) + C, four s8 per register (lowest index in bits 0-7);
// wraps on overflow (no .satfinite). d may be c.
__device__ __forceinline__ void mma_m16n8k32_s8(int d[4], const uint32_t a[4], const uint32_t b[2], const int c[4]) {
#ifndef KESTREL_CUDA_EMULATE
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]), "r"(c[2]),
        "r"(c[3]));
#else
  emu::mma_m16n8<4>(d, a, b, c, [](uint32_t reg, unsigned k) -> int64_t {
    return static_cast<int8_t>(static_cast<uint8_t>(reg >> (8 * k)));
  });
#endif
}

// D (16x8 f32) = A (16x32 e4m3) * B (32x8 e4m3) + C, four FP8 codes per register (lowest index in
// bits 0-7), the same fragment layout as .s8. sm_89 and newer: an older target traps, and the
// host picks another kernel there (fp8_mma_available). d may be c.
__device__ __forceinline__ void mma_m16n8k32_e4m3(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
#ifndef KESTREL_CUDA_EMULATE
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
#else
  __trap();
#endif
#else
  emu::mma_m16n8<4>(d, a, b, c, [](uint32_t reg, unsigned k) -> double {
    return bits_f32(e4m3_to_fp32_bits(static_cast<uint8_t>(reg >> (8 * k))));
  });
#endif
}

// ---- ldmatrix (shared memory -> mma fragments) --------------------------------------------------
// Every lane passes one row address: lane 8i + j the start of row j of matrix i (16 bytes,
// 16-byte aligned, in shared memory). With .x4 over a row-major 16x16 tile, lanes 0-15 pointing at
// rows 0-15 column 0 and lanes 16-31 at rows 0-15 column 8 give exactly an mma A fragment. The
// pointed-to rows must be visible to the warp (a __syncwarp / __syncthreads after the stores:
// that barrier is also what orders the stores before this asm for the compiler).

// Four matrices: r[i] is this lane's fragment of matrix i.
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* smem_row_ptr) {
#ifndef KESTREL_CUDA_EMULATE
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row_ptr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
#else
  emu::ldmatrix<4, false>(r, smem_row_ptr);
#endif
}

// Two matrices: only lanes 0-15 give addresses (the others' are ignored).
__device__ __forceinline__ void ldmatrix_x2(uint32_t r[2], const void* smem_row_ptr) {
#ifndef KESTREL_CUDA_EMULATE
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row_ptr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
#else
  emu::ldmatrix<2, false>(r, smem_row_ptr);
#endif
}

// Four matrices, each transposed: r[i] holds (row 2t, col g) and (row 2t+1, col g) of matrix i as
// stored. Over a row-major K x N tile this gives the mma B fragment (B is "col").
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* smem_row_ptr) {
#ifndef KESTREL_CUDA_EMULATE
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem_row_ptr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
#else
  emu::ldmatrix<4, true>(r, smem_row_ptr);
#endif
}

// ---- cp.async (global -> shared, bypassing the register file) -----------------------------------
// PTX ISA "cp.async", "cp.async.commit_group", "cp.async.wait_group": a thread's copies are
// committed as a group; wait<N> blocks until at most N of its groups are pending. The copied data
// is then visible to this thread only: other threads read it after a __syncthreads (or
// __syncwarp) that follows everyone's wait.

// 16 bytes from global to shared memory; both addresses 16-byte aligned (.cg: cached in L2 only).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
#ifndef KESTREL_CUDA_EMULATE
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(__cvta_generic_to_global(gmem))
               : "memory");
#else
  // Done at once (so commit and wait have nothing to do); a misaligned address is the launch's
  // error, as the GPU faults on it.
  ::kestrel::cuda_emu::check_aligned(static_cast<const emu::Bytes16*>(gmem), "cp.async global source");
  ::kestrel::cuda_emu::check_aligned(static_cast<const emu::Bytes16*>(smem), "cp.async shared destination");
  std::memcpy(smem, gmem, 16);
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#ifndef KESTREL_CUDA_EMULATE
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most N of this thread's committed groups are still in flight (N = 0: all done).
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  static_assert(N >= 0, "cp_async_wait<N>: N is a count of groups");
#ifndef KESTREL_CUDA_EMULATE
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

#ifdef KESTREL_CUDA_EMULATE
}  // namespace emulated
#endif
}  // namespace kestrel::ptx
