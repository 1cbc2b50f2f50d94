// MATMUL and MATMUL_ID of MXFP4 weights (gpt-oss) over batches of more than kMaxCols tokens on the sm_120
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
// global memory directly (a first form: no shared-memory staging). MATMUL_ID (gpt-oss's experts)
// runs the same tile over the (slot, token) pairs grouped by expert (moe_group.cu), as mmq.cu.
// On compute capability 10.0 (B200) the product is mmq_mx_tc.cu's tcgen05 tile instead, on the
// same MXFP8 X (mxfp4_mma_requested).
#include <algorithm>
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

// The product tile: W rows 0 .. n_rows - 1 (at most kMmaRows) from `rows` (row_stride bytes
// apart) times the kMmaCols X columns cols[c] (-1: none) of xq / xs, into acc as store_mma_tiles
// reads it. `cols` is shared memory, written before a barrier.
__device__ __forceinline__ void mxfp4_tile(const uint8_t* rows, int64_t row_stride, int64_t n_rows, int64_t K, const uint8_t* xq,
                                           const uint8_t* xs, const int64_t* cols, float (&acc)[kMmaTiles][4]) {
  const int64_t nb = K / 32;
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, t = lane % 4;
  const int64_t r0 = 16 * warp + g, r1 = r0 + 8;
  // The A scale this lane supplies (block_scale.cuh): row l / 4 + 8 (l % 4) of the warp's 16.
  const int64_t ra = t < 2 ? 16 * warp + g + 8 * t : -1;
  for (int j = 0; j < kMmaTiles; ++j)
    for (int i = 0; i < 4; ++i) acc[j][i] = 0;
  const auto block_of = [&](int64_t r, int64_t b) { return reinterpret_cast<const block_mxfp4*>(rows + r * row_stride) + b; };
  const auto codes = [&](int64_t r, int64_t b) -> uint32_t {  // qs[4t .. 4t + 3] of row r's block b
    if (r >= n_rows) return 0;
    const uint8_t* q = block_of(r, b)->qs + 4 * t;
    return uint32_t{q[0]} | uint32_t{q[1]} << 8 | uint32_t{q[2]} << 16 | uint32_t{q[3]} << 24;
  };
  for (int64_t b = 0; b < nb; ++b) {
    // A: rows r0, r1, K 4t .. 4t + 3 (low nibbles of qs[4t ..]) and 16 + 4t .. (high nibbles).
    const uint32_t q0 = codes(r0, b), q1 = codes(r1, b);
    const uint32_t a[4] = {e2m1_containers(q0, false), e2m1_containers(q1, false), e2m1_containers(q0, true),
                           e2m1_containers(q1, true)};
    const uint32_t sfa = ra >= 0 && ra < n_rows ? block_of(ra, b)->e : 127u;
    for (int j = 0; j < kMmaTiles; ++j) {
      // B: the tile's token 8 j + g, K 4t .. 4t + 3 and 16 + 4t ..; its scale from lane 4 n.
      const int64_t col = cols[8 * j + g];
      uint32_t bv[2] = {0, 0};
      if (col >= 0) {
        bv[0] = *reinterpret_cast<const uint32_t*>(xq + col * K + 32 * b + 4 * t);
        bv[1] = *reinterpret_cast<const uint32_t*>(xq + col * K + 32 * b + 16 + 4 * t);
      }
      const int64_t cb = cols[8 * j + lane / 4];
      const uint32_t sfb = t == 0 && cb >= 0 ? xs[cb * nb + b] : 127u;
      ptx::mma_mxf4_e4m3(acc[j], a, bv, acc[j], sfa, sfb);
    }
  }
}

__global__ void mxfp4_mma_kernel(TensorArg dst, TensorArg w, const uint8_t* xq, const uint8_t* xs, int64_t M) {
  using Acc = float[kMmaTiles][4];
  dense_tile(dst, w, M, [&](const uint8_t* rows, int64_t n_rows, const int64_t* cols, Acc& acc) {
    mxfp4_tile(rows, w.nb[1], n_rows, w.ne[0], xq, xs, cols, acc);
  });
}

// MATMUL_ID (gpt-oss's experts): the same tile over the (slot, token) pairs grouped by expert.
__global__ void mxfp4_mma_id_kernel(TensorArg dst, TensorArg w, const uint8_t* xq, const uint8_t* xs, int64_t x_slots,
                                    TensorArg bias, ExpertTiles g) {
  using Acc = float[kMmaTiles][4];
  grouped_tile<float>(dst, w, x_slots, bias, g, [&](const uint8_t* rows, int64_t n_rows, const int64_t* cols, Acc& acc) {
    mxfp4_tile(rows, w.nb[1], n_rows, w.ne[0], xq, xs, cols, acc);
  });
}

}  // namespace

BlockScaledMma mxfp4_mma_requested() {
#ifdef KESTREL_CUDA_EMULATE
  constexpr bool kEmulated = true;
#else
  constexpr bool kEmulated = false;
#endif
  static const int cc = [] {
    cudaDeviceProp prop{};
    return cudaGetDeviceProperties(&prop, 0) == cudaSuccess ? 10 * prop.major + prop.minor : 0;
  }();
  const char* v = std::getenv("KESTREL_CUDA_MXFP4_MMA");
  if (!v || reference_kernels_only()) return BlockScaledMma::off;
  const bool sm120 = kEmulated || cc / 10 == 12, sm100 = kEmulated || cc == 100;
  if (std::strcmp(v, "tcgen05") == 0) return sm100 ? BlockScaledMma::tcgen05 : BlockScaledMma::off;
  if (std::strcmp(v, "1") != 0) return BlockScaledMma::off;
  return sm120 ? BlockScaledMma::mma_sync : (sm100 ? BlockScaledMma::tcgen05 : BlockScaledMma::off);
}

bool mxfp4_mma_applies(const Node& n, const Stream& s) {
  if (s.mxfp4_mma == BlockScaledMma::off || (n.op != Op::MATMUL && n.op != Op::MATMUL_ID) || n.src[0]->type != DType::MXFP4 ||
      n.src[0]->layout != 0)
    return false;
  const Tensor *w = n.src[0], *x = n.src[1];
  if (w->ne[0] % 32 != 0 || w->ne[3] != 1 || x->nb[0] != 4) return false;
  if (n.op == Op::MATMUL_ID) return n.dst->ne[2] > kMaxCols && w->ne[2] < kMaxBuckets;
  return x->n_rows() > kMaxCols && w->ne[2] == 1 && blocks_for(x->n_rows(), kMmaCols) <= 65535u;
}

Status run_mxfp4_mma(const Node& n, Stream& s) {
  const Tensor *w = n.src[0], *x = n.src[1];
  const int64_t K = w->ne[0], cols = x->n_rows();
  const bool id = n.op == Op::MATMUL_ID;
  const size_t codes = (static_cast<size_t>(K * cols) + 255) / 256 * 256, scales = (static_cast<size_t>(K / 32 * cols) + 255) / 256 * 256;
  auto mem = s.scratch(codes + scales + (id ? expert_tiles_bytes(n) : 0));
  KS_RETURN_IF_ERROR(mem.status());
  auto* xq = static_cast<uint8_t*>(mem.value());
  uint8_t* xs = xq + codes;
  KS_RETURN_IF_ERROR(KS_LAUNCH(quantize_mxfp8_kernel, dim3(grid_stride_blocks(K / 32 * cols * 32, 256)), dim3(256), 0, s.stream,
                               arg(x), xq, xs));
  const bool tc = s.mxfp4_mma == BlockScaledMma::tcgen05;
  const dim3 block(32 * kMmaWarps);
  if (!id && tc) return launch_mxfp4_tc(n, s, xq, xs, nullptr, 0);
  if (!id)
    return KS_LAUNCH(mxfp4_mma_kernel, dim3(blocks_for(w->ne[1], kMmaRows), blocks_for(cols, kMmaCols)), block, 0, s.stream,
                     arg(n.dst), arg(w), static_cast<const uint8_t*>(xq), static_cast<const uint8_t*>(xs), cols);
  const int64_t max_tiles = expert_tiles_max(n);
  if (max_tiles > 65535) return Error(KESTREL_ERR_UNSUPPORTED, "cuda: MATMUL_ID of " + std::to_string(max_tiles) + " tiles");
  auto g = group_pairs(n, xs + scales, s);
  KS_RETURN_IF_ERROR(g.status());
  if (tc) return launch_mxfp4_tc(n, s, xq, xs, &g.value(), max_tiles);
  return KS_LAUNCH(mxfp4_mma_id_kernel, dim3(blocks_for(w->ne[1], kMmaRows), static_cast<unsigned>(max_tiles)), block, 0, s.stream,
                   arg(n.dst), arg(w), static_cast<const uint8_t*>(xq), static_cast<const uint8_t*>(xs), x->ne[1], arg(n.src[3]),
                   g.value());
}

}  // namespace kestrel::cuda
