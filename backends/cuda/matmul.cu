// MATMUL and MATMUL_ID for every weight type, reading the quantized blocks directly. First the
// activations are rounded through the weight type's vec_dot type (Q8_0, Q8_1, Q8_K, F16, BF16:
// what llama.cpp's matmul sees) into scratch; then one warp per output row, each lane decoding
// whole 32-value chunks of the row and dotting them with NC activation columns at once (NC = 1
// for decode, 8 for batches, so a decoded chunk serves eight tokens). The reference path: the
// integer-code types go to gemv_q8.cu (decode, and MATMUL_ID of few tokens) and mmq.cu (batches
// and MoE prefill, tensor cores),
// FP8 to matmul_fp8.cu, F16 and BF16 to matmul_f16.cu (batches to gemm_cublas.cu where cuBLAS
// loaded).
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/kernels.h"

namespace kestrel::cuda {
namespace {

constexpr unsigned kWarps = 8;  // output rows per block
// Column groups (or expert pairs) per launch row of blocks: enough parallelism with N / kWarps
// blocks along x, and each block's setup amortized over several (under the emulator, its 256
// fibers).
constexpr unsigned kMaxGridY = 64;

// Values one thread of round_x_kernel rounds together: a block of the activation type.
template <DType VDT>
constexpr int64_t round_span() {
  return VDT == DType::Q8_K ? 256 : VDT == DType::FP8_E4M3 ? 128 : (VDT == DType::Q8_0 || VDT == DType::Q8_1) ? 32 : 1;
}

// Column `col` of X (rows over dims 1..3) rounded as `vdt` into xr[col * K ...]: one thread per
// block of 32 (Q8_0/Q8_1), 128 (FP8) or 256 values (Q8_K), or per value (F16, BF16, F32).
template <DType VDT>
__global__ void round_x_kernel(TensorArg x, float* xr) {
  const int64_t K = x.ne[0], cols = x.rows();
  constexpr int64_t kSpan = round_span<VDT>();
  const int64_t per_col = K / kSpan, n = per_col * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t col = i / per_col, k0 = (i % per_col) * kSpan;
    const float* src = x.f32(col) + k0;
    float* out = xr + col * K + k0;
    if constexpr (VDT == DType::Q8_0 || VDT == DType::Q8_1) {
      // llama.cpp's activation quantizer: id = 127 / amax, round half to even, scale as fp16.
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = fmaxf(amax, fabsf(src[j]));
      const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f, dh = round_half(d);
      for (int j = 0; j < 32; ++j) out[j] = dh * rintf(src[j] * id);
    } else if constexpr (VDT == DType::Q8_K) {
      // GGML's quantize_row_q8_K_ref: the signed value of largest magnitude sets the scale.
      float amax = 0, max = 0;
      for (int j = 0; j < 256; ++j)
        if (fabsf(src[j]) > amax) amax = fabsf(src[j]), max = src[j];
      if (amax == 0.0f) {
        for (int j = 0; j < 256; ++j) out[j] = 0.0f;
        continue;
      }
      const float iscale = -127.0f / max, d = 1 / iscale;
      for (int j = 0; j < 256; ++j) out[j] = d * fminf(127.0f, fmaxf(-128.0f, rintf(iscale * src[j])));
    } else if constexpr (VDT == DType::FP8_E4M3) {  // quantize_fp8_e4m3, then its dequantizer
      uint8_t q[128];
      const float d = fp8_quantize_block(src, q);
      for (int j = 0; j < 128; ++j) out[j] = d * e4m3_to_float(q[j]);
    } else if constexpr (VDT == DType::F16) {
      out[0] = round_half(src[0]);
    } else if constexpr (VDT == DType::BF16) {
      out[0] = round_bf16(src[0]);
    } else {
      out[0] = src[0];
    }
  }
}

// acc[j] += row . xr column (col0 + j) for j < nc, over the lane's share of the row. Double
// accumulation, as the reference: float sums of products would differ from it by a few ulps, and
// the next layer's activation rounding (to int8 steps) turns some of those into whole steps.
// (Part 2's integer and tensor-core dots are exact per block, as llama.cpp's are.)
template <DType T, int NC>
__device__ __forceinline__ void dot_row(const uint8_t* row, const float* xr, int64_t K, int nc, double* acc) {
  const unsigned lane = threadIdx.x % 32;
  if constexpr (is_plain<T>()) {
    for (int64_t k = lane; k < K; k += 32) {
      const double w = load_elem<T>(row, k);
      for (int j = 0; j < NC; ++j)
        if (j < nc) acc[j] += w * xr[j * K + k];
    }
  } else {
    float v[32];
    for (int64_t c = lane; c < K / 32; c += 32) {
      dequant_chunk<T>(row, c, v);
      for (int j = 0; j < NC; ++j) {
        if (j >= nc) break;
        const float* x = xr + j * K + 32 * c;
        double s = 0;
        for (int i = 0; i < 32; ++i) s += static_cast<double>(v[i]) * x[i];
        acc[j] += s;
      }
    }
  }
}

// dst[n, m] = W row n . xr column m. Block: kWarps rows; blockIdx.y (strided): columns by NC.
template <DType T, int NC>
__global__ void matmul_kernel(TensorArg dst, TensorArg w, const float* xr, int64_t M) {
  const int64_t K = w.ne[0], N = w.ne[1];
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (n >= N) return;  // the whole warp: no block barriers here
  __shared__ double partials[kWarps * 32 * NC];
  double* part = partials + threadIdx.x / 32 * 32 * NC;
  const unsigned lane = threadIdx.x % 32;
  const uint8_t* row = w.data + n * w.nb[1];
  for (int64_t m0 = static_cast<int64_t>(blockIdx.y) * NC; m0 < M; m0 += static_cast<int64_t>(gridDim.y) * NC) {
    const int nc = static_cast<int>(M - m0 < NC ? M - m0 : NC);
    double acc[NC];
    for (int j = 0; j < NC; ++j) acc[j] = 0;
    dot_row<T, NC>(row, xr + m0 * K, K, nc, acc);
    const double total = warp_sum_columns<NC>(acc, nc, part);
    if (static_cast<int>(lane) < nc) dst.f32(m0 + lane)[n] = static_cast<float>(total);
  }
}

// dst[n, i, t] = W[:, n, e] . xr column (i or 0, t) + bias[n, e], e = ids[i, t] (or i).
template <DType T>
__global__ void matmul_id_kernel(TensorArg dst, TensorArg w, const float* xr, int64_t x_slots, TensorArg ids,
                                 TensorArg bias) {
  const int64_t K = w.ne[0], N = w.ne[1];
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (n >= N) return;
  __shared__ double partials[kWarps * 32];
  matmul_id_pairs(dst, w.ne[2], x_slots, ids, bias, n, partials + threadIdx.x / 32 * 32, [&](int32_t e, int64_t col) {
    double acc = 0;
    dot_row<T, 1>(w.data + n * w.nb[1] + e * w.nb[2], xr + col * K, K, 1, &acc);
    return acc;
  });
}

// out[col * K + k] = x[k, col] rounded to T's 16 bits, one thread per value.
template <DType T>
__global__ void x_to_b16_kernel(TensorArg x, uint16_t* out) {
  const int64_t K = x.ne[0], n = K * x.rows();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = x.f32(i / K)[i % K];
    out[i] = T == DType::F16 ? float_to_half(v) : float_to_bf16(v);
  }
}

}  // namespace

Expected<uint16_t*> x_to_b16(const Tensor* x, DType t, Stream& s, size_t extra_bytes, void** extra) {
  const int64_t K = x->ne[0], cols = x->n_rows();
  const size_t x_bytes = (static_cast<size_t>(K * cols) * 2 + 255) / 256 * 256;
  auto mem = s.scratch(x_bytes + extra_bytes);
  KS_RETURN_IF_ERROR(mem.status());
  auto* out = static_cast<uint16_t*>(mem.value());
  if (extra) *extra = static_cast<uint8_t*>(mem.value()) + x_bytes;
  const unsigned grid = grid_stride_blocks(K * cols, 256);
  KS_RETURN_IF_ERROR(t == DType::BF16 ? KS_LAUNCH(x_to_b16_kernel<DType::BF16>, dim3(grid), dim3(256), 0, s.stream, arg(x), out)
                                      : KS_LAUNCH(x_to_b16_kernel<DType::F16>, dim3(grid), dim3(256), 0, s.stream, arg(x), out));
  return out;
}

Expected<float*> round_x(const Tensor* w, const Tensor* x, Stream& s, size_t extra_bytes, void** extra) {
  const int64_t K = x->ne[0], cols = x->n_rows();
  const size_t x_bytes = (static_cast<size_t>(K * cols) * sizeof(float) + 255) / 256 * 256;
  auto mem = s.scratch(x_bytes + extra_bytes);
  KS_RETURN_IF_ERROR(mem.status());
  float* xr = static_cast<float*>(mem.value());
  if (extra) *extra = static_cast<uint8_t*>(mem.value()) + x_bytes;
  const DType vdt = dtype_info(w->type).vec_dot_type;
  Status st = Error(KESTREL_ERR_UNSUPPORTED, "cuda: no activation rounding for " + std::string(dtype_name(vdt)));
  auto go = [&]<DType V>() {
    const unsigned grid = grid_stride_blocks(K / round_span<V>() * cols, 128);
    st = KS_LAUNCH(round_x_kernel<V>, dim3(grid), dim3(128), 0, s.stream, arg(x), xr);
  };
  switch (vdt) {
    case DType::Q8_0: go.template operator()<DType::Q8_0>(); break;
    case DType::Q8_1: go.template operator()<DType::Q8_1>(); break;
    case DType::Q8_K: go.template operator()<DType::Q8_K>(); break;
    case DType::FP8_E4M3: go.template operator()<DType::FP8_E4M3>(); break;
    case DType::F16: go.template operator()<DType::F16>(); break;
    case DType::BF16: go.template operator()<DType::BF16>(); break;
    case DType::F32: go.template operator()<DType::F32>(); break;
    default: break;
  }
  KS_RETURN_IF_ERROR(st);
  return xr;
}

bool weight_type_supported(DType t) {
  bool known = false;
  with_weight_type(t, [&]<DType T>() { known = T == t; });
  return known;
}

namespace {

Status run_matmul_kernels(const Node& n, Stream& s) {
  if (mxfp4_mma_applies(n, s)) {  // opt-in: X as MXFP8, not the reference's Q8_0
    s.forget_x();
    return run_mxfp4_mma(n, s);
  }
  if (mmq_id_applies(n)) return run_mmq_id(n, s);
  // cuBLAS where it applies and its handle can be had (else the kernels below, as without it).
  const auto library = [&] { return cublas_gemm_applies(n, s) && s.cublas_handle().ok(); };
  if (s.cublas_dequant && library()) {  // the opt-in baseline, before mmq
    s.forget_x();
    return run_cublas_gemm(n, s);
  }
  if (gemv_q8_applies(n)) return run_gemv_q8(n, s);
  if (mmq_applies(n)) return run_mmq(n, s);
  s.forget_x();  // the paths below use the scratch for something else
  if (n.src[0]->layout != 0)  // split rows are made only where the integer kernels apply
    return Error(KESTREL_ERR_INTERNAL,
                 "cuda: " + std::string(n.src[0]->name) + " is in the split layout, which this kernel does not read");
  if (fp8_matmul_applies(n)) return run_fp8_matmul(n, s);
  if (f16_tma_applies(n, s)) return run_f16_tma(n, s);
  if (library()) return run_cublas_gemm(n, s);
  if (f16_matmul_applies(n)) return run_f16_matmul(n, s);
  const Tensor *w = n.src[0], *x = n.src[1];
  auto xr = round_x(w, x, s);
  KS_RETURN_IF_ERROR(xr.status());
  Status st = Error(KESTREL_ERR_UNSUPPORTED, "cuda: " + std::string(op_name(n.op)) + " of " + dtype_name(w->type));
  const dim3 block(32 * kWarps);
  const unsigned gx = blocks_for(w->ne[1], kWarps);
  if (n.op == Op::MATMUL) {
    const int64_t M = x->n_rows();
    with_weight_type(w->type, [&]<DType T>() {
      if (M == 1)
        st = launch("matmul_kernel", matmul_kernel<T, 1>, dim3(gx, 1), block, 0, s.stream, arg(n.dst), arg(w), xr.value(), M);
      else
        st = launch("matmul_kernel", matmul_kernel<T, 8>, dim3(gx, std::min<unsigned>(blocks_for(M, 8), kMaxGridY)), block, 0,
                       s.stream, arg(n.dst), arg(w), xr.value(), M);
    });
  } else {
    const int64_t pairs = n.dst->ne[1] * n.dst->ne[2];
    with_weight_type(w->type, [&]<DType T>() {
      st = KS_LAUNCH(matmul_id_kernel<T>, dim3(gx, static_cast<unsigned>(std::min<int64_t>(pairs, kMaxGridY))), block,
                     0, s.stream, arg(n.dst), arg(w), xr.value(), x->ne[1], arg(n.src[2]), arg(n.src[3]));
    });
  }
  return st;
}

}  // namespace

Status run_matmul(const Node& n, Stream& s) {
  Status st = run_matmul_kernels(n, s);
  s.forget_x_if_written(n.dst);
  return st;
}

}  // namespace kestrel::cuda
