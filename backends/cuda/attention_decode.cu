// ATTENTION for a few tokens over a long cache (decode, speculative verification): each K and V
// row is read once per kv head for its whole query group (GQA), and the cache is split into
// kSplit-cell pieces so that one token still fills the GPU. Two launches:
//   1. scores: a block per (split, kv head, token), the group's queries in shared memory, a
//      warp per cell reading its K row once for all of them (double dots, as the reference,
//      summed across the lanes); masked cells score -inf. Scores go to scratch,
//      [token][head][cell]. The last of a (kv head, token)'s split blocks to finish (an atomic
//      count) then takes its heads' statistics: the max over the scores and the sink, and the
//      sum of exp(s - max) in double.
//   2. pv: a block per (split, kv head, token): the split's probabilities of every head of the
//      group in shared memory, p = exp(s - max) / sum rounded to fp16 for an F16 V cache (the
//      reference's rounding: the normalised p, which an online softmax would not have), then a
//      thread per output dimension, V read once for the group. Partial sums to scratch; the last
//      split block to finish adds them in split order into the output.
// Masks, sinks, soft-capping and MLA's strided V as in the part-1 kernel (attention.cu), which
// stays the path for prefill. A group of more than kMaxGroup query heads (MLA's one KV head for
// all of DeepSeek-V3's 128) is split into sub-groups of up to kMaxGroup, a block each: the K and V
// rows are then read once per sub-group. (The statistics and the final sum were launches of their
// own, 4.1 and 3.5 us of a decode layer on an H100 for a few hundred values' work. Folded in, the
// two kernels took 28.0 us where the four took 26.2: the last block's work is serial; what is
// saved is two launch gaps of a replayed step.)
#include "backends/cuda/kernels.h"

namespace kestrel::cuda {
namespace {

constexpr int kSplit = 256;      // cells per split
constexpr int kMaxGroup = 16;    // query heads per block (a kv head's group, or part of it)
constexpr int kMaxTokens = 16;   // tokens handled here
constexpr unsigned kThreads = 128;

struct DecodeArgs {
  int64_t n_head, group, hd_k, hd_v, max_cells, n_split;
  int64_t n_sub;  // blocks per kv head: ceil(group / kMaxGroup)
  float scale, softcap;
  int32_t window;
  int k_kind, v_kind;  // CacheKind
};

// The block's kv head, its first query head and how many it takes (blockIdx.y: kv head, sub-group).
struct SubGroup {
  int64_t kvh, h0, n;
};
__device__ __forceinline__ SubGroup sub_group(const DecodeArgs& a) {
  const int64_t kvh = blockIdx.y / a.n_sub, first = (blockIdx.y % a.n_sub) * kMaxGroup;
  return {kvh, kvh * a.group + first, a.group - first < kMaxGroup ? a.group - first : kMaxGroup};
}

// Whether this block is the last of n to get here on `counter` (every thread calls it; what the
// blocks wrote before is then visible to the last one's load_l2 reads). The last one sets the
// counter back to zero for the next launch.
__device__ __forceinline__ bool last_block(unsigned* counter, unsigned n) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, 1u) == n - 1;
    if (last) atomicExch(counter, 0u);
  }
  __syncthreads();
  if (last) __threadfence();
  return last;
}

// Head h's statistics for token t over its nc scores (block-wide reductions; every thread calls).
__device__ void head_stats(int64_t h, int32_t t, int32_t nc, const float* sinks, const DecodeArgs& a,
                           const float* scores, float* maxes, double* sums) {
  __shared__ float scratch[32];
  __shared__ double dscratch[32];
  const float* s = scores + (t * a.n_head + h) * a.max_cells;
  float mx = -INFINITY;
  for (int32_t i = threadIdx.x; i < nc; i += blockDim.x) mx = fmaxf(mx, load_l2(s + i));
  mx = block_max(mx, scratch);
  const float sink = sinks ? sinks[h] : -INFINITY;
  mx = fmaxf(mx, sink);
  double sum = 0;
  for (int32_t i = threadIdx.x; i < nc; i += blockDim.x) {
    const float si = load_l2(s + i);
    sum += isinf(si) ? 0.0f : expf(si - mx);
  }
  sum = block_sum(sum, dscratch);
  if (threadIdx.x == 0) {
    maxes[t * a.n_head + h] = mx;
    sums[t * a.n_head + h] = sum + (sinks ? exp(static_cast<double>(sink - mx)) : 0.0);
  }
}

__global__ void scores_kernel(TensorArg q, TensorArg kc, const int32_t* packed, DecodeArgs a, float* scores,
                              const float* sinks, float* maxes, double* sums, unsigned* done) {
  KS_DYNAMIC_SMEM(float, qs);  // [n][hd_k], rounded like the cache
  const AttentionBatch b = AttentionBatch::view(packed);
  const int32_t t = static_cast<int32_t>(blockIdx.z), nc = b.n_cells_of(t);
  const SubGroup sg = sub_group(a);
  const int64_t kvh = sg.kvh, h0 = sg.h0, group = sg.n;
  for (int64_t i = threadIdx.x; i < group * a.hd_k; i += blockDim.x) {
    const float v = reinterpret_cast<const float*>(q.row(h0 + i / a.hd_k, t, 0))[i % a.hd_k];
    qs[i] = a.k_kind != kCacheF32 ? round_half(v) : v;
  }
  __syncthreads();
  // A warp per cell: the lanes read its K row together (coalesced), each dotting its share of
  // the dimensions with every query of the group in double, then the warp sums the shares.
  const int lane = static_cast<int>(threadIdx.x % 32), n_warps = static_cast<int>(blockDim.x / 32);
  const int32_t begin = static_cast<int32_t>(blockIdx.x * kSplit);
  const int32_t end = nc < begin + kSplit ? nc : begin + kSplit;
  for (int32_t i = begin + static_cast<int32_t>(threadIdx.x / 32); i < end; i += n_warps) {
    const int32_t c = b.cell(t, i);
    float* out = scores + (t * a.n_head + h0) * a.max_cells + i;
    if (!b.visible(t, c, a.window)) {  // the same answer in every lane
      if (lane < group) out[lane * a.max_cells] = -INFINITY;
      continue;
    }
    double dot[kMaxGroup];
    for (int g = 0; g < kMaxGroup; ++g) dot[g] = 0;
    for (int64_t d = lane; d < a.hd_k; d += 32) {
      const double k = cache_at(kc, c, kvh * a.hd_k + d, a.k_kind);
      for (int g = 0; g < kMaxGroup; ++g)
        if (g < group) dot[g] += static_cast<double>(qs[g * a.hd_k + d]) * k;
    }
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g >= group) break;
      double v = dot[g];
      for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane == g) {
        const float sd = static_cast<float>(v);
        out[g * a.max_cells] = a.softcap > 0 ? a.softcap * tanhf(sd * a.scale / a.softcap) : sd * a.scale;
      }
    }
  }
  if (!last_block(done + t * gridDim.y + blockIdx.y, gridDim.x)) return;
  for (int64_t g = 0; g < group; ++g) head_stats(h0 + g, t, nc, sinks, a, scores, maxes, sums);
}

__global__ void pv_kernel(TensorArg dst, TensorArg vc, const int32_t* packed, DecodeArgs a, const float* scores,
                          const float* maxes, const double* sums, float* partial, unsigned* done) {
  KS_DYNAMIC_SMEM(float, ps);  // [n][kSplit] probabilities of the split's cells
  const AttentionBatch b = AttentionBatch::view(packed);
  const int32_t t = static_cast<int32_t>(blockIdx.z), nc = b.n_cells_of(t);
  const SubGroup sg = sub_group(a);
  const int64_t kvh = sg.kvh, h0 = sg.h0, group = sg.n;
  const int32_t i0 = static_cast<int32_t>(blockIdx.x * kSplit), n = nc - i0 < 0 ? 0 : (nc - i0 < kSplit ? nc - i0 : kSplit);
  // Only the split's n cells (the V loop reads no further): a short cache's few probabilities
  // take a thread each rather than every thread walking kSplit slots.
  for (int32_t j = static_cast<int32_t>(threadIdx.x); j < static_cast<int32_t>(group) * n; j += static_cast<int32_t>(blockDim.x)) {
    const int32_t g = j / n, i = j % n;
    const int64_t h = h0 + g;
    const float s = scores[(t * a.n_head + h) * a.max_cells + i0 + i];
    const float e = isinf(s) ? 0.0f : expf(s - maxes[t * a.n_head + h]);
    float p = static_cast<float>(e / sums[t * a.n_head + h]);
    if (a.v_kind != kCacheF32) p = round_half(p);
    if (e == 0.0f) p = 0.0f;
    ps[g * kSplit + i] = p;
  }
  __syncthreads();
  // A thread per output dimension, the cells in order (the reference's float sums); kAhead V
  // values loaded before they are used, so that loads overlap.
  constexpr int kAhead = 8;
  for (int64_t d = threadIdx.x; d < a.hd_v; d += blockDim.x) {
    float acc[kMaxGroup];
    for (int g = 0; g < kMaxGroup; ++g) acc[g] = 0;
    for (int32_t i = 0; i < n; i += kAhead) {
      float v[kAhead];
      bool use[kAhead];
      for (int u = 0; u < kAhead; ++u) {
        use[u] = false;
        if (i + u < n)
          for (int g = 0; g < kMaxGroup; ++g) use[u] |= g < group && ps[g * kSplit + i + u] != 0.0f;
        v[u] = use[u] ? cache_at(vc, b.cell(t, i0 + i + u), kvh * a.hd_v + d, a.v_kind) : 0.0f;
      }
      for (int u = 0; u < kAhead; ++u) {
        if (!use[u]) continue;
        for (int g = 0; g < kMaxGroup; ++g)
          if (g < group) acc[g] += ps[g * kSplit + i + u] * v[u];
      }
    }
    for (int64_t g = 0; g < group; ++g)
      partial[((blockIdx.x * gridDim.z + t) * a.n_head + h0 + g) * a.hd_v + d] = acc[g];
  }
  // The last split block: the output is the splits' partial sums, added in split order.
  if (!last_block(done + t * gridDim.y + blockIdx.y, gridDim.x)) return;
  for (int64_t i = threadIdx.x; i < group * a.hd_v; i += blockDim.x) {
    const int64_t h = h0 + i / a.hd_v, d = i % a.hd_v;
    float sum = 0;
    for (int64_t sp = 0; sp < a.n_split; ++sp) sum += load_l2(partial + ((sp * gridDim.z + t) * a.n_head + h) * a.hd_v + d);
    reinterpret_cast<float*>(dst.row(h, t, 0))[d] = sum;
  }
}

DecodeArgs decode_args(const Node& n) {
  const Tensor *q = n.src[0], *kc = n.src[1], *vc = n.src[2];
  const AttentionParams& ap = n.param<AttentionParams>();
  DecodeArgs a{};
  a.n_head = q->ne[1], a.hd_k = q->ne[0], a.hd_v = n.dst->ne[0];
  a.group = a.n_head / (kc->ne[0] / a.hd_k);
  a.n_sub = (a.group + kMaxGroup - 1) / kMaxGroup;
  a.max_cells = kc->ne[1];  // bounds the packed batch's max_cells, which only the device holds
  a.n_split = (a.max_cells + kSplit - 1) / kSplit;
  a.scale = ap.scale, a.softcap = ap.softcap, a.window = ap.window;
  a.k_kind = cache_kind(kc->type), a.v_kind = cache_kind(vc->type);
  return a;
}

// Scratch: scores [T][n_head][max_cells], maxes and sums [T][n_head], partials [n_split][T][n_head][hd_v].
size_t scratch_bytes(const DecodeArgs& a, int64_t T) {
  const auto up = [](int64_t b) { return static_cast<size_t>((b + 255) / 256 * 256); };
  return up(T * a.n_head * a.max_cells * 4) + up(T * a.n_head * 4) + up(T * a.n_head * 8) +
         up(a.n_split * T * a.n_head * a.hd_v * 4);
}

}  // namespace

bool attention_decode_applies(const Node& n) {
  if (reference_kernels_only()) return false;
  const DecodeArgs a = decode_args(n);
  const int64_t T = n.src[0]->ne[2];
  return T <= kMaxTokens && std::min<int64_t>(a.group, kMaxGroup) * a.hd_k * 4 <= (48 << 10) &&
         scratch_bytes(a, T) <= (size_t{64} << 20);
}

Status run_attention_decode(const Node& n, Stream& s) {
  const DecodeArgs a = decode_args(n);
  const int64_t T = n.src[0]->ne[2];
  auto mem = s.scratch(scratch_bytes(a, T));
  KS_RETURN_IF_ERROR(mem.status());
  const auto up = [](int64_t b) { return static_cast<size_t>((b + 255) / 256 * 256); };
  uint8_t* base = static_cast<uint8_t*>(mem.value());
  float* scores = reinterpret_cast<float*>(base);
  base += up(T * a.n_head * a.max_cells * 4);
  float* maxes = reinterpret_cast<float*>(base);
  base += up(T * a.n_head * 4);
  double* sums = reinterpret_cast<double*>(base);
  base += up(T * a.n_head * 8);
  float* partial = reinterpret_cast<float*>(base);
  const int32_t* packed = static_cast<const int32_t*>(n.src[4]->data);
  const float* sinks = n.src[3] ? static_cast<const float*>(n.src[3]->data) : nullptr;
  const int64_t per_block = std::min<int64_t>(a.group, kMaxGroup);  // query heads
  const dim3 split_grid(static_cast<unsigned>(a.n_split), static_cast<unsigned>(a.n_head / a.group * a.n_sub),
                        static_cast<unsigned>(T));
  // A counter per (kv sub-group, token) for each launch.
  const size_t per_launch = static_cast<size_t>(split_grid.y) * split_grid.z;
  auto done = s.counters(2 * per_launch);
  KS_RETURN_IF_ERROR(done.status());
  KS_RETURN_IF_ERROR(KS_LAUNCH(scores_kernel, split_grid, dim3(kThreads), static_cast<size_t>(per_block * a.hd_k) * 4,
                               s.stream, arg(n.src[0]), arg(n.src[1]), packed, a, scores, sinks, maxes, sums,
                               done.value()));
  return KS_LAUNCH(pv_kernel, split_grid, dim3(threads_for(a.hd_v, kThreads)), static_cast<size_t>(per_block * kSplit) * 4,
                   s.stream, arg(n.dst), arg(n.src[2]), packed, a, static_cast<const float*>(scores),
                   static_cast<const float*>(maxes), static_cast<const double*>(sums), partial, done.value() + per_launch);
}

}  // namespace kestrel::cuda
