// Reference kernels for the mixture-of-experts and MLA ops: ROUTER, MATMUL_ID, MOE_SUM,
// SWIGLU_OAI and CONCAT. Scalar and obvious, like the rest of backends/ref.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "backends/ref/ops_ref.h"

namespace kestrel::ref {
namespace {

float* row_of(const Tensor* t, int64_t r) {
  return t->f32(r % t->ne[1], (r / t->ne[1]) % t->ne[2], r / (t->ne[1] * t->ne[2]));
}

// Indices of the k largest values of v (ties: the lower index first; NaN ranks last, so bad
// weights give a defined order instead of an invalid comparator), best first.
void top_k(const std::vector<float>& v, int32_t k, int32_t* out) {
  std::vector<int32_t> idx(v.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<int32_t>(i);
  auto key = [&](int32_t i) { return std::isnan(v[i]) ? -std::numeric_limits<float>::infinity() : v[i]; };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); });
  std::copy(idx.begin(), idx.begin() + k, out);
}

// Keeps the `keep` expert groups whose two best selection scores sum highest; the others are
// excluded (-inf), as DeepSeek V3 does before its top-k.
void mask_groups(std::vector<float>& sel, int32_t n_groups, int32_t keep) {
  const int64_t per = static_cast<int64_t>(sel.size()) / n_groups;
  std::vector<float> group_score(n_groups);
  for (int32_t g = 0; g < n_groups; ++g) {
    std::vector<float> s(sel.begin() + g * per, sel.begin() + (g + 1) * per);
    for (float& x : s)
      if (std::isnan(x)) x = -std::numeric_limits<float>::infinity();
    std::sort(s.begin(), s.end(), std::greater<float>());
    group_score[g] = s[0] + (per > 1 ? s[1] : 0.0f);
  }
  std::vector<int32_t> kept(keep);
  top_k(group_score, keep, kept.data());
  std::vector<bool> on(n_groups, false);
  for (int32_t g : kept) on[g] = true;
  for (int32_t g = 0; g < n_groups; ++g)
    if (!on[g]) std::fill(sel.begin() + g * per, sel.begin() + (g + 1) * per, -std::numeric_limits<float>::infinity());
}

}  // namespace

RouterTieLog& router_tie_log() {
  static RouterTieLog log;
  return log;
}

void router(const Node& n, int64_t t0, int64_t t1) {
  const Tensor *logits = n.src[0], *bias = n.src[1], *ids = n.src[2];
  const int64_t E = logits->ne[0];
  const RouterParams& rp = n.param<RouterParams>();
  const int32_t gating = rp.gating, k = rp.n_used, n_groups = rp.n_groups, keep = rp.n_groups_used;
  const bool normalise = rp.normalize;
  const float scale = rp.weights_scale;
  std::vector<float> p(E), sel(E);
  for (int64_t t = t0; t < t1; ++t) {
    const float* x = logits->f32(t);
    if (gating == 1) {  // softmax over every expert
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t e = 0; e < E; ++e) mx = std::max(mx, x[e]);
      double sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(x[e] - mx));
      for (int64_t e = 0; e < E; ++e) p[e] = static_cast<float>(p[e] / sum);
    } else if (gating == 2) {
      for (int64_t e = 0; e < E; ++e) p[e] = 1.0f / (1.0f + std::exp(-x[e]));
    } else {
      for (int64_t e = 0; e < E; ++e) p[e] = x[e];
    }
    for (int64_t e = 0; e < E; ++e) sel[e] = p[e] + (bias ? static_cast<const float*>(bias->data)[e] : 0.0f);
    if (n_groups > 1 && keep < n_groups) mask_groups(sel, n_groups, keep);
    int32_t* id = reinterpret_cast<int32_t*>(ids->row(t));
    top_k(sel, k, id);
    if (RouterTieLog& tl = router_tie_log(); tl.enabled.load(std::memory_order_relaxed) && k < E) {
      std::vector<float> sorted(sel);
      std::nth_element(sorted.begin(), sorted.begin() + k, sorted.end(), std::greater<float>());
      const float kth = *std::min_element(sorted.begin(), sorted.begin() + k);
      if (kth - sorted[static_cast<size_t>(k)] < tl.gap) {
        std::lock_guard<std::mutex> lock(tl.mu);
        tl.rows.push_back(t);
      }
    }
    float* w = n.dst->f32(t);
    for (int32_t i = 0; i < k; ++i) w[i] = p[id[i]];
    if (gating == 3) {  // softmax over the chosen logits only (gpt-oss)
      float mx = -std::numeric_limits<float>::infinity();
      for (int32_t i = 0; i < k; ++i) mx = std::max(mx, w[i]);
      double sum = 0;
      for (int32_t i = 0; i < k; ++i) sum += (w[i] = std::exp(w[i] - mx));
      for (int32_t i = 0; i < k; ++i) w[i] = static_cast<float>(w[i] / sum);
    }
    if (normalise) {
      float sum = 0;
      for (int32_t i = 0; i < k; ++i) sum += w[i];
      for (int32_t i = 0; i < k; ++i) w[i] /= sum;
    }
    if (scale != 0.0f)
      for (int32_t i = 0; i < k; ++i) w[i] *= scale;
  }
}

int32_t expert_of(const Node& n, int64_t slot, int64_t t) {
  const Tensor* ids = n.src[2];
  if (!ids) return static_cast<int32_t>(slot);
  return reinterpret_cast<const int32_t*>(ids->row(t))[slot];
}

void matmul_id(const Node& n) {
  const Tensor *w = n.src[0], *x = n.src[1], *bias = n.src[3];
  const int64_t K = w->ne[0], N = w->ne[1], E = w->ne[2];
  const int64_t n_slots = n.dst->ne[1], T = n.dst->ne[2];
  const DTypeInfo& ti = dtype_info(w->type);
  std::vector<float> wr(K), xr(K);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < n_slots; ++i) {
      const int32_t e = expert_of(n, i, t);
      float* y = n.dst->f32(i, t);
      if (e < 0 || e >= E) {  // not a valid expert: no contribution
        std::fill(y, y + N, 0.0f);
        continue;
      }
      round_activations(ti.vec_dot_type, x->f32(x->ne[1] == 1 ? 0 : i, t), xr.data(), K);
      for (int64_t r = 0; r < N; ++r) {
        ti.to_float(w->row(r, e), wr.data(), K);
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += static_cast<double>(wr[k]) * xr[k];
        y[r] = static_cast<float>(s) + (bias ? bias->f32(e)[r] : 0.0f);
      }
    }
  }
}

void moe_sum(const Node& n, int64_t t0, int64_t t1) {
  const Tensor *x = n.src[0], *wt = n.src[1];
  const int64_t N = x->ne[0], n_slots = x->ne[1];
  for (int64_t t = t0; t < t1; ++t) {
    float* y = n.dst->f32(t);
    const float* w = wt->f32(t);
    for (int64_t r = 0; r < N; ++r) y[r] = x->f32(0, t)[r] * w[0];
    for (int64_t i = 1; i < n_slots; ++i) {
      const float* xi = x->f32(i, t);
      for (int64_t r = 0; r < N; ++r) y[r] += xi[r] * w[i];
    }
  }
}

void swiglu_oai(const Node& n, int64_t r0, int64_t r1) {
  const float alpha = n.param<SwigluOaiParams>().alpha, limit = n.param<SwigluOaiParams>().limit;
  const int64_t K = n.src[0]->ne[0];
  for (int64_t r = r0; r < r1; ++r) {
    const float* g = row_of(n.src[0], r);
    const float* u = row_of(n.src[1], r);
    float* y = row_of(n.dst, r);
    for (int64_t k = 0; k < K; ++k) {
      const float a = std::min(g[k], limit);
      const float b = std::clamp(u[k], -limit, limit);
      y[k] = a / (1.0f + std::exp(alpha * (-a))) * (b + 1.0f);
    }
  }
}

void concat(const Node& n, int64_t r0, int64_t r1) {
  const int64_t a = n.src[0]->ne[0], b = n.src[1]->ne[0];
  for (int64_t r = r0; r < r1; ++r) {
    float* y = row_of(n.dst, r);
    std::copy_n(row_of(n.src[0], r), a, y);
    std::copy_n(row_of(n.src[1], r), b, y + a);
  }
}

}  // namespace kestrel::ref
