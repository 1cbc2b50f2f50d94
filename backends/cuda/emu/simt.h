// The SIMT emulator's runtime: runs a CUDA-style kernel body on the CPU, a grid of blocks one
// block at a time, each block's threads as fibers of one OS thread that switch only at barriers
// (block: __syncthreads; warp: shuffles, votes, __syncwarp). Between two barriers a thread runs
// alone, so what the GPU's threads do concurrently the fibers do in turn, in thread order: a
// missing barrier shows up as a wrong value, deterministically. Barrier misuse (a thread that
// exits while others wait at a __syncthreads, threads waiting at different barriers) ends the
// launch with an error naming the threads, never a hang. Memory is plain host memory, so the
// sanitizers see every out-of-bounds access. cuda_shim.h gives it the CUDA spellings, so the same
// .cu sources compile as host C++ (-DKESTREL_CUDA_EMULATE=ON).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

namespace kestrel::cuda_emu {

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr unsigned count() const { return x * y * z; }
};

// What a running emulated thread sees (threadIdx, blockIdx, ...).
struct ThreadContext {
  dim3 thread_idx, block_idx, block_dim, grid_dim;
  unsigned linear = 0;  // thread index within the block (x fastest)
};
const ThreadContext& current();

// Runs body for every thread of grid x block. dynamic_smem bytes of block-shared memory (0xFF
// bytes at block start: undefined, as on the GPU) are at dynamic_shared(). One launch at a time
// per process. Returns "" or the first error (barrier misuse, an exception
// a thread threw, a block over 1024 threads).
std::string launch(dim3 grid, dim3 block, size_t dynamic_smem, const std::function<void()>& body);

void* dynamic_shared();
// __syncthreads: every thread of the block.
void sync_block();
// A barrier of the calling thread's warp (its existing lanes: a last warp may be partial).
void sync_warp();
// Lanes exchange 64-bit values: each contributes `value` and receives the value of lane
// src_lane(own lane) of its warp (its own when that lane does not exist).
uint64_t warp_exchange(uint64_t value, unsigned (*src_lane)(unsigned lane, unsigned arg, unsigned width),
                       unsigned arg, unsigned width);
// Bit i set when lane i of the caller's warp passed pred != 0.
uint32_t warp_ballot(bool pred);
unsigned lane_id();

// Type-generic shuffles over warp_exchange (any trivially copyable T of up to 8 bytes).
template <class T>
T shuffle(T v, unsigned (*src)(unsigned, unsigned, unsigned), unsigned arg, unsigned width) {
  static_assert(sizeof(T) <= 8, "shuffle: at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = warp_exchange(bits, src, arg, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
unsigned src_xor(unsigned lane, unsigned mask, unsigned width);
unsigned src_down(unsigned lane, unsigned delta, unsigned width);
unsigned src_up(unsigned lane, unsigned delta, unsigned width);
unsigned src_idx(unsigned lane, unsigned idx, unsigned width);

}  // namespace kestrel::cuda_emu
