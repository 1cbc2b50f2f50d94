// Hopper's warpgroup MMA (sm_90a only): wgmma.mma_async with both operands in shared memory, and
// the fences around it. A warpgroup is 4 consecutive warps (128 threads, the first warp's index
// divisible by 4) that issue the instruction together; D stays in registers.
//
//   wgmma_m64n32k16<T>   wgmma.mma_async.sync.aligned.m64n32k16.f32.{f16,bf16}.{f16,bf16}
//   wgmma_m64n32k32_s8   wgmma.mma_async.sync.aligned.m64n32k32.s32.s8.s8
//   wgmma_fence / wgmma_commit / wgmma_wait<N>   wgmma.fence / commit_group / wait_group
//   fence_proxy_async    fence.proxy.async.shared::cta (ordinary stores -> the tensor cores' reads)
//
// Facts from the PTX ISA ("Asynchronous Warpgroup Level Matrix Multiply-Accumulate"):
// - Operands are K-major here (imm-trans 0), without swizzling: "core matrices" of 8 rows x 16
//   bytes (8 x 8 16-bit values, or 8 x 16 8-bit ones), each 128 contiguous bytes, row r at byte
//   16 r. Element (row m, k) of a 16-bit operand is at start + (m % 8) * 16 + (m / 8) * SBO +
//   (k % 8) * 2 + (k / 8) * LBO (8-bit: (k % 16) + (k / 16) * LBO): the leading byte offset LBO
//   steps to the next core matrix along K, the stride byte offset SBO to the next 8 rows
//   (canonical layout ((8,m),(T,2k)):((1T,SBO),(1,LBO)), T = 128 / bits per element).
// - The descriptor (64 bits): start address bits 0-13, LBO bits 16-29, SBO bits 32-45, each
//   (x & 0x3FFFF) >> 4; base offset bits 49-51 (0 without swizzling); swizzle mode bits 62-63
//   (0 none).
// - D (64 x N f32) fragments: warp w of the warpgroup, lane l (g = l / 4, t = l % 4) holds, for
//   each 8 columns j, d[4j + i] = D[16w + g + 8 (i >= 2)][8j + 2t + (i & 1)]: per warp, the m16n8
//   accumulator layout of mma.sync, once per 8 columns. So float acc[4][4] of the mma.sync tiles
//   (common.cuh, kMmaTiles = 4) is exactly the m64n32 fragment.
// - With the 128-byte swizzle (swizzle mode 1; wgmma_operand_sw128), a K-major operand's rows are
//   128 bytes (64 16-bit values) in atoms of 8 rows (1024 bytes, 1024-aligned), SBO the step
//   between atoms and LBO unused: element (m, k) is at start + (m % 8) * 128 + (m / 8) * SBO +
//   k * 2 with bits 4-6 of that shared address XORed with bits 7-9 (the 16-byte chunk index with
//   the row within the atom), as a TMA copy with the 128-byte swizzle stores a box (tma.cuh).
//   The k-steps of a 64-value row are reached by adding 32 bytes per 16 values to the start.
// - Shared memory written with ordinary stores needs fence.proxy.async in the writing threads
//   before the barrier after which wgmma reads it.
//
// Under KESTREL_CUDA_EMULATE each thread computes its own D values from shared memory through the
// descriptor's strides (double sums rounded once, like the mma.sync emulation), at issue: commit
// and wait have nothing left to do. The emulator cannot turn a generic pointer into a shared-window
// address, so an operand carries its pointer beside the descriptor; only the GPU reads the address
// field.
#pragma once
#include <cstdint>

#include "backends/cuda/ptx.cuh"

#if defined(__CUDA_ARCH__) && !defined(KESTREL_CUDA_EMULATE) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KS_HAVE_WGMMA 1
#endif

namespace kestrel::ptx {
#ifdef KESTREL_CUDA_EMULATE
inline namespace emulated {  // as in ptx.cuh
#endif

struct WgmmaOperand {
  const void* smem;  // the emulator's view of the start address
  uint64_t desc;
};

// A K-major operand at `smem` (16-byte aligned), no swizzle, with the strides above in bytes.
__device__ __forceinline__ WgmmaOperand wgmma_operand(const void* smem, uint32_t lbo, uint32_t sbo) {
  uint64_t addr = 0;
#ifndef KESTREL_CUDA_EMULATE
  addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
#endif
  const auto enc = [](uint64_t x) { return (x & 0x3FFFF) >> 4; };
  return {smem, enc(addr) | enc(lbo) << 16 | enc(sbo) << 32};
}
// A K-major operand of 16-bit values in 128-byte swizzled rows (above), `sbo` bytes between
// atoms of 8 rows; smem is an atom's first row plus the k-step's 32-byte offsets.
__device__ __forceinline__ WgmmaOperand wgmma_operand_sw128(const void* smem, uint32_t sbo) {
  WgmmaOperand op = wgmma_operand(smem, 16, sbo);
  op.desc |= uint64_t{1} << 62;
  return op;
}

__device__ __forceinline__ void fence_proxy_async() {  // sm_90 and newer (tcgen05.cuh's too)
#if defined(__CUDA_ARCH__) && !defined(KESTREL_CUDA_EMULATE) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_fence() {
#ifdef KS_HAVE_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#ifdef KS_HAVE_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#ifdef KS_HAVE_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

#ifdef KESTREL_CUDA_EMULATE
namespace emu {
// The address of element (m, k) of a K-major, unswizzled operand of `bytes`-byte elements (a core
// matrix row holds 16 / bytes of them).
inline uintptr_t wgmma_address(const WgmmaOperand& op, unsigned m, unsigned k, unsigned bytes) {
  const uint64_t lbo = ((op.desc >> 16) & 0x3FFF) << 4, sbo = ((op.desc >> 32) & 0x3FFF) << 4;
  if (op.desc >> 62 == 1) {  // the 128-byte swizzle, on the address (the atom 1024-aligned)
    const uintptr_t start = reinterpret_cast<uintptr_t>(op.smem);
    if (((start & ~uintptr_t{127}) % 1024) != 0) throw std::runtime_error("wgmma emulation: a swizzled operand's atom is not 1024-aligned");
    const uintptr_t a = start + (m % 8) * 128 + (m / 8) * sbo + k * bytes;
    return a ^ (((a >> 7) & 7) << 4);
  }
  if (op.desc >> 62 != 0) throw std::runtime_error("wgmma emulation: only unswizzled and 128-byte swizzled operands are modelled");
  const unsigned per_row = 16 / bytes;
  return reinterpret_cast<uintptr_t>(op.smem) + (m % 8) * 16 + (m / 8) * sbo + (k % per_row) * bytes + (k / per_row) * lbo;
}
// Element (m, k) as a float (16-bit values, `bf16` or f16).
inline double wgmma_element(const WgmmaOperand& op, unsigned m, unsigned k, bool bf16) {
  const uint16_t v = load_b16(wgmma_address(op, m, k, 2));
  return bf16 ? bf16_to_f32(v) : f16_to_f32(v);
}
// This thread's (warp w of the warpgroup, lane l) D element i of columns 8j..: (row, column).
inline RowCol wgmma_d(unsigned j, unsigned i) {
  const unsigned lin = static_cast<unsigned>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  const unsigned w = (lin % 128) / 32, lane = lin % 32;
  return {16 * w + lane / 4 + (i >= 2 ? 8 : 0), 8 * j + 2 * (lane % 4) + (i & 1)};
}
// d[j][i] = add(d[j][i], the sum over K of product(row of A, row of B, k)) for this thread's
// fragment of an m64n32 D, the sum in Sum (double, or int64 for exact integers).
template <class Sum, unsigned K, class D, class Product, class Add>
inline void wgmma_emulate(D (&d)[4][4], Product product, Add add) {
  require_full_warp("wgmma.mma_async");
  for (unsigned j = 0; j < 4; ++j)
    for (unsigned i = 0; i < 4; ++i) {
      const RowCol p = wgmma_d(j, i);
      Sum s = 0;
      for (unsigned k = 0; k < K; ++k) s += product(p.row, p.col, k);
      d[j][i] = add(d[j][i], s);
    }
}
}  // namespace emu
#endif

// D (64 x 32 f32, += ) = A (64 x 16, K-major) * B (32 x 16, K-major: B's rows are D's columns).
// Every thread of the warpgroup calls it with the same operands; d is this thread's fragment.
template <bool Bf16>
__device__ __forceinline__ void wgmma_m64n32k16(float (&d)[4][4], const WgmmaOperand& a, const WgmmaOperand& b) {
#if defined(KESTREL_CUDA_EMULATE)
  emu::wgmma_emulate<double, 16>(
      d, [&](unsigned m, unsigned n, unsigned k) { return emu::wgmma_element(a, m, k, Bf16) * emu::wgmma_element(b, n, k, Bf16); },
      [](float acc, double s) { return static_cast<float>(s + static_cast<double>(acc)); });
#elif defined(KS_HAVE_WGMMA)
#define KS_WGMMA_ASM(TYPE)                                                                                                  \
  asm volatile(                                                                                                             \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                                                            \
      "wgmma.mma_async.sync.aligned.m64n32k16.f32." TYPE "." TYPE " "                                                       \
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"             \
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),         \
        "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]),         \
        "+f"(d[3][2]), "+f"(d[3][3])                                                                                       \
      : "l"(a.desc), "l"(b.desc), "r"(1))
  if constexpr (Bf16)
    KS_WGMMA_ASM("bf16");
  else
    KS_WGMMA_ASM("f16");
#undef KS_WGMMA_ASM
#else
  __trap();  // not sm_90a: the host never picks a wgmma kernel there (wgmma_requested)
#endif
}

// D (64 x 32 s32, += ) = A (64 x 32 s8, K-major) * B (32 x 32 s8, K-major): exact integer sums,
// wrapping at 32 bits (no .satfinite). The same fragment as above.
__device__ __forceinline__ void wgmma_m64n32k32_s8(int (&d)[4][4], const WgmmaOperand& a, const WgmmaOperand& b) {
#if defined(KESTREL_CUDA_EMULATE)
  const auto code = [](const WgmmaOperand& op, unsigned m, unsigned k) {
    return static_cast<int64_t>(*reinterpret_cast<const int8_t*>(emu::wgmma_address(op, m, k, 1)));
  };
  emu::wgmma_emulate<int64_t, 32>(
      d, [&](unsigned m, unsigned n, unsigned k) { return code(a, m, k) * code(b, n, k); },
      [](int acc, int64_t s) { return static_cast<int>(static_cast<uint32_t>(static_cast<uint64_t>(s) + static_cast<uint32_t>(acc))); });
#elif defined(KS_HAVE_WGMMA)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k32.s32.s8.s8 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p;\n}\n"
      : "+r"(d[0][0]), "+r"(d[0][1]), "+r"(d[0][2]), "+r"(d[0][3]), "+r"(d[1][0]), "+r"(d[1][1]), "+r"(d[1][2]),
        "+r"(d[1][3]), "+r"(d[2][0]), "+r"(d[2][1]), "+r"(d[2][2]), "+r"(d[2][3]), "+r"(d[3][0]), "+r"(d[3][1]),
        "+r"(d[3][2]), "+r"(d[3][3])
      : "l"(a.desc), "l"(b.desc), "r"(1));
#else
  __trap();  // not sm_90a: the host never picks a wgmma kernel there
#endif
}

#ifdef KESTREL_CUDA_EMULATE
}  // namespace emulated
#endif
}  // namespace kestrel::ptx
