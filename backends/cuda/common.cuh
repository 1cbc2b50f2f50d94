// What every CUDA kernel file of the backend includes: the CUDA headers (or, in the emulated
// build, the SIMT emulator's spellings of them), the launch wrapper, half/bfloat16 conversions,
// and TensorArg, a tensor as a kernel receives it (by value: pointer, shape, strides).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#ifdef KESTREL_CUDA_EMULATE
#include "backends/cuda/emu/cuda_runtime_emu.h"
#include "backends/cuda/emu/cuda_shim.h"
#include "core/fp16.h"
#else
#include <cuda_fp16.h>
#include <cuda_runtime.h>
// extern __shared__ storage, 16-byte aligned, as T* name.
#define KS_DYNAMIC_SMEM(T, name)                                \
  extern __shared__ __align__(16) unsigned char ks_dyn_smem_[]; \
  T* name = reinterpret_cast<T*>(ks_dyn_smem_)
#endif

#include "core/status.h"
#include "tensor/quants/fp8.h"
#include "tensor/graph.h"

// Unroll the next loop: its trip count is a constant, and it indexes register arrays (a loop left
// rolled would move them to local memory). Nothing under the emulator.
#if defined(__CUDACC__) && !defined(KESTREL_CUDA_EMULATE)
#define KS_UNROLL _Pragma("unroll")
#else
#define KS_UNROLL
#endif

namespace kestrel::cuda {

// kernel<<<grid, block, smem, stream>>>(args...), its error as a Status naming the kernel. In the
// emulated build the launch runs to completion here, on the calling thread (or is recorded, while
// the stream is capturing a graph).
Status launch_result(const char* kernel, cudaError_t err);
Status launch_result(const char* kernel, const std::string& emu_error);
template <class... P, class... A>
Status launch(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
              A... args) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return Status::Ok();  // nothing to do
#ifdef KESTREL_CUDA_EMULATE
  return launch_result(name, ::kestrel::cuda_emu::launch_kernel_on<P...>(stream, kernel, grid, block, smem, static_cast<P>(args)...));
#else
  kernel<<<grid, block, smem, stream>>>(static_cast<P>(args)...);
  return launch_result(name, cudaGetLastError());
#endif
}
#define KS_LAUNCH(kernel, ...) ::kestrel::cuda::launch(#kernel, kernel, __VA_ARGS__)

inline unsigned blocks_for(int64_t n, unsigned per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

// Threads for a block that spreads n items over its threads: a whole number of warps, at most
// `most` (small rows get small blocks: fewer idle threads, and fewer fibers under the emulator).
inline unsigned threads_for(int64_t n, unsigned most) {
  const int64_t warps = (n + 31) / 32;
  return static_cast<unsigned>(32 * std::clamp<int64_t>(warps, 1, most / 32));
}

// IEEE half / bfloat16 bits <-> float, round to nearest even (as the CPU backend's core/fp16.h).
__device__ __forceinline__ float half_to_float(uint16_t h) {
#ifdef KESTREL_CUDA_EMULATE
  return fp16_to_fp32(h);
#else
  return __half2float(__ushort_as_half(h));
#endif
}
__device__ __forceinline__ uint16_t float_to_half(float f) {
#ifdef KESTREL_CUDA_EMULATE
  return fp32_to_fp16(f);
#else
  return __half_as_ushort(__float2half_rn(f));
#endif
}
__device__ __forceinline__ float bits_to_float(uint32_t u) {
#ifdef KESTREL_CUDA_EMULATE
  return fp32_from_bits(u);
#else
  return __uint_as_float(u);
#endif
}
__device__ __forceinline__ uint32_t float_to_bits(float f) {
#ifdef KESTREL_CUDA_EMULATE
  return fp32_to_bits(f);
#else
  return __float_as_uint(f);
#endif
}
__device__ __forceinline__ float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }
__device__ __forceinline__ uint16_t float_to_bf16(float f) {
  const uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64);  // quiet NaN
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}
__device__ __forceinline__ float round_half(float f) { return half_to_float(float_to_half(f)); }
__device__ __forceinline__ float round_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

// Four floats in one 16-byte load (p must be 16-byte aligned: the GPU faults otherwise, and so
// does the emulator).
__device__ __forceinline__ float4 load_float4(const float* p) {
#ifdef KESTREL_CUDA_EMULATE
  return ::kestrel::cuda_emu::vector_load(reinterpret_cast<const float4*>(p));
#else
  return *reinterpret_cast<const float4*>(p);
#endif
}

// A load from L2, past this SM's L1: for data another block of the same launch wrote (after its
// __threadfence and this block's observing it through an atomic).
template <class T>
__device__ __forceinline__ T load_l2(const T* p) {
#ifdef KESTREL_CUDA_EMULATE
  return *p;
#else
  return __ldcg(p);
#endif
}
// Sixteen bytes in one load (p must be 16-byte aligned, as for load_float4).
__device__ __forceinline__ uint4 load_uint4(const void* p) {
#ifdef KESTREL_CUDA_EMULATE
  return ::kestrel::cuda_emu::vector_load(static_cast<const uint4*>(p));
#else
  return *static_cast<const uint4*>(p);
#endif
}

// A tensor as a kernel sees it. Row r counts over dims 1..3 (r = i1 + ne1 * (i2 + ne2 * i3)), as
// the reference kernels' row_of does, so strided views work wherever the reference allows them.
struct TensorArg {
  uint8_t* data = nullptr;
  int64_t ne[4] = {1, 1, 1, 1};
  int64_t nb[4] = {0, 0, 0, 0};

  __device__ __forceinline__ uint8_t* row(int64_t r) const {
    const int64_t i1 = r % ne[1], i2 = (r / ne[1]) % ne[2], i3 = r / (ne[1] * ne[2]);
    return data + i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
  }
  __device__ __forceinline__ uint8_t* row(int64_t i1, int64_t i2, int64_t i3) const {
    return data + i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
  }
  __device__ __forceinline__ float* f32(int64_t r) const { return reinterpret_cast<float*>(row(r)); }
  __device__ __forceinline__ int64_t rows() const { return ne[1] * ne[2] * ne[3]; }
};
TensorArg arg(const Tensor* t);  // an absent (null) tensor gives data == nullptr

// A KV cache's element type as the attention kernels read it: F32, F16, FP8 E4M3 bytes (each
// exactly an f16 value), or a block type, Q8_0 or Q4_0 (a row's values in blocks of 32 with an
// F16 scale, the blocks running across heads); queries and probabilities are rounded to f16 for
// every type but F32.
enum CacheKind : int { kCacheF32 = 0, kCacheF16 = 1, kCacheF8 = 2, kCacheQ8 = 3, kCacheQ4 = 4 };
inline CacheKind cache_kind(DType t) {
  switch (t) {
    case DType::F16: return kCacheF16;
    case DType::F8_E4M3: return kCacheF8;
    case DType::Q8_0: return kCacheQ8;
    case DType::Q4_0: return kCacheQ4;
    default: return kCacheF32;
  }
}
inline bool is_block_cache(DType t) { return t == DType::Q8_0 || t == DType::Q4_0; }
inline bool is_cache_type(DType t) {
  return t == DType::F16 || t == DType::F32 || t == DType::F8_E4M3 || is_block_cache(t);
}
// Value k of cell `cell` of a KV cache tensor of that kind (a view keeps its row stride).
__device__ __forceinline__ float cache_at(const TensorArg& c, int64_t cell, int64_t k, int kind) {
  const uint8_t* row = c.data + cell * c.nb[1];
  if (kind == kCacheF16) return half_to_float(reinterpret_cast<const uint16_t*>(row)[k]);
  if (kind == kCacheF8) return bits_to_float(e4m3_to_fp32_bits(row[k]));
  if (kind == kCacheQ8) {  // 34-byte blocks: the F16 scale, 32 int8 values
    const uint8_t* b = row + k / 32 * 34;
    return half_to_float(*reinterpret_cast<const uint16_t*>(b)) * static_cast<float>(static_cast<int8_t>(b[2 + k % 32]));
  }
  if (kind == kCacheQ4) {  // 18-byte blocks: the F16 scale, byte j holding values j and j + 16
    const uint8_t* b = row + k / 32 * 18;
    const int j = static_cast<int>(k % 32), q = j < 16 ? b[2 + j] & 0xF : b[2 + j - 16] >> 4;
    return half_to_float(*reinterpret_cast<const uint16_t*>(b)) * static_cast<float>(q - 8);
  }
  return reinterpret_cast<const float*>(row)[k];
}
// Value k of a cache row as KV_STORE writes it (F16, F32, or E4M3 rounded to nearest even and
// saturating; the block types are written a block at a time, by kv_store's own kernel).
__device__ __forceinline__ void cache_store(uint8_t* row, int64_t k, float v, int kind) {
  if (kind == kCacheF16) reinterpret_cast<uint16_t*>(row)[k] = float_to_half(v);
  else if (kind == kCacheF8) row[k] = e4m3_from_fp32_bits(float_to_bits(v));
  else reinterpret_cast<float*>(row)[k] = v;
}

// A block-wide reduction over blockDim.x threads (a multiple of 32, at most 1024): every thread
// gets op over all threads' v. `scratch` is 32 values of shared memory the caller owns; the
// first barrier lets a previous reduction finish reading it.
template <class T, class Op>
__device__ __forceinline__ T block_reduce(T v, T* scratch, T identity, Op op) {
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32, n_warps = blockDim.x / 32;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < n_warps ? scratch[lane] : identity;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sums in double: they decide roundings the reference makes (RMS_NORM's scale, attention's
// probabilities rounded to fp16), and float's error would flip some of them.
__device__ __forceinline__ double block_sum(double v, double* scratch) {
  return block_reduce(v, scratch, 0.0, [](double a, double b) { return a + b; });
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  return block_reduce(v, scratch, -INFINITY, [](float a, float b) { return fmaxf(a, b); });
}

// Sums the warp's 32 partials of each of nc <= NC columns: lane j < nc gets column j's total.
// Through shared memory (`part`: 32 * NC values the warp owns; one barrier each way) rather than
// 5 shuffles per column: the same on the GPU for a memory-bound kernel, and a fifth of the
// barriers under the emulator.
template <int NC, class T>
__device__ __forceinline__ T warp_sum_columns(const T* acc, int nc, T* part) {
  const unsigned lane = threadIdx.x % 32;
  for (int j = 0; j < NC; ++j) part[lane * NC + j] = acc[j];
  __syncwarp();
  T s = 0;
  if (static_cast<int>(lane) < nc)
    for (int l = 0; l < 32; ++l) s += part[l * NC + lane];
  __syncwarp();  // part is reused by the warp's next columns
  return s;
}

// The (slot, token) pairs of a MATMUL_ID for weight row n, blockIdx.y striding over them:
// dst[n, i, t] = the warp's sum of row_dot(e, col) + bias[n, e], with e = ids[i, t] (or i) and col
// the X column (i or 0, t); 0 where e is not a valid expert. row_dot(e, col) returns this lane's
// share of W[:, n, e] . X column col; part is the warp's 32 values of scratch (warp_sum_columns).
template <class Acc, class RowDot>
__device__ __forceinline__ void matmul_id_pairs(TensorArg dst, int64_t n_expert, int64_t x_slots, TensorArg ids,
                                                TensorArg bias, int64_t n, Acc* part, RowDot row_dot) {
  const int64_t n_slots = dst.ne[1], n_tokens = dst.ne[2];
  const bool lead = threadIdx.x % 32 == 0;
  for (int64_t p = blockIdx.y; p < n_slots * n_tokens; p += gridDim.y) {
    const int64_t i = p % n_slots, t = p / n_slots;
    const int32_t e = ids.data ? reinterpret_cast<const int32_t*>(ids.row(t))[i] : static_cast<int32_t>(i);
    float* y = reinterpret_cast<float*>(dst.row(i, t, 0));
    if (e < 0 || e >= n_expert) {  // not a valid expert: no contribution
      if (lead) y[n] = 0.0f;
      continue;
    }
    Acc acc = row_dot(e, (x_slots == 1 ? 0 : i) + x_slots * t);
    acc = warp_sum_columns<1>(&acc, 1, part);
    if (lead) y[n] = static_cast<float>(acc) + (bias.data ? reinterpret_cast<const float*>(bias.row(e))[n] : 0.0f);
  }
}

// The GEMVs' ending: the warp's per-lane float partials of nc columns summed, and column c's sum
// stored at dst.f32(c0 + c)[n] (kWarpsPerBlock warps in the block, each with its own row n).
template <int NC, unsigned kWarpsPerBlock>
__device__ __forceinline__ void store_column_sums(const float* acc, int nc, TensorArg dst, int64_t n, int64_t c0 = 0) {
  __shared__ float partials[kWarpsPerBlock * 32 * NC];
  const float total = warp_sum_columns<NC>(acc, nc, partials + threadIdx.x / 32 * 32 * NC);
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (lane < nc) dst.f32(c0 + lane)[n] = total;
}

// A float GEMV's body (matmul_f16.cu, matmul_fp8.cu): a warp per weight row n, kWarpsPerBlock
// rows a block, blockIdx.y a group of NC of the M columns of xr (X rounded, K floats a column).
// row_dot(row, x, nc, acc) adds this lane's share of the row times columns x, x + K, ... to acc.
template <int NC, unsigned kWarpsPerBlock, class RowDot>
__device__ __forceinline__ void gemv_columns(TensorArg dst, TensorArg w, const float* xr, int64_t M, RowDot row_dot) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (n >= w.ne[1]) return;  // whole warps leave together
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * NC;  // this block's group of columns
  const int nc = static_cast<int>(M - c0 < NC ? M - c0 : NC);
  float acc[NC];
  for (int c = 0; c < NC; ++c) acc[c] = 0;
  row_dot(w.data + n * w.nb[1], xr + c0 * w.ne[0], nc, acc);
  store_column_sums<NC, kWarpsPerBlock>(acc, nc, dst, n, c0);
}

// The same for MATMUL_ID: dst[n, i, t] = W[:, n, e] . X column (i or 0, t) + bias[n, e], e =
// ids[i, t] (or i); blockIdx.y strides over the (slot, token) pairs (matmul_id_pairs).
template <unsigned kWarpsPerBlock, class RowDot>
__device__ __forceinline__ void gemv_id_rows(TensorArg dst, TensorArg w, const float* xr, int64_t x_slots, TensorArg ids,
                                             TensorArg bias, RowDot row_dot) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (n >= w.ne[1]) return;  // whole warps leave together
  __shared__ float partials[kWarpsPerBlock * 32];
  matmul_id_pairs(dst, w.ne[2], x_slots, ids, bias, n, partials + threadIdx.x / 32 * 32, [&](int32_t e, int64_t col) {
    float acc = 0;
    row_dot(w.data + n * w.nb[1] + e * w.nb[2], xr + col * w.ne[0], 1, &acc);
    return acc;
  });
}

// The tile of the tensor-core GEMMs (mmq.cu, matmul_fp8.cu, matmul_f16.cu): a block of kMmaWarps
// warps computes kMmaRows weight rows (16 per warp) x kMmaCols tokens (kMmaTiles mma tiles of 8).
inline constexpr int kMmaWarps = 4, kMmaRows = 16 * kMmaWarps, kMmaCols = 32, kMmaTiles = kMmaCols / 8;

// The GEMMs' ending: each warp's kMmaTiles m16n8 accumulator fragments (element i of tile j is
// row 16 warp + g, + 8 for i >= 2, and token 8 j + 2 t, + 1 for odd i; g = lane / 4, t = lane % 4)
// stored at dst.f32(col0 + token)[row0 + row], inside N rows and M tokens.
template <class Acc>
__device__ __forceinline__ void store_mma_tiles(const Acc (&acc)[kMmaTiles][4], TensorArg dst, int64_t row0, int64_t col0,
                                                int64_t N, int64_t M) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4, t = lane % 4;
  for (int j = 0; j < kMmaTiles; ++j)
    for (int i = 0; i < 4; ++i) {
      const int64_t n = row0 + warp * 16 + g + (i >= 2 ? 8 : 0), col = col0 + j * 8 + 2 * t + (i & 1);
      if (n < N && col < M) dst.f32(col)[n] = static_cast<float>(acc[j][i]);
    }
}

// MATMUL_ID's (slot, token) pairs grouped by expert (moe_group.cu): bucket b's pairs (p = i +
// n_slots t, in order) fill tiles first_tile[b] .. of kMmaCols pairs each, the last padded with
// -1. Bucket n_expert takes the pairs whose id is not a valid expert (their output is 0).
struct ExpertTiles {
  int32_t* pairs;        // kMmaCols per tile
  int32_t* tile_expert;  // per tile: its bucket
  int32_t* n_tiles;      // tiles in use (a launch's grid has an upper bound of them)
};
inline constexpr int kMaxBuckets = 1024;  // experts + 1, in the grouping kernel's shared memory

// A GEMM tile's X columns col0 .. col0 + kMmaCols - 1 (-1 past M) in cols (shared), then a barrier.
__device__ __forceinline__ void dense_tile_columns(int64_t col0, int64_t M, int64_t* cols) {
  for (int c = static_cast<int>(threadIdx.x); c < kMmaCols; c += static_cast<int>(blockDim.x))
    cols[c] = col0 + c < M ? col0 + c : -1;
  __syncthreads();
}

// Tile `tile`'s pairs as X columns in cols (shared, kMmaCols; (i or 0) + x_slots t, or -1), then
// a barrier; returns the tile's bucket.
__device__ __forceinline__ int32_t tile_columns(const ExpertTiles& g, int64_t tile, int64_t n_slots, int64_t x_slots,
                                                int64_t* cols) {
  const int32_t* pairs = g.pairs + tile * kMmaCols;
  for (int c = static_cast<int>(threadIdx.x); c < kMmaCols; c += static_cast<int>(blockDim.x)) {
    const int64_t p = pairs[c];
    cols[c] = p < 0 ? -1 : (x_slots == 1 ? 0 : p % n_slots) + x_slots * (p / n_slots);
  }
  __syncthreads();
  return g.tile_expert[tile];
}

// store_mma_tiles' fragments, each token column to its pair's row of dst (dst[n, i, t] = sum +
// bias[n, e]), or 0 for the bucket of invalid ids (e == n_expert).
template <class Acc>
__device__ __forceinline__ void store_id_tiles(const Acc (&acc)[kMmaTiles][4], TensorArg dst, const int32_t* pairs, int32_t e,
                                               int64_t n_expert, TensorArg bias, int64_t row0, int64_t N) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int gr = lane / 4, t = lane % 4;
  const int64_t n_slots = dst.ne[1];
  for (int j = 0; j < kMmaTiles; ++j)
    for (int i = 0; i < 4; ++i) {
      const int64_t n = row0 + warp * 16 + gr + (i >= 2 ? 8 : 0);
      const int32_t p = pairs[j * 8 + 2 * t + (i & 1)];
      if (n >= N || p < 0) continue;
      float* y = reinterpret_cast<float*>(dst.row(p % n_slots, p / n_slots, 0));
      y[n] = e < n_expert ? static_cast<float>(acc[j][i]) + (bias.data ? reinterpret_cast<const float*>(bias.row(e))[n] : 0.0f)
                          : 0.0f;
    }
}

// A grouped MATMUL_ID kernel's body: block (x, y) computes weight rows x of tile y's expert times
// the tile's pairs, whose X columns are gathered. tile(rows, n_rows, cols, acc) is the GEMM's
// product tile (rows: the expert's first row of the block, row stride w.nb[1]).
template <class Acc, class Tile>
__device__ __forceinline__ void grouped_tile(TensorArg dst, TensorArg w, int64_t x_slots, TensorArg bias, const ExpertTiles& g,
                                             Tile tile) {
  const int64_t t = blockIdx.y;
  if (t >= *g.n_tiles) return;  // the whole block: past the tiles in use
  __shared__ int64_t cols[kMmaCols];
  const int32_t e = tile_columns(g, t, dst.ne[1], x_slots, cols);
  const int64_t N = w.ne[1], row0 = static_cast<int64_t>(blockIdx.x) * kMmaRows;
  Acc acc[kMmaTiles][4] = {};
  if (e < w.ne[2])  // block-uniform: the tile's barriers are safe
    tile(w.data + row0 * w.nb[1] + e * w.nb[2], std::min<int64_t>(kMmaRows, N - row0), cols, acc);
  store_id_tiles(acc, dst, g.pairs + t * kMmaCols, e, w.ne[2], bias, row0, N);
}

// A dense GEMM's block (blockIdx.x: kMmaRows weight rows, blockIdx.y: kMmaCols tokens of M):
// tile(rows, n_rows, cols, acc) as grouped_tile's, then store_mma_tiles.
template <class Tile>
__device__ __forceinline__ void dense_tile(TensorArg dst, TensorArg w, int64_t M, Tile tile) {
  __shared__ int64_t cols[kMmaCols];
  const int64_t N = w.ne[1];
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kMmaRows, col0 = static_cast<int64_t>(blockIdx.y) * kMmaCols;
  dense_tile_columns(col0, M, cols);
  float acc[kMmaTiles][4];
  tile(w.data + row0 * w.nb[1], std::min<int64_t>(kMmaRows, N - row0), cols, acc);
  store_mma_tiles(acc, dst, row0, col0, N, M);
}

// Blocks of `threads` for a grid-stride loop over n items, at most 4096 (each block's threads
// then take several items).
inline unsigned grid_stride_blocks(int64_t n, unsigned threads) {
  return std::min(blocks_for(n, threads), 4096u);
}

}  // namespace kestrel::cuda
