// MATMUL_ID on the CPU: group by expert, gather, one cpu::matmul per used expert, scatter. The
// per-expert product goes through the same entry point as MATMUL, so it gets every speed-up the
// dense kernels get.
#include <algorithm>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/moe.h"
#include "backends/ref/ops_ref.h"

namespace kestrel::cpu {

ExpertMatmulStats& expert_matmul_stats() {
  static ExpertMatmulStats s;
  return s;
}

void matmul_id(const Node& n, ThreadPool& pool) {
  const Tensor *w = n.src[0], *x = n.src[1], *bias = n.src[3];
  const int64_t K = w->ne[0], N = w->ne[1], E = w->ne[2];
  const int64_t n_slots = n.dst->ne[1], T = n.dst->ne[2];
  // (slot, token) pairs per expert, in batch order.
  std::vector<std::vector<int64_t>> pairs(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < n_slots; ++i) {
      const int32_t e = ref::expert_of(n, i, t);
      if (e >= 0 && e < E) {
        pairs[e].push_back(t * n_slots + i);
      } else {  // not a valid expert: no contribution
        float* y = n.dst->f32(i, t);
        std::fill(y, y + N, 0.0f);
      }
    }
  }
  static thread_local std::vector<float> xg, yg;  // owned by the calling thread
  for (int64_t e = 0; e < E; ++e) {
    const std::vector<int64_t>& pe = pairs[e];
    if (pe.empty()) continue;
    const int64_t m = static_cast<int64_t>(pe.size());
    xg.resize(static_cast<size_t>(K * m));
    yg.resize(static_cast<size_t>(N * m));
    for (int64_t j = 0; j < m; ++j) {
      const int64_t i = pe[j] % n_slots, t = pe[j] / n_slots;
      const float* col = x->f32(x->ne[1] == 1 ? 0 : i, t);
      std::copy_n(col, K, xg.data() + j * K);
    }
    Tensor we = make_tensor(w->type, K, N, 1, 1, static_cast<uint8_t*>(w->data) + e * w->nb[2]);
    we.nb[1] = w->nb[1];
    Tensor xt = make_tensor(DType::F32, K, m, 1, 1, xg.data());
    Tensor yt = make_tensor(DType::F32, N, m, 1, 1, yg.data());
    Node mm;
    mm.op = Op::MATMUL;
    mm.dst = &yt;
    mm.src[0] = &we;
    mm.src[1] = &xt;
    matmul(mm, pool);
    ExpertMatmulStats& st = expert_matmul_stats();
    st.expert_matmuls.fetch_add(1, std::memory_order_relaxed);
    st.weight_bytes.fetch_add(we.n_bytes(), std::memory_order_relaxed);
    const float* b = bias ? bias->f32(e) : nullptr;
    for (int64_t j = 0; j < m; ++j) {
      const int64_t i = pe[j] % n_slots, t = pe[j] / n_slots;
      float* y = n.dst->f32(i, t);
      const float* src = yg.data() + j * N;
      if (b) {
        for (int64_t r = 0; r < N; ++r) y[r] = src[r] + b[r];
      } else {
        std::copy_n(src, N, y);
      }
    }
  }
}

}  // namespace kestrel::cpu
