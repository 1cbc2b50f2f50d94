// Decode-shaped MATMUL (at most kMaxCols columns) and MATMUL_ID of the integer-code weight types
// (int_codes.cuh): X quantized once (quantize_x; consecutive matmuls of one X, such as q, k and
// v, share it), then one warp per weight row, each lane whole 32-value chunks, whose codes are
// dotted four at a time with __dp4a; each half's
// dx * (d * isum + m * sum(qx)) accumulates in double. MATMUL_ID of up to kMaxCols tokens runs a
// row per (slot, token) pair with its expert's matrix (more tokens: mmq.cu groups them). The
// part-1 kernel (matmul.cu) stays the path for the other types, and for everything with
// KESTREL_CUDA_KERNELS=reference.
#include "backends/cuda/int_codes.cuh"

#include <algorithm>
#include <cstdlib>

namespace kestrel::cuda {
namespace {

constexpr unsigned kWarps = 8;  // rows per block
// Chunks a lane loads before it dots them: 4 for matrices of few rows (a lane's share of a row of
// 4096 values in one round trip), 1 where the rows fill the GPU many times over (74 registers
// instead of about 40 cut the occupancy: on an H100, 14336 x 4096 took 26 us at 4, 21 us at 1;
// 1024 x 4096 6.6 us at 4, 8.8 at 1). kAheadRows: the most rows (512 blocks) that take 4.
constexpr int64_t kAheadRows = 512 * kWarps;

// A warp per 32 values (quantize_q8_0_warp), or per 256 (quantize_q8_K_warp): a decode step's
// single column still spreads over K / 32 lanes' worth of warps instead of K / 32 threads.
__global__ void quantize_q8_0_kernel(TensorArg x, int8_t* xq, float* xd, int32_t* xs) {
  const int64_t K = x.ne[0], nb = K / 32, n = nb * x.rows();
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32; i < n; i += warps) {
    const int64_t col = i / nb, b = i % nb;
    quantize_q8_0_warp(x.f32(col)[32 * b + threadIdx.x % 32], xq + col * K + 32 * b, xd + i, xs + 2 * i);
  }
}
__global__ void quantize_q8_K_kernel(TensorArg x, int8_t* xq, float* xd, int32_t* xs) {
  const int64_t K = x.ne[0], nb = K / 32, n = K / 256 * x.rows();
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32; i < n; i += warps) {
    const int64_t col = i / (K / 256), b = i % (K / 256), c0 = col * nb + 8 * b;  // its first chunk
    quantize_q8_K_warp_at(x.f32(col) + 256 * b, xq + col * K + 256 * b, xd + c0, xs + 2 * c0);
  }
}

// Chunk c of a weight row (as codes) dotted with chunk c of X column col: its halves'
// dx * (d * isum + m * sum(qx)), the integer sums exact.
// X's codes come in two 16-byte loads (the scratch starts 256-byte aligned and K % 32 == 0, so
// every chunk starts 16-byte aligned).
__device__ __forceinline__ double chunk_dot(const ChunkCodes& k, const QuantizedX& x, int64_t col, int64_t c, int64_t K) {
  const uint4 lo = load_uint4(x.q + col * K + 32 * c), hi = load_uint4(x.q + col * K + 32 * c + 16);
  const int32_t xq[8] = {static_cast<int32_t>(lo.x), static_cast<int32_t>(lo.y), static_cast<int32_t>(lo.z),
                         static_cast<int32_t>(lo.w), static_cast<int32_t>(hi.x), static_cast<int32_t>(hi.y),
                         static_cast<int32_t>(hi.z), static_cast<int32_t>(hi.w)};
  const int64_t xc = col * (K / 32) + c;
  double dot = 0;
  for (int h = 0; h < 2; ++h) {
    int32_t isum = 0;
    for (int i = 4 * h; i < 4 * h + 4; ++i) isum = __dp4a(k.q[i], xq[i], isum);
    dot += static_cast<double>(k.d[h]) * isum + static_cast<double>(k.m[h]) * x.s[2 * xc + h];
  }
  return static_cast<double>(x.d[xc]) * dot;
}

// dst[n, j] = W row n . X column j for j < M (M <= kMaxCols). Block: kWarps rows.
template <DType T, int NC, int kAhead>
__global__ void gemv_q8_kernel(TensorArg dst, TensorArg w, RowLayout rl, QuantizedX x, int64_t M) {
  const int64_t K = w.ne[0], N = w.ne[1], nb = K / 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (n >= N) return;  // the whole warp: no block barriers here
  __shared__ double partials[kWarps * 32 * NC];
  double* part = partials + threadIdx.x / 32 * 32 * NC;
  const unsigned lane = threadIdx.x % 32;
  const uint8_t* row = w.data + n * w.nb[1];
  const int nc = static_cast<int>(M < NC ? M : NC);
  double acc[NC];
  for (int j = 0; j < NC; ++j) acc[j] = 0;
  // kAhead chunks a lane at a time, all their weight loads issued before the first dot (one
  // memory round trip per kAhead chunks instead of one per chunk); the sums in chunk order, the
  // same for any kAhead.
  for (int64_t c0 = lane; c0 < nb; c0 += 32 * kAhead) {
    ChunkCodes k[kAhead];
    KS_UNROLL
    for (int u = 0; u < kAhead; ++u)
      if (c0 + 32 * u < nb) chunk_codes<T>(row, c0 + 32 * u, k[u], rl);
    KS_UNROLL
    for (int u = 0; u < kAhead; ++u) {
      if (c0 + 32 * u >= nb) break;
      for (int j = 0; j < NC; ++j) {
        if (j >= nc) break;
        acc[j] += chunk_dot(k[u], x, j, c0 + 32 * u, K);
      }
    }
  }
  const double total = warp_sum_columns<NC>(acc, nc, part);
  if (static_cast<int>(lane) < nc) dst.f32(lane)[n] = static_cast<float>(total);
}

// MATMUL_ID: dst[n, i, t] = W[:, n, e] . X column (i or 0, t) + bias[n, e], e = ids[i, t] (or i),
// one warp per row as above; blockIdx.y strides over the (slot, token) pairs.
template <DType T>
__global__ void gemv_id_kernel(TensorArg dst, TensorArg w, RowLayout rl, QuantizedX x, int64_t x_slots, TensorArg ids,
                               TensorArg bias) {
  const int64_t K = w.ne[0], N = w.ne[1], nb = K / 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (n >= N) return;  // the whole warp: no block barriers here
  __shared__ double partials[kWarps * 32];
  matmul_id_pairs(dst, w.ne[2], x_slots, ids, bias, n, partials + threadIdx.x / 32 * 32, [&](int32_t e, int64_t col) {
    const uint8_t* row = w.data + n * w.nb[1] + e * w.nb[2];
    double acc = 0;
    for (int64_t c = threadIdx.x % 32; c < nb; c += 32) {
      ChunkCodes k;
      chunk_codes<T>(row, c, k, rl);
      acc += chunk_dot(k, x, col, c, K);
    }
    return acc;
  });
}

}  // namespace

bool reference_kernels_only() {
  static const bool on = [] {
    const char* v = std::getenv("KESTREL_CUDA_KERNELS");
    return v && std::string(v) == "reference";
  }();
  return on;
}

bool int_codes_apply(const Node& n) {
  if ((n.op != Op::MATMUL && n.op != Op::MATMUL_ID) || reference_kernels_only()) return false;
  bool codes = false;
  with_weight_type(n.src[0]->type, [&]<DType T>() { codes = has_codes<T>(); });
  return codes && n.src[0]->ne[0] % dtype_info(n.src[0]->type).block_size == 0 && n.src[0]->ne[0] % 32 == 0;
}

bool gemv_q8_applies(const Node& n) {
  return int_codes_apply(n) && (n.op == Op::MATMUL_ID || n.src[1]->n_rows() <= kMaxCols);
}

Expected<XQuantPlan> plan_quantize_x(const Tensor* x, DType vdt, Stream& s, size_t extra_bytes, void** extra) {
  const int64_t K = x->ne[0], M = x->n_rows(), nb = K / 32;
  if (vdt == DType::Q8_K && K % 256 != 0)
    return Error(KESTREL_ERR_UNSUPPORTED, "cuda: Q8_K activations of a row of " + std::to_string(K));
  // Scratch: codes, scales, half sums (each part 256-byte aligned).
  const auto round_up = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t q_bytes = round_up(static_cast<size_t>(K * M)), d_bytes = round_up(static_cast<size_t>(nb * M) * 4);
  const size_t x_bytes = q_bytes + 3 * d_bytes, bytes = x_bytes + round_up(extra_bytes);
  auto mem = s.scratch(bytes);
  KS_RETURN_IF_ERROR(mem.status());
  uint8_t* base = static_cast<uint8_t*>(mem.value());
  XQuantPlan p;
  p.q = reinterpret_cast<int8_t*>(base);
  p.d = reinterpret_cast<float*>(base + q_bytes);
  p.s = reinterpret_cast<int32_t*>(base + q_bytes + d_bytes);
  if (extra) *extra = base + x_bytes;
  p.key.data = x->data, p.key.vdt = vdt, p.key.bytes = bytes;
  for (int i = 0; i < 4; ++i) p.key.ne[i] = x->ne[i], p.key.nb[i] = static_cast<int64_t>(x->nb[i]);
  const Stream::QuantizedXKey& h = s.x_key;  // the previous matmul's (or a fused norm's) X?
  p.cached = h.data == p.key.data && h.vdt == vdt && h.bytes == bytes && std::equal(h.ne, h.ne + 4, p.key.ne) &&
             std::equal(h.nb, h.nb + 4, p.key.nb);
  return p;
}

Expected<QuantizedX> quantize_x(const Tensor* x, DType vdt, Stream& s, size_t extra_bytes, void** extra) {
  auto plan = plan_quantize_x(x, vdt, s, extra_bytes, extra);
  KS_RETURN_IF_ERROR(plan.status());
  const XQuantPlan& p = plan.value();
  if (p.cached) return QuantizedX{p.q, p.d, p.s};
  s.forget_x();
  const int64_t K = x->ne[0], M = x->n_rows();
  if (vdt == DType::Q8_K)
    KS_RETURN_IF_ERROR(KS_LAUNCH(quantize_q8_K_kernel, dim3(grid_stride_blocks(K / 256 * M * 32, 128)), dim3(128), 0, s.stream,
                                 arg(x), p.q, p.d, p.s));
  else
    KS_RETURN_IF_ERROR(KS_LAUNCH(quantize_q8_0_kernel, dim3(grid_stride_blocks(K / 32 * M * 32, 128)), dim3(128), 0, s.stream,
                                 arg(x), p.q, p.d, p.s));
  s.x_key = p.key;
  return QuantizedX{p.q, p.d, p.s};
}

Status run_gemv_q8(const Node& n, Stream& s) {
  const Tensor *w = n.src[0], *x = n.src[1];
  const int64_t M = x->n_rows();
  auto qx = quantize_x(x, dtype_info(w->type).vec_dot_type, s);
  KS_RETURN_IF_ERROR(qx.status());
  Status st = Error(KESTREL_ERR_UNSUPPORTED, "cuda: no integer GEMV for " + std::string(dtype_name(w->type)));
  const dim3 grid(blocks_for(w->ne[1], kWarps)), block(32 * kWarps);
  if (n.op == Op::MATMUL_ID) {
    const int64_t pairs = n.dst->ne[1] * n.dst->ne[2];
    const dim3 grid_id(grid.x, static_cast<unsigned>(std::min<int64_t>(pairs, 64)));
    with_weight_type(w->type, [&]<DType T>() {
      if constexpr (has_codes<T>())
        st = KS_LAUNCH(gemv_id_kernel<T>, grid_id, block, 0, s.stream, arg(n.dst), arg(w), row_layout(w), qx.value(), x->ne[1],
                       arg(n.src[2]), arg(n.src[3]));
    });
    return st;
  }
  with_weight_type(w->type, [&]<DType T>() {
    if constexpr (has_codes<T>()) {
      const RowLayout rl = row_layout(w);
      const auto kernel = M > 1                     ? gemv_q8_kernel<T, kMaxCols, 4>
                          : w->ne[1] <= kAheadRows ? gemv_q8_kernel<T, 1, 4>
                                                   : gemv_q8_kernel<T, 1, 1>;
      st = launch("gemv_q8_kernel", kernel, grid, block, 0, s.stream, arg(n.dst), arg(w), rl, qx.value(), M);
    }
  });
  return st;
}

}  // namespace kestrel::cuda
