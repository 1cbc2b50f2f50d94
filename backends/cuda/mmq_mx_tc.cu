// The block-scaled MXFP4 product of mmq_mx.cu on sm_100a's tcgen05 tensor cores (tcgen05.cuh):
// the same arithmetic (W's E2M1 codes and E8M0 scales as stored, X as MXFP8, one scale each per
// 32-value block), one instruction computing 128 weight rows x 32 tokens x one block, the
// accumulator in tensor memory. Chosen by run_mxfp4_mma when KESTREL_CUDA_MXFP4_MMA asks for
// block-scaled MMAs on a device of compute capability 10.0 (or =tcgen05 on the emulator).
//
// A block (4 warps, 128 threads) owns 128 weight rows x kMmaCols = 32 tokens (the expert tiles'
// width, so MATMUL_ID's grouped pairs serve it unchanged). Per stage of kStage K blocks: every
// thread stages one weight row's blocks (16 nibble bytes each, as two padded 16-byte chunks) and
// one (token, block)'s 32 E4M3 codes into shared memory, the warps write the stage's scales into
// TMEM (a byte per block), one thread issues the stage's MMAs and commits them to a barrier that
// everyone waits on before the next stage overwrites the buffers. A first form: one buffer, no TMA,
// loads and MMAs do not overlap (the pipeline is the next step, with a GPU to time it on).
//
// K order inside a block: a weight block's byte qs[j] holds value j (low nibble) and j + 16 (high).
// Chunk c of the padded operand is bytes qs[8c .. 8c + 7] as they are, so MMA index 16c + 2i + h
// is value 8c + i + 16h; X's codes are staged in that order, which leaves every block's sum (one
// scale pair per block) unchanged.
#include <algorithm>

#include "backends/cuda/dequant.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/tcgen05.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kTcRows = 128, kStage = 4;
// Shared operands: core matrices of 8 rows x 16 bytes, kLbo bytes apart along K, kSbo apart per 8 rows.
constexpr uint32_t kLbo = 128, kSbo = 2 * kStage * kLbo;
// TMEM columns: D (kMmaCols f32), then A's scales (4 columns), then B's (1).
constexpr uint32_t kTmemCols = 64, kSfaCol = kMmaCols, kSfbCol = kSfaCol + kTcRows / 32;

struct TcShared {
  alignas(128) uint8_t a[kTcRows / 8 * kSbo];
  alignas(128) uint8_t b[kMmaCols / 8 * kSbo];
  uint32_t sfa[kTcRows];  // row r's stage scales, a byte per block
  uint64_t bar;
  uint32_t tmem;
};

// Stores 16 bytes (two 8-byte words and zeros) at a 16-byte aligned shared address.
__device__ __forceinline__ void store_chunk(uint8_t* dst, uint64_t lo, uint64_t hi) {
  reinterpret_cast<uint64_t*>(dst)[0] = lo;
  reinterpret_cast<uint64_t*>(dst)[1] = hi;
}
__device__ __forceinline__ uint64_t load8(const uint8_t* p) {  // unaligned
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

// The product tile: W rows 0 .. n_rows - 1 (at most 128) from `rows` (row_stride bytes apart)
// times the X columns cols[c] (-1: none) of xq / xs; thread t gets row t's 32 sums in out.
__device__ void tc_tile(const uint8_t* rows, int64_t row_stride, int64_t n_rows, int64_t K, const uint8_t* xq, const uint8_t* xs,
                        const int64_t* cols, float (&out)[kMmaCols]) {
  __shared__ TcShared sm;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  if (warp == 0) {
    ptx::tmem_alloc(&sm.tmem, kTmemCols);
    ptx::tmem_relinquish();
  }
  if (tid == 0) {
    mbarrier_init(&sm.bar, 1);
    fence_mbarrier_init();
  }
  ptx::tc_fence_before();
  __syncthreads();
  ptx::tc_fence_after();
  const uint32_t tmem = sm.tmem, quarter = static_cast<uint32_t>(32 * warp) << 16;
  const int64_t nb = K / 32;
  uint32_t phase = 0;
  for (int64_t b0 = 0; b0 < nb; b0 += kStage) {
    const int nk = static_cast<int>(std::min<int64_t>(kStage, nb - b0));
    {  // A: row tid's blocks, and their scales
      uint32_t sf = 0;
      for (int kb = 0; kb < kStage; ++kb) {
        uint8_t* dst = sm.a + (tid / 8) * kSbo + 2 * kb * kLbo + (tid % 8) * 16;
        uint64_t q0 = 0, q1 = 0;
        uint32_t e = 127;
        if (kb < nk && tid < n_rows) {
          const auto* blk = reinterpret_cast<const block_mxfp4*>(rows + tid * row_stride) + b0 + kb;
          q0 = load8(blk->qs);
          q1 = load8(blk->qs + 8);
          e = blk->e;
        }
        store_chunk(dst, q0, 0);
        store_chunk(dst + kLbo, q1, 0);
        sf |= e << (8 * kb);
      }
      sm.sfa[tid] = sf;
    }
    {  // B: token tid % 32's block tid / 32, in the weights' K order (above)
      const int c = tid % 32, kb = tid / 32;
      const int64_t col = cols[c];
      uint8_t* dst = sm.b + (c / 8) * kSbo + 2 * kb * kLbo + (c % 8) * 16;
      for (int half = 0; half < 2; ++half) {
        uint64_t w[2] = {0, 0};
        if (kb < nk && col >= 0) {
          const uint8_t* x = xq + col * K + 32 * (b0 + kb) + 8 * half;
          for (int i = 0; i < 8; ++i) w[i / 4] |= (uint64_t{x[i]} | uint64_t{x[16 + i]} << 8) << (16 * (i % 4));
        }
        store_chunk(dst + half * kLbo, w[0], w[1]);
      }
    }
    ptx::fence_proxy_async();  // the generic stores, before the tensor cores read them
    __syncthreads();
    {  // the stage's scales: warp w's lanes are TMEM lanes 32 w .., each quarter a full copy
      const uint32_t v[4] = {sm.sfa[lane], sm.sfa[lane + 32], sm.sfa[lane + 64], sm.sfa[lane + 96]};
      ptx::tmem_store_x4(tmem + quarter + kSfaCol, v);
      const int64_t col = cols[lane];
      uint32_t sfb = 0;
      for (int kb = 0; kb < kStage; ++kb) sfb |= (kb < nk && col >= 0 ? uint32_t{xs[col * nb + b0 + kb]} : 127u) << (8 * kb);
      ptx::tmem_store_x1(tmem + quarter + kSfbCol, sfb);
      ptx::tmem_wait_st();
    }
    ptx::tc_fence_before();
    __syncthreads();
    if (tid == 0) {
      ptx::tc_fence_after();
      for (int kb = 0; kb < nk; ++kb) {
        const uint32_t id = static_cast<uint32_t>(kb);
        ptx::tc_mma_mxf4_e4m3(tmem, ptx::tc_operand(sm.a + 2 * kb * kLbo, kLbo, kSbo), ptx::tc_operand(sm.b + 2 * kb * kLbo, kLbo, kSbo),
                              ptx::tc_idesc_block_scaled(ptx::kTcE2M1, ptx::kTcE4M3, kMmaCols, id, id),
                              (tmem + kSfaCol) | id << 30, (tmem + kSfbCol) | id << 30, b0 + kb > 0 ? 1u : 0u);
      }
      ptx::tc_commit(&sm.bar);
    }
    __syncthreads();  // (the emulator completes the MMAs at issue: issue before anyone waits)
    mbarrier_wait(&sm.bar, phase);
    phase ^= 1;
    ptx::tc_fence_after();
  }
  ptx::tmem_load_x32(tmem + quarter, out);
  ptx::tmem_wait_ld();
  ptx::tc_fence_before();
  __syncthreads();
  if (warp == 0) {
    ptx::tc_fence_after();
    ptx::tmem_dealloc(tmem, kTmemCols);
  }
}

__global__ void mxfp4_tc_kernel(TensorArg dst, TensorArg w, const uint8_t* xq, const uint8_t* xs,
                                                           int64_t M) {
  __shared__ int64_t cols[kMmaCols];
  const int64_t N = w.ne[1], row0 = static_cast<int64_t>(blockIdx.x) * kTcRows, col0 = static_cast<int64_t>(blockIdx.y) * kMmaCols;
  dense_tile_columns(col0, M, cols);
  float out[kMmaCols];
  tc_tile(w.data + row0 * w.nb[1], w.nb[1], std::min<int64_t>(kTcRows, N - row0), w.ne[0], xq, xs, cols, out);
  const int64_t r = row0 + threadIdx.x;
  if (r >= N) return;
  for (int c = 0; c < kMmaCols; ++c)
    if (col0 + c < M) dst.f32(col0 + c)[r] = out[c];
}

// MATMUL_ID: block (x, y) computes weight rows x of tile y's expert times the tile's pairs.
__global__ void mxfp4_tc_id_kernel(TensorArg dst, TensorArg w, const uint8_t* xq, const uint8_t* xs,
                                                              int64_t x_slots, TensorArg bias, ExpertTiles g) {
  const int64_t t = blockIdx.y;
  if (t >= *g.n_tiles) return;  // the whole block: past the tiles in use
  __shared__ int64_t cols[kMmaCols];
  const int32_t e = tile_columns(g, t, dst.ne[1], x_slots, cols);
  const int64_t N = w.ne[1], row0 = static_cast<int64_t>(blockIdx.x) * kTcRows;
  float out[kMmaCols] = {};
  if (e < w.ne[2])  // block-uniform
    tc_tile(w.data + row0 * w.nb[1] + e * w.nb[2], w.nb[1], std::min<int64_t>(kTcRows, N - row0), w.ne[0], xq, xs, cols, out);
  const int64_t r = row0 + threadIdx.x, n_slots = dst.ne[1];
  if (r >= N) return;
  const float b = e < w.ne[2] && bias.data ? reinterpret_cast<const float*>(bias.row(e))[r] : 0.0f;
  for (int c = 0; c < kMmaCols; ++c) {
    const int32_t p = g.pairs[t * kMmaCols + c];
    if (p < 0) continue;
    reinterpret_cast<float*>(dst.row(p % n_slots, p / n_slots, 0))[r] = e < w.ne[2] ? out[c] + b : 0.0f;
  }
}

}  // namespace

Status launch_mxfp4_tc(const Node& n, Stream& s, const uint8_t* xq, const uint8_t* xs, const ExpertTiles* g, int64_t max_tiles) {
  const Tensor* w = n.src[0];
  const dim3 block(kTcRows);
  if (!g)
    return KS_LAUNCH(mxfp4_tc_kernel, dim3(blocks_for(w->ne[1], kTcRows), blocks_for(n.src[1]->n_rows(), kMmaCols)), block, 0,
                     s.stream, arg(n.dst), arg(w), xq, xs, n.src[1]->n_rows());
  return KS_LAUNCH(mxfp4_tc_id_kernel, dim3(blocks_for(w->ne[1], kTcRows), static_cast<unsigned>(max_tiles)), block, 0, s.stream,
                   arg(n.dst), arg(w), xq, xs, n.src[1]->ne[1], arg(n.src[3]), *g);
}

}  // namespace kestrel::cuda
