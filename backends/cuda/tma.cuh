// Hopper's tensor memory accelerator (TMA) and the transaction barriers it signals (sm_90):
//   TmaMap                 a 2-D tensor map (CUtensorMap under nvcc), made on the host by
//                          encode_tma_2d (tma.cu; the driver's cuTensorMapEncodeTiled)
//   tma_load_2d            cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes
//   mbarrier_init / mbarrier_arrive_expect_tx / mbarrier_wait
//                          mbarrier.init / arrive.expect_tx / try_wait.parity (shared::cta, b64)
//   fence_mbarrier_init    fence.mbarrier_init.release.cluster (the barriers' init, before TMA
//                          signals them)
//
// Facts from the PTX ISA and the CUDA driver API: a box of box[1] rows of box[0] elements,
// starting at element coordinates (c0, c1), is copied from global memory to shared memory, rows
// of the box one after the other; elements outside the tensor are written as zeros and still
// count toward the transaction bytes (the whole box). With the 128-byte swizzle (the box's rows
// exactly 128 bytes, the destination 1024-byte aligned) the 16-byte chunk j of box row r lands
// at chunk j ^ (r % 8) of that row: bits 4-6 of the shared address XORed with bits 7-9. A
// barrier's phase completes when its pending arrivals reach zero and its expected transaction
// bytes have all arrived; try_wait.parity(p) is true once the phase of parity p has completed.
//
// Under KESTREL_CUDA_EMULATE the copy is done at issue, by the issuing thread, and signals the
// barrier at once. Fibers switch only at barriers, so a wait that is not complete when it is
// reached would never complete: the emulator makes that the launch's error. Kernels therefore
// issue a stage's copy before the block barrier after which its consumers wait for it (the
// usual producer-ahead pipeline does).
#pragma once
#include <cstdint>

#include "backends/cuda/common.cuh"

#ifndef KESTREL_CUDA_EMULATE
#include <cuda.h>
#endif

#if defined(__CUDA_ARCH__) && !defined(KESTREL_CUDA_EMULATE) && __CUDA_ARCH__ >= 900
#define KS_HAVE_TMA 1
#endif

namespace kestrel::cuda {

#ifdef KESTREL_CUDA_EMULATE
#define __grid_constant__
struct alignas(64) TmaMap {
  const uint8_t* base = nullptr;
  uint32_t elem_bytes = 0;
  uint64_t dims[2] = {0, 0};  // elements: inner, rows
  uint64_t row_bytes = 0;     // stride between rows
  uint32_t box[2] = {0, 0};
  bool swizzle128 = false;
};
#else
using TmaMap = CUtensorMap;
#endif

// A 2-D map of `rows` rows of `inner` 16-bit values (F16 or BF16), row_bytes apart, read in boxes
// of box_rows rows of box_inner values; swizzle128: the 128-byte swizzle (box_inner * 2 == 128).
// base and row_bytes must be multiples of 16 (checked).
Status encode_tma_2d(TmaMap* map, const void* base, DType type, int64_t inner, int64_t rows, int64_t row_bytes,
                     int box_inner, int box_rows, bool swizzle128);

#ifdef KESTREL_CUDA_EMULATE
namespace emu {
// The barrier's state in its 64-bit word: bit 63 the completed-phase parity, bits 32-62 the
// transaction bytes still expected, bits 16-31 the arrival count, bits 0-15 the arrivals pending.
inline void mbar_complete_if_done(uint64_t* bar) {
  const uint64_t v = *bar;
  if ((v & 0xFFFF) != 0 || ((v >> 32) & 0x7FFFFFFF) != 0) return;
  const uint64_t count = (v >> 16) & 0xFFFF;
  *bar = ((v ^ (uint64_t{1} << 63)) & (uint64_t{1} << 63)) | count << 16 | count;
}
// The shared-memory address of box element (row r, byte b of the row) under the 128-byte swizzle.
inline uint8_t* swizzled(uint8_t* dst, uint32_t r, uint32_t b, uint32_t row_bytes, bool swz) {
  uint8_t* p = dst + static_cast<uint64_t>(r) * row_bytes + b;
  if (!swz) return p;
  if (reinterpret_cast<uintptr_t>(dst) % 1024 != 0) throw std::runtime_error("TMA: a 128-byte swizzled box needs a 1024-byte aligned destination");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return reinterpret_cast<uint8_t*>(a ^ (((a >> 7) & 7) << 4));
}
}  // namespace emu
#endif

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
#ifdef KESTREL_CUDA_EMULATE
  *bar = uint64_t{count} << 16 | count;
#elif defined(KS_HAVE_TMA)
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar))), "r"(count)
               : "memory");
#endif
}

__device__ __forceinline__ void fence_mbarrier_init() {
#if defined(KS_HAVE_TMA)
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// One arrival, announcing `bytes` of transactions (the copies it is about to issue).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#ifdef KESTREL_CUDA_EMULATE
  const uint64_t tx = ((*bar >> 32) & 0x7FFFFFFF) + bytes, pending = (*bar & 0xFFFF) - 1;
  *bar = (*bar & (uint64_t{1} << 63)) | tx << 32 | (*bar & 0xFFFF0000u) | pending;
  emu::mbar_complete_if_done(bar);
#elif defined(KS_HAVE_TMA)
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(bar))),
               "r"(bytes)
               : "memory");
#endif
}

// Waits until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
#ifdef KESTREL_CUDA_EMULATE
  if ((*bar >> 63) == parity)
    throw std::runtime_error("mbarrier wait on a phase that has not completed (its copies were not issued before): state " + std::to_string(*bar) + " parity " + std::to_string(parity));
#elif defined(KS_HAVE_TMA)
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  }
#endif
}

// Box (c0, c1) of the map (c0 in elements along the row, c1 in rows) into dst (shared memory),
// signalling bar with its bytes.
__device__ __forceinline__ void tma_load_2d(void* dst, const TmaMap* map, int32_t c0, int32_t c1, uint64_t* bar) {
#ifdef KESTREL_CUDA_EMULATE
  const uint32_t eb = map->elem_bytes, row = map->box[0] * eb;
  for (uint32_t r = 0; r < map->box[1]; ++r)
    for (uint32_t e = 0; e < map->box[0]; ++e) {
      const int64_t x = int64_t{c0} + e, y = int64_t{c1} + r;
      const bool in = x >= 0 && y >= 0 && static_cast<uint64_t>(x) < map->dims[0] && static_cast<uint64_t>(y) < map->dims[1];
      uint8_t* d = emu::swizzled(static_cast<uint8_t*>(dst), r, e * eb, row, map->swizzle128);
      for (uint32_t i = 0; i < eb; ++i) d[i] = in ? map->base[static_cast<uint64_t>(y) * map->row_bytes + static_cast<uint64_t>(x) * eb + i] : 0;
    }
  const uint64_t tx = ((*bar >> 32) & 0x7FFFFFFF) - uint64_t{row} * map->box[1];
  *bar = (*bar & ~(uint64_t{0x7FFFFFFF} << 32)) | (tx & 0x7FFFFFFF) << 32;
  emu::mbar_complete_if_done(bar);
#elif defined(KS_HAVE_TMA)
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          static_cast<uint32_t>(__cvta_generic_to_shared(dst))),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar)))
      : "memory");
#else
  __trap();  // not sm_90: the host never picks a TMA kernel there
#endif
}

}  // namespace kestrel::cuda
