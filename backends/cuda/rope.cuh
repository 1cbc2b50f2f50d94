// ROPE's arithmetic, shared by the ROPE kernel (norm_rope.cu) and the fused rope-and-store chain
// (rope_store.cu): the host-side constants, and one work item (a rotated pair of a row, or a
// copied value past the rotated dimensions), rounded as the reference rounds it.
#pragma once
#include <algorithm>
#include <cmath>

#include "backends/cuda/common.cuh"

namespace kestrel::cuda {

struct RopeArgs {
  int32_t n_rot, mode;
  float freq_base, freq_scale, ext_factor, attn_factor;
  float theta_scale, corr0, corr1;
};

// Host-side constants, computed as the reference computes them (float, same order).
inline RopeArgs rope_args(const RopeParams& rp) {
  RopeArgs p{rp.n_rot, rp.mode, rp.freq_base, rp.freq_scale, rp.ext_factor, rp.attn_factor, 0, 0, 0};
  p.theta_scale = std::pow(rp.freq_base, -2.0f / static_cast<float>(rp.n_rot));
  if (rp.ext_factor != 0.0f) {
    auto corr_dim = [&](float n_rot) {
      return rp.n_rot * std::log(rp.n_ctx_orig / (n_rot * 2 * static_cast<float>(M_PI))) / (2 * std::log(rp.freq_base));
    };
    p.corr0 = std::max(0.0f, std::floor(corr_dim(rp.beta_fast)));
    p.corr1 = std::min(static_cast<float>(rp.n_rot - 1), std::ceil(corr_dim(rp.beta_slow)));
  }
  return p;
}

// Work items a row of head_dim values takes: its rotated pairs, then its copied tail.
__host__ __device__ __forceinline__ int64_t rope_items_per_row(int64_t head_dim, int32_t n_rot) {
  return n_rot / 2 + (head_dim - n_rot);
}

// Item j of a row (x in, y out) at position pos: y's element(s) written (unless y is null), and
// each also passed to put(i, value). Pair j's angle is the position times theta_scale^j reached
// by j repeated float multiplications, as the reference's serial loop reaches it (bit for bit);
// each thread repeats those few multiplications instead of waiting on a neighbour.
template <class Put>
__device__ __forceinline__ void rope_item(const float* x, float* y, float pos, int64_t j, const float* freq_factors,
                                          const RopeArgs& p, Put put) {
  const int64_t half = p.n_rot / 2;
  if (j >= half) {  // past the rotated dimensions: a copy
    const int64_t i = p.n_rot + (j - half);
    const float v = x[i];
    if (y) y[i] = v;
    put(i, v);
    return;
  }
  float theta_base = pos;
  for (int64_t k = 0; k < j; ++k) theta_base *= p.theta_scale;
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
  const int64_t a = p.mode == ROPE_NEOX ? j : 2 * j;
  const int64_t b = p.mode == ROPE_NEOX ? j + half : 2 * j + 1;
  const float x0 = x[a], x1 = x[b];
  const float ya = x0 * c - x1 * s, yb = x0 * s + x1 * c;
  if (y) y[a] = ya, y[b] = yb;
  put(a, ya);
  put(b, yb);
}

}  // namespace kestrel::cuda
