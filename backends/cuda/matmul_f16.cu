// MATMUL of F16 and BF16 weights. X is first rounded to the weight's type (round_x: what
// llama.cpp's matmul sees), then
//  - decode (at most kDecodeBatchCols columns, in groups of kMaxCols; rows of a multiple of 8):
//    one warp per weight row, each lane loading 8 values (16 bytes) per step, so a warp reads 512
//    contiguous bytes at once, two steps in flight; float dots with the columns' values (16-byte
//    loads), reduced across the warp;
//  - larger batches: tensor cores, mma.sync m16n8k16 with f16 or bf16 operands and f32
//    accumulation. A block of kMmaWarps warps computes kMmaRows weight rows x kMmaCols tokens
//    (common.cuh), kStep values of K per shared-memory stage (two mma per tile), any K (a
//    stage's tail is zero-padded).
// MATMUL_ID (MoE experts, per-head matrices) the same ways: up to kDecodeBatchCols tokens the
// GEMV's row dot, a row per (slot, token) pair with its expert's matrix; more tokens, the
// tensor-core tile over the pairs grouped by expert (moe_group.cu), each expert's rows read once
// per kMmaCols pairs.
// On sm_90a with KESTREL_CUDA_WGMMA=1 both tensor-core tiles are issued as wgmma instead (below).
// Products of two 16-bit values are exact in f32, so both agree with the reference's double sums
// to float rounding. The part-1 kernel (matmul.cu) stays the path for the decode of rows that 8
// does not divide, and with KESTREL_CUDA_KERNELS=reference.
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/ptx.cuh"
#include "backends/cuda/wgmma.cuh"

namespace kestrel::cuda {
namespace {

template <DType T>
__device__ __forceinline__ float b16_value(uint32_t h) {
  return T == DType::F16 ? half_to_float(static_cast<uint16_t>(h)) : bf16_to_float(static_cast<uint16_t>(h));
}
// The 16-bit pattern of a value already rounded to T (exact).
template <DType T>
__device__ __forceinline__ uint32_t b16_bits(float v) {
  return T == DType::F16 ? ptx::f32_to_f16(v) : ptx::f32_to_bf16(v);
}

constexpr unsigned kGemvWarps = 8;  // rows per block
constexpr int kAhead = 4;            // 16-byte loads in flight per lane

// acc[c] += this lane's share of the 16-bit row . column c of xr (columns K floats apart), c < nc.
// The row is 16-byte aligned (K % 8 == 0).
template <DType T, int NC>
__device__ __forceinline__ void f16_row_dot(const uint8_t* row, const float* xr, int64_t K, int nc, float* acc) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t k0 = 8 * lane; k0 < K; k0 += 256 * kAhead) {
    uint4 v[kAhead];
    for (int u = 0; u < kAhead; ++u) {
      const int64_t k = k0 + 256 * u;
      v[u] = k < K ? load_uint4(row + 2 * k) : uint4{0, 0, 0, 0};
    }
    for (int u = 0; u < kAhead; ++u) {
      const int64_t k = k0 + 256 * u;
      if (k >= K) break;
      const uint32_t words[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
      float wf[8];
      for (int i = 0; i < 4; ++i) wf[2 * i] = b16_value<T>(words[i] & 0xFFFF), wf[2 * i + 1] = b16_value<T>(words[i] >> 16);
      for (int c = 0; c < NC; ++c) {
        if (c >= nc) break;
        const float4 x0 = load_float4(xr + c * K + k), x1 = load_float4(xr + c * K + k + 4);
        acc[c] += wf[0] * x0.x + wf[1] * x0.y + wf[2] * x0.z + wf[3] * x0.w + wf[4] * x1.x + wf[5] * x1.y +
                  wf[6] * x1.z + wf[7] * x1.w;
      }
    }
  }
}

template <DType T, int NC>
__global__ void f16_gemv_kernel(TensorArg dst, TensorArg w, const float* xr, int64_t M) {
  gemv_columns<NC, kGemvWarps>(dst, w, xr, M, [&](const uint8_t* row, const float* x, int nc, float* acc) {
    f16_row_dot<T, NC>(row, x, w.ne[0], nc, acc);
  });
}

// MATMUL_ID, a row per (slot, token) pair with its expert's matrix (gemv_id_rows).
template <DType T>
__global__ void f16_gemv_id_kernel(TensorArg dst, TensorArg w, const float* xr, int64_t x_slots, TensorArg ids, TensorArg bias) {
  gemv_id_rows<kGemvWarps>(dst, w, xr, x_slots, ids, bias, [&](const uint8_t* row, const float* x, int nc, float* acc) {
    f16_row_dot<T, 1>(row, x, w.ne[0], nc, acc);
  });
}

constexpr int kStep = 32;               // values of K per stage: two mma k16
constexpr int kWords = kStep / 2;       // 16-bit pairs per staged row
constexpr int kStride = kWords + 4;     // the pad spreads a fragment's 8 rows over distinct banks

// Values k, k + 1 of weight row r of a stage as one word, zeros past n_rows and K. Rows may be
// only 2-byte aligned (odd K), so 16-bit loads.
__device__ __forceinline__ uint32_t weight_pair(const uint8_t* rows, int64_t row_stride, int64_t n_rows, int r, int64_t k,
                                                int64_t K) {
  const uint16_t* src = reinterpret_cast<const uint16_t*>(rows + r * row_stride);
  const uint32_t lo = r < n_rows && k < K ? src[k] : 0u, hi = r < n_rows && k + 1 < K ? src[k + 1] : 0u;
  return lo | (hi << 16);
}
// Values k, k + 1 of X column col (-1: none) of xr as T's bits (exact: X is rounded to T already).
template <DType T>
__device__ __forceinline__ uint32_t x_pair(const float* xr, int64_t col, int64_t k, int64_t K) {
  const float* x = xr + (col < 0 ? 0 : col) * K;
  const uint32_t lo = col >= 0 && k < K ? b16_bits<T>(x[k]) : 0u, hi = col >= 0 && k + 1 < K ? b16_bits<T>(x[k + 1]) : 0u;
  return lo | (hi << 16);
}

// The block's product tile: weight rows 0 .. n_rows - 1 (at most kMmaRows) from `rows` (row_stride
// bytes apart) times the kMmaCols X columns cols[c] of xr (-1: none), into acc as store_mma_tiles
// reads it. `cols` is shared memory, written before a barrier.
template <DType T>
__device__ __forceinline__ void f16_mma_tile(const uint8_t* rows, int64_t row_stride, int64_t n_rows, int64_t K,
                                             const float* xr, const int64_t* cols, float (&acc)[kMmaTiles][4]) {
  __shared__ uint32_t sa[kMmaRows * kStride], sx[kMmaCols * kStride];
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  for (int j = 0; j < kMmaTiles; ++j)
    for (int i = 0; i < 4; ++i) acc[j][i] = 0;
  for (int64_t k0 = 0; k0 < K; k0 += kStep) {
    // One pair of K per thread and step.
    for (int p = tid; p < kMmaRows * kWords; p += blockDim.x)
      sa[p / kWords * kStride + p % kWords] = weight_pair(rows, row_stride, n_rows, p / kWords, k0 + 2 * (p % kWords), K);
    for (int p = tid; p < kMmaCols * kWords; p += blockDim.x)
      sx[p / kWords * kStride + p % kWords] = x_pair<T>(xr, cols[p / kWords], k0 + 2 * (p % kWords), K);
    __syncthreads();
    const int ra = warp * 16 + g;  // this lane's rows: ra and ra + 8
    for (int h = 0; h < kStep / 16; ++h) {
      // A (16 x 16, row-major): rows ra, ra + 8; columns 2t, 2t + 1 and 2t + 8, 2t + 9 of the half.
      const uint32_t a[4] = {sa[ra * kStride + 8 * h + t], sa[(ra + 8) * kStride + 8 * h + t],
                             sa[ra * kStride + 8 * h + 4 + t], sa[(ra + 8) * kStride + 8 * h + 4 + t]};
      for (int j = 0; j < kMmaTiles; ++j) {
        const int cb = j * 8 + g;  // B (16 x 8): token cb, k 2t, 2t + 1 and 2t + 8, 2t + 9
        const uint32_t b[2] = {sx[cb * kStride + 8 * h + t], sx[cb * kStride + 8 * h + 4 + t]};
        if constexpr (T == DType::F16) ptx::mma_m16n8k16_f16(acc[j], a, b, acc[j]);
        else ptx::mma_m16n8k16_bf16(acc[j], a, b, acc[j]);
      }
    }
    __syncthreads();  // the stage is read; the next one may overwrite it
  }
}

// The same tile on Hopper's warpgroup MMA (wgmma.cuh; sm_90a, KESTREL_CUDA_WGMMA=1): the block's
// four warps are one warpgroup, and one m64n32k16 instruction does what four warps' sixteen
// mma.sync m16n8k16 do. The stage is stored as K-major core matrices (8 rows x 8 values, 128
// bytes each): A as [k / 8][row / 8][row % 8][k % 8], X likewise with 4 groups of 8 columns.
template <DType T>
__device__ __forceinline__ void f16_wgmma_tile(const uint8_t* rows, int64_t row_stride, int64_t n_rows, int64_t K,
                                               const float* xr, const int64_t* cols, float (&acc)[kMmaTiles][4]) {
  constexpr int kGroupsA = kMmaRows / 8, kGroupsX = kMmaCols / 8;
  alignas(128) __shared__ uint32_t sa[kStep / 8 * kGroupsA * 32], sx[kStep / 8 * kGroupsX * 32];
  const int tid = static_cast<int>(threadIdx.x);
  for (int j = 0; j < kMmaTiles; ++j)
    for (int i = 0; i < 4; ++i) acc[j][i] = 0;
  // The word holding values k, k + 1 (k even) of row r of a tile with `groups` groups of 8 rows.
  const auto word = [](int r, int k, int groups) { return ((k / 8 * groups + r / 8) * 64 + r % 8 * 8 + k % 8) / 2; };
  for (int64_t k0 = 0; k0 < K; k0 += kStep) {
    for (int p = tid; p < kMmaRows * kWords; p += blockDim.x) {
      const int r = p / kWords, wi = p % kWords;
      sa[word(r, 2 * wi, kGroupsA)] = weight_pair(rows, row_stride, n_rows, r, k0 + 2 * wi, K);
    }
    for (int p = tid; p < kMmaCols * kWords; p += blockDim.x) {
      const int c = p / kWords, wi = p % kWords;
      sx[word(c, 2 * wi, kGroupsX)] = x_pair<T>(xr, cols[c], k0 + 2 * wi, K);
    }
    ptx::fence_proxy_async();  // the stores above, before the tensor cores read them
    __syncthreads();
    ptx::wgmma_fence();
    for (int h = 0; h < kStep / 16; ++h) {  // two 8-value core matrices of K per instruction
      const auto a = ptx::wgmma_operand(sa + h * 2 * kGroupsA * 32, kGroupsA * 128, 128);
      const auto b = ptx::wgmma_operand(sx + h * 2 * kGroupsX * 32, kGroupsX * 128, 128);
      ptx::wgmma_m64n32k16<T == DType::BF16>(acc, a, b);
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
    __syncthreads();  // the stage is read; the next one may overwrite it
  }
}

template <DType T, bool kWgmma>
__global__ void f16_mma_kernel(TensorArg dst, TensorArg w, const float* xr, int64_t M) {
  __shared__ int64_t cols[kMmaCols];
  const int64_t N = w.ne[1];
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kMmaRows, col0 = static_cast<int64_t>(blockIdx.y) * kMmaCols;
  dense_tile_columns(col0, M, cols);
  float acc[kMmaTiles][4];
  const uint8_t* rows = w.data + row0 * w.nb[1];
  if constexpr (kWgmma) f16_wgmma_tile<T>(rows, w.nb[1], std::min<int64_t>(kMmaRows, N - row0), w.ne[0], xr, cols, acc);
  else f16_mma_tile<T>(rows, w.nb[1], std::min<int64_t>(kMmaRows, N - row0), w.ne[0], xr, cols, acc);
  store_mma_tiles(acc, dst, row0, col0, N, M);
}

// MATMUL_ID of many tokens: the same tile over the pairs grouped by expert (moe_group.cu).
template <DType T, bool kWgmma>
__global__ void f16_mma_id_kernel(TensorArg dst, TensorArg w, const float* xr, int64_t x_slots, TensorArg bias, ExpertTiles g) {
  using Acc = float[kMmaTiles][4];
  grouped_tile<float>(dst, w, x_slots, bias, g, [&](const uint8_t* rows, int64_t n_rows, const int64_t* cols, Acc& acc) {
    if constexpr (kWgmma) f16_wgmma_tile<T>(rows, w.nb[1], n_rows, w.ne[0], xr, cols, acc);
    else f16_mma_tile<T>(rows, w.nb[1], n_rows, w.ne[0], xr, cols, acc);
  });
}

}  // namespace

// Tokens of a MATMUL (its columns) or of a MATMUL_ID (dst [N, n_used, T]).
static int64_t tokens_of(const Node& n) { return n.op == Op::MATMUL ? n.src[1]->n_rows() : n.dst->ne[2]; }

bool f16_matmul_applies(const Node& n) {
  const DType t = n.src[0]->type;
  if ((n.op != Op::MATMUL && n.op != Op::MATMUL_ID) || (t != DType::F16 && t != DType::BF16) || reference_kernels_only())
    return false;
  return tokens_of(n) > kDecodeBatchCols || n.src[0]->ne[0] % 8 == 0;
}

Status run_f16_matmul(const Node& n, Stream& s) {
  const Tensor *w = n.src[0], *x = n.src[1];
  const int64_t M = x->n_rows();
  const bool grouped = n.op == Op::MATMUL_ID && tokens_of(n) > kDecodeBatchCols;
  const bool wgmma = s.wgmma;
  void* tiles_mem = nullptr;
  auto xr = round_x(w, x, s, grouped ? expert_tiles_bytes(n) : 0, &tiles_mem);
  KS_RETURN_IF_ERROR(xr.status());
  if (n.op == Op::MATMUL_ID) {
    auto go_id = [&]<DType T>() -> Status {
      if (!grouped) {
        const int64_t pairs = n.dst->ne[1] * n.dst->ne[2];
        const dim3 grid(blocks_for(w->ne[1], kGemvWarps), static_cast<unsigned>(std::min<int64_t>(pairs, 64)));
        return launch("f16_gemv_id_kernel", f16_gemv_id_kernel<T>, grid, dim3(32 * kGemvWarps), 0, s.stream, arg(n.dst),
                      arg(w), xr.value(), x->ne[1], arg(n.src[2]), arg(n.src[3]));
      }
      const int64_t tiles = expert_tiles_max(n);
      if (tiles > 65535) return Error(KESTREL_ERR_UNSUPPORTED, "cuda: MATMUL_ID of " + std::to_string(tiles) + " tiles");
      auto g = group_pairs(n, tiles_mem, s);
      KS_RETURN_IF_ERROR(g.status());
      const dim3 grid(blocks_for(w->ne[1], kMmaRows), static_cast<unsigned>(tiles));
      return launch("f16_mma_id_kernel", wgmma ? f16_mma_id_kernel<T, true> : f16_mma_id_kernel<T, false>, grid,
                    dim3(32 * kMmaWarps), 0, s.stream, arg(n.dst), arg(w), static_cast<const float*>(xr.value()), x->ne[1],
                    arg(n.src[3]), g.value());
    };
    return w->type == DType::F16 ? go_id.template operator()<DType::F16>() : go_id.template operator()<DType::BF16>();
  }
  auto go = [&]<DType T>() -> Status {
    if (M <= kDecodeBatchCols) {
      const dim3 grid(blocks_for(w->ne[1], kGemvWarps), blocks_for(M, kMaxCols)), block(32 * kGemvWarps);
      if (M == 1) return launch("f16_gemv_kernel", f16_gemv_kernel<T, 1>, grid, block, 0, s.stream, arg(n.dst), arg(w), xr.value(), M);
      return launch("f16_gemv_kernel", f16_gemv_kernel<T, kMaxCols>, grid, block, 0, s.stream, arg(n.dst), arg(w), xr.value(), M);
    }
    if (blocks_for(M, kMmaCols) > 65535u) return Error(KESTREL_ERR_UNSUPPORTED, "cuda: MATMUL of " + std::to_string(M) + " columns");
    const dim3 grid(blocks_for(w->ne[1], kMmaRows), blocks_for(M, kMmaCols)), block(32 * kMmaWarps);
    return launch("f16_mma_kernel", wgmma ? f16_mma_kernel<T, true> : f16_mma_kernel<T, false>, grid, block, 0, s.stream,
                  arg(n.dst), arg(w), xr.value(), M);
  };
  return w->type == DType::F16 ? go.template operator()<DType::F16>() : go.template operator()<DType::BF16>();
}

}  // namespace kestrel::cuda
