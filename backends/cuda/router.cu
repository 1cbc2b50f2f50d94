// ROUTER: MoE expert choice per token, one thread per token (a few hundred experts and a top-8
// are serial work the size of one row): gating, the selection bias, DeepSeek's group masking,
// top-k (ties to the lower index, NaN last), then the chosen weights' softmax, normalisation and
// scale, in the reference's order.
#include "backends/cuda/kernels.h"

namespace kestrel::cuda {
namespace {

struct RouterArgs {
  int32_t gating, k, n_groups, keep;
  bool normalize;
  float scale;
};

__device__ __forceinline__ float rank_key(float v) { return isnan(v) ? -INFINITY : v; }

// Indices of the k largest keys of v[0..n), best first, into out; ties to the lower index.
__device__ void top_k(const float* v, int64_t n, int32_t k, int32_t* out) {
  for (int32_t j = 0; j < k; ++j) {
    int32_t best = -1;
    float best_key = -INFINITY;
    for (int64_t i = 0; i < n; ++i) {
      bool taken = false;
      for (int32_t m = 0; m < j; ++m) taken |= out[m] == i;
      if (taken) continue;
      const float key = rank_key(v[i]);
      if (best < 0 || key > best_key) best = static_cast<int32_t>(i), best_key = key;
    }
    out[j] = best;
  }
}

__global__ void router_kernel(TensorArg weights, TensorArg logits, const float* bias, TensorArg ids, RouterArgs a,
                              int32_t* group_ids_all) {
  KS_DYNAMIC_SMEM(float, smem);  // p[E], sel[E], group scores[n_groups] per thread
  const int64_t E = logits.ne[0], T = logits.ne[1];
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= T) return;
  const int64_t per_thread = 2 * E + (a.n_groups > 1 ? a.n_groups : 0);
  float* p = smem + threadIdx.x * per_thread;
  float* sel = p + E;
  float* gscore = sel + E;
  const float* x = logits.f32(t);
  if (a.gating == 1) {
    float mx = -INFINITY;
    for (int64_t e = 0; e < E; ++e) mx = fmaxf(mx, x[e]);
    float sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += (p[e] = expf(x[e] - mx));
    for (int64_t e = 0; e < E; ++e) p[e] /= sum;
  } else if (a.gating == 2) {
    for (int64_t e = 0; e < E; ++e) p[e] = 1.0f / (1.0f + expf(-x[e]));
  } else {
    for (int64_t e = 0; e < E; ++e) p[e] = x[e];
  }
  for (int64_t e = 0; e < E; ++e) sel[e] = p[e] + (bias ? bias[e] : 0.0f);
  if (a.n_groups > 1 && a.keep < a.n_groups) {
    const int64_t per = E / a.n_groups;
    for (int32_t g = 0; g < a.n_groups; ++g) {  // the sum of each group's two best scores
      float s0 = -INFINITY, s1 = -INFINITY;
      for (int64_t e = g * per; e < (g + 1) * per; ++e) {
        const float v = rank_key(sel[e]);
        if (v > s0) s1 = s0, s0 = v;
        else if (v > s1) s1 = v;
      }
      gscore[g] = s0 + (per > 1 ? s1 : 0.0f);
    }
    int32_t* kept = group_ids_all + t * a.n_groups;
    top_k(gscore, a.n_groups, a.keep, kept);
    for (int32_t g = 0; g < a.n_groups; ++g) {
      bool on = false;
      for (int32_t m = 0; m < a.keep; ++m) on |= kept[m] == g;
      if (!on)
        for (int64_t e = g * per; e < (g + 1) * per; ++e) sel[e] = -INFINITY;
    }
  }
  int32_t* id = reinterpret_cast<int32_t*>(ids.row(t));
  top_k(sel, E, a.k, id);
  float* w = weights.f32(t);
  for (int32_t i = 0; i < a.k; ++i) w[i] = p[id[i]];
  if (a.gating == 3) {  // softmax over the chosen logits (gpt-oss)
    float mx = -INFINITY;
    for (int32_t i = 0; i < a.k; ++i) mx = fmaxf(mx, w[i]);
    float sum = 0;
    for (int32_t i = 0; i < a.k; ++i) sum += (w[i] = expf(w[i] - mx));
    for (int32_t i = 0; i < a.k; ++i) w[i] /= sum;
  }
  if (a.normalize) {
    float sum = 0;
    for (int32_t i = 0; i < a.k; ++i) sum += w[i];
    for (int32_t i = 0; i < a.k; ++i) w[i] /= sum;
  }
  if (a.scale != 0.0f)
    for (int32_t i = 0; i < a.k; ++i) w[i] *= a.scale;
}

}  // namespace

Status run_router(const Node& n, Stream& s) {
  const RouterParams& rp = n.param<RouterParams>();
  const RouterArgs a{rp.gating, rp.n_used, rp.n_groups, rp.n_groups_used, rp.normalize, rp.weights_scale};
  const int64_t E = n.src[0]->ne[0], T = n.src[0]->ne[1];
  const int64_t per_thread = 2 * E + (a.n_groups > 1 ? a.n_groups : 0);
  // Threads per block so that their rows fit the 48 KiB of shared memory every GPU grants.
  const unsigned threads = static_cast<unsigned>(std::clamp<int64_t>((48 << 10) / (per_thread * 4), 1, 32));
  if (per_thread * 4 > (48 << 10)) return Error(KESTREL_ERR_UNSUPPORTED, "cuda: ROUTER over " + std::to_string(E) + " experts");
  auto groups = s.scratch(static_cast<size_t>(T * std::max(1, a.n_groups)) * sizeof(int32_t));
  KS_RETURN_IF_ERROR(groups.status());
  return KS_LAUNCH(router_kernel, dim3(blocks_for(T, threads)), dim3(threads),
                   static_cast<size_t>(per_thread * threads) * sizeof(float), s.stream, arg(n.dst), arg(n.src[0]),
                   n.src[1] ? static_cast<const float*>(n.src[1]->data) : nullptr, arg(n.src[2]), a,
                   static_cast<int32_t*>(groups.value()));
}

}  // namespace kestrel::cuda
