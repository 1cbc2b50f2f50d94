// The CUDA spellings over the SIMT emulator (simt.h), for .cu sources compiled as host C++ with
// KESTREL_CUDA_EMULATE: qualifiers, thread and block indices, __shared__ memory, barriers, warp
// shuffles and votes, atomics. Under nvcc none of this is included.
#pragma once
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "backends/cuda/emu/cuda_runtime_emu.h"
#include "backends/cuda/emu/simt.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
// One copy, shared by the fibers (threads) of the block being run: launches are serialized and
// blocks run one at a time, so it is per block as on the GPU. The variables live in one section,
// which launch() fills with 0xFF bytes (NaN for floats, -1 for integers) before every block, as
// undefined as the GPU's: a read before the block wrote it shows.
#define __shared__ static __attribute__((section("ks_emu_shared"), used))
// Dynamic shared memory (extern __shared__ T name[] under nvcc).
#define KS_DYNAMIC_SMEM(T, name) T* name = static_cast<T*>(::kestrel::cuda_emu::dynamic_shared())

#define threadIdx (::kestrel::cuda_emu::current().thread_idx)
#define blockIdx (::kestrel::cuda_emu::current().block_idx)
#define blockDim (::kestrel::cuda_emu::current().block_dim)
#define gridDim (::kestrel::cuda_emu::current().grid_dim)
#define warpSize 32

using ::kestrel::cuda_emu::dim3;

// CUDA's vector types, with the GPU's alignment (a load of one must be aligned to its size).
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};

// CUDA's math functions are global names; the host's float versions are those of <cmath>.
using std::isfinite;
using std::isinf;
using std::isnan;

// Four int8 lanes dotted, plus c (what the dp4a instruction does).
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i)
    c += static_cast<int8_t>(static_cast<uint32_t>(a) >> (8 * i)) * static_cast<int8_t>(static_cast<uint32_t>(b) >> (8 * i));
  return c;
}
inline int __dp4a(unsigned a, unsigned b, int c) { return __dp4a(static_cast<int>(a), static_cast<int>(b), c); }

inline void __syncthreads() { ::kestrel::cuda_emu::sync_block(); }
// Memory is one coherent host memory here: ordering needs nothing.
inline void __threadfence() {}
inline void __syncwarp(unsigned = 0xffffffffu) { ::kestrel::cuda_emu::sync_warp(); }

// The lane mask is taken as "every existing lane of the warp" (what the kernels here pass).
template <class T>
T __shfl_xor_sync(unsigned, T v, int lane_mask, int width = 32) {
  return ::kestrel::cuda_emu::shuffle(v, ::kestrel::cuda_emu::src_xor, static_cast<unsigned>(lane_mask),
                                      static_cast<unsigned>(width));
}
template <class T>
T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
  return ::kestrel::cuda_emu::shuffle(v, ::kestrel::cuda_emu::src_down, delta, static_cast<unsigned>(width));
}
template <class T>
T __shfl_up_sync(unsigned, T v, unsigned delta, int width = 32) {
  return ::kestrel::cuda_emu::shuffle(v, ::kestrel::cuda_emu::src_up, delta, static_cast<unsigned>(width));
}
template <class T>
T __shfl_sync(unsigned, T v, int src_lane, int width = 32) {
  return ::kestrel::cuda_emu::shuffle(v, ::kestrel::cuda_emu::src_idx, static_cast<unsigned>(src_lane),
                                      static_cast<unsigned>(width));
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline unsigned __ballot_sync(unsigned, int pred) { return ::kestrel::cuda_emu::warp_ballot(pred != 0); }
inline int __any_sync(unsigned m, int pred) { return __ballot_sync(m, pred) != 0; }
inline int __all_sync(unsigned, int pred) {
  const unsigned all = ::kestrel::cuda_emu::warp_ballot(true);
  return ::kestrel::cuda_emu::warp_ballot(pred != 0) == all;
}

// Fibers switch only at barriers, so a read-modify-write is atomic as written.
template <class T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <class T>
T atomicMax(T* p, T v) {
  const T old = *p;
  if (v > old) *p = v;
  return old;
}
template <class T>
T atomicExch(T* p, T v) {
  const T old = *p;
  *p = v;
  return old;
}
template <class T>
T atomicCAS(T* p, T compare, T v) {
  const T old = *p;
  if (old == compare) *p = v;
  return old;
}

namespace kestrel::cuda_emu {
// Vector loads and stores (float4, uint2, ...; under nvcc a plain dereference): the GPU faults on
// an address not aligned to the vector's size, so the emulator makes it the launch's error (a
// plain host load would just work and hide the bug).
template <class V>
inline void check_aligned(const V* p, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % alignof(V) != 0)
    throw std::runtime_error(std::string("misaligned ") + std::to_string(alignof(V)) + "-byte vector " + what);
}
template <class V>
V vector_load(const V* p) {
  check_aligned(p, "load");
  return *p;
}
template <class V>
void vector_store(V* p, const V& v) {
  check_aligned(p, "store");
  *p = v;
}

// kernel<<<grid, block, smem>>>(args...) in emulation: "" or the launch's error.
template <class... P, class... A>
std::string launch_kernel(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
  return launch(grid, block, smem, [&] { kernel(args...); });
}
// The same on a stream: recorded with its arguments' values while the stream is capturing.
template <class... P>
std::string launch_kernel_on(cudaStream_t s, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, P... args) {
  if (record_if_capturing(s, [=] { return launch(grid, block, smem, [&] { kernel(args...); }); })) return "";
  return launch(grid, block, smem, [&] { kernel(args...); });
}
}  // namespace kestrel::cuda_emu
