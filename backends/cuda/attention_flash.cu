// ATTENTION for prefill on tensor cores: a block per (64 tokens, head), a warp per 16 of its
// tokens. The block walks its tokens' cells in tiles of BC: K (and V) rows staged in shared
// memory, S = Q·Kᵀ with mma.sync m16n8k16 (f16 in, f32 sums), then the causal, sliding-window
// and empty-cell masks, scale and soft-cap on S as the reference applies them. Tiles that no
// token of the block can see are skipped (the causal upper triangle, cells outside every window).
//
// Two passes over the tiles, not FlashAttention-2's one: the reference rounds the *normalised* p to
// f16 before P·V, which a one-pass online softmax cannot do (it rounds exp(s - running max) and
// divides at the end). Measured on the emulator, the one-pass form moved outputs by up to 2^-12
// of their size wherever one cell dominates, enough to push random-weight models of the
// reference-logit tests past their bounds. So pass 1 computes S for the row max and the sum of
// exp(s - max) (in double, rescaled as the max grows; sinks join at its end), and pass 2
// computes S again, p = exp(s - max) / sum rounded to f16, and O += P·V (V through
// ldmatrix.trans). The price is a second Q·Kᵀ: 1.5 times FlashAttention-2's FLOPs.
//
// Tokens of one block may belong to different sequences (a batch of several prompts): the block
// makes one pass pair per sequence among its tokens, over that sequence's block table, and a
// token takes cells only in its own.
//
// F16 and FP8 caches (FP8 bytes widened to f16 as they are staged) with head sizes up to 256
// (padded to 64, 128 or 256), and MLA's absorbed form (DeepSeek: K rows of 576 values, the latent
// and the shared rope part; V the latent's 512): K heads up to kMaxHeadWide, any V head. Those
// take the wide variant: its four warps share one block's 16 tokens. Q's fragments sit in shared
// memory (36 k-steps would be 144 registers); each warp forms the scores over a quarter of the
// k-steps, the four partial tiles are summed in shared memory (in warp order, so every warp
// holds the same S), and each warp adds P·V for its own 128 of the V dimensions (512 a block,
// more over blockIdx.z). K and then V are staged in the same shared memory. Batches of more than
// kDecodeBatchCols tokens (kernels.h: up to that size, a token's attention is computed exactly as
// in decode). Everything else stays on attention.cu's kernel.
#include "backends/cuda/kernels.h"
#include "backends/cuda/ptx.cuh"

namespace kestrel::cuda {
namespace {

constexpr int kMaxHead = 256;       // K and V heads of the 4-warp variants
constexpr int kMaxHeadWide = 576;   // K heads of the wide variant (MLA: 512 latent + 64 rope)
constexpr int kWideSlice = 128;     // V dimensions a warp of the wide variant writes (a block: 4 of them)

struct FlashArgs {
  int32_t n_tokens, group, hd_k, hd_v;
  float scale, softcap;
  int32_t window;
  bool f8;   // an FP8 cache (E4M3 bytes, each exactly an f16 value), else F16
  bool vec;  // head sizes a multiple of 8 and rows aligned to 8 values: 16-byte (8 for FP8) loads
};

// One row of nw 32-bit words (f16 pairs) of a cache row from `src`, zeros past `n` values. An FP8
// row's bytes are widened to the f16 values they are.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t lo, uint32_t hi) {
  return static_cast<uint32_t>(float_to_half(bits_to_float(e4m3_to_fp32_bits(static_cast<uint8_t>(lo))))) |
         (static_cast<uint32_t>(float_to_half(bits_to_float(e4m3_to_fp32_bits(static_cast<uint8_t>(hi))))) << 16);
}
__device__ __forceinline__ void stage_row(uint32_t* dst, const uint8_t* src, int n, int nw, int lane_in, int lanes,
                                          const FlashArgs& a) {
  if (a.vec) {
    for (int w = 4 * lane_in; w < nw; w += 4 * lanes) {
      uint4 v = {0, 0, 0, 0};
      if (2 * w < n) {
        if (a.f8) {
          const uint2 b = *reinterpret_cast<const uint2*>(src + 2 * w);
          v = {e4m3x2_to_f16x2(b.x, b.x >> 8), e4m3x2_to_f16x2(b.x >> 16, b.x >> 24), e4m3x2_to_f16x2(b.y, b.y >> 8),
               e4m3x2_to_f16x2(b.y >> 16, b.y >> 24)};
        } else {
          v = *reinterpret_cast<const uint4*>(src + 4 * w);
        }
      }
      dst[w] = v.x, dst[w + 1] = v.y, dst[w + 2] = v.z, dst[w + 3] = v.w;
    }
    return;
  }
  for (int w = lane_in; w < nw; w += lanes) {
    if (a.f8) {
      dst[w] = e4m3x2_to_f16x2(2 * w < n ? src[2 * w] : 0u, 2 * w + 1 < n ? src[2 * w + 1] : 0u);
      continue;
    }
    const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
    const uint32_t lo = 2 * w < n ? h[2 * w] : 0u, hi = 2 * w + 1 < n ? h[2 * w + 1] : 0u;
    dst[w] = lo | (hi << 16);
  }
}

// DK: the padded K head size (a multiple of 16, at least hd_k); DV: the V dimensions a warp
// writes; BC: cells per tile; W: warps. SH (the wide variant): the W warps share 16 tokens, Q's
// fragments in shared memory, the scores' k-steps split between the warps, each warp a DV-slice
// of V (the block's W * DV from blockIdx.z * W * DV). Otherwise each warp has 16 tokens of its
// own, Q in registers, all of V (DV >= hd_v).
template <int DK, int DV, int BC, int W, bool SH>
__global__ void flash_kernel(TensorArg dst, TensorArg q, TensorArg kc, TensorArg vc, const float* sinks,
                             const int32_t* packed, FlashArgs a) {
  constexpr int kRows = SH ? 16 : 16 * W;  // tokens per block
  constexpr int KS = DK / 2 + 4;  // words per staged K (and Q) row: the pad puts a fragment's 8 rows on distinct banks
  constexpr int VB = SH ? W * DV : DV;  // V dimensions a block stages
  constexpr int VS = VB + 8;      // halves per staged V row (16-byte rows for ldmatrix, same spread)
  // K's and V's tiles: apart, or (SH) V where K was, staged after the scores are formed.
  constexpr int kStageWords = SH ? (BC * KS > BC * VS / 2 ? BC * KS : BC * VS / 2) : BC * KS + BC * VS / 2;
  alignas(16) __shared__ uint32_t stage[kStageWords];
  alignas(16) __shared__ uint32_t sq[SH ? kRows * KS : 1];
  __shared__ float partial[SH ? W * (BC / 8) * 4 * 32 : 1];  // each warp's share of S
  __shared__ int32_t cell_of[BC], pos_of[BC], row_pos[kRows], row_seq[kRows];
  __shared__ int32_t any_visible;
  uint32_t* const sk = stage;
  uint16_t* const sv = reinterpret_cast<uint16_t*>(SH ? stage : stage + BC * KS);

  const AttentionBatch b = AttentionBatch::view(packed);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  const int32_t t0 = static_cast<int32_t>(blockIdx.x) * kRows;
  const int64_t h = blockIdx.y, kvh = h / a.group;
  const int vb0 = static_cast<int>(blockIdx.z) * VB;  // the block's first V dimension
  const int hb = a.hd_v - vb0 < VB ? a.hd_v - vb0 : VB;  // V dimensions it stages
  const int v0 = SH ? warp * DV : 0;                      // the warp's first, within the block's
  const int hv = hb - v0 < 0 ? 0 : (hb - v0 < DV ? hb - v0 : DV);  // V dimensions it writes
  const int kd = (a.hd_k + 15) / 16, vd = (hv + 15) / 16;  // 16-wide slices that hold data
  // The k-steps this warp adds to S: all, or (SH) its quarter.
  constexpr int kSteps = DK / 16, kMine = SH ? (kSteps + W - 1) / W : kSteps;
  const int kk0 = SH ? warp * kMine : 0;
  if (tid < kRows) {
    const int32_t t = t0 + tid;
    row_seq[tid] = t < a.n_tokens ? b.token_seq[t] : INT32_MAX;
    row_pos[tid] = t < a.n_tokens ? b.token_pos[t] : -1;
  }

  // This lane's rows of the warp's 16: r0 = g and r1 = g + 8. Q's A fragments, rounded to f16 as
  // the reference rounds Q for an F16 cache; zeros past hd_k and past the batch. In registers, or
  // (SH) as f16 pairs in shared memory, KS words a row, read per k-step.
  const int r0 = (SH ? 0 : warp * 16) + g, r1 = r0 + 8;
  const auto at = [&](const float* row, int d) { return row && d < a.hd_k ? row[d] : 0.0f; };
  uint32_t qf[SH ? 1 : DK / 16][4];
  if constexpr (SH) {
    for (int i = tid; i < kRows * (DK / 2); i += 32 * W) {
      const int r = i / (DK / 2), w = i % (DK / 2);
      const float* row = t0 + r < a.n_tokens ? reinterpret_cast<const float*>(q.row(h, t0 + r, 0)) : nullptr;
      sq[r * KS + w] = ptx::pack_f16x2(at(row, 2 * w), at(row, 2 * w + 1));
    }
  } else {
    const float* q0 = t0 + r0 < a.n_tokens ? reinterpret_cast<const float*>(q.row(h, t0 + r0, 0)) : nullptr;
    const float* q1 = t0 + r1 < a.n_tokens ? reinterpret_cast<const float*>(q.row(h, t0 + r1, 0)) : nullptr;
    KS_UNROLL for (int kk = 0; kk < DK / 16; ++kk) {
      const int d = 16 * kk + 2 * t4;
      qf[kk][0] = ptx::pack_f16x2(at(q0, d), at(q0, d + 1));
      qf[kk][1] = ptx::pack_f16x2(at(q1, d), at(q1, d + 1));
      qf[kk][2] = ptx::pack_f16x2(at(q0, d + 8), at(q0, d + 9));
      qf[kk][3] = ptx::pack_f16x2(at(q1, d + 8), at(q1, d + 9));
    }
  }
  float o[DV / 8][4];
  KS_UNROLL for (int j = 0; j < DV / 8; ++j)
    KS_UNROLL for (int e = 0; e < 4; ++e) o[j][e] = 0;
  __syncthreads();

  for (int32_t prev = -1;;) {
    // The next sequence among the block's tokens, and the span of their positions.
    int32_t seq = INT32_MAX, lo = INT32_MAX, hi = -1;
    for (int r = 0; r < kRows; ++r)
      if (row_seq[r] > prev && row_seq[r] < seq) seq = row_seq[r];
    if (seq == INT32_MAX) break;
    for (int r = 0; r < kRows; ++r)
      if (row_seq[r] == seq) {
        lo = row_pos[r] < lo ? row_pos[r] : lo;
        hi = row_pos[r] > hi ? row_pos[r] : hi;
      }
    prev = seq;
    // Rows of another sequence see nothing in this pass (position -1).
    const int32_t p0 = row_seq[r0] == seq ? row_pos[r0] : -1, p1 = row_seq[r1] == seq ? row_pos[r1] : -1;
    const int32_t tb = b.table_begin[seq], nc = (b.table_begin[seq + 1] - tb) * b.block_size;
    // Per row: the max and the sum of exp(s - max) (this lane's columns, in double as the
    // reference sums), over every visible cell; then the max with the sink, and the whole sum.
    float m[2] = {-INFINITY, -INFINITY};
    double l[2] = {0, 0};

    for (int phase = 0; phase < 2; ++phase) {
      for (int32_t j0 = 0; j0 < nc; j0 += BC) {
        __syncthreads();  // the previous tile (and any_visible) are read
        if (tid == 0) any_visible = 0;
        __syncthreads();
        if (tid < BC) {
          const int32_t i = j0 + tid;
          int32_t c = -1, cp = -1;
          if (i < nc) {
            c = b.tables[tb + i / b.block_size] * b.block_size + i % b.block_size;
            cp = b.cell_pos[c];
          }
          cell_of[tid] = cp >= 0 ? c : -1;
          pos_of[tid] = cp;
          // Some token of the pass may see it (a bound: positions lo..hi are not all present).
          if (cp >= 0 && cp <= hi && (a.window <= 0 || lo - cp < a.window)) any_visible = 1;
        }
        __syncthreads();
        if (!any_visible) continue;
        // Stage K (and V for the second phase, unless SH): a quarter warp per cell row; empty
        // cells as zeros (their memory may hold anything, and a NaN times a zero p would be a NaN).
        const int elem = a.f8 ? 1 : 2;
        const auto stage_v = [&] {
          for (int r = tid / 8; r < BC; r += W * 4) {
            const int32_t c = cell_of[r];
            uint32_t* vd_row = reinterpret_cast<uint32_t*>(sv + r * VS);
            if (c < 0) {
              for (int w = tid % 8; w < VB / 2; w += 8) vd_row[w] = 0;
              continue;
            }
            stage_row(vd_row, vc.data + c * vc.nb[1] + (kvh * a.hd_v + vb0) * elem, hb, VB / 2, tid % 8, 8, a);
          }
        };
        for (int r = tid / 8; r < BC; r += W * 4) {
          const int32_t c = cell_of[r];
          uint32_t* kd_row = sk + r * KS;
          if (c < 0) {
            for (int w = tid % 8; w < DK / 2; w += 8) kd_row[w] = 0;
            continue;
          }
          stage_row(kd_row, kc.data + c * kc.nb[1] + kvh * a.hd_k * elem, a.hd_k, DK / 2, tid % 8, 8, a);
        }
        if (!SH && phase == 1) stage_v();
        __syncthreads();

        // S = Q·Kᵀ for the warp's 16 rows and the tile's BC cells (SH: the four warps' shares
        // of the k-steps, summed); scaled, soft-capped and masked as the reference does it.
        float s[BC / 8][4];
        KS_UNROLL for (int j = 0; j < BC / 8; ++j) {
          KS_UNROLL for (int e = 0; e < 4; ++e) s[j][e] = 0;
          const uint32_t* krow = sk + (8 * j + g) * KS;
          KS_UNROLL for (int k = 0; k < kMine; ++k) {
            const int kk = kk0 + k;
            if (kk >= kd) break;
            const uint32_t bf[2] = {krow[8 * kk + t4], krow[8 * kk + 4 + t4]};
            if constexpr (SH) {
              const uint32_t* q0 = sq + r0 * KS + 8 * kk + t4;
              const uint32_t* q1 = sq + r1 * KS + 8 * kk + t4;
              const uint32_t af[4] = {q0[0], q1[0], q0[4], q1[4]};
              ptx::mma_m16n8k16_f16(s[j], af, bf, s[j]);
            } else {
              ptx::mma_m16n8k16_f16(s[j], qf[kk], bf, s[j]);
            }
          }
        }
        if constexpr (SH) {
          KS_UNROLL for (int j = 0; j < BC / 8; ++j)
            KS_UNROLL for (int e = 0; e < 4; ++e) partial[((warp * (BC / 8) + j) * 4 + e) * 32 + lane] = s[j][e];
          __syncthreads();  // every share written, and K read: V may take its place
          KS_UNROLL for (int j = 0; j < BC / 8; ++j)
            KS_UNROLL for (int e = 0; e < 4; ++e) {
              float sum = 0;
              KS_UNROLL for (int w = 0; w < W; ++w) sum += partial[((w * (BC / 8) + j) * 4 + e) * 32 + lane];
              s[j][e] = sum;
            }
          if (phase == 1) {
            stage_v();
            __syncthreads();
          }
        }
        KS_UNROLL for (int j = 0; j < BC / 8; ++j) {
          KS_UNROLL for (int e = 0; e < 4; ++e) {
            const int32_t cp = pos_of[8 * j + 2 * t4 + e % 2], p = e < 2 ? p0 : p1;
            const bool vis = cp >= 0 && cp <= p && (a.window <= 0 || p - cp < a.window);
            const float sd = s[j][e];
            const float v = a.softcap > 0 ? a.softcap * tanhf(sd * a.scale / a.softcap) : sd * a.scale;
            s[j][e] = vis ? v : -INFINITY;
          }
        }
        if (phase == 0) {
          // The running max, the sum rescaled when it grows.
          KS_UNROLL for (int r = 0; r < 2; ++r) {
            float mt = -INFINITY;
            KS_UNROLL for (int j = 0; j < BC / 8; ++j) mt = fmaxf(mt, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
            mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
            mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
            if (mt == -INFINITY) continue;  // nothing visible to this row here
            if (mt > m[r]) {
              if (m[r] != -INFINITY) l[r] *= exp(static_cast<double>(m[r]) - mt);
              m[r] = mt;
            }
            KS_UNROLL for (int j = 0; j < BC / 8; ++j) {
              l[r] += expf(s[j][2 * r] - m[r]);  // exp(-inf) = 0 for masked cells
              l[r] += expf(s[j][2 * r + 1] - m[r]);
            }
          }
          continue;
        }
        // p = exp(s - max) / sum, rounded to f16 by the packing as the reference rounds it for an
        // F16 V; P's C fragments of two 8-cell tiles are the A fragment of 16 cells for O += P·V.
        uint32_t pf[BC / 8][2];
        KS_UNROLL for (int j = 0; j < BC / 8; ++j) {
          float pr[4];
          KS_UNROLL for (int e = 0; e < 4; ++e) {
            const int r = e / 2;
            pr[e] = s[j][e] == -INFINITY ? 0.0f : static_cast<float>(expf(s[j][e] - m[r]) / l[r]);
          }
          pf[j][0] = ptx::pack_f16x2(pr[0], pr[1]);
          pf[j][1] = ptx::pack_f16x2(pr[2], pr[3]);
        }
        KS_UNROLL for (int kc2 = 0; kc2 < BC / 16; ++kc2) {
          const uint32_t af[4] = {pf[2 * kc2][0], pf[2 * kc2][1], pf[2 * kc2 + 1][0], pf[2 * kc2 + 1][1]};
          // ldmatrix.trans: matrix i = lane / 8 holds cells 16 kc2 + 8 (i % 2) .., dims + 8 (i / 2).
          const uint16_t* vrow = sv + (16 * kc2 + (lane % 8) + 8 * ((lane / 8) % 2)) * VS + v0 + 8 * (lane / 16);
          KS_UNROLL for (int dn = 0; dn < DV / 16; ++dn) {
            if (dn >= vd) break;
            uint32_t bv[4];
            ptx::ldmatrix_x4_trans(bv, vrow + 16 * dn);
            const uint32_t b0[2] = {bv[0], bv[1]}, b1[2] = {bv[2], bv[3]};
            ptx::mma_m16n8k16_f16(o[2 * dn], af, b0, o[2 * dn]);
            ptx::mma_m16n8k16_f16(o[2 * dn + 1], af, b1, o[2 * dn + 1]);
          }
        }
      }
      if (phase == 0) {
        // The whole row's sum, and the sink: max(max, sink) and exp(sink - max) in the sum.
        KS_UNROLL for (int r = 0; r < 2; ++r) {
          l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
          l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
          if (sinks && (r == 0 ? p0 : p1) >= 0) {
            const float sink = sinks[h], mf = fmaxf(m[r], sink);
            if (m[r] != -INFINITY) l[r] *= exp(static_cast<double>(m[r]) - mf);
            l[r] += exp(static_cast<double>(sink - mf));
            m[r] = mf;
          }
        }
      }
    }
  }

  // O is normalised already (p was); rows past the batch and columns past hd_v are not written.
  float* out[2] = {nullptr, nullptr};
  KS_UNROLL for (int r = 0; r < 2; ++r) {
    const int32_t t = t0 + (r == 0 ? r0 : r1);
    if (t < a.n_tokens) out[r] = reinterpret_cast<float*>(dst.row(h, t, 0));
  }
  KS_UNROLL for (int j = 0; j < DV / 8; ++j) {
    KS_UNROLL for (int e = 0; e < 4; ++e) {
      const int d = 8 * j + 2 * t4 + e % 2;
      float* row = out[e / 2];
      if (row && d < hv) row[vb0 + v0 + d] = o[j][e];
    }
  }
}

FlashArgs flash_args(const Node& n) {
  const Tensor *q = n.src[0], *kc = n.src[1], *vc = n.src[2];
  const AttentionParams& ap = n.param<AttentionParams>();
  FlashArgs a{};
  a.n_tokens = static_cast<int32_t>(q->ne[2]);
  a.hd_k = static_cast<int32_t>(q->ne[0]);
  a.hd_v = static_cast<int32_t>(n.dst->ne[0]);
  a.group = static_cast<int32_t>(q->ne[1] / (kc->ne[0] / a.hd_k));
  a.scale = ap.scale, a.softcap = ap.softcap, a.window = ap.window;
  a.f8 = kc->type == DType::F8_E4M3;
  const size_t chunk = a.f8 ? 8 : 16;  // bytes of 8 values
  const auto aligned = [&](const Tensor* t) {
    return reinterpret_cast<uintptr_t>(t->data) % chunk == 0 && t->nb[1] % chunk == 0;
  };
  a.vec = a.hd_k % 8 == 0 && a.hd_v % 8 == 0 && aligned(kc) && aligned(vc);
  return a;
}

}  // namespace

bool attention_flash_applies(const Node& n) {
  if (reference_kernels_only()) return false;
  const Tensor *q = n.src[0], *kc = n.src[1], *vc = n.src[2];
  const bool f16 = kc->type == DType::F16 && vc->type == DType::F16;
  const bool f8 = kc->type == DType::F8_E4M3 && vc->type == DType::F8_E4M3;
  return q->ne[2] > kDecodeBatchCols && (f16 || f8) && q->ne[1] <= 65535 &&
         ((q->ne[0] <= kMaxHead && n.dst->ne[0] <= kMaxHead) || q->ne[0] <= kMaxHeadWide);
}

Status run_attention_flash(const Node& n, Stream& s) {
  const FlashArgs a = flash_args(n);
  const unsigned heads = static_cast<unsigned>(n.src[0]->ne[1]);
  const float* sinks = n.src[3] ? static_cast<const float*>(n.src[3]->data) : nullptr;
  const int32_t* packed = static_cast<const int32_t*>(n.src[4]->data);
  const int d = std::max(a.hd_k, a.hd_v);
  // 4 warps a block: 64 tokens, or (the wide variant) 16 tokens and 4 * kWideSlice V dimensions.
  const auto go = [&](auto kernel, int tokens, int v_slices) {
    const dim3 grid(blocks_for(a.n_tokens, static_cast<unsigned>(tokens)), heads, static_cast<unsigned>(v_slices));
    return launch("flash_kernel", kernel, grid, dim3(128), 0, s.stream, arg(n.dst), arg(n.src[0]), arg(n.src[1]),
                  arg(n.src[2]), sinks, packed, a);
  };
  if (d <= 64) return go(flash_kernel<64, 64, 64, 4, false>, 64, 1);
  if (d <= 128) return go(flash_kernel<128, 128, 64, 4, false>, 64, 1);
  if (d <= kMaxHead) return go(flash_kernel<256, 256, 16, 4, false>, 64, 1);
  return go(flash_kernel<kMaxHeadWide, kWideSlice, 16, 4, true>, 16, static_cast<int>(blocks_for(a.hd_v, 4 * kWideSlice)));
}

}  // namespace kestrel::cuda
