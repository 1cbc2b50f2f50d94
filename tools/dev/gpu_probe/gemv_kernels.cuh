// gpu_probe gemv kernels (included by gemv.cu only). Decode GEMV y = W x, one output per row.
//
// Formats as GGUF stores them: Q4_0 block = fp16 d + 16 bytes, low nibble = weight j, high nibble =
// weight j+16, value (q-8)*d; Q8_0 block = fp16 d + 32 int8; BF16 row-major. The quantized kernels
// use int8 activations (per 32: scale d and sum s) and dp4a.
//
// "native": the GGUF layout as is (18/34-byte blocks, so 2-byte loads), one warp per row.
// "repack": blocks split at upload into 16-byte-aligned quants + a separate fp16 scale array; each
// warp does R rows, each lane keeps U 16-byte loads per row in flight, and the next tile's weights
// are loaded before the current tile is multiplied (double buffer). Programmatic dependent launch
// (PDL): the kernel lets the next kernel launch at once, loads its first weights (which no earlier
// kernel writes), and only then waits for the previous kernel before touching x. Launched without
// the PDL attribute, the trigger and the wait are no-ops.
#pragma once
#include "probe.cuh"

namespace probe {
namespace gemv {

struct XS {
  float d;
  int s;
};

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ void pdl_launch_next() { cudaTriggerProgrammaticLaunchCompletion(); }
__device__ __forceinline__ void pdl_wait_prev() { cudaGridDependencySynchronize(); }

// ---- data generation and upload-time repack ----------------------------------------------------
// Random GGUF blocks: d = +-(0.004..0.014) as fp16, then random quant bytes.
__global__ void k_fill_blocks(uint8_t* p, size_t nblocks, int bpb, uint32_t seed) {
  for (size_t b = blockIdx.x * size_t(blockDim.x) + threadIdx.x; b < nblocks; b += size_t(gridDim.x) * blockDim.x) {
    uint8_t* blk = p + b * bpb;
    const uint32_t h = hash32(b, seed);
    const __half hd = __float2half((0.004f + 0.01f * (h & 0xffff) / 65535.0f) * ((h >> 16) & 1 ? -1.0f : 1.0f));
    memcpy(blk, &hd, 2);
    for (int i = 2; i < bpb; i += 4) {
      const uint32_t r = hash32(b * 64 + i, seed ^ 0x5bd1e995u);
      for (int j = 0; j < 4 && i + j < bpb; ++j) blk[i + j] = uint8_t(r >> (8 * j));
    }
  }
}
__global__ void k_fill_bf16(__nv_bfloat16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(hash_unit(i, seed));
}
// GGUF block b (= row * blocks_per_row + column block) -> quants at b * qbytes, scale at d[b].
__global__ void k_repack(const uint8_t* src, size_t nblocks, int bpb, uint8_t* qs, __half* d) {
  const int qb = bpb - 2;
  for (size_t b = blockIdx.x * size_t(blockDim.x) + threadIdx.x; b < nblocks; b += size_t(gridDim.x) * blockDim.x) {
    const uint8_t* blk = src + b * bpb;
    memcpy(d + b, blk, 2);
    for (int i = 0; i < qb; ++i) qs[b * qb + i] = blk[2 + i];
  }
}
// x (fp32) -> int8 blocks of 32: d = amax/127, q = round(x/d). One warp per block. Stands in for
// the elementwise op (rms_norm, swiglu, ...) whose epilogue will quantize in the real step.
__global__ void k_quantize_x(const float* __restrict__ x, int8_t* xq, XS* xs, int K) {
  pdl_launch_next();
  pdl_wait_prev();
  const int b = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  if (b >= K / 32) return;
  const float v = x[b * 32 + lane];
  float amax = fabsf(v);
  for (int o = 16; o; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f;
  const int q = d == 0.0f ? 0 : __float2int_rn(v / d);
  xq[b * 32 + lane] = int8_t(q);
  int s = q;
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) xs[b] = XS{d, s};
}

// Launch-cost probe: the grid of a real GEMV, no work.
__global__ void k_empty() {
  pdl_launch_next();
  pdl_wait_prev();
}

// ---- straightforward kernels on the GGUF layout -------------------------------------------------
template <int BPB>  // 18: Q4_0, 34: Q8_0
__global__ void k_native(const uint8_t* __restrict__ W, const int8_t* __restrict__ xq, const XS* __restrict__ xs,
                         float* __restrict__ y, int N, int K) {
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
  if (row >= N) return;
  const int nb = K / 32;
  const uint8_t* rp = W + size_t(row) * nb * BPB;
  float acc = 0.0f;
  for (int b = lane; b < nb; b += 32) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(rp + size_t(b) * BPB);  // 2-byte aligned only
    const float d = __half2float(__ushort_as_half(__ldg(h)));
    const int4* xp = reinterpret_cast<const int4*>(xq + b * 32);
    const int4 xa = __ldg(xp), xb = __ldg(xp + 1);
    const int xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
    const XS t = xs[b];
    int s = 0;
    if (BPB == 18) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t v = uint32_t(__ldg(h + 1 + 2 * i)) | uint32_t(__ldg(h + 2 + 2 * i)) << 16;
        s = __dp4a(int(v & 0x0f0f0f0fu), xv[i], s);
        s = __dp4a(int((v >> 4) & 0x0f0f0f0fu), xv[4 + i], s);
      }
      s -= 8 * t.s;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i)
        s = __dp4a(int(uint32_t(__ldg(h + 1 + 2 * i)) | uint32_t(__ldg(h + 2 + 2 * i)) << 16), xv[i], s);
    }
    acc += d * t.d * float(s);
  }
  acc = warp_sum(acc);
  if (lane == 0) y[row] = acc;
}

// ---- repacked Q4_0 / Q8_0 ------------------------------------------------------------------------
// Q4_0: a lane's 16-byte unit is one block (32 weights). Q8_0: half a block (16 weights), so a warp
// reads 512 contiguous bytes per row either way. `units` = 16-byte units per row.
template <int R, int U>
struct QTile {
  uint4 q[U][R];
  float d[U][R];
};
template <bool Q4, int R, int U>
__device__ __forceinline__ void q_load(QTile<R, U>& t, const uint4* __restrict__ Wq, const __half* __restrict__ Wd,
                                       int row0, int units, int u0, int lane) {
  const int per_block = Q4 ? 1 : 2, nb = units / per_block;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = u0 + u * 32 + lane;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      t.q[u][r] = c < units ? __ldcs(Wq + size_t(row0 + r) * units + c) : make_uint4(0, 0, 0, 0);
      t.d[u][r] = c < units ? __half2float(__ldcs(Wd + size_t(row0 + r) * nb + c / per_block)) : 0.0f;
    }
  }
}
template <bool Q4, int R, int U>
__device__ __forceinline__ void q_dot(const QTile<R, U>& t, float (&acc)[R], const int8_t* __restrict__ xq,
                                      const XS* __restrict__ xs, int units, int u0, int lane) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = u0 + u * 32 + lane;
    if (c >= units) continue;
    if (Q4) {
      const int4* xp = reinterpret_cast<const int4*>(xq + c * 32);
      const int4 xa = __ldg(xp), xb = __ldg(xp + 1);
      const XS x = xs[c];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint4 w = t.q[u][r];
        int s = __dp4a(int(w.x & 0x0f0f0f0fu), xa.x, 0);
        s = __dp4a(int(w.y & 0x0f0f0f0fu), xa.y, s);
        s = __dp4a(int(w.z & 0x0f0f0f0fu), xa.z, s);
        s = __dp4a(int(w.w & 0x0f0f0f0fu), xa.w, s);
        s = __dp4a(int((w.x >> 4) & 0x0f0f0f0fu), xb.x, s);
        s = __dp4a(int((w.y >> 4) & 0x0f0f0f0fu), xb.y, s);
        s = __dp4a(int((w.z >> 4) & 0x0f0f0f0fu), xb.z, s);
        s = __dp4a(int((w.w >> 4) & 0x0f0f0f0fu), xb.w, s);
        acc[r] += t.d[u][r] * x.d * float(s - 8 * x.s);
      }
    } else {
      const int4 xa = __ldg(reinterpret_cast<const int4*>(xq) + c);
      const float xd = xs[c >> 1].d;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint4 w = t.q[u][r];
        int s = __dp4a(int(w.x), xa.x, 0);
        s = __dp4a(int(w.y), xa.y, s);
        s = __dp4a(int(w.z), xa.z, s);
        s = __dp4a(int(w.w), xa.w, s);
        acc[r] += t.d[u][r] * xd * float(s);
      }
    }
  }
}
template <bool Q4, int R, int U>
__global__ void __launch_bounds__(128) k_repack_gemv(const uint4* __restrict__ Wq, const __half* __restrict__ Wd,
                                                     const int8_t* __restrict__ xq, const XS* __restrict__ xs,
                                                     float* __restrict__ y, int N, int K) {
  pdl_launch_next();
  const int lane = threadIdx.x & 31;
  const int row0 = ((blockIdx.x * blockDim.x + threadIdx.x) >> 5) * R;
  if (row0 >= N) return;
  const int units = Q4 ? K / 32 : K / 16, step = 32 * U;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  QTile<R, U> cur, nxt;
  q_load<Q4>(cur, Wq, Wd, row0, units, 0, lane);
  pdl_wait_prev();  // x is written by the previous kernel; the weights above are not
  for (int u0 = 0; u0 < units; u0 += step) {
    if (u0 + step < units) q_load<Q4>(nxt, Wq, Wd, row0, units, u0 + step, lane);
    q_dot<Q4>(cur, acc, xq, xs, units, u0, lane);
    cur = nxt;
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float v = warp_sum(acc[r]);
    if (lane == 0 && row0 + r < N) y[row0 + r] = v;
  }
}

// Persistent grid: a fixed number of blocks (a few per SM) walk the row groups, so a large matrix
// costs no more block launches than a small one. The weight stream runs across group boundaries:
// the next tile (possibly the next group's first) is loaded before the current one is multiplied.
template <bool Q4, int R, int U>
__global__ void __launch_bounds__(128) k_persist_gemv(const uint4* __restrict__ Wq, const __half* __restrict__ Wd,
                                                      const int8_t* __restrict__ xq, const XS* __restrict__ xs,
                                                      float* __restrict__ y, int N, int K) {
  pdl_launch_next();
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const int groups = (N + R - 1) / R, gstride = gridDim.x * warps;
  int g = blockIdx.x * warps + (threadIdx.x >> 5), t = 0;
  if (g >= groups) return;
  const int units = Q4 ? K / 32 : K / 16, step = 32 * U, tiles = (units + step - 1) / step;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  QTile<R, U> cur, nxt;
  q_load<Q4>(cur, Wq, Wd, g * R, units, 0, lane);
  pdl_wait_prev();
  while (true) {
    int ng = g, nt = t + 1;
    if (nt == tiles) ng += gstride, nt = 0;
    const bool more = ng < groups;
    if (more) q_load<Q4>(nxt, Wq, Wd, ng * R, units, nt * step, lane);
    q_dot<Q4>(cur, acc, xq, xs, units, t * step, lane);
    if (nt == 0) {  // group g done
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float v = warp_sum(acc[r]);
        if (lane == 0 && g * R + r < N) y[g * R + r] = v;
        acc[r] = 0.0f;
      }
    }
    if (!more) break;
    g = ng, t = nt, cur = nxt;
  }
}

// ---- BF16 --------------------------------------------------------------------------------------
// x (fp32) staged in shared memory per block; lane = 8 weights (one uint4) per row. R=1, U=1
// without double buffering is the straightforward kernel.
template <int R, int U, bool DB>
__global__ void k_bf16(const uint4* __restrict__ W, const float* __restrict__ x, float* __restrict__ y, int N, int K) {
  extern __shared__ float4 xsh[];
  pdl_launch_next();
  const int lane = threadIdx.x & 31;
  const int row0 = ((blockIdx.x * blockDim.x + threadIdx.x) >> 5) * R;
  const bool active = row0 < N;
  const int nc = K / 8, step = 32 * U;
  uint4 cur[U][R], nxt[U][R];
  auto load = [&](uint4 (&w)[U][R], int c0) {
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int c = c0 + u * 32 + lane;
        w[u][r] = c < nc ? __ldcs(W + size_t(row0 + r) * nc + c) : make_uint4(0, 0, 0, 0);
      }
  };
  if (active && DB) load(cur, 0);
  pdl_wait_prev();
  for (int i = threadIdx.x; i < K / 4; i += blockDim.x) xsh[i] = reinterpret_cast<const float4*>(x)[i];
  __syncthreads();
  if (!active) return;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
#pragma unroll 1
  for (int c0 = 0; c0 < nc; c0 += step) {
    if (!DB) load(cur, c0);
    else if (c0 + step < nc) load(nxt, c0 + step);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + u * 32 + lane;
      if (c >= nc) continue;
      const float4 xa = xsh[2 * c], xb = xsh[2 * c + 1];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint4 v = cur[u][r];
        float a = acc[r];
        a = fmaf(bf16_lo(v.x), xa.x, a);
        a = fmaf(bf16_hi(v.x), xa.y, a);
        a = fmaf(bf16_lo(v.y), xa.z, a);
        a = fmaf(bf16_hi(v.y), xa.w, a);
        a = fmaf(bf16_lo(v.z), xb.x, a);
        a = fmaf(bf16_hi(v.z), xb.y, a);
        a = fmaf(bf16_lo(v.w), xb.z, a);
        a = fmaf(bf16_hi(v.w), xb.w, a);
        acc[r] = a;
      }
    }
    if (DB) {
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r) cur[u][r] = nxt[u][r];
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float v = warp_sum(acc[r]);
    if (lane == 0 && row0 + r < N) y[row0 + r] = v;
  }
}

}  // namespace gemv
}  // namespace probe
