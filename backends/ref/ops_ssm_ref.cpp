// Reference kernels of the Mamba-2 ops (SSM_CONV, SSM_SCAN) and RELU_SQR. The SSM ops' items
// are channels (SSM_CONV) or (head, dim) rows of the state (SSM_SCAN): each item walks the
// batch's tokens in order and carries every sequence's state, so items never share memory.
#include <cmath>

#include "backends/ref/ops_ref.h"
#include "tensor/attention_batch.h"

namespace kestrel::ref {
namespace {

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

const float* col(const Tensor* t, int64_t j) { return reinterpret_cast<const float*>(static_cast<const char*>(t->data) + j * t->nb[1]); }
float* col_w(const Tensor* t, int64_t j) { return reinterpret_cast<float*>(static_cast<char*>(t->data) + j * t->nb[1]); }

}  // namespace

void ssm_conv(const Node& n, int64_t c0, int64_t c1) {
  const SsmParams& p = n.param<SsmParams>();
  const Tensor *in = n.src[0], *w = n.src[1], *state = n.src[3];
  const float* bias = static_cast<const float*>(n.src[2]->data);
  const AttentionBatch b = AttentionBatch::view(static_cast<const int32_t*>(n.src[4]->data));
  const int64_t K = w->ne[0], T = in->ne[1];
  for (int64_t c = c0; c < c1; ++c) {
    const float* wc = col(w, c);
    for (int64_t t = 0; t < T; ++t) {
      float* win = col_w(state, b.token_seq[t]) + c * (K - 1);  // oldest first
      const float x = col(in, t)[p.d_inner + c];
      float s = 0.0f;
      for (int64_t k = 0; k + 1 < K; ++k) s += wc[k] * win[k];
      s += wc[K - 1] * x;
      for (int64_t k = 0; k + 2 < K; ++k) win[k] = win[k + 1];
      if (K > 1) win[K - 2] = x;
      col_w(n.dst, t)[c] = silu(s + bias[c]);
    }
  }
}

void ssm_scan(const Node& n, int64_t r0, int64_t r1) {
  const SsmParams& p = n.param<SsmParams>();
  const Tensor *xbc = n.src[0], *zx = n.src[1], *state = n.src[5];
  const float *A = static_cast<const float*>(n.src[2]->data), *D = static_cast<const float*>(n.src[3]->data);
  const float* dt_bias = static_cast<const float*>(n.src[4]->data);
  const AttentionBatch b = AttentionBatch::view(static_cast<const int32_t*>(n.src[6]->data));
  const int64_t hd = p.d_inner / p.n_head, ds = p.d_state, conv = xbc->ne[0], T = xbc->ne[1];
  const int64_t heads_per_group = p.n_head / p.n_group;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t h = r / hd, g = h / heads_per_group;
    for (int64_t t = 0; t < T; ++t) {
      float* s = col_w(state, b.token_seq[t]) + r * ds;  // [d_state, head_dim, n_head]
      const float* xc = col(xbc, t);
      const float *B = xc + p.d_inner + g * ds, *C = xc + p.d_inner + p.n_group * ds + g * ds;
      const float* zc = col(zx, t);
      const float d = softplus(zc[p.d_inner + conv + h] + dt_bias[h]);
      const float dA = std::exp(d * A[h]), x = xc[r], x_dt = x * d;
      float sum = 0.0f;
      for (int64_t k = 0; k < ds; ++k) {
        const float v = s[k] * dA + B[k] * x_dt;
        sum += v * C[k];
        s[k] = v;
      }
      col_w(n.dst, t)[r] = (sum + D[h] * x) * silu(zc[r]);
    }
  }
}

void relu_sqr(const Node& n, int64_t r0, int64_t r1) {
  const int64_t K = n.src[0]->ne[0];
  for (int64_t r = r0; r < r1; ++r) {
    const Tensor *src = n.src[0], *dst = n.dst;
    const float* a = src->f32(r % src->ne[1], (r / src->ne[1]) % src->ne[2], r / (src->ne[1] * src->ne[2]));
    float* y = dst->f32(r % dst->ne[1], (r / dst->ne[1]) % dst->ne[2], r / (dst->ne[1] * dst->ne[2]));
    for (int64_t k = 0; k < K; ++k) {
      const float v = a[k] > 0.0f ? a[k] : 0.0f;
      y[k] = v * v;
    }
  }
}

}  // namespace kestrel::ref
