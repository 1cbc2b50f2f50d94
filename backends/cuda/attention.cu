// ATTENTION over the paged KV cache, one block per (token, head): scores of the token's visible
// cells (its sequence's block table, in order), a block-wide max and sum, then the weighted sum
// of V, a thread per output dimension. Causal and sliding-window masks, sinks and soft-capping
// as the reference; GQA by kv head = head / group; MLA's V is a strided view of K's rows.
// Scores live in scratch (one row of max_cells per block of a launch). Correct, not fast: the
// reference path; a few tokens take attention_decode.cu (split over the cache, GQA-aware), and
// prefill over an F16 cache takes attention_flash.cu (tensor cores, online softmax).
#include "backends/cuda/kernels.h"

namespace kestrel::cuda {
namespace {

constexpr unsigned kThreads = 128;

struct AttnArgs {
  int64_t n_head, group, hd_k, hd_v;
  float scale, softcap;
  int32_t window;
  int k_kind, v_kind;  // CacheKind
};

__global__ void attention_kernel(TensorArg dst, TensorArg q, TensorArg kc, TensorArg vc, const float* sinks,
                                 const int32_t* packed, AttnArgs a, int64_t item0, float* scores_all,
                                 int64_t max_cells) {
  KS_DYNAMIC_SMEM(float, qr);  // the query, rounded like the cache (hd_k floats)
  __shared__ float scratch[32];
  __shared__ double dscratch[32];
  const AttentionBatch b = AttentionBatch::view(packed);
  const int64_t item = item0 + blockIdx.x, t = item / a.n_head, h = item % a.n_head, kvh = h / a.group;
  const int32_t tt = static_cast<int32_t>(t), nc = b.n_cells_of(tt);
  float* scores = scores_all + blockIdx.x * max_cells;
  const float* qp = reinterpret_cast<const float*>(q.row(h, t, 0));
  for (int64_t d = threadIdx.x; d < a.hd_k; d += blockDim.x) qr[d] = a.k_kind != kCacheF32 ? round_half(qp[d]) : qp[d];
  __syncthreads();

  float mx = -INFINITY;
  for (int32_t i = threadIdx.x; i < nc; i += blockDim.x) {
    const int32_t c = b.cell(tt, i);
    if (!b.visible(tt, c, a.window)) {
      scores[i] = -INFINITY;
      continue;
    }
    double dot = 0;
    for (int64_t d = 0; d < a.hd_k; ++d) dot += static_cast<double>(qr[d]) * cache_at(kc, c, kvh * a.hd_k + d, a.k_kind);
    const float sd = static_cast<float>(dot);
    const float s = a.softcap > 0 ? a.softcap * tanhf(sd * a.scale / a.softcap) : sd * a.scale;
    scores[i] = s;
    mx = fmaxf(mx, s);
  }
  mx = block_max(mx, scratch);
  const float sink = sinks ? sinks[h] : -INFINITY;
  mx = fmaxf(mx, sink);
  double sum = 0;
  for (int32_t i = threadIdx.x; i < nc; i += blockDim.x) {
    const float e = isinf(scores[i]) ? 0.0f : expf(scores[i] - mx);
    scores[i] = e;
    sum += e;
  }
  sum = block_sum(sum, dscratch);  // its barriers also publish every thread's scores
  if (sinks) sum += exp(static_cast<double>(sink - mx));

  float* out = reinterpret_cast<float*>(dst.row(h, t, 0));
  for (int64_t d = threadIdx.x; d < a.hd_v; d += blockDim.x) {
    float acc = 0;
    for (int32_t i = 0; i < nc; ++i) {
      if (scores[i] == 0.0f) continue;
      float p = static_cast<float>(scores[i] / sum);
      if (a.v_kind != kCacheF32) p = round_half(p);
      acc += p * cache_at(vc, b.cell(tt, i), kvh * a.hd_v + d, a.v_kind);
    }
    out[d] = acc;
  }
}

}  // namespace

Status run_attention(const Node& n, Stream& s) {
  if (attention_decode_applies(n)) return run_attention_decode(n, s);
  if (attention_flash_applies(n)) return run_attention_flash(n, s);
  const Tensor *q = n.src[0], *kc = n.src[1], *vc = n.src[2];
  const AttentionParams& ap = n.param<AttentionParams>();
  AttnArgs a{};
  a.n_head = q->ne[1];
  a.hd_k = q->ne[0];
  a.hd_v = n.dst->ne[0];
  a.group = a.n_head / (kc->ne[0] / a.hd_k);
  a.scale = ap.scale, a.softcap = ap.softcap, a.window = ap.window;
  a.k_kind = cache_kind(kc->type), a.v_kind = cache_kind(vc->type);
  // The packed batch's max_cells sizes the scores; the host image is not at hand here, so the
  // cache's cell count bounds it.
  const int64_t max_cells = kc->ne[1];
  const int64_t items = q->ne[1] * q->ne[2];
  const int64_t per_launch = std::max<int64_t>(1, std::min<int64_t>(items, (int64_t{64} << 20) / (4 * max_cells)));
  for (int64_t i0 = 0; i0 < items; i0 += per_launch) {
    const int64_t count = std::min(per_launch, items - i0);
    auto scores = s.scratch(static_cast<size_t>(count * max_cells) * sizeof(float));
    KS_RETURN_IF_ERROR(scores.status());
    KS_RETURN_IF_ERROR(KS_LAUNCH(attention_kernel, dim3(static_cast<unsigned>(count)),
                                 dim3(threads_for(std::max(a.hd_v, a.hd_k), kThreads)),
                                 static_cast<size_t>(a.hd_k) * sizeof(float), s.stream, arg(n.dst), arg(q), arg(kc),
                                 arg(vc), n.src[3] ? static_cast<const float*>(n.src[3]->data) : nullptr,
                                 static_cast<const int32_t*>(n.src[4]->data), a, i0,
                                 static_cast<float*>(scores.value()), max_cells));
  }
  return Status::Ok();
}

}  // namespace kestrel::cuda
