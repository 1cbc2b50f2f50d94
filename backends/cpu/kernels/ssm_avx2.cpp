// SSM_SCAN (AVX2): the reference's recurrence with each state row in 8-lane vectors and the y
// reduction in four 8-lane accumulators (summed at the end in a fixed order), so a prompt's scan
// is no longer scalar. The per-token scalars (softplus, exp, SiLU) are the reference's std::
// calls; the arithmetic of a row does not depend on the batch or the thread split.
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels/hsum_avx2.h"
#include "backends/cpu/kernels/kernels.h"
#include "tensor/attention_batch.h"

namespace kestrel::cpu {
namespace {

const float* col(const Tensor* t, int64_t j) { return reinterpret_cast<const float*>(static_cast<const char*>(t->data) + j * t->nb[1]); }
float* col_w(const Tensor* t, int64_t j) { return reinterpret_cast<float*>(static_cast<char*>(t->data) + j * t->nb[1]); }

// One token's update of a state row s[ds] and its C.s.
inline float scan_row(float* s, const float* B, const float* C, int64_t ds, float dA, float x_dt) {
  const __m256 vdA = _mm256_set1_ps(dA), vx = _mm256_set1_ps(x_dt);
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t k = 0; k < ds; k += 32)
    for (int j = 0; j < 4; ++j) {
      const int64_t o = k + 8 * j;
      const __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(s + o), vdA, _mm256_mul_ps(_mm256_loadu_ps(B + o), vx));
      _mm256_storeu_ps(s + o, v);
      acc[j] = _mm256_fmadd_ps(v, _mm256_loadu_ps(C + o), acc[j]);
    }
  return hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

}  // namespace

bool ssm_scan_supported(const Node& n) { return n.op == Op::SSM_SCAN && n.param<SsmParams>().d_state % 32 == 0; }

void ssm_scan(const Node& n, int64_t r0, int64_t r1) {
  const SsmParams& p = n.param<SsmParams>();
  const Tensor *xbc = n.src[0], *zx = n.src[1], *state = n.src[5];
  const float *A = static_cast<const float*>(n.src[2]->data), *D = static_cast<const float*>(n.src[3]->data);
  const float* dt_bias = static_cast<const float*>(n.src[4]->data);
  const AttentionBatch b = AttentionBatch::view(static_cast<const int32_t*>(n.src[6]->data));
  const int64_t hd = p.d_inner / p.n_head, ds = p.d_state, conv = xbc->ne[0], T = xbc->ne[1];
  const int64_t heads_per_group = p.n_head / p.n_group;
  // Head by head, token by token: a head's softplus and decay once per token, then its rows
  // (a head's state, head_dim x d_state values, stays in cache across the tokens).
  for (int64_t h = r0 / hd; h * hd < r1; ++h) {
    const int64_t g = h / heads_per_group, first = std::max(r0, h * hd), end = std::min(r1, (h + 1) * hd);
    for (int64_t t = 0; t < T; ++t) {
      const float* xc = col(xbc, t);
      const float* zc = col(zx, t);
      const float dt = zc[p.d_inner + conv + h] + dt_bias[h];
      const float d = dt > 20.0f ? dt : std::log1p(std::exp(dt));
      const float dA = std::exp(d * A[h]);
      float* s = col_w(state, b.token_seq[t]);
      float* y = col_w(n.dst, t);
      for (int64_t r = first; r < end; ++r) {
        const float x = xc[r], z = zc[r];
        const float sum = scan_row(s + r * ds, xc + p.d_inner + g * ds, xc + p.d_inner + p.n_group * ds + g * ds, ds,
                                   dA, x * d);
        y[r] = (sum + D[h] * x) * (z / (1.0f + std::exp(-z)));
      }
    }
  }
}

}  // namespace kestrel::cpu
#endif
