// MATMUL of MXFP4 weights (gpt-oss) over batches of more than kMaxCols columns on the sm_120
// family's block-scaled tensor cores (block_scale.cuh): W's E2M1 codes and E8M0 scales go to the
// MMA as they are stored, X is quantized to MXFP8 (E4M3 codes, an E8M0 scale per 32 values), and
// one instruction does a 32-value block with both scales. Opt-in (KESTREL_CUDA_MXFP4_MMA=1, on a
// device of compute capability 12.x, or the emulator): X's MXFP8 rounding is not llama.cpp's
// Q8_0, so the result is not the reference's arithmetic (the op test checks it against its own).
//
// X's MXFP8, as the OCP MX recipe with the scale rounded up so that nothing saturates: the scale
// is 2^s for the least s with max|x| <= 448 * 2^s (s from frexp, no logarithms), each value x /
// 2^s rounded to E4M3 (ties to even). A block of zeros gets s = -127 and zero codes.
//
// A block (4 warps) computes kMmaRows = 64 weight rows x kMmaCols = 32 tokens, as mmq.cu's tile
// (store_mma_tiles); each warp 16 rows, four m16n8k32 a block of K. Operands are read from
// global memory directly (a first form: no shared-memory staging).
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/block_scale.cuh"
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/kernels.h"

namespace kestrel::cuda {
namespace {

// The MXFP8 scale exponent of a block whose largest magnitude is amax (> 0).
__device__ __forceinline__ int mxfp8_exponent(float amax) {
  int e = 0;
  const float f = frexpf(amax, &e);  // amax = f 2^e, f in [0.5, 1); 448 = 0.875 2^9
  const int s = e - 9 + (f > 0.875f ? 1 : 0);
  return s < -127 ? -127 : (s > 127 ? 127 : s);
}

// One warp per 32 values of a column: codes xq[col K + k], scale byte xs[col K / 32 + b].
__global__ void quantize_mxfp8_kernel(TensorArg x, uint8_t* xq, uint8_t* xs) {
  const int64_t K = x.ne[0], nb = K / 32, n = nb * x.rows();
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const unsigned lane = threadIdx.x % 32;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32; i < n; i += warps) {
    const int64_t col = i / nb, b = i % nb;
    const float v = x.f32(col)[32 * b + lane];
    float amax = fabsf(v);
    for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const int s = amax > 0.0f ? mxfp8_exponent(amax) : -127;
    xq[col * K + 32 * b + lane] = amax > 0.0f ? e4m3_from_fp32_bits(float_to_bits(ldexpf(v, -s))) : 0;
    if (lane == 0) xs[i] = static_cast<uint8_t>(s + 127);
  }
}

// E2M1 nibbles to the MMA's 8-bit containers (the code in bits 2-5): the low nibbles of four
// bytes, or their high nibbles.
__device__ __forceinline__ uint32_t e2m1_containers(uint32_t bytes, bool high) {
  const uint32_t n = high ? (bytes >> 4) & 0x0F0F0F0Fu : bytes & 0x0F0F0F0Fu;
  return n << 2;
}

__global__ void mxfp4_mma_kernel(TensorArg dst, TensorArg w, const uint8_t* xq, const uint8_t* xs, int64_t M) {
  const int64_t K = w.ne[0], N = w.ne[1], nb = K / 32;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kMmaRows, col0 = static_cast<int64_t>(blockIdx.y) * kMmaCols;
  const int64_t r0 = row0 + 16 * warp + g, r1 = r0 + 8;
  // The A scale this lane supplies (block_scale.cuh): row l / 4 + 8 (l % 4) of the warp's 16.
  const int64_t ra = t < 2 ? row0 + 16 * warp + g + 8 * t : -1;
  float acc[kMmaTiles][4];
  for (int j = 0; j < kMmaTiles; ++j)
    for (int i = 0; i < 4; ++i) acc[j][i] = 0;
  const auto block_of = [&](int64_t r, int64_t b) { return reinterpret_cast<const block_mxfp4*>(w.data + r * w.nb[1]) + b; };
  for (int64_t b = 0; b < nb; ++b) {
    // A: rows r0, r1, K 4t .. 4t + 3 (low nibbles of qs[4t ..]) and 16 + 4t .. (high nibbles).
    uint32_t q0 = 0, q1 = 0;
    if (r0 < N) {
      const uint8_t* q = block_of(r0, b)->qs + 4 * t;
      q0 = uint32_t{q[0]} | uint32_t{q[1]} << 8 | uint32_t{q[2]} << 16 | uint32_t{q[3]} << 24;
    }
    if (r1 < N) {
      const uint8_t* q = block_of(r1, b)->qs + 4 * t;
      q1 = uint32_t{q[0]} | uint32_t{q[1]} << 8 | uint32_t{q[2]} << 16 | uint32_t{q[3]} << 24;
    }
    const uint32_t a[4] = {e2m1_containers(q0, false), e2m1_containers(q1, false), e2m1_containers(q0, true),
                           e2m1_containers(q1, true)};
    const uint32_t sfa = ra >= 0 && ra < N ? block_of(ra, b)->e : 127u;
    for (int j = 0; j < kMmaTiles; ++j) {
      // B: token col0 + 8 j + g, K 4t .. 4t + 3 and 16 + 4t ..; its scale from lane 4 n.
      const int64_t col = col0 + 8 * j + g;
      uint32_t bv[2] = {0, 0};
      if (col < M) {
        bv[0] = *reinterpret_cast<const uint32_t*>(xq + col * K + 32 * b + 4 * t);
        bv[1] = *reinterpret_cast<const uint32_t*>(xq + col * K + 32 * b + 16 + 4 * t);
      }
      const int64_t cb = col0 + 8 * j + lane / 4;
      const uint32_t sfb = t == 0 && cb < M ? xs[cb * nb + b] : 127u;
      ptx::mma_mxf4_e4m3(acc[j], a, bv, acc[j], sfa, sfb);
    }
  }
  store_mma_tiles(acc, dst, row0, col0, N, M);
}

}  // namespace

bool mxfp4_mma_requested() {
#ifdef KESTREL_CUDA_EMULATE
  constexpr bool kEmulated = true;
#else
  constexpr bool kEmulated = false;
#endif
  static const bool family = [] {
    cudaDeviceProp prop{};
    return cudaGetDeviceProperties(&prop, 0) == cudaSuccess && (kEmulated || prop.major == 12);
  }();
  const char* v = std::getenv("KESTREL_CUDA_MXFP4_MMA");
  return family && v && std::strcmp(v, "1") == 0 && !reference_kernels_only();
}

bool mxfp4_mma_applies(const Node& n, const Stream& s) {
  if (!s.mxfp4_mma || n.op != Op::MATMUL || n.src[0]->type != DType::MXFP4 || n.src[0]->layout != 0) return false;
  const Tensor *w = n.src[0], *x = n.src[1];
  return x->n_rows() > kMaxCols && w->ne[0] % 32 == 0 && w->ne[2] == 1 && w->ne[3] == 1 && x->nb[0] == 4 &&
         blocks_for(x->n_rows(), kMmaCols) <= 65535u;
}

Status run_mxfp4_mma(const Node& n, Stream& s) {
  const Tensor *w = n.src[0], *x = n.src[1];
  const int64_t K = w->ne[0], M = x->n_rows();
  const size_t codes = (static_cast<size_t>(K * M) + 255) / 256 * 256;
  auto mem = s.scratch(codes + static_cast<size_t>(K / 32 * M));
  KS_RETURN_IF_ERROR(mem.status());
  auto* xq = static_cast<uint8_t*>(mem.value());
  uint8_t* xs = xq + codes;
  KS_RETURN_IF_ERROR(KS_LAUNCH(quantize_mxfp8_kernel, dim3(grid_stride_blocks(K / 32 * M * 32, 256)), dim3(256), 0, s.stream,
                               arg(x), xq, xs));
  const dim3 grid(blocks_for(w->ne[1], kMmaRows), blocks_for(M, kMmaCols)), block(32 * kMmaWarps);
  return KS_LAUNCH(mxfp4_mma_kernel, grid, block, 0, s.stream, arg(n.dst), arg(w), static_cast<const uint8_t*>(xq),
                   static_cast<const uint8_t*>(xs), M);
}

}  // namespace kestrel::cuda
