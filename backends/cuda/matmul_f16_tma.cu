// MATMUL of F16/BF16 weights over batches of more than kDecodeBatchCols columns on Hopper's own
// path: TMA copies (tma.cuh) feed warpgroup MMA (wgmma.cuh) through a pipeline of kStages
// shared-memory stages, each a transaction barrier's. Opt-in with KESTREL_CUDA_WGMMA=1 on sm_90
// (Stream::wgmma), like the wgmma tiles of matmul_f16.cu, until a GPU has timed it; there it
// takes the dense batches before cuBLAS.
//
// A block (one warpgroup, 128 threads) computes kMmaRows = 64 weight rows x kMmaCols = 32 tokens,
// 64 values of K a stage: W's box of 64 rows x 64 values and X's of 32 tokens x 64 values (X
// rounded to the weight's 16 bits first, x_to_b16), both 128-byte rows with the 128-byte swizzle,
// read by four wgmma m64n32k16 (the start advanced 32 bytes a k-step). Thread 0 issues the copies
// kStages - 1 stages ahead; every thread waits on a stage's barrier before its MMAs, and a block
// barrier after them frees the stage for its next copy. The TMA writes zeros past the matrix
// (rows, tokens, K's tail), so nothing is padded by hand. The accumulator fragment is mma.sync's,
// stored by store_mma_tiles.
#include "backends/cuda/kernels.h"
#include "backends/cuda/tma.cuh"
#include "backends/cuda/wgmma.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kStages = 3;
constexpr int kStageK = 64;  // values of K a stage: 128-byte rows
constexpr uint32_t kStageBytes = (kMmaRows + kMmaCols) * kStageK * 2;

template <DType T>
__global__ void f16_tma_kernel(TensorArg dst, const __grid_constant__ TmaMap wmap, const __grid_constant__ TmaMap xmap,
                               int64_t N, int64_t M, int64_t K) {
  alignas(1024) __shared__ uint16_t sw[kStages][kMmaRows * kStageK];
  alignas(1024) __shared__ uint16_t sx[kStages][kMmaCols * kStageK];
  alignas(8) __shared__ uint64_t full[kStages];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kMmaRows, col0 = static_cast<int64_t>(blockIdx.y) * kMmaCols;
  const int64_t steps = (K + kStageK - 1) / kStageK;
  const auto issue = [&](int64_t k) {  // thread 0: stage k's two boxes
    const int s = static_cast<int>(k % kStages);
    mbarrier_arrive_expect_tx(&full[s], kStageBytes);
    tma_load_2d(sw[s], &wmap, static_cast<int32_t>(k * kStageK), static_cast<int32_t>(row0), &full[s]);
    tma_load_2d(sx[s], &xmap, static_cast<int32_t>(k * kStageK), static_cast<int32_t>(col0), &full[s]);
  };
  // The barriers, and the first kStages - 1 stages' copies, before the barrier after which every
  // thread may wait for them (every later copy is issued at least one block barrier before its
  // first wait, which is what lets the emulator, whose copies complete at issue, run this).
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) mbarrier_init(&full[s], 1);
    fence_mbarrier_init();
    for (int64_t k = 0; k < kStages - 1 && k < steps; ++k) issue(k);
  }
  __syncthreads();
  float acc[kMmaTiles][4];
  for (int j = 0; j < kMmaTiles; ++j)
    for (int i = 0; i < 4; ++i) acc[j][i] = 0;
  for (int64_t k = 0; k < steps; ++k) {
    // The stage freed by the block barrier that ended step k - 1 takes step k + kStages - 1.
    if (tid == 0 && k + kStages - 1 < steps) issue(k + kStages - 1);
    const int s = static_cast<int>(k % kStages);
    mbarrier_wait(&full[s], static_cast<uint32_t>((k / kStages) & 1));
    ptx::wgmma_fence();
    for (int h = 0; h < kStageK / 16; ++h) {
      const auto a = ptx::wgmma_operand_sw128(sw[s] + 16 * h, 1024);
      const auto b = ptx::wgmma_operand_sw128(sx[s] + 16 * h, 1024);
      ptx::wgmma_m64n32k16<T == DType::BF16>(acc, a, b);
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
    __syncthreads();  // the stage is read; its next copy may be issued
  }
  store_mma_tiles(acc, dst, row0, col0, N, M);
}

}  // namespace

bool f16_tma_applies(const Node& n, const Stream& s) {
  if (!s.wgmma || n.op != Op::MATMUL) return false;
  const Tensor *w = n.src[0], *x = n.src[1];
  if (w->type != DType::F16 && w->type != DType::BF16) return false;
  const int64_t K = w->ne[0], M = x->n_rows();
  // TMA's rules: rows 16-byte aligned (K % 8 for X's rows too), coordinates and sizes in int32.
  return M > kDecodeBatchCols && w->layout == 0 && w->ne[2] == 1 && w->ne[3] == 1 && w->nb[0] == 2 && w->nb[1] % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w->data) % 16 == 0 && K % 8 == 0 && x->nb[0] == 4 && K <= INT32_MAX &&
         w->ne[1] <= INT32_MAX && M <= INT32_MAX && blocks_for(M, kMmaCols) <= 65535u;
}

Status run_f16_tma(const Node& n, Stream& s) {
  const Tensor *w = n.src[0], *x = n.src[1];
  const int64_t K = w->ne[0], N = w->ne[1], M = x->n_rows();
  auto xb = x_to_b16(x, w->type, s);
  KS_RETURN_IF_ERROR(xb.status());
  TmaMap wmap, xmap;
  KS_RETURN_IF_ERROR(encode_tma_2d(&wmap, w->data, w->type, K, N, static_cast<int64_t>(w->nb[1]), kStageK, kMmaRows, true));
  KS_RETURN_IF_ERROR(encode_tma_2d(&xmap, xb.value(), w->type, K, M, K * 2, kStageK, kMmaCols, true));
  const dim3 grid(blocks_for(N, kMmaRows), blocks_for(M, kMmaCols)), block(128);
  return w->type == DType::F16
             ? launch("f16_tma_kernel", f16_tma_kernel<DType::F16>, grid, block, 0, s.stream, arg(n.dst), wmap, xmap, N, M, K)
             : launch("f16_tma_kernel", f16_tma_kernel<DType::BF16>, grid, block, 0, s.stream, arg(n.dst), wmap, xmap, N, M, K);
}

}  // namespace kestrel::cuda
