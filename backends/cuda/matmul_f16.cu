// MATMUL of F16 and BF16 weights. X is first rounded to the weight's type (round_x: what
// llama.cpp's matmul sees), then
//  - decode (at most kDecodeBatchCols columns, in groups of kMaxCols; rows of a multiple of 8):
//    one warp per weight row, each lane loading 8 values (16 bytes) per step, so a warp reads 512
//    contiguous bytes at once, two steps in flight; float dots with the columns' values (16-byte
//    loads), reduced across the warp;
//  - larger batches: tensor cores, mma.sync m16n8k16 with f16 or bf16 operands and f32
//    accumulation. A block of kMmaWarps warps computes kMmaRows weight rows x kMmaCols tokens
//    (common.cuh), kStep values of K per shared-memory stage (two mma per tile), any K (a
//    stage's tail is zero-padded).
// Products of two 16-bit values are exact in f32, so both agree with the reference's double sums
// to float rounding. The part-1 kernel (matmul.cu) stays the path for MATMUL_ID, for the decode
// of rows that 8 does not divide, and with KESTREL_CUDA_KERNELS=reference.
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/ptx.cuh"

namespace kestrel::cuda {
namespace {

template <DType T>
__device__ __forceinline__ float b16_value(uint32_t h) {
  return T == DType::F16 ? half_to_float(static_cast<uint16_t>(h)) : bf16_to_float(static_cast<uint16_t>(h));
}
// The 16-bit pattern of a value already rounded to T (exact).
template <DType T>
__device__ __forceinline__ uint32_t b16_bits(float v) {
  return T == DType::F16 ? ptx::f32_to_f16(v) : ptx::f32_to_bf16(v);
}

constexpr unsigned kGemvWarps = 8;  // rows per block
constexpr int kAhead = 2;            // 16-byte loads in flight per lane

template <DType T, int NC>
__global__ void f16_gemv_kernel(TensorArg dst, TensorArg w, const float* xr, int64_t M) {
  const int64_t K = w.ne[0], N = w.ne[1];
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (n >= N) return;  // whole warps leave together
  const uint8_t* row = w.data + n * w.nb[1];  // 16-byte aligned: K % 8 == 0
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * NC;  // this block's group of columns
  const int nc = static_cast<int>(M - c0 < NC ? M - c0 : NC);
  xr += c0 * K;
  float acc[NC];
  for (int c = 0; c < NC; ++c) acc[c] = 0;
  for (int64_t k0 = 8 * lane; k0 < K; k0 += 256 * kAhead) {
    uint4 v[kAhead];
    for (int u = 0; u < kAhead; ++u) {
      const int64_t k = k0 + 256 * u;
      v[u] = k < K ? load_uint4(row + 2 * k) : uint4{0, 0, 0, 0};
    }
    for (int u = 0; u < kAhead; ++u) {
      const int64_t k = k0 + 256 * u;
      if (k >= K) break;
      const uint32_t words[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
      float wf[8];
      for (int i = 0; i < 4; ++i) wf[2 * i] = b16_value<T>(words[i] & 0xFFFF), wf[2 * i + 1] = b16_value<T>(words[i] >> 16);
      for (int c = 0; c < NC; ++c) {
        if (c >= nc) break;
        const float4 x0 = load_float4(xr + c * K + k), x1 = load_float4(xr + c * K + k + 4);
        acc[c] += wf[0] * x0.x + wf[1] * x0.y + wf[2] * x0.z + wf[3] * x0.w + wf[4] * x1.x + wf[5] * x1.y +
                  wf[6] * x1.z + wf[7] * x1.w;
      }
    }
  }
  store_column_sums<NC, kGemvWarps>(acc, nc, dst, n, c0);
}

constexpr int kStep = 32;               // values of K per stage: two mma k16
constexpr int kWords = kStep / 2;       // 16-bit pairs per staged row
constexpr int kStride = kWords + 4;     // the pad spreads a fragment's 8 rows over distinct banks

template <DType T>
__global__ void f16_mma_kernel(TensorArg dst, TensorArg w, const float* xr, int64_t M) {
  __shared__ uint32_t sa[kMmaRows * kStride], sx[kMmaCols * kStride];
  const int64_t K = w.ne[0], N = w.ne[1];
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kMmaRows, col0 = static_cast<int64_t>(blockIdx.y) * kMmaCols;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  float acc[kMmaTiles][4];
  for (int j = 0; j < kMmaTiles; ++j)
    for (int i = 0; i < 4; ++i) acc[j][i] = 0;
  for (int64_t k0 = 0; k0 < K; k0 += kStep) {
    // One pair of K per thread and step; rows may be only 2-byte aligned (odd K), so 16-bit loads.
    for (int p = tid; p < kMmaRows * kWords; p += blockDim.x) {
      const int r = p / kWords, wi = p % kWords;
      const int64_t n = row0 + r, k = k0 + 2 * wi;
      const uint16_t* src = reinterpret_cast<const uint16_t*>(w.data + n * w.nb[1]);
      const uint32_t lo = n < N && k < K ? src[k] : 0u, hi = n < N && k + 1 < K ? src[k + 1] : 0u;
      sa[r * kStride + wi] = lo | (hi << 16);
    }
    for (int p = tid; p < kMmaCols * kWords; p += blockDim.x) {
      const int c = p / kWords, wi = p % kWords;
      const int64_t col = col0 + c, k = k0 + 2 * wi;
      const float* x = xr + col * K;
      const uint32_t lo = col < M && k < K ? b16_bits<T>(x[k]) : 0u, hi = col < M && k + 1 < K ? b16_bits<T>(x[k + 1]) : 0u;
      sx[c * kStride + wi] = lo | (hi << 16);
    }
    __syncthreads();
    const int ra = warp * 16 + g;  // this lane's rows: ra and ra + 8
    for (int h = 0; h < kStep / 16; ++h) {
      // A (16 x 16, row-major): rows ra, ra + 8; columns 2t, 2t + 1 and 2t + 8, 2t + 9 of the half.
      const uint32_t a[4] = {sa[ra * kStride + 8 * h + t], sa[(ra + 8) * kStride + 8 * h + t],
                             sa[ra * kStride + 8 * h + 4 + t], sa[(ra + 8) * kStride + 8 * h + 4 + t]};
      for (int j = 0; j < kMmaTiles; ++j) {
        const int cb = j * 8 + g;  // B (16 x 8): token cb, k 2t, 2t + 1 and 2t + 8, 2t + 9
        const uint32_t b[2] = {sx[cb * kStride + 8 * h + t], sx[cb * kStride + 8 * h + 4 + t]};
        if constexpr (T == DType::F16) ptx::mma_m16n8k16_f16(acc[j], a, b, acc[j]);
        else ptx::mma_m16n8k16_bf16(acc[j], a, b, acc[j]);
      }
    }
    __syncthreads();  // the stage is read; the next one may overwrite it
  }
  store_mma_tiles(acc, dst, row0, col0, N, M);
}

}  // namespace

bool f16_matmul_applies(const Node& n) {
  const DType t = n.src[0]->type;
  if (n.op != Op::MATMUL || (t != DType::F16 && t != DType::BF16) || reference_kernels_only()) return false;
  return n.src[1]->n_rows() > kDecodeBatchCols || n.src[0]->ne[0] % 8 == 0;
}

Status run_f16_matmul(const Node& n, Stream& s) {
  const Tensor *w = n.src[0], *x = n.src[1];
  const int64_t M = x->n_rows();
  auto xr = round_x(w, x, s);
  KS_RETURN_IF_ERROR(xr.status());
  auto go = [&]<DType T>() -> Status {
    if (M <= kDecodeBatchCols) {
      const dim3 grid(blocks_for(w->ne[1], kGemvWarps), blocks_for(M, kMaxCols)), block(32 * kGemvWarps);
      if (M == 1) return launch("f16_gemv_kernel", f16_gemv_kernel<T, 1>, grid, block, 0, s.stream, arg(n.dst), arg(w), xr.value(), M);
      return launch("f16_gemv_kernel", f16_gemv_kernel<T, kMaxCols>, grid, block, 0, s.stream, arg(n.dst), arg(w), xr.value(), M);
    }
    if (blocks_for(M, kMmaCols) > 65535u) return Error(KESTREL_ERR_UNSUPPORTED, "cuda: MATMUL of " + std::to_string(M) + " columns");
    const dim3 grid(blocks_for(w->ne[1], kMmaRows), blocks_for(M, kMmaCols)), block(32 * kMmaWarps);
    return launch("f16_mma_kernel", f16_mma_kernel<T>, grid, block, 0, s.stream, arg(n.dst), arg(w), xr.value(), M);
  };
  return w->type == DType::F16 ? go.template operator()<DType::F16>() : go.template operator()<DType::BF16>();
}

}  // namespace kestrel::cuda
