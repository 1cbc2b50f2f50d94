// MATMUL of F16 and BF16 weights over batches larger than the decode kernels take
// (kDecodeBatchCols), on cuBLAS where it loaded (cublas.h): X rounded to the weight's type, as
// 16-bit values in scratch (what llama.cpp's matmul sees, and round_x's rounding), then one
// cublasGemmEx with f32 accumulation and an f32 result written straight into dst.
//
// With KESTREL_CUDA_CUBLAS=dequant, batches of quantized weights too: the baseline the tensor-core
// kernels of mmq.cu are measured against. W is dequantized to F16 a piece of rows at a time
// (kPieceBytes of scratch), X rounded to F16 rather than to the type's Q8_0/Q8_K (so the result
// is not llama.cpp's arithmetic: the op harness checks it with a looser bound), one GEMM per piece.
//
// In cuBLAS's column-major terms: W [K, N] (rows of K values, nb[1] bytes apart) is a K x N
// matrix with lda = nb[1] / 2, taken transposed; X16 is K x M with ldb = K; dst [N, M] is N x M
// with ldc = nb[1] / 4. So dst = op_T(W) . X16, m = N, n = M, k = K.
//
// cuBLAS's sums are its own (tensor cores, its split of K): like the tile kernels', they agree
// with the reference to float rounding, and batches of up to kDecodeBatchCols tokens never come
// here, so a verified draft token is still computed as its decode step computes it.
#include <algorithm>
#include <climits>
#include <string>

#include "backends/cuda/dequant.cuh"
#include "backends/cuda/kernels.h"

namespace kestrel::cuda {
namespace {

// Rows [row0, row0 + rows) of W decoded to F16 into out (rows x K), one thread per 32-value chunk.
template <DType T>
__global__ void w_to_f16_kernel(TensorArg w, int64_t row0, int64_t rows, int64_t split_nb, uint16_t* out) {
  const int64_t K = w.ne[0], per_row = K / 32, n = rows * per_row;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, c = i % per_row;
    float v[32];
    dequant_row_chunk<T>(w.data + (row0 + r) * w.nb[1], c, split_nb, v);
    for (int j = 0; j < 32; ++j) out[r * K + 32 * c + j] = float_to_half(v[j]);
  }
}

#ifdef KESTREL_CUDA_EMULATE
constexpr size_t kPieceBytes = size_t{16} << 10;  // small, so that the op tests' matrices take several pieces
#else
constexpr size_t kPieceBytes = size_t{64} << 20;  // dequantized rows per GEMM, at most
#endif

bool fits_int(int64_t v) { return v > 0 && v <= INT_MAX; }

Status gemm(Stream& s, cublas::Handle h, int type, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda, const void* b,
            float* c, int64_t ldc) {
  const float one = 1.0f, zero = 0.0f;
  const cublas::StatusT st = s.cublas->gemm_ex(h, cublas::kOpT, cublas::kOpN, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                                               &one, a, type, static_cast<int>(lda), b, type, static_cast<int>(k), &zero, c,
                                               cublas::kR32F, static_cast<int>(ldc), cublas::kCompute32F, cublas::kGemmDefault);
  ++s.cublas_gemms;
  if (st != 0)
    return Error(KESTREL_ERR_INTERNAL, "cuda: cublasGemmEx (" + std::to_string(m) + " x " + std::to_string(n) + " x " +
                                           std::to_string(k) + "): " + s.cublas->status_string(st));
  return Status::Ok();
}

}  // namespace

bool cublas_gemm_applies(const Node& n, const Stream& s) {
  if (!s.use_cublas || n.op != Op::MATMUL) return false;
  const Tensor *w = n.src[0], *x = n.src[1], *d = n.dst;
  const bool b16 = w->type == DType::F16 || w->type == DType::BF16;
  if (!b16 && !(s.cublas_dequant && dtype_info(w->type).quantized && weight_type_supported(w->type) && w->ne[0] % 32 == 0)) return false;
  const int64_t K = w->ne[0], N = w->ne[1], M = x->n_rows();
  if (M <= kDecodeBatchCols || w->ne[2] != 1 || w->ne[3] != 1) return false;
  if (b16 && (w->layout != 0 || w->nb[0] != 2 || w->nb[1] % 2 != 0 || !fits_int(w->nb[1] / 2))) return false;
  // dst's columns one stride apart (a contiguous [N, M...]), every size an int for cuBLAS.
  return d->is_contiguous() && x->nb[0] == 4 && fits_int(K) && fits_int(N) && fits_int(M) &&
         fits_int(static_cast<int64_t>(d->nb[1] / 4));
}

Status run_cublas_gemm(const Node& n, Stream& s) {
  const Tensor *w = n.src[0], *x = n.src[1];
  const int64_t K = w->ne[0], N = w->ne[1], M = x->n_rows(), ldc = static_cast<int64_t>(n.dst->nb[1] / 4);
  const bool b16 = w->type == DType::F16 || w->type == DType::BF16;
  auto h = s.cublas_handle();
  KS_RETURN_IF_ERROR(h.status());
  const int64_t piece = b16 ? N : std::clamp<int64_t>(static_cast<int64_t>(kPieceBytes / (2 * static_cast<size_t>(K))), 1, N);
  const bool bf16 = w->type == DType::BF16;
  void* pieces = nullptr;
  auto xbm = x_to_b16(x, bf16 ? DType::BF16 : DType::F16, s, b16 ? 0 : static_cast<size_t>(piece * K) * 2, &pieces);
  KS_RETURN_IF_ERROR(xbm.status());
  const uint16_t* xb = xbm.value();
  float* dst = n.dst->f32();
  if (b16)
    return gemm(s, h.value(), bf16 ? cublas::kR16BF : cublas::kR16F, N, M, K, w->data, static_cast<int64_t>(w->nb[1] / 2), xb,
                dst, ldc);
  auto* wf = static_cast<uint16_t*>(pieces);
  const int64_t split_nb = row_layout(w).split_nb;
  for (int64_t row0 = 0; row0 < N; row0 += piece) {
    const int64_t rows = std::min(piece, N - row0);
    Status st = Error(KESTREL_ERR_UNSUPPORTED, "cuda: no F16 decoding of " + std::string(dtype_name(w->type)));
    with_weight_type(w->type, [&]<DType T>() {
      if constexpr (!is_plain<T>())
        st = KS_LAUNCH(w_to_f16_kernel<T>, dim3(grid_stride_blocks(rows * K / 32, 256)), dim3(256), 0, s.stream, arg(w), row0, rows,
                       split_nb, wf);
    });
    KS_RETURN_IF_ERROR(st);
    KS_RETURN_IF_ERROR(gemm(s, h.value(), cublas::kR16F, rows, M, K, wf, K, xb, dst + row0, ldc));
  }
  return Status::Ok();
}

}  // namespace kestrel::cuda
