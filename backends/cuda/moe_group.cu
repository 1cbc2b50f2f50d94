// MATMUL_ID's (slot, token) pairs grouped by expert on the device (ExpertTiles, common.cuh), for
// the grouped tensor-core kernels of MoE prefill (mmq.cu, matmul_fp8.cu): nothing goes back to
// the host, so the launch that follows has an upper bound of tiles for its grid.
#include "backends/cuda/kernels.h"

namespace kestrel::cuda {
namespace {

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

}  // namespace

int64_t expert_tiles_max(const Node& n) {
  const int64_t P = n.dst->ne[1] * n.dst->ne[2];
  return (P + kMmaCols - 1) / kMmaCols + std::min<int64_t>(n.src[0]->ne[2] + 1, P);  // a partial tile per bucket
}

size_t expert_tiles_bytes(const Node& n) { return static_cast<size_t>(expert_tiles_max(n) * (kMmaCols + 1) + 1) * 4; }

Expected<ExpertTiles> group_pairs(const Node& n, void* mem, Stream& s) {
  const int64_t n_expert = n.src[0]->ne[2], max_tiles = expert_tiles_max(n);
  if (n_expert + 1 > kMaxBuckets) return Error(KESTREL_ERR_UNSUPPORTED, "cuda: MATMUL_ID of " + std::to_string(n_expert) + " experts");
  int32_t* base = static_cast<int32_t*>(mem);
  const ExpertTiles g{base, base + max_tiles * kMmaCols, base + max_tiles * (kMmaCols + 1)};
  KS_RETURN_IF_ERROR(KS_LAUNCH(group_pairs_kernel, dim3(1), dim3(threads_for(32 * (n_expert + 1), 1024)), 0, s.stream,
                               arg(n.src[2]), n.dst->ne[1], n.dst->ne[2], n_expert, g));
  return g;
}

}  // namespace kestrel::cuda
