// RMS_NORM and SOFTMAX (a block per row, block-wide reductions) and ROPE (a thread per rotated
// pair, rope.cuh). RMS_NORM also runs fused with the ADD before it (the residual) and the MUL by
// its gain after it: one launch and one pass where three would take three of each. When the next
// node is an integer-code MATMUL of the fused output (q after the attention norm, gate after the
// FFN norm), the same kernel also writes that matmul's quantized input (int_codes.cuh), so the
// matmuls skip quantize_x's launch.
#include "backends/cuda/int_codes.cuh"
#include "backends/cuda/rope.cuh"

namespace kestrel::cuda {
namespace {

constexpr unsigned kRowThreads = 256;

// vec4: every row 16-byte aligned and K a multiple of 4, so the sum of squares reads float4s.
// The sum of squares in double, as the reference (the scale then matches it to the last bit
// nearly always, and the int8 rounding of the next matmul's input with it).
// This thread's share of the row's sum of squares (x: the row, K values).
__device__ __forceinline__ double sum_squares(const float* x, int64_t K, bool vec4) {
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
  return ss;
}

__global__ void rms_norm_kernel(TensorArg dst, TensorArg src, float eps, bool vec4) {
  __shared__ double scratch[32];
  const int64_t K = src.ne[0], r = blockIdx.x;
  const float* x = src.f32(r);
  const double ss = block_sum(sum_squares(x, K, vec4), scratch);
  const float scale = 1.0f / sqrtf(static_cast<float>(ss / static_cast<double>(K)) + eps);
  float* y = dst.f32(r);
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) y[k] = x[k] * scale;
}

// Row r of the fused norm's output (zr, K values, every thread's stores behind a barrier) as the
// next matmul's input: Q8_0 (qmode 1) or Q8_K (2) into xq/xd/xs, where quantize_x would put it, a
// warp per 32 or 256 values.
__device__ __forceinline__ void quantize_row(const float* zr, int64_t K, int64_t r, int qmode, int8_t* xq, float* xd,
                                             int32_t* xs) {
  const int64_t nb = K / 32, warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (qmode == 1) {
    for (int64_t c = warp; c < nb; c += warps)
      quantize_q8_0_warp(zr[32 * c + lane], xq + r * K + 32 * c, xd + r * nb + c, xs + 2 * (r * nb + c));
  } else {
    for (int64_t c = warp; c < K / 256; c += warps)
      quantize_q8_K_warp_at(zr + 256 * c, xq + r * K + 256 * c, xd + r * nb + 8 * c, xs + 2 * (r * nb + 8 * c));
  }
}

// [h = a + b ->] y = RMS_NORM(h) -> z = y * gain, every output written and each value rounded as
// the separate ops round it (b and gain broadcast over rows as ADD and MUL do; the host checked
// that their rows hold K values). Without a, h is the norm's input. A block per row; a thread
// reads and writes only its own elements, except the vec4 sum of squares, which runs after a
// barrier: outputs that are their inputs (in place) behave as in the three ops run one after
// another.
// qmode 1 or 2: then z is quantized as Q8_0 (1) or Q8_K (2) into xq/xd/xs, where quantize_x
// would put it, a warp per 32 or 256 values (after a barrier: they come from every thread).
__global__ void add_norm_mul_kernel(TensorArg h, TensorArg a, TensorArg b, TensorArg y, TensorArg z, TensorArg gain,
                                    float eps, bool vec4, int qmode, int8_t* xq, float* xd, int32_t* xs) {
  __shared__ double scratch[32];
  const int64_t K = h.ne[0], r = blockIdx.x;
  float* hr = h.f32(r);
  if (a.data) {
    const float* ar = a.f32(r);
    const float* br = b.f32(r % b.rows());
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x) hr[k] = ar[k] + br[k];
    __syncthreads();  // the vec4 sum reads other threads' h
  }
  const double ss = block_sum(sum_squares(hr, K, vec4), scratch);
  const float scale = 1.0f / sqrtf(static_cast<float>(ss / static_cast<double>(K)) + eps);
  float *yr = y.f32(r), *zr = z.f32(r);
  const float* g = gain.f32(r % gain.rows());
  for (int64_t k = threadIdx.x; k < K; k += blockDim.x) {
    const float v = hr[k] * scale;
    yr[k] = v;
    zr[k] = v * g[k];
  }
  if (qmode == 0) return;
  __syncthreads();
  quantize_row(zr, K, r, qmode, xq, xd, xs);
}

// The same chain with the row in registers, for rows of at most 4 * V * blockDim.x values
// (decode's hidden sizes; vec4 rows): V float4s a thread, thread t holding values 4 (t + u
// blockDim.x) .. + 3, the partition of sum_squares' vec4 loop, so the same sum to the bit. Every
// input is loaded before the reduction's barrier and every output stored after it, so any overlap
// of outputs and inputs is safe (the graph planner puts y and z where a and b were); and the loads
// are one round trip instead of a loop's K / blockDim.x. The quantization reads z back after a
// barrier, a warp per chunk, as above. (Quantizing Q8_0 from the registers, 8 lanes a chunk,
// storing through a pointer chosen between the scratch and a local array for lanes past K, passed
// the emulator; nvcc deleted those stores, and on an H100 the matmul read a stale input.)
template <int V>
__global__ void add_norm_mul_regs_kernel(TensorArg h, TensorArg a, TensorArg b, TensorArg y, TensorArg z,
                                         TensorArg gain, float eps, int qmode, int8_t* xq, float* xd, int32_t* xs) {
  __shared__ double scratch[32];
  const int64_t K = h.ne[0], r = blockIdx.x;
  const float* src = a.data ? a.f32(r) : h.f32(r);
  const float* br = a.data ? b.f32(r % b.rows()) : nullptr;
  const float* g = gain.f32(r % gain.rows());
  float4 v[V] = {}, gv[V] = {};
  double ss = 0;
  KS_UNROLL
  for (int u = 0; u < V; ++u) {
    const int64_t k = 4 * (threadIdx.x + static_cast<int64_t>(u) * blockDim.x);
    if (k >= K) continue;
    v[u] = load_float4(src + k);
    gv[u] = load_float4(g + k);
    if (br) {
      const float4 w = load_float4(br + k);
      v[u] = float4{v[u].x + w.x, v[u].y + w.y, v[u].z + w.z, v[u].w + w.w};
    }
  }
  KS_UNROLL
  for (int u = 0; u < V; ++u) {
    if (4 * (threadIdx.x + static_cast<int64_t>(u) * blockDim.x) >= K) continue;
    ss += static_cast<double>(v[u].x) * v[u].x + static_cast<double>(v[u].y) * v[u].y +
          static_cast<double>(v[u].z) * v[u].z + static_cast<double>(v[u].w) * v[u].w;
  }
  ss = block_sum(ss, scratch);
  const float scale = 1.0f / sqrtf(static_cast<float>(ss / static_cast<double>(K)) + eps);
  float *hr = h.f32(r), *yr = y.f32(r), *zr = z.f32(r);
  KS_UNROLL
  for (int u = 0; u < V; ++u) {
    const int64_t k = 4 * (threadIdx.x + static_cast<int64_t>(u) * blockDim.x);
    if (k >= K) continue;
    if (br) *reinterpret_cast<float4*>(hr + k) = v[u];
    const float4 yv = float4{v[u].x * scale, v[u].y * scale, v[u].z * scale, v[u].w * scale};
    *reinterpret_cast<float4*>(yr + k) = yv;
    *reinterpret_cast<float4*>(zr + k) = float4{yv.x * gv[u].x, yv.y * gv[u].y, yv.z * gv[u].z, yv.w * gv[u].w};
  }
  if (qmode == 0) return;
  __syncthreads();
  quantize_row(zr, K, r, qmode, xq, xd, xs);
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

// A thread per (row, rotated pair), or per copied tail value (rope.cuh).
__global__ void rope_kernel(TensorArg dst, TensorArg src, const int32_t* pos, const float* freq_factors, RopeArgs p) {
  const int64_t n_head = src.ne[1], rows = src.rows(), per_row = rope_items_per_row(src.ne[0], p.n_rot);
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < rows * per_row;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = idx / per_row;
    rope_item(src.f32(r), dst.f32(r), static_cast<float>(pos[r / n_head]), idx % per_row, freq_factors, p,
              [](int64_t, float) {});
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

namespace {

bool same_view(const Tensor* p, const Tensor* q) {
  return p->data == q->data && std::equal(p->ne, p->ne + 4, q->ne) && std::equal(p->nb, p->nb + 4, q->nb);
}
bool f32_rows_of(const Tensor* t, int64_t K, int64_t rows) {
  return t->type == DType::F32 && t->ne[0] == K && t->n_rows() == rows && t->nb[0] == 4;
}
// A broadcast operand (ADD's b, MUL's gain): K values a row, its rows repeating over `rows`.
bool broadcasts_over(const Tensor* t, int64_t K, int64_t rows) {
  return t->type == DType::F32 && t->ne[0] == K && t->nb[0] == 4 && rows % t->n_rows() == 0;
}

}  // namespace

size_t norm_fusion(const std::vector<Node>& nodes, size_t i, size_t end) {
  if (reference_kernels_only()) return 0;
  const bool add = i + 2 < end && nodes[i].op == Op::ADD && nodes[i + 1].op == Op::RMS_NORM &&
                   nodes[i + 1].src[0] == nodes[i].dst;
  const size_t ni = add ? i + 1 : i;  // the RMS_NORM
  if (ni + 1 >= end || nodes[ni].op != Op::RMS_NORM || nodes[ni + 1].op != Op::MUL || nodes[ni + 1].src[0] != nodes[ni].dst)
    return 0;
  const Tensor *h = nodes[ni].src[0], *y = nodes[ni].dst, *z = nodes[ni + 1].dst, *gain = nodes[ni + 1].src[1];
  const int64_t K = h->ne[0], rows = h->n_rows();
  if (!f32_rows_of(h, K, rows) || !f32_rows_of(y, K, rows) || !f32_rows_of(z, K, rows) || !broadcasts_over(gain, K, rows))
    return 0;
  // The outputs h, y, z, then the inputs gain [, a, b] (checked on every step: no allocation).
  const Tensor* all[6] = {h, y, z, gain, nullptr, nullptr};
  const int n_outs = 3, n_all = add ? 6 : 4;
  if (add) {
    all[4] = nodes[i].src[0], all[5] = nodes[i].src[1];
    if (!f32_rows_of(all[4], K, rows) || !broadcasts_over(all[5], K, rows)) return 0;
  }
  // Each pair of tensors the same view or apart; an input read by every row (broadcast) apart
  // from every output. Then a thread touching only its own elements keeps the ops' order.
  for (int p = 0; p < n_all; ++p)
    for (int q = p + 1; q < n_all; ++q)
      if (!same_view(all[p], all[q]) && !tensors_apart(all[p], all[q])) return 0;
  for (int in = n_outs; in < n_all; ++in)
    if (all[in]->n_rows() != rows)
      for (int out = 0; out < n_outs; ++out)
        if (!tensors_apart(all[in], all[out])) return 0;
  return add ? 3 : 2;
}

Status run_norm_fusion(const Node* nodes, size_t count, Stream& s, const Node* next) {
  const bool add = count == 3;
  const Node &norm = nodes[add ? 1 : 0], &mul = nodes[add ? 2 : 1];
  const Tensor* h = norm.src[0];
  const int64_t K = h->ne[0];
  // The next matmul's quantized input, written here, where the integer kernels would quantize z.
  int qmode = 0;
  XQuantPlan plan;
  if (next && next->op == Op::MATMUL && next->src[1] == mul.dst && K % 32 == 0 &&
      (gemv_q8_applies(*next) || mmq_applies(*next))) {
    const DType vdt = dtype_info(next->src[0]->type).vec_dot_type;
    auto p = plan_quantize_x(mul.dst, vdt, s);
    if (p.ok()) plan = p.value(), qmode = vdt == DType::Q8_K ? 2 : 1;
  }
  const unsigned threads = threads_for(K, kRowThreads);
  const Tensor* a = add ? nodes[0].src[0] : nullptr;
  const Tensor* b = add ? nodes[0].src[1] : nullptr;
  const TensorArg args[6] = {arg(h), arg(a), arg(b), arg(norm.dst), arg(mul.dst), arg(mul.src[1])};
  const float eps = norm.param<NormParams>().eps;
  const unsigned rows = static_cast<unsigned>(h->n_rows());
  // The row in registers where it fits and every row is 16-byte aligned (V float4s a thread).
  const int64_t per_thread = (K + 4 * threads - 1) / (4 * threads);
  const bool regs = K % 4 == 0 && per_thread <= 8 && aligned16(h) && aligned16(norm.dst) && aligned16(mul.dst) &&
                    aligned16(mul.src[1]) && (!add || (aligned16(a) && aligned16(b)));
  if (regs) {
    const auto launch_v = [&](auto kernel) {
      return launch("add_norm_mul_regs_kernel", kernel, dim3(rows), dim3(threads), 0, s.stream, args[0], args[1],
                    args[2], args[3], args[4], args[5], eps, qmode, plan.q, plan.d, plan.s);
    };
    KS_RETURN_IF_ERROR(per_thread <= 1   ? launch_v(add_norm_mul_regs_kernel<1>)
                       : per_thread <= 2 ? launch_v(add_norm_mul_regs_kernel<2>)
                       : per_thread <= 4 ? launch_v(add_norm_mul_regs_kernel<4>)
                                         : launch_v(add_norm_mul_regs_kernel<8>));
  } else {
    KS_RETURN_IF_ERROR(KS_LAUNCH(add_norm_mul_kernel, dim3(rows), dim3(threads), 0, s.stream, args[0], args[1], args[2],
                                 args[3], args[4], args[5], eps, aligned16(h), qmode, plan.q, plan.d, plan.s));
  }
  if (qmode) s.x_key = plan.key;
  return Status::Ok();
}

Status run_softmax(const Node& n, Stream& s) {
  return KS_LAUNCH(softmax_kernel, dim3(static_cast<unsigned>(n.dst->n_rows())),
                   dim3(threads_for(n.src[0]->ne[0], kRowThreads)), 0, s.stream,
                   arg(n.dst), arg(n.src[0]), n.param<SoftmaxParams>().scale);
}

Status run_rope(const Node& n, Stream& s) {
  const RopeParams& rp = n.param<RopeParams>();
  const int64_t items = n.src[0]->n_rows() * rope_items_per_row(n.src[0]->ne[0], rp.n_rot);
  return KS_LAUNCH(rope_kernel, dim3(grid_stride_blocks(items, 128)), dim3(128), 0, s.stream, arg(n.dst), arg(n.src[0]),
                   static_cast<const int32_t*>(n.src[1]->data),
                   n.src[2] ? static_cast<const float*>(n.src[2]->data) : static_cast<const float*>(nullptr), rope_args(rp));
}

}  // namespace kestrel::cuda
