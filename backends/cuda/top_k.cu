// TOP_K: each row's k best values in the sampler's strict order (higher first, ties to the lower
// index, NaN above everything), so a decode step hands back k (value, id) pairs instead of the
// whole vocabulary. One block per row, three phases:
//   1. radix select: four passes of 8 bits over order-preserving keys find the k-th best key
//      and how many elements equal to it are taken;
//   2. ordered gather: everything above that key, and the lowest indices equal to it (a block
//      scan over index-ordered chunks, so ties resolve as the reference does);
//   3. rank sort of the k gathered pairs (k <= 256: each thread counts who beats its pair).
// Cost: five reads of the row (from L2 after the first); one block is enough beside a step that
// reads the whole model.
#include "backends/cuda/kernels.h"

namespace kestrel::cuda {
namespace {

constexpr unsigned kMaxThreads = 256;
constexpr int32_t kMaxK = 256;  // ops.def

// Larger float -> larger key; -0 and +0 are one key (they compare equal); NaN is the largest.
__device__ __forceinline__ uint32_t order_key(float v) {
  if (isnan(v)) return 0xFFFFFFFFu;
  uint32_t u = float_to_bits(v);
  if (u == 0x80000000u) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__global__ void top_k_kernel(TensorArg vals, TensorArg logits, TensorArg ids, int32_t k) {
  __shared__ uint32_t hist[256];
  __shared__ uint32_t sel_key[kMaxK];
  __shared__ int32_t sel_id[kMaxK];
  __shared__ uint32_t warp_count[kMaxThreads / 32];
  __shared__ uint32_t s_prefix, s_remaining, s_n_gt, s_n_eq, s_done;
  const int64_t V = logits.ne[0];
  const int64_t r = blockIdx.x;
  const float* x = logits.f32(r);
  const unsigned tid = threadIdx.x, lane = tid % 32, warp = tid / 32, n_warps = blockDim.x / 32;

  // 1. The k-th best key, 8 bits at a time from the top; `remaining` counts how many of the
  // elements matching the prefix so far are still to be taken.
  uint32_t prefix = 0, mask = 0, remaining = static_cast<uint32_t>(k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (unsigned i = tid; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    for (int64_t i = tid; i < V; i += blockDim.x) {
      const uint32_t key = order_key(x[i]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      uint32_t above = 0;
      int d = 255;
      for (; d > 0 && above + hist[d] < remaining; --d) above += hist[d];
      s_prefix = prefix | (static_cast<uint32_t>(d) << shift);
      s_remaining = remaining - above;
    }
    __syncthreads();
    prefix = s_prefix;
    remaining = s_remaining;
    mask |= 255u << shift;
    __syncthreads();  // everyone has read s_*, hist is free for the next pass
  }

  // 2. Keys above the k-th: k - remaining of them, in any order. Keys equal to it: the first
  // `remaining` by index, placed after them.
  const uint32_t n_gt = static_cast<uint32_t>(k) - remaining;
  if (tid == 0) s_n_gt = 0, s_n_eq = 0;
  __syncthreads();
  for (int64_t base = 0; base < V; base += blockDim.x) {
    const int64_t i = base + tid;
    const uint32_t key = i < V ? order_key(x[i]) : 0;
    const bool gt = i < V && key > prefix, eq = i < V && key == prefix;
    if (gt) {
      const uint32_t p = atomicAdd(&s_n_gt, 1u);
      sel_key[p] = key, sel_id[p] = static_cast<int32_t>(i);
    }
    const unsigned ballot = __ballot_sync(0xffffffffu, eq);
    if (lane == 0) warp_count[warp] = static_cast<uint32_t>(__popc(ballot));
    __syncthreads();
    uint32_t before = s_n_eq + static_cast<uint32_t>(__popc(ballot & ((1u << lane) - 1u)));
    for (unsigned w = 0; w < warp; ++w) before += warp_count[w];
    if (eq && before < remaining) sel_key[n_gt + before] = key, sel_id[n_gt + before] = static_cast<int32_t>(i);
    __syncthreads();
    if (tid == 0) {
      for (unsigned w = 0; w < n_warps; ++w) s_n_eq += warp_count[w];
      s_done = s_n_eq >= remaining && s_n_gt >= n_gt;  // one flag: s_n_gt moves again next chunk
    }
    __syncthreads();
    if (s_done) break;
  }

  // 3. Each pair's place is the number of pairs that beat it.
  float* out_v = vals.f32(r);
  int32_t* out_i = reinterpret_cast<int32_t*>(ids.row(r));
  for (int32_t j = static_cast<int32_t>(tid); j < k; j += static_cast<int32_t>(blockDim.x)) {
    const uint32_t kj = sel_key[j];
    const int32_t ij = sel_id[j];
    int32_t rank = 0;
    for (int32_t m = 0; m < k; ++m) rank += sel_key[m] > kj || (sel_key[m] == kj && sel_id[m] < ij);
    out_v[rank] = x[ij];
    out_i[rank] = ij;
  }
}

}  // namespace

bool top_k_supported(const Node& n) {
  return n.src[0]->type == DType::F32 && n.src[1] && n.src[1]->type == DType::I32 && n.dst->ne[0] >= 1 &&
         n.dst->ne[0] <= kMaxK && n.dst->ne[0] <= n.src[0]->ne[0] && n.src[0]->ne[2] == 1 && n.src[0]->ne[3] == 1;
}

Status run_top_k(const Node& n, Stream& s) {
  const int64_t V = n.src[0]->ne[0], R = n.src[0]->ne[1];
  return KS_LAUNCH(top_k_kernel, dim3(static_cast<unsigned>(R)), dim3(threads_for(V, kMaxThreads)), 0, s.stream,
                   arg(n.dst), arg(n.src[0]), arg(n.src[1]), static_cast<int32_t>(n.dst->ne[0]));
}

}  // namespace kestrel::cuda
