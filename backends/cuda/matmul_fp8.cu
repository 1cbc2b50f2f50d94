// MATMUL of FP8 (E4M3) weights, W8A8 (docs/LOW_PRECISION.md): X is rounded to FP8 blocks of 128
// (one float scale each) as the reference rounds it, then
//  - decode (at most kDecodeBatchCols columns, in groups of kMaxCols): one warp per weight row,
//    the lanes reading a block's 32 code words side by side (128 coalesced bytes per load). Each
//    lane converts its four codes (e4m3x4_to_float: about 3 integer operations and a multiply
//    each) and dots them with the columns' rounded values, read as floats (16-byte loads); one
//    multiply by the block's scale per lane, float sums reduced across the warp;
//  - larger batches: FP8 tensor cores, mma.sync m16n8k32 e4m3 (sm_89 and newer). A block of
//    kMmaWarps warps computes kMmaRows weight rows x kMmaCols tokens (common.cuh), one 128-value
//    block of K per shared-memory stage: four mma chained over the block's 128 values, then
//    promoted to float registers with the block's two scales (DeepSeek-V3's promotion interval:
//    Hopper's FP8 MMA accumulates with fewer bits than f32, so longer chains lose precision);
//  - MATMUL_ID (MoE experts) of up to kDecodeBatchCols tokens: the decode GEMV's row dot, a row
//    per (slot, token) pair with its expert's matrix; more tokens (prefill): the tensor-core tile
//    over the pairs grouped by expert (moe_group.cu), each expert's rows read once per 32 pairs.
// The part-1 kernel (matmul.cu) stays the path with KESTREL_CUDA_KERNELS=reference.
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/ptx.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kBlock = 128;                         // values per FP8 block
constexpr int kBlockWords = 1 + kBlock / 4;        // a block_fp8 as 32-bit words: scale, codes
static_assert(sizeof(block_fp8) == 4 * kBlockWords);

// One thread per 128 values of a column: codes into q[col * K ...], the scale into d[col * nb + b].
__global__ void quantize_fp8_kernel(TensorArg x, uint8_t* q, float* d) {
  const int64_t K = x.ne[0], nb = K / kBlock, n = nb * x.rows();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t col = i / nb, b = i % nb;
    d[i] = fp8_quantize_block(x.f32(col) + kBlock * b, q + col * K + kBlock * b);
  }
}

constexpr unsigned kGemvWarps = 8;  // rows per block

// acc[c] += this lane's share of the FP8 row . column c of xr (columns K floats apart), c < nc.
// X arrives as floats already rounded to FP8 (round_x: dx * e4m3(q), as the reference rounds it),
// so each weight costs a code conversion and one FMA, and the block scale one multiply per lane.
template <int NC>
__device__ __forceinline__ void fp8_row_dot(const uint32_t* row, const float* xr, int64_t K, int nc, float* acc) {
  const int64_t nb = K / kBlock;
  const int lane = static_cast<int>(threadIdx.x % 32);
  // Four blocks' loads are issued before their arithmetic: more bytes in flight per warp.
  constexpr int kAhead = 4;
  for (int64_t b0 = 0; b0 < nb; b0 += kAhead) {
    uint32_t wq[kAhead];
    float dw[kAhead];
    for (int u = 0; u < kAhead; ++u) {
      const uint32_t* blk = row + (b0 + u < nb ? b0 + u : b0) * kBlockWords;
      dw[u] = bits_to_float(blk[0]);
      wq[u] = blk[1 + lane];
    }
    for (int u = 0; u < kAhead && b0 + u < nb; ++u) {
      const int64_t b = b0 + u;
      float wv[4];
      e4m3x4_to_float(wq[u], wv);
      for (int c = 0; c < NC; ++c) {
        if (c >= nc) break;
        const float4 x4 = load_float4(xr + c * K + kBlock * b + 4 * lane);
        acc[c] += (wv[0] * x4.x + wv[1] * x4.y + wv[2] * x4.z + wv[3] * x4.w) * dw[u];
      }
    }
  }
}

template <int NC>
__global__ void fp8_gemv_kernel(TensorArg dst, TensorArg w, const float* xr, int64_t M) {
  gemv_columns<NC, kGemvWarps>(dst, w, xr, M, [&](const uint8_t* row, const float* x, int nc, float* acc) {
    fp8_row_dot<NC>(reinterpret_cast<const uint32_t*>(row), x, w.ne[0], nc, acc);  // 4-byte aligned
  });
}

// MATMUL_ID, a row per (slot, token) pair with its expert's matrix (gemv_id_rows).
__global__ void fp8_gemv_id_kernel(TensorArg dst, TensorArg w, const float* xr, int64_t x_slots, TensorArg ids, TensorArg bias) {
  gemv_id_rows<kGemvWarps>(dst, w, xr, x_slots, ids, bias, [&](const uint8_t* row, const float* x, int nc, float* acc) {
    fp8_row_dot<1>(reinterpret_cast<const uint32_t*>(row), x, w.ne[0], nc, acc);
  });
}

constexpr int kStride = kBlock / 4 + 4;  // words per staged row; the pad spreads a fragment's rows over banks

// The block's product tile: weight rows 0 .. n_rows - 1 (at most kMmaRows) from `rows` (row_stride
// bytes apart) times the kMmaCols X columns cols[c] of xq/xd (-1: none), into acc as
// store_mma_tiles reads it. `cols` is shared memory, written before a barrier.
__device__ __forceinline__ void fp8_mma_tile(const uint8_t* rows, int64_t row_stride, int64_t n_rows, int64_t K,
                                             const uint8_t* xq, const float* xd, const int64_t* cols,
                                             float (&acc)[kMmaTiles][4]) {
  __shared__ uint32_t sa[kMmaRows * kStride], sx[kMmaCols * kStride];
  __shared__ float sdw[kMmaRows], sdx[kMmaCols];
  const int64_t nb = K / kBlock;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  for (int j = 0; j < kMmaTiles; ++j)
    for (int i = 0; i < 4; ++i) acc[j][i] = 0;
  for (int64_t b = 0; b < nb; ++b) {
    // Consecutive threads take consecutive words of a row's block: coalesced.
    for (int p = tid; p < kMmaRows * kBlockWords; p += blockDim.x) {
      const int r = p / kBlockWords, wi = p % kBlockWords;
      const uint32_t v = r < n_rows ? reinterpret_cast<const uint32_t*>(rows + r * row_stride)[b * kBlockWords + wi] : 0u;
      if (wi == 0) sdw[r] = bits_to_float(v);
      else sa[r * kStride + wi - 1] = v;
    }
    for (int p = tid; p < kMmaCols * (kBlock / 4); p += blockDim.x) {
      const int c = p / (kBlock / 4), wi = p % (kBlock / 4);
      const int64_t col = cols[c];
      sx[c * kStride + wi] = col >= 0 ? reinterpret_cast<const uint32_t*>(xq + col * K + kBlock * b)[wi] : 0u;
      if (wi == 0) sdx[c] = col >= 0 ? xd[col * nb + b] : 0.0f;
    }
    __syncthreads();
    const int ra = warp * 16 + g;  // this lane's rows: ra and ra + 8
    float part[kMmaTiles][4];
    for (int j = 0; j < kMmaTiles; ++j)
      for (int i = 0; i < 4; ++i) part[j][i] = 0;
    for (int s = 0; s < kBlock / 32; ++s) {
      // A (16 x 32 codes, row-major): rows ra, ra + 8; bytes 4t.. and 16 + 4t.. of the step.
      const uint32_t a[4] = {sa[ra * kStride + 8 * s + t], sa[(ra + 8) * kStride + 8 * s + t],
                             sa[ra * kStride + 8 * s + 4 + t], sa[(ra + 8) * kStride + 8 * s + 4 + t]};
      for (int j = 0; j < kMmaTiles; ++j) {
        const int cb = j * 8 + g;  // B (32 x 8): token cb, bytes 4t.. and 16 + 4t..
        const uint32_t bb[2] = {sx[cb * kStride + 8 * s + t], sx[cb * kStride + 8 * s + 4 + t]};
        ptx::mma_m16n8k32_e4m3(part[j], a, bb, part[j]);
      }
    }
    for (int j = 0; j < kMmaTiles; ++j)
      for (int i = 0; i < 4; ++i) {  // C: (row g or g + 8, token 2t or 2t + 1)
        const int r = ra + (i >= 2 ? 8 : 0), tok = j * 8 + 2 * t + (i & 1);
        acc[j][i] += part[j][i] * (sdw[r] * sdx[tok]);
      }
    __syncthreads();  // the stage is read; the next one may overwrite it
  }
}

__global__ void fp8_mma_kernel(TensorArg dst, TensorArg w, const uint8_t* xq, const float* xd, int64_t M) {
  using Acc = float[kMmaTiles][4];
  dense_tile(dst, w, M, [&](const uint8_t* rows, int64_t n_rows, const int64_t* cols, Acc& acc) {
    fp8_mma_tile(rows, w.nb[1], n_rows, w.ne[0], xq, xd, cols, acc);
  });
}

// MATMUL_ID of many tokens: the same tile over the pairs grouped by expert (moe_group.cu), as
// mmq.cu's mmq_id_kernel does for the integer types.
__global__ void fp8_mma_id_kernel(TensorArg dst, TensorArg w, const uint8_t* xq, const float* xd, int64_t x_slots,
                                  TensorArg bias, ExpertTiles g) {
  using Acc = float[kMmaTiles][4];
  grouped_tile<float>(dst, w, x_slots, bias, g, [&](const uint8_t* rows, int64_t n_rows, const int64_t* cols, Acc& acc) {
    fp8_mma_tile(rows, w.nb[1], n_rows, w.ne[0], xq, xd, cols, acc);
  });
}

}  // namespace

bool fp8_matmul_applies(const Node& n) {
  if (n.src[0]->type != DType::FP8_E4M3 || reference_kernels_only()) return false;
  return n.op == Op::MATMUL_ID || (n.op == Op::MATMUL && (n.src[1]->n_rows() <= kDecodeBatchCols || fp8_mma_available()));
}

Status run_fp8_matmul(const Node& n, Stream& s) {
  const Tensor *w = n.src[0], *x = n.src[1];
  const int64_t K = x->ne[0], M = x->n_rows(), nb = K / kBlock;
  // MATMUL_ID of few tokens: a row per (slot, token) pair, with its expert's matrix (more: below).
  if (n.op == Op::MATMUL_ID && !(n.dst->ne[2] > kDecodeBatchCols && fp8_mma_available())) {
    auto xr = round_x(w, x, s);
    KS_RETURN_IF_ERROR(xr.status());
    const int64_t pairs = n.dst->ne[1] * n.dst->ne[2];
    const dim3 grid(blocks_for(w->ne[1], kGemvWarps), static_cast<unsigned>(std::min<int64_t>(pairs, 64))), block(32 * kGemvWarps);
    return KS_LAUNCH(fp8_gemv_id_kernel, grid, block, 0, s.stream, arg(n.dst), arg(w), xr.value(), x->ne[1], arg(n.src[2]),
                     arg(n.src[3]));
  }
  if (n.op == Op::MATMUL && M <= kDecodeBatchCols) {
    auto xr = round_x(w, x, s);
    KS_RETURN_IF_ERROR(xr.status());
    const dim3 grid(blocks_for(w->ne[1], kGemvWarps), blocks_for(M, kMaxCols)), block(32 * kGemvWarps);
    if (M == 1) return launch("fp8_gemv_kernel", fp8_gemv_kernel<1>, grid, block, 0, s.stream, arg(n.dst), arg(w), xr.value(), M);
    return launch("fp8_gemv_kernel", fp8_gemv_kernel<kMaxCols>, grid, block, 0, s.stream, arg(n.dst), arg(w), xr.value(), M);
  }
  const bool grouped = n.op == Op::MATMUL_ID;
  const int64_t tiles = grouped ? expert_tiles_max(n) : blocks_for(M, kMmaCols);
  if (tiles > 65535)
    return Error(KESTREL_ERR_UNSUPPORTED, "cuda: " + std::string(op_name(n.op)) + " of " + std::to_string(M) + " columns");
  const auto round_up = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t q_bytes = round_up(static_cast<size_t>(K * M)), d_bytes = round_up(static_cast<size_t>(nb * M) * sizeof(float));
  auto mem = s.scratch(q_bytes + d_bytes + (grouped ? expert_tiles_bytes(n) : 0));
  KS_RETURN_IF_ERROR(mem.status());
  uint8_t* xq = static_cast<uint8_t*>(mem.value());
  float* xd = reinterpret_cast<float*>(xq + q_bytes);
  KS_RETURN_IF_ERROR(KS_LAUNCH(quantize_fp8_kernel, dim3(grid_stride_blocks(nb * M, 128)), dim3(128), 0, s.stream, arg(x), xq, xd));
  const dim3 grid(blocks_for(w->ne[1], kMmaRows), static_cast<unsigned>(tiles)), block(32 * kMmaWarps);
  if (!grouped) return launch("fp8_mma_kernel", fp8_mma_kernel, grid, block, 0, s.stream, arg(n.dst), arg(w), xq, xd, M);
  auto g = group_pairs(n, xq + q_bytes + d_bytes, s);
  KS_RETURN_IF_ERROR(g.status());
  return launch("fp8_mma_id_kernel", fp8_mma_id_kernel, grid, block, 0, s.stream, arg(n.dst), arg(w), xq, xd, x->ne[1],
                arg(n.src[3]), g.value());
}

}  // namespace kestrel::cuda
