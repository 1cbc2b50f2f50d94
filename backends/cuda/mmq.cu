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
// tiles of kMmaCols, and one launch covers every expert's tiles, so each expert's weights are read
// once per tile of its tokens rather than once per token.
#include "backends/cuda/int_codes.cuh"
#include "backends/cuda/ptx.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kStage = 4;             // blocks of K per shared-memory stage
constexpr int kStride = 8 * kStage + 4;  // ints per staged row; the pad spreads a fragment's rows over banks

// The block's product tile: weight rows 0 .. n_rows - 1 (at most kMmaRows) from `rows` (row_stride
// bytes apart, read as rl says) times the kMmaCols quantized X columns cols[c] (-1: none, its sums 0), into acc as
// store_mma_tiles reads it. `cols` is shared memory, written before a barrier.
template <DType T>
__device__ __forceinline__ void mmq_tile(const uint8_t* rows, int64_t row_stride, int64_t n_rows, RowLayout rl,
                                         int64_t K, const QuantizedX& x, const int64_t* cols, double (&acc)[kMmaTiles][4]) {
  __shared__ int32_t sa[kMmaRows * kStride];  // weight codes
  __shared__ float sd[kMmaRows * kStage * 2], sm[kMmaRows * kStage * 2];  // per half
  __shared__ int32_t sx[kMmaCols * kStride];  // token codes
  __shared__ float sxd[kMmaCols * kStage];
  __shared__ int32_t sxs[kMmaCols * kStage * 2];  // per half
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
      for (int i = 0; i < 8; ++i) sa[r * kStride + 8 * s + i] = k.q[i];
      for (int h = 0; h < 2; ++h) sd[2 * (r * kStage + s) + h] = k.d[h], sm[2 * (r * kStage + s) + h] = k.m[h];
    }
    for (int p = tid; p < kMmaCols * kStage; p += blockDim.x) {  // tokens: (token, block) per thread
      const int c = p / kStage, s = p % kStage;
      const int64_t col = cols[c], kb = kb0 + s;
      const bool in = col >= 0 && kb < nb;
      const int32_t* q = in ? reinterpret_cast<const int32_t*>(x.q + col * K + 32 * kb) : nullptr;
      for (int i = 0; i < 8; ++i) sx[c * kStride + 8 * s + i] = in ? q[i] : 0;
      sxd[c * kStage + s] = in ? x.d[col * nb + kb] : 0.0f;
      for (int h = 0; h < 2; ++h) sxs[2 * (c * kStage + s) + h] = in ? x.s[2 * (col * nb + kb) + h] : 0;
    }
    __syncthreads();
    const int ra = warp * 16 + g;  // this lane's rows: ra and ra + 8
    for (int s = 0; s < kStage; ++s) {
      // A (16 x 32 codes, row-major): rows ra, ra + 8; bytes 4t.. and 16 + 4t.. of the block.
      const uint32_t a[4] = {static_cast<uint32_t>(sa[ra * kStride + 8 * s + t]),
                             static_cast<uint32_t>(sa[(ra + 8) * kStride + 8 * s + t]),
                             static_cast<uint32_t>(sa[ra * kStride + 8 * s + 4 + t]),
                             static_cast<uint32_t>(sa[(ra + 8) * kStride + 8 * s + 4 + t])};
      for (int j = 0; j < kMmaTiles; ++j) {
        // B (32 x 8, column per token): token j * 8 + g, bytes 4t.. and 16 + 4t.. of its block.
        const int cb = j * 8 + g;
        const uint32_t b[2] = {static_cast<uint32_t>(sx[cb * kStride + 8 * s + t]),
                               static_cast<uint32_t>(sx[cb * kStride + 8 * s + 4 + t])};
        const int zero[4] = {0, 0, 0, 0};
        int c[2][4];  // the integer sums over both halves, or (split) over each half
        if constexpr (split_halves<T>()) {
          const uint32_t lo[4] = {a[0], a[1], 0, 0}, hi[4] = {0, 0, a[2], a[3]};  // A's bytes 0-15, 16-31
          ptx::mma_m16n8k32_s8(c[0], lo, b, zero);
          ptx::mma_m16n8k32_s8(c[1], hi, b, zero);
        } else {
          ptx::mma_m16n8k32_s8(c[0], a, b, zero);
        }
        for (int i = 0; i < 4; ++i) {  // C: (row g or g + 8, token 2t or 2t + 1)
          const int r = ra + (i >= 2 ? 8 : 0), tok = j * 8 + 2 * t + (i & 1);
          const float* d = sd + 2 * (r * kStage + s);
          const float* m = sm + 2 * (r * kStage + s);
          const int32_t* sum = sxs + 2 * (tok * kStage + s);
          double dot;
          if constexpr (split_halves<T>())
            dot = static_cast<double>(d[0]) * c[0][i] + static_cast<double>(m[0]) * sum[0] +
                  static_cast<double>(d[1]) * c[1][i] + static_cast<double>(m[1]) * sum[1];
          else
            dot = static_cast<double>(d[0]) * c[0][i] + static_cast<double>(m[0]) * (sum[0] + sum[1]);
          acc[j][i] += static_cast<double>(sxd[tok * kStage + s]) * dot;
        }
      }
    }
    __syncthreads();  // the stage is read; the next one may overwrite it
  }
}

template <DType T>
__global__ void mmq_kernel(TensorArg dst, TensorArg w, RowLayout rl, QuantizedX x, int64_t M) {
  __shared__ int64_t cols[kMmaCols];
  const int64_t N = w.ne[1];
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kMmaRows, col0 = static_cast<int64_t>(blockIdx.y) * kMmaCols;
  for (int c = static_cast<int>(threadIdx.x); c < kMmaCols; c += static_cast<int>(blockDim.x))
    cols[c] = col0 + c < M ? col0 + c : -1;
  __syncthreads();
  double acc[kMmaTiles][4];
  mmq_tile<T>(w.data + row0 * w.nb[1], w.nb[1], std::min<int64_t>(kMmaRows, N - row0), rl, w.ne[0], x, cols, acc);
  store_mma_tiles(acc, dst, row0, col0, N, M);
}

// MATMUL_ID's (slot, token) pairs grouped by expert, on the device: bucket b's pairs (p = i +
// n_slots t, in order) fill tiles first_tile[b] .. of kMmaCols pairs each, the last padded with
// -1. Bucket n_expert takes the pairs whose id is not a valid expert (their output is 0).
struct ExpertTiles {
  int32_t* pairs;        // kMmaCols per tile
  int32_t* tile_expert;  // per tile: its bucket
  int32_t* n_tiles;      // tiles in use (the launch's grid has an upper bound of them)
};
constexpr int kMaxBuckets = 1024;  // experts + 1, in group_pairs_kernel's shared memory

// One block: a warp per bucket at a time counts its pairs with ballots, thread 0 lays out the
// tiles, and a second pass places each bucket's pairs in order (deterministic, no atomics).
__global__ void group_pairs_kernel(TensorArg ids, int64_t n_slots, int64_t n_tokens, int64_t n_expert, ExpertTiles g) {
  __shared__ int32_t count[kMaxBuckets], first_tile[kMaxBuckets];
  const int64_t P = n_slots * n_tokens;
  const int buckets = static_cast<int>(n_expert) + 1;
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int n_warps = static_cast<int>(blockDim.x / 32);
  const auto bucket_of = [&](int64_t p) {
    const int64_t i = p % n_slots, t = p / n_slots;
    const int64_t e = ids.data ? reinterpret_cast<const int32_t*>(ids.row(t))[i] : i;
    return static_cast<int>(e < 0 || e >= n_expert ? n_expert : e);
  };
  for (int b = warp; b < buckets; b += n_warps) {
    int32_t c = 0;
    for (int64_t p0 = 0; p0 < P; p0 += 32) c += __popc(__ballot_sync(0xffffffffu, p0 + lane < P && bucket_of(p0 + lane) == b));
    if (lane == 0) count[b] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t tiles = 0;
    for (int b = 0; b < buckets; ++b) first_tile[b] = tiles, tiles += (count[b] + kMmaCols - 1) / kMmaCols;
    *g.n_tiles = tiles;
  }
  __syncthreads();
  for (int b = warp; b < buckets; b += n_warps) {
    int32_t* out = g.pairs + static_cast<int64_t>(first_tile[b]) * kMmaCols;
    int32_t placed = 0;
    for (int64_t p0 = 0; p0 < P; p0 += 32) {
      const bool mine = p0 + lane < P && bucket_of(p0 + lane) == b;
      const unsigned m = __ballot_sync(0xffffffffu, mine);
      if (mine) out[placed + __popc(m & ((1u << lane) - 1u))] = static_cast<int32_t>(p0 + lane);
      placed += __popc(m);
    }
    const int32_t tiles = (count[b] + kMmaCols - 1) / kMmaCols;
    for (int32_t k = count[b] + lane; k < tiles * kMmaCols; k += 32) out[k] = -1;
    for (int32_t k = lane; k < tiles; k += 32) g.tile_expert[first_tile[b] + k] = b;
  }
}

// MATMUL_ID over grouped pairs: block (x, y) is weight rows x of tile y's expert times its
// kMmaCols pairs, each pair's X column (i or 0, t) gathered, and dst[n, i, t] = sum + bias[n, e].
// Each expert's rows are read once per kMmaCols of its pairs rather than once per pair.
template <DType T>
__global__ void mmq_id_kernel(TensorArg dst, TensorArg w, RowLayout rl, QuantizedX x, int64_t x_slots, TensorArg bias,
                              ExpertTiles g) {
  const int64_t tile = blockIdx.y;
  if (tile >= *g.n_tiles) return;  // the whole block: past the tiles in use
  __shared__ int64_t cols[kMmaCols];
  const int32_t e = g.tile_expert[tile];
  const int32_t* pairs = g.pairs + tile * kMmaCols;
  const int64_t N = w.ne[1], n_slots = dst.ne[1], row0 = static_cast<int64_t>(blockIdx.x) * kMmaRows;
  for (int c = static_cast<int>(threadIdx.x); c < kMmaCols; c += static_cast<int>(blockDim.x)) {
    const int64_t p = pairs[c];
    cols[c] = p < 0 ? -1 : (x_slots == 1 ? 0 : p % n_slots) + x_slots * (p / n_slots);
  }
  __syncthreads();
  const bool valid = e < w.ne[2];  // block-uniform: mmq_tile's barriers are safe
  double acc[kMmaTiles][4] = {};
  if (valid)
    mmq_tile<T>(w.data + row0 * w.nb[1] + e * w.nb[2], w.nb[1], std::min<int64_t>(kMmaRows, N - row0), rl, w.ne[0], x,
                cols, acc);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32), gr = lane / 4, t = lane % 4;
  for (int j = 0; j < kMmaTiles; ++j)  // store_mma_tiles' fragment layout, to each pair's own row
    for (int i = 0; i < 4; ++i) {
      const int64_t n = row0 + warp * 16 + gr + (i >= 2 ? 8 : 0);
      const int32_t p = pairs[j * 8 + 2 * t + (i & 1)];
      if (n >= N || p < 0) continue;
      float* y = reinterpret_cast<float*>(dst.row(p % n_slots, p / n_slots, 0));
      y[n] = valid ? static_cast<float>(acc[j][i]) + (bias.data ? reinterpret_cast<const float*>(bias.row(e))[n] : 0.0f) : 0.0f;
    }
}

}  // namespace

bool mmq_applies(const Node& n) { return n.op == Op::MATMUL && int_codes_apply(n) && n.src[1]->n_rows() > kMaxCols; }

bool mmq_id_applies(const Node& n) {
  return n.op == Op::MATMUL_ID && int_codes_apply(n) && n.dst->ne[2] > kMaxCols && n.src[0]->ne[2] < kMaxBuckets;
}

Status run_mmq_id(const Node& n, Stream& s) {
  const Tensor *w = n.src[0], *x = n.src[1];
  const int64_t n_slots = n.dst->ne[1], n_tokens = n.dst->ne[2], n_expert = w->ne[2], P = n_slots * n_tokens;
  // Every bucket adds at most one partly filled tile.
  const int64_t max_tiles = (P + kMmaCols - 1) / kMmaCols + std::min<int64_t>(n_expert + 1, P);
  if (max_tiles > 65535) return Error(KESTREL_ERR_UNSUPPORTED, "cuda: MATMUL_ID of " + std::to_string(P) + " pairs");
  void* extra = nullptr;
  auto qx = quantize_x(x, dtype_info(w->type).vec_dot_type, s, static_cast<size_t>(max_tiles * (kMmaCols + 1) + 1) * 4, &extra);
  KS_RETURN_IF_ERROR(qx.status());
  int32_t* base = static_cast<int32_t*>(extra);
  const ExpertTiles g{base, base + max_tiles * kMmaCols, base + max_tiles * (kMmaCols + 1)};
  KS_RETURN_IF_ERROR(KS_LAUNCH(group_pairs_kernel, dim3(1), dim3(threads_for(32 * (n_expert + 1), 1024)), 0, s.stream,
                               arg(n.src[2]), n_slots, n_tokens, n_expert, g));
  const dim3 grid(blocks_for(w->ne[1], kMmaRows), static_cast<unsigned>(max_tiles)), block(32 * kMmaWarps);
  Status st = Error(KESTREL_ERR_UNSUPPORTED, "cuda: no integer MMA for " + std::string(dtype_name(w->type)));
  with_weight_type(w->type, [&]<DType T>() {
    if constexpr (has_codes<T>())
      st = launch("mmq_id_kernel", mmq_id_kernel<T>, grid, block, 0, s.stream, arg(n.dst), arg(w), row_layout(w), qx.value(), x->ne[1],
                  arg(n.src[3]), g);
  });
  return st;
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
    if constexpr (has_codes<T>()) st = launch("mmq_kernel", mmq_kernel<T>, grid, block, 0, s.stream, arg(n.dst), arg(w), row_layout(w), qx.value(), M);
  });
  return st;
}

}  // namespace kestrel::cuda
