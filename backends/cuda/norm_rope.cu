// RMS_NORM and SOFTMAX (a block per row, block-wide reductions) and ROPE (a thread per rotated
// pair).
#include "backends/cuda/kernels.h"

namespace kestrel::cuda {
namespace {

constexpr unsigned kRowThreads = 256;

// vec4: every row 16-byte aligned and K a multiple of 4, so the sum of squares reads float4s.
// The sum of squares in double, as the reference (the scale then matches it to the last bit
// nearly always, and the int8 rounding of the next matmul's input with it).
__global__ void rms_norm_kernel(TensorArg dst, TensorArg src, float eps, bool vec4) {
  __shared__ double scratch[32];
  const int64_t K = src.ne[0], r = blockIdx.x;
  const float* x = src.f32(r);
  double ss = 0;
  if (vec4) {
    for (int64_t k = 4 * threadIdx.x; k < K; k += 4 * blockDim.x) {
      const float4 v = load_float4(x + k);
      ss += static_cast<double>(v.x) * v.x + static_cast<double>(v.y) * v.y + static_cast<double>(v.z) * v.z +
            static_cast<double>(v.w) * v.w;
    }
  } else {
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) ss += static_cast<double>(x[k]) * x[k];
  }
  ss = block_sum(ss, scratch);
  const float scale = 1.0f / sqrtf(static_cast<float>(ss / static_cast<double>(K)) + eps);
  float* y = dst.f32(r);
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) y[k] = x[k] * scale;
}

__global__ void softmax_kernel(TensorArg dst, TensorArg src, float scale) {
  __shared__ float scratch[32];
  __shared__ double dscratch[32];
  const int64_t K = src.ne[0], r = blockIdx.x;
  const float* x = src.f32(r);
  float* y = dst.f32(r);
  float mx = -INFINITY;
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) mx = fmaxf(mx, x[k] * scale);
  mx = block_max(mx, scratch);
  double sum = 0;
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) sum += (y[k] = expf(x[k] * scale - mx));
  sum = block_sum(sum, dscratch);
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) y[k] = static_cast<float>(y[k] / sum);
}

struct RopeArgs {
  int32_t n_rot, mode;
  float freq_base, freq_scale, ext_factor, attn_factor;
  float theta_scale, corr0, corr1;
};

// A thread per (row, rotated pair), or per copied tail value. Pair j's angle is the position times
// theta_scale^j reached by j repeated float multiplications, as the reference's serial loop
// reaches it (bit for bit); each thread repeats those few multiplications instead of waiting on
// a neighbour.
__global__ void rope_kernel(TensorArg dst, TensorArg src, const int32_t* pos, const float* freq_factors, RopeArgs p) {
  const int64_t head_dim = src.ne[0], n_head = src.ne[1], rows = src.rows();
  const int64_t half = p.n_rot / 2, per_row = half + (head_dim - p.n_rot);
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < rows * per_row;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / per_row, j = idx % per_row;
    const float* x = src.f32(r);
    float* y = dst.f32(r);
    if (j >= half) {  // past the rotated dimensions: a copy
      const int64_t i = p.n_rot + (j - half);
      y[i] = x[i];
      continue;
    }
    float theta_base = static_cast<float>(pos[r / n_head]);
    for (int64_t k = 0; k < j; ++k) theta_base *= p.theta_scale;
    const int64_t i0 = 2 * j;
    const float f = freq_factors ? freq_factors[j] : 1.0f;
    const float theta_extrap = theta_base / f;
    const float theta_interp = p.freq_scale * theta_extrap;
    float theta = theta_interp, mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
      const float v = (static_cast<float>(j) - p.corr0) / fmaxf(0.001f, p.corr1 - p.corr0);
      const float ramp = (1 - fminf(1.0f, fmaxf(0.0f, v))) * p.ext_factor;
      theta = theta_interp * (1 - ramp) + theta_extrap * ramp;
      mscale *= 1.0f + 0.1f * logf(1.0f / p.freq_scale);
    }
    const float c = cosf(theta) * mscale, s = sinf(theta) * mscale;
    const int64_t a = p.mode == ROPE_NEOX ? j : i0;
    const int64_t b = p.mode == ROPE_NEOX ? j + half : i0 + 1;
    const float x0 = x[a], x1 = x[b];
    y[a] = x0 * c - x1 * s;
    y[b] = x0 * s + x1 * c;
  }
}

// Every row of t starts 16-byte aligned and holds a multiple of 4 floats.
bool aligned16(const Tensor* t) {
  if (t->ne[0] % 4 != 0 || reinterpret_cast<uintptr_t>(t->data) % 16 != 0) return false;
  for (int i = 1; i < 4; ++i)
    if (t->ne[i] > 1 && t->nb[i] % 16 != 0) return false;
  return true;
}

}  // namespace

Status run_rms_norm(const Node& n, Stream& s) {
  const int64_t K = n.src[0]->ne[0];
  return KS_LAUNCH(rms_norm_kernel, dim3(static_cast<unsigned>(n.dst->n_rows())), dim3(threads_for(K, kRowThreads)), 0, s.stream,
                   arg(n.dst), arg(n.src[0]), n.param<NormParams>().eps, aligned16(n.src[0]));
}

Status run_softmax(const Node& n, Stream& s) {
  return KS_LAUNCH(softmax_kernel, dim3(static_cast<unsigned>(n.dst->n_rows())),
                   dim3(threads_for(n.src[0]->ne[0], kRowThreads)), 0, s.stream,
                   arg(n.dst), arg(n.src[0]), n.param<SoftmaxParams>().scale);
}

Status run_rope(const Node& n, Stream& s) {
  const RopeParams& rp = n.param<RopeParams>();
  RopeArgs p{rp.n_rot, rp.mode, rp.freq_base, rp.freq_scale, rp.ext_factor, rp.attn_factor, 0, 0, 0};
  // Host-side constants, computed as the reference computes them (float, same order).
  p.theta_scale = std::pow(rp.freq_base, -2.0f / static_cast<float>(rp.n_rot));
  if (rp.ext_factor != 0.0f) {
    auto corr_dim = [&](float n_rot) {
      return rp.n_rot * std::log(rp.n_ctx_orig / (n_rot * 2 * static_cast<float>(M_PI))) / (2 * std::log(rp.freq_base));
    };
    p.corr0 = std::max(0.0f, std::floor(corr_dim(rp.beta_fast)));
    p.corr1 = std::min(static_cast<float>(rp.n_rot - 1), std::ceil(corr_dim(rp.beta_slow)));
  }
  const int64_t items = n.src[0]->n_rows() * (rp.n_rot / 2 + (n.src[0]->ne[0] - rp.n_rot));
  return KS_LAUNCH(rope_kernel, dim3(grid_stride_blocks(items, 128)), dim3(128), 0, s.stream, arg(n.dst), arg(n.src[0]),
                   static_cast<const int32_t*>(n.src[1]->data),
                   n.src[2] ? static_cast<const float*>(n.src[2]->data) : static_cast<const float*>(nullptr), p);
}

}  // namespace kestrel::cuda
