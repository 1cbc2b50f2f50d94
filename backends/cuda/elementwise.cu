// Row-wise element ops (ADD, MUL, SILU, SWIGLU, GEGLU, SWIGLU_OAI, CONCAT), MOE_SUM, KV_STORE and
// GET_ROWS: one thread per element (or per 32-value chunk of a quantized row), grid-stride loops.
// A gate (SWIGLU, GEGLU, SWIGLU_OAI) followed by an integer-code matmul of its output (the FFN's down
// projection) runs a warp per chunk instead and writes the matmul's int8 input as well.
#include "backends/cuda/int_codes.cuh"

namespace kestrel::cuda {
namespace {

constexpr unsigned kThreads = 256;

unsigned grid_for(int64_t n) { return grid_stride_blocks(n, kThreads); }

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
// GELU's tanh form through F16, as the GEGLU op defines it (ops.def).
__device__ __forceinline__ float gelu_f16(float x) {
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  const float h = round_half(x);
  return round_half(0.5f * h * (1.0f + tanhf(0.79788456080286535588f * h * (1.0f + 0.044715f * h * h))));
}

enum class Binary : int { kAdd, kMul, kSilu, kSwiglu, kSwigluOai, kConcat, kGeglu };

// Element k of dst row r = f(src0 row r, src1 row r mod rows(src1)).
__device__ __forceinline__ float binary_value(Binary op, const TensorArg& a, const TensorArg& b, int64_t r, int64_t k,
                                              float alpha, float limit) {
  const float* x = a.f32(r);
  switch (op) {
    case Binary::kSilu: return silu(x[k]);
    case Binary::kGeglu: return gelu_f16(x[k]) * b.f32(r)[k];
    case Binary::kConcat: return k < a.ne[0] ? x[k] : b.f32(r)[k - a.ne[0]];
    case Binary::kSwigluOai: {
      const float g = fminf(x[k], limit), u = fminf(fmaxf(b.f32(r)[k], -limit), limit);
      return g / (1.0f + expf(alpha * (-g))) * (u + 1.0f);
    }
    default: {
      const float v = b.f32(r % b.rows())[k % b.ne[0]];
      return op == Binary::kAdd ? x[k] + v : op == Binary::kMul ? x[k] * v : silu(x[k]) * v;
    }
  }
}

// A thread per element; K = dst->ne[0].
__global__ void binary_kernel(TensorArg dst, TensorArg a, TensorArg b, int op, float alpha, float limit) {
  const int64_t K = dst.ne[0], n = K * dst.rows();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / K, k = i % K;
    dst.f32(r)[k] = binary_value(static_cast<Binary>(op), a, b, r, k, alpha, limit);
  }
}

// The same op, a warp per 32-value chunk (qmode 1, Q8_0) or 256-value block (qmode 2, Q8_K) of
// dst, lanes over its values, which the warp then quantizes as the next matmul's input, where
// quantize_x would put it.
__global__ void binary_quantize_kernel(TensorArg dst, TensorArg a, TensorArg b, int op, float alpha, float limit, int qmode,
                                       int8_t* xq, float* xd, int32_t* xs) {
  const int64_t K = dst.ne[0], span = qmode == 1 ? 32 : 256, per_row = K / span, n = per_row * dst.rows(), nb = K / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const unsigned lane = threadIdx.x % 32;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32; i < n; i += warps) {
    const int64_t r = i / per_row, k0 = span * (i % per_row), c0 = r * nb + k0 / 32;
    float* y = dst.f32(r) + k0;
    float v[8];
    for (int j = 0; j < span / 32; ++j) {
      v[j] = binary_value(static_cast<Binary>(op), a, b, r, k0 + lane + 32 * j, alpha, limit);
      y[lane + 32 * j] = v[j];
    }
    if (qmode == 1) quantize_q8_0_warp(v[0], xq + r * K + k0, xd + c0, xs + 2 * c0);
    else quantize_q8_K_warp(v, xq + r * K + k0, xd + c0, xs + 2 * c0);
  }
}

// dst[:, t] = sum_i x[:, i, t] * w[i, t], in slot order.
__global__ void moe_sum_kernel(TensorArg dst, TensorArg x, TensorArg w) {
  const int64_t N = dst.ne[0], T = dst.ne[1], n_slots = x.ne[1], n = N * T;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i % N, t = i / N;
    const float* wt = w.f32(t);
    float y = reinterpret_cast<const float*>(x.row(0, t, 0))[r] * wt[0];
    for (int64_t s = 1; s < n_slots; ++s) y += reinterpret_cast<const float*>(x.row(s, t, 0))[r] * wt[s];
    dst.f32(t)[r] = y;
  }
}

// Column t of x [R, T] into cache row slots[t] (CacheKind: F16, F32, or E4M3 bytes, saturating).
__global__ void kv_store_kernel(TensorArg cache, TensorArg x, const int32_t* slots, int kind) {
  const int64_t R = x.ne[0], n = R * x.ne[1];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = i % R, t = i / R;
    cache_store(cache.data + slots[t] * cache.nb[1], k, x.f32(t)[k], kind);
  }
}

// C's (int8_t) cast of the quantizers (tensor/quants): truncation, NaN 0, saturating.
__device__ __forceinline__ int trunc_to_i8(float v) {
  if (!(v == v)) return 0;
  const float t = truncf(v);
  return t < -128.0f ? -128 : (t > 127.0f ? 127 : static_cast<int>(t));
}

// Column t of x [R, T] into cache row slots[t] as Q8_0 or Q4_0 blocks (R a multiple of 32), one
// thread a block, computed as the host's quantize_q8_0/q4_0 compute it: the same bytes.
__global__ void kv_store_blocks_kernel(TensorArg cache, TensorArg x, const int32_t* slots, int kind) {
  const int64_t nb = x.ne[0] / 32, n = nb * x.ne[1];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i % nb, t = i / nb;
    const float* v = x.f32(t) + 32 * b;
    uint8_t* row = cache.data + slots[t] * cache.nb[1];
    if (kind == kCacheQ8) {
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = fabsf(v[j]) > amax ? fabsf(v[j]) : amax;
      const float d = amax / 127, id = d != 0.0f ? 1.0f / d : 0.0f;
      uint8_t* out = row + b * 34;
      *reinterpret_cast<uint16_t*>(out) = float_to_half(d);
      for (int j = 0; j < 32; ++j) out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(trunc_to_i8(roundf(v[j] * id))));
    } else {  // Q4_0: d from the signed value of largest magnitude (the first), q = v / d + 8
      float amax = 0.0f, max = 0.0f;
      for (int j = 0; j < 32; ++j)
        if (amax < fabsf(v[j])) amax = fabsf(v[j]), max = v[j];
      const float d = max / -8, id = d != 0.0f ? 1.0f / d : 0.0f;
      uint8_t* out = row + b * 18;
      *reinterpret_cast<uint16_t*>(out) = float_to_half(d);
      for (int j = 0; j < 16; ++j) {
        const int q0 = trunc_to_i8(v[j] * id + 8.5f), q1 = trunc_to_i8(v[j + 16] * id + 8.5f);
        out[2 + j] = static_cast<uint8_t>(((q0 > 15 ? 15 : q0) & 0x0F) | ((q1 > 15 ? 15 : q1) << 4));
      }
    }
  }
}

// dst[:, i] = table row ids[i], decoded: one thread per element (plain types) or 32-value chunk.
// split_nb > 0: a table in the split-rows layout (kernels.h).
template <DType T>
__global__ void get_rows_kernel(TensorArg dst, TensorArg table, const int32_t* ids, int64_t split_nb) {
  const int64_t K = table.ne[0], per_row = is_plain<T>() ? K : K / 32, n = per_row * dst.ne[1];
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, c = i % per_row;
    const uint8_t* src = table.data + ids[r] * table.nb[1];
    float* y = dst.f32(r);
    if constexpr (is_plain<T>()) {
      y[c] = load_elem<T>(src, c);
    } else {
      float v[32];
      dequant_row_chunk<T>(src, c, split_nb, v);
      for (int j = 0; j < 32; ++j) y[32 * c + j] = v[j];
    }
  }
}

}  // namespace

Status run_elementwise(const Node& n, Stream& s, const Node* next) {
  Binary op;
  float alpha = 0, limit = 0;
  switch (n.op) {
    case Op::ADD: op = Binary::kAdd; break;
    case Op::MUL: op = Binary::kMul; break;
    case Op::SILU: op = Binary::kSilu; break;
    case Op::SWIGLU: op = Binary::kSwiglu; break;
    case Op::GEGLU: op = Binary::kGeglu; break;
    case Op::CONCAT: op = Binary::kConcat; break;
    case Op::SWIGLU_OAI:
      op = Binary::kSwigluOai;
      alpha = n.param<SwigluOaiParams>().alpha;
      limit = n.param<SwigluOaiParams>().limit;
      break;
    default: return Error(KESTREL_ERR_INTERNAL, "cuda: run_elementwise given " + std::string(op_name(n.op)));
  }
  const TensorArg b = n.src[1] ? arg(n.src[1]) : arg(n.src[0]);
  // A gate whose output is the next integer-code matmul's input: that input's int8 form too.
  const int64_t K = n.dst->ne[0];
  const bool gate = op == Binary::kSwiglu || op == Binary::kGeglu || op == Binary::kSwigluOai;
  if (gate && next && (next->op == Op::MATMUL || next->op == Op::MATMUL_ID) && next->src[1] == n.dst && K % 32 == 0 &&
      n.dst->nb[0] == 4 && (gemv_q8_applies(*next) || (next->op == Op::MATMUL && mmq_applies(*next)))) {
    const DType vdt = dtype_info(next->src[0]->type).vec_dot_type;
    auto p = plan_quantize_x(n.dst, vdt, s);
    if (p.ok()) {
      const int qmode = vdt == DType::Q8_K ? 2 : 1;
      KS_RETURN_IF_ERROR(KS_LAUNCH(binary_quantize_kernel, dim3(grid_for(n.dst->n_elements() / (qmode == 1 ? 1 : 8))),
                                   dim3(kThreads), 0, s.stream, arg(n.dst), arg(n.src[0]), b, static_cast<int>(op), alpha,
                                   limit, qmode, p.value().q, p.value().d, p.value().s));
      s.x_key = p.value().key;
      return Status::Ok();
    }
  }
  return KS_LAUNCH(binary_kernel, dim3(grid_for(n.dst->n_elements())), dim3(kThreads), 0, s.stream, arg(n.dst),
                   arg(n.src[0]), b, static_cast<int>(op), alpha, limit);
}

Status run_moe_sum(const Node& n, Stream& s) {
  return KS_LAUNCH(moe_sum_kernel, dim3(grid_for(n.dst->n_elements())), dim3(kThreads), 0, s.stream, arg(n.dst),
                   arg(n.src[0]), arg(n.src[1]));
}

Status run_kv_store(const Node& n, Stream& s) {
  if (is_block_cache(n.src[0]->type))
    return KS_LAUNCH(kv_store_blocks_kernel, dim3(grid_for(n.src[1]->n_elements() / 32)), dim3(kThreads), 0, s.stream,
                     arg(n.src[0]), arg(n.src[1]), static_cast<const int32_t*>(n.src[2]->data),
                     static_cast<int>(cache_kind(n.src[0]->type)));
  return KS_LAUNCH(kv_store_kernel, dim3(grid_for(n.src[1]->n_elements())), dim3(kThreads), 0, s.stream,
                   arg(n.src[0]), arg(n.src[1]), static_cast<const int32_t*>(n.src[2]->data),
                   static_cast<int>(cache_kind(n.src[0]->type)));
}

Status run_get_rows(const Node& n, Stream& s) {
  Status st = Error(KESTREL_ERR_UNSUPPORTED, "cuda: GET_ROWS of " + std::string(dtype_name(n.src[0]->type)));
  with_weight_type(n.src[0]->type, [&]<DType T>() {
    const int64_t per_row = is_plain<T>() ? n.src[0]->ne[0] : n.src[0]->ne[0] / 32;
    st = KS_LAUNCH(get_rows_kernel<T>, dim3(grid_for(per_row * n.dst->ne[1])), dim3(kThreads), 0, s.stream,
                   arg(n.dst), arg(n.src[0]), static_cast<const int32_t*>(n.src[1]->data), row_layout(n.src[0]).split_nb);
  });
  return st;
}

}  // namespace kestrel::cuda
