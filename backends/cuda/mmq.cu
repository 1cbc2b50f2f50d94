// Batched MATMUL (more than kMaxCols columns) of the integer-code weight types on tensor cores:
// mma.sync m16n8k32 over int8, one 32-value block of K per instruction (sm_80 and newer; the
// emulator runs the same fragments, ptx.cuh). A block of kMmaWarps warps computes kMmaRows weight
// rows x kMmaCols tokens (common.cuh): each warp 16 rows x kMmaCols, as kMmaTiles mma tiles. Per
// stage, the block decodes kStage chunks of K of its rows into shared memory as codes
// (int_codes.cuh) with their d and m, and copies the tokens' quantized chunks beside them; each
// mma's exact integer sums are then scaled per (row, chunk) and (token, chunk) and accumulated in
// double, as gemv_q8.cu does, so the result equals the reference's to float rounding. A type whose
// halves have scales of their own (Q2_K, Q3_K, Q6_K, NVFP4) takes two mma per chunk, each over one
// half (the other half's A registers zero). MATMUL_ID of more than kMaxCols tokens (MoE prefill)
// runs the same tile per expert: a one-block kernel groups the (slot, token) pairs by expert into
// tiles of kMmaCols (moe_group.cu), and one launch covers every expert's tiles, so each expert's
// weights are read once per tile of its tokens rather than once per token. On sm_90a with
// KESTREL_CUDA_WGMMA=1 the tile's integer sums come from Hopper's wgmma instead (mmq_tile).
#include "backends/cuda/int_codes.cuh"
#include "backends/cuda/ptx.cuh"
#include "backends/cuda/wgmma.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kStage = 4;             // blocks of K per shared-memory stage
constexpr int kStride = 8 * kStage + 4;  // ints per staged row; the pad spreads a fragment's rows over banks

// The block's product tile: weight rows 0 .. n_rows - 1 (at most kMmaRows) from `rows` (row_stride
// bytes apart, read as rl says) times the kMmaCols quantized X columns cols[c] (-1: none, its sums 0), into acc as
// store_mma_tiles reads it. `cols` is shared memory, written before a barrier.
// kWgmma (KESTREL_CUDA_WGMMA=1 on sm_90a, types whose chunks have one scale): each chunk's integer
// sums come from one wgmma m64n32k32 over the four warps (wgmma.cuh) instead of their sixteen
// mma.sync; the stage is then stored as K-major core matrices (8 rows x 16 codes): the code word
// i of (row r, chunk s) at [s][i / 4][r / 8][r % 8][i % 4]. The scaling after is the same.
template <DType T, bool kWgmma>
__device__ __forceinline__ void mmq_tile(const uint8_t* rows, int64_t row_stride, int64_t n_rows, RowLayout rl,
                                         int64_t K, const QuantizedX& x, const int64_t* cols, double (&acc)[kMmaTiles][4]) {
  static_assert(!kWgmma || !split_halves<T>(), "wgmma takes whole chunks");
  alignas(128) __shared__ int32_t sa[kMmaRows * kStride];  // weight codes
  __shared__ float sd[kMmaRows * kStage * 2], sm[kMmaRows * kStage * 2];  // per half
  alignas(128) __shared__ int32_t sx[kMmaCols * kStride];  // token codes
  __shared__ float sxd[kMmaCols * kStage];
  __shared__ int32_t sxs[kMmaCols * kStage * 2];  // per half
  // Where code word i of (row r, chunk s) goes, for a tile of `groups` groups of 8 rows.
  const auto word = [](int r, int s, int i, int groups) {
    return kWgmma ? ((s * 2 + i / 4) * groups + r / 8) * 32 + r % 8 * 4 + i % 4 : r * kStride + 8 * s + i;
  };
  const int64_t nb = K / 32;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  for (int j = 0; j < kMmaTiles; ++j)
    for (int i = 0; i < 4; ++i) acc[j][i] = 0;

  for (int64_t kb0 = 0; kb0 < nb; kb0 += kStage) {
    for (int p = tid; p < kMmaRows * kStage; p += blockDim.x) {  // weights: (row, block) per thread
      const int r = p / kStage, s = p % kStage;
      const int64_t kb = kb0 + s;
      ChunkCodes k = {{0, 0, 0, 0, 0, 0, 0, 0}, {0, 0}, {0, 0}};
      if (r < n_rows && kb < nb) chunk_codes<T>(rows + r * row_stride, kb, k, rl);
      for (int i = 0; i < 8; ++i) sa[word(r, s, i, kMmaRows / 8)] = k.q[i];
      for (int h = 0; h < 2; ++h) sd[2 * (r * kStage + s) + h] = k.d[h], sm[2 * (r * kStage + s) + h] = k.m[h];
    }
    for (int p = tid; p < kMmaCols * kStage; p += blockDim.x) {  // tokens: (token, block) per thread
      const int c = p / kStage, s = p % kStage;
      const int64_t col = cols[c], kb = kb0 + s;
      const bool in = col >= 0 && kb < nb;
      const int32_t* q = in ? reinterpret_cast<const int32_t*>(x.q + col * K + 32 * kb) : nullptr;
      for (int i = 0; i < 8; ++i) sx[word(c, s, i, kMmaCols / 8)] = in ? q[i] : 0;
      sxd[c * kStage + s] = in ? x.d[col * nb + kb] : 0.0f;
      for (int h = 0; h < 2; ++h) sxs[2 * (c * kStage + s) + h] = in ? x.s[2 * (col * nb + kb) + h] : 0;
    }
    if constexpr (kWgmma) ptx::fence_proxy_async();  // the stores above, before the tensor cores read them
    __syncthreads();
    const int ra = warp * 16 + g;  // this lane's rows: ra and ra + 8
    for (int s = 0; s < kStage; ++s) {
      // The chunk's integer sums, C layout (row g or g + 8, token 2t or 2t + 1 of tile j): over
      // both halves in c[0], or (split) over each half in c[0] and c[1].
      int c[2][kMmaTiles][4] = {};
      if constexpr (kWgmma) {
        ptx::wgmma_fence();
        ptx::wgmma_m64n32k32_s8(c[0], ptx::wgmma_operand(sa + word(0, s, 0, kMmaRows / 8), kMmaRows / 8 * 128, 128),
                                ptx::wgmma_operand(sx + word(0, s, 0, kMmaCols / 8), kMmaCols / 8 * 128, 128));
        ptx::wgmma_commit();
        ptx::wgmma_wait<0>();
      } else {
        // A (16 x 32 codes, row-major): rows ra, ra + 8; bytes 4t.. and 16 + 4t.. of the block.
        const uint32_t a[4] = {static_cast<uint32_t>(sa[word(ra, s, t, 0)]), static_cast<uint32_t>(sa[word(ra + 8, s, t, 0)]),
                               static_cast<uint32_t>(sa[word(ra, s, 4 + t, 0)]),
                               static_cast<uint32_t>(sa[word(ra + 8, s, 4 + t, 0)])};
        const int zero[4] = {0, 0, 0, 0};
        for (int j = 0; j < kMmaTiles; ++j) {
          // B (32 x 8, column per token): token j * 8 + g, bytes 4t.. and 16 + 4t.. of its block.
          const int cb = j * 8 + g;
          const uint32_t b[2] = {static_cast<uint32_t>(sx[word(cb, s, t, 0)]), static_cast<uint32_t>(sx[word(cb, s, 4 + t, 0)])};
          if constexpr (split_halves<T>()) {
            const uint32_t lo[4] = {a[0], a[1], 0, 0}, hi[4] = {0, 0, a[2], a[3]};  // A's bytes 0-15, 16-31
            ptx::mma_m16n8k32_s8(c[0][j], lo, b, zero);
            ptx::mma_m16n8k32_s8(c[1][j], hi, b, zero);
          } else {
            ptx::mma_m16n8k32_s8(c[0][j], a, b, zero);
          }
        }
      }
      for (int j = 0; j < kMmaTiles; ++j)
        for (int i = 0; i < 4; ++i) {
          const int r = ra + (i >= 2 ? 8 : 0), tok = j * 8 + 2 * t + (i & 1);
          const float* d = sd + 2 * (r * kStage + s);
          const float* m = sm + 2 * (r * kStage + s);
          const int32_t* sum = sxs + 2 * (tok * kStage + s);
          double dot;
          if constexpr (split_halves<T>())
            dot = static_cast<double>(d[0]) * c[0][j][i] + static_cast<double>(m[0]) * sum[0] +
                  static_cast<double>(d[1]) * c[1][j][i] + static_cast<double>(m[1]) * sum[1];
          else
            dot = static_cast<double>(d[0]) * c[0][j][i] + static_cast<double>(m[0]) * (sum[0] + sum[1]);
          acc[j][i] += static_cast<double>(sxd[tok * kStage + s]) * dot;
        }
    }
    __syncthreads();  // the stage is read; the next one may overwrite it
  }
}

template <DType T, bool kWgmma>
__global__ void mmq_kernel(TensorArg dst, TensorArg w, RowLayout rl, QuantizedX x, int64_t M) {
  __shared__ int64_t cols[kMmaCols];
  const int64_t N = w.ne[1];
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kMmaRows, col0 = static_cast<int64_t>(blockIdx.y) * kMmaCols;
  dense_tile_columns(col0, M, cols);
  double acc[kMmaTiles][4];
  mmq_tile<T, kWgmma>(w.data + row0 * w.nb[1], w.nb[1], std::min<int64_t>(kMmaRows, N - row0), rl, w.ne[0], x, cols, acc);
  store_mma_tiles(acc, dst, row0, col0, N, M);
}

// MATMUL_ID over grouped pairs: block (x, y) is weight rows x of tile y's expert times its
// kMmaCols pairs, each pair's X column (i or 0, t) gathered, and dst[n, i, t] = sum + bias[n, e].
// Each expert's rows are read once per kMmaCols of its pairs rather than once per pair.
template <DType T, bool kWgmma>
__global__ void mmq_id_kernel(TensorArg dst, TensorArg w, RowLayout rl, QuantizedX x, int64_t x_slots, TensorArg bias,
                              ExpertTiles g) {
  using Acc = double[kMmaTiles][4];
  grouped_tile<double>(dst, w, x_slots, bias, g, [&](const uint8_t* rows, int64_t n_rows, const int64_t* cols, Acc& acc) {
    mmq_tile<T, kWgmma>(rows, w.nb[1], n_rows, rl, w.ne[0], x, cols, acc);
  });
}

// The kernel for T: on wgmma where enabled and T's chunks have one scale.
template <DType T, template <DType, bool> class K>
constexpr auto pick_kernel(bool wgmma) {
  if constexpr (split_halves<T>()) return K<T, false>::get();
  else return wgmma ? K<T, true>::get() : K<T, false>::get();
}
template <DType T, bool W>
struct MmqKernel {
  static constexpr auto get() { return mmq_kernel<T, W>; }
};
template <DType T, bool W>
struct MmqIdKernel {
  static constexpr auto get() { return mmq_id_kernel<T, W>; }
};

}  // namespace

bool mmq_applies(const Node& n) { return n.op == Op::MATMUL && int_codes_apply(n) && n.src[1]->n_rows() > kMaxCols; }

bool mmq_id_applies(const Node& n) {
  return n.op == Op::MATMUL_ID && int_codes_apply(n) && n.dst->ne[2] > kMaxCols && n.src[0]->ne[2] < kMaxBuckets;
}

Status run_mmq(const Node& n, Stream& s) {
  const Tensor *w = n.src[0], *x = n.src[1];
  const int64_t M = x->n_rows();
  auto qx = quantize_x(x, dtype_info(w->type).vec_dot_type, s);
  KS_RETURN_IF_ERROR(qx.status());
  // Tokens along y: at most 65535 blocks, so a launch covers 65535 * kMmaCols columns.
  if (blocks_for(M, kMmaCols) > 65535u) return Error(KESTREL_ERR_UNSUPPORTED, "cuda: MATMUL of " + std::to_string(M) + " columns");
  const dim3 grid(blocks_for(w->ne[1], kMmaRows), blocks_for(M, kMmaCols)), block(32 * kMmaWarps);
  Status st = Error(KESTREL_ERR_UNSUPPORTED, "cuda: no integer MMA for " + std::string(dtype_name(w->type)));
  with_weight_type(w->type, [&]<DType T>() {
    if constexpr (has_codes<T>())
      st = launch("mmq_kernel", pick_kernel<T, MmqKernel>(s.wgmma), grid, block, 0, s.stream, arg(n.dst), arg(w),
                  row_layout(w), qx.value(), M);
  });
  return st;
}

Status run_mmq_id(const Node& n, Stream& s) {
  const Tensor *w = n.src[0], *x = n.src[1];
  const int64_t max_tiles = expert_tiles_max(n);
  if (max_tiles > 65535) return Error(KESTREL_ERR_UNSUPPORTED, "cuda: MATMUL_ID of " + std::to_string(max_tiles) + " tiles");
  void* extra = nullptr;
  auto qx = quantize_x(x, dtype_info(w->type).vec_dot_type, s, expert_tiles_bytes(n), &extra);
  KS_RETURN_IF_ERROR(qx.status());
  auto g = group_pairs(n, extra, s);
  KS_RETURN_IF_ERROR(g.status());
  const dim3 grid(blocks_for(w->ne[1], kMmaRows), static_cast<unsigned>(max_tiles)), block(32 * kMmaWarps);
  Status st = Error(KESTREL_ERR_UNSUPPORTED, "cuda: no integer MMA for " + std::string(dtype_name(w->type)));
  with_weight_type(w->type, [&]<DType T>() {
    if constexpr (has_codes<T>())
      st = launch("mmq_id_kernel", pick_kernel<T, MmqIdKernel>(s.wgmma), grid, block, 0, s.stream, arg(n.dst), arg(w),
                  row_layout(w), qx.value(), x->ne[1], arg(n.src[3]), g.value());
  });
  return st;
}

}  // namespace kestrel::cuda
