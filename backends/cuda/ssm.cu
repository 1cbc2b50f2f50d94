// Mamba-2 ops: SSM_CONV (one thread per channel) and SSM_SCAN (one thread per (head, dim) row
// of the state), each walking the batch's tokens in order and carrying every sequence's state in
// place, as the reference does; RELU_SQR, one thread per element. The scan's per-token work is a
// d_state-long row, so a decode step is a few hundred thousand independent rows on a large model.
#include "backends/cuda/kernels.h"
#include "tensor/attention_batch.h"

namespace kestrel::cuda {
namespace {

struct SsmArgs {
  int32_t d_inner, n_head, n_group, d_state;
};

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
__device__ __forceinline__ float* col(const TensorArg& t, int64_t j) { return reinterpret_cast<float*>(t.data + j * t.nb[1]); }

__global__ void ssm_conv_kernel(TensorArg dst, TensorArg in, TensorArg w, const float* bias, TensorArg state,
                                const int32_t* packed, SsmArgs a) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t C = dst.ne[0], K = w.ne[0], T = in.ne[1];
  if (c >= C) return;
  const AttentionBatch b = AttentionBatch::view(packed);
  const float* wc = col(w, c);
  for (int64_t t = 0; t < T; ++t) {
    float* win = col(state, b.token_seq[t]) + c * (K - 1);
    const float x = col(in, t)[a.d_inner + c];
    float s = 0.0f;
    for (int64_t k = 0; k + 1 < K; ++k) s += wc[k] * win[k];
    s += wc[K - 1] * x;
    for (int64_t k = 0; k + 2 < K; ++k) win[k] = win[k + 1];
    if (K > 1) win[K - 2] = x;
    col(dst, t)[c] = silu(s + bias[c]);
  }
}

__global__ void ssm_scan_kernel(TensorArg dst, TensorArg xbc, TensorArg zx, const float* A, const float* D,
                                const float* dt_bias, TensorArg state, const int32_t* packed, SsmArgs a) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r >= a.d_inner) return;
  const AttentionBatch b = AttentionBatch::view(packed);
  const int64_t hd = a.d_inner / a.n_head, ds = a.d_state, conv = xbc.ne[0], T = xbc.ne[1];
  const int64_t h = r / hd, g = h / (a.n_head / a.n_group);
  for (int64_t t = 0; t < T; ++t) {
    float* s = col(state, b.token_seq[t]) + r * ds;
    const float* xc = col(xbc, t);
    const float *B = xc + a.d_inner + g * ds, *C = xc + a.d_inner + a.n_group * ds + g * ds;
    const float* zc = col(zx, t);
    const float d = softplus(zc[a.d_inner + conv + h] + dt_bias[h]);
    const float dA = expf(d * A[h]), x = xc[r], x_dt = x * d;
    float sum = 0.0f;
    for (int64_t k = 0; k < ds; ++k) {
      const float v = s[k] * dA + B[k] * x_dt;
      sum += v * C[k];
      s[k] = v;
    }
    col(dst, t)[r] = (sum + D[h] * x) * silu(zc[r]);
  }
}

__global__ void relu_sqr_kernel(TensorArg dst, TensorArg src) {
  const int64_t K = src.ne[0], n = K * src.rows();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = fmaxf(reinterpret_cast<const float*>(src.row(i / K))[i % K], 0.0f);
    reinterpret_cast<float*>(dst.row(i / K))[i % K] = v * v;
  }
}

SsmArgs ssm_args(const Node& n) {
  const SsmParams& p = n.param<SsmParams>();
  return {p.d_inner, p.n_head, p.n_group, p.d_state};
}
const float* f32_data(const Tensor* t) { return static_cast<const float*>(t->data); }

}  // namespace

Status run_ssm(const Node& n, Stream& s) {
  constexpr unsigned kThreads = 128;
  if (n.op == Op::SSM_CONV)
    return KS_LAUNCH(ssm_conv_kernel, dim3(blocks_for(n.dst->ne[0], kThreads)), dim3(kThreads), 0, s.stream,
                     arg(n.dst), arg(n.src[0]), arg(n.src[1]), f32_data(n.src[2]), arg(n.src[3]),
                     static_cast<const int32_t*>(n.src[4]->data), ssm_args(n));
  if (n.op == Op::SSM_SCAN)
    return KS_LAUNCH(ssm_scan_kernel, dim3(blocks_for(n.dst->ne[0], kThreads)), dim3(kThreads), 0, s.stream,
                     arg(n.dst), arg(n.src[0]), arg(n.src[1]), f32_data(n.src[2]), f32_data(n.src[3]),
                     f32_data(n.src[4]), arg(n.src[5]), static_cast<const int32_t*>(n.src[6]->data), ssm_args(n));
  const int64_t total = n.src[0]->ne[0] * n.src[0]->n_rows();
  return KS_LAUNCH(relu_sqr_kernel, dim3(std::min(blocks_for(total, 256), 4096u)), dim3(256), 0, s.stream, arg(n.dst),
                   arg(n.src[0]));
}

bool ssm_supported(const Node& n) {
  const int batch = n.op == Op::SSM_CONV ? 4 : n.op == Op::SSM_SCAN ? 6 : -1;
  for (int i = 0; i < Node::kMaxSrc; ++i)
    if (n.src[i] && n.src[i]->type != (i == batch ? DType::I32 : DType::F32)) return false;
  return n.dst->type == DType::F32;
}

}  // namespace kestrel::cuda
