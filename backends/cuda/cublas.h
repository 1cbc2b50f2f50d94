// cuBLAS, loaded when first needed (dlopen of libcublas.so.13), for the F16/BF16 GEMMs of batches
// larger than the decode kernels take. Loaded, not linked: libcublas and the libcublasLt it pulls
// in are about 600 MB, which a program that links libkestrel should not need in order to start,
// or at all on a CPU. Where it is missing (or KESTREL_CUDA_CUBLAS=0) the batches stay on
// Kestrel's own tensor-core tiles (matmul_f16.cu).
//
// The table holds the six entry points used, with cuBLAS's C signatures; the enum values are
// cuBLAS's and CUDA's (checked against their headers in the nvcc build, cublas.cu). Under
// KESTREL_CUDA_EMULATE the table points at the emulator's host implementation
// (emu/cublas_emu.cpp), which computes what cublasGemmEx documents, so the CI's emulated build
// runs the same calls, layouts and leading dimensions.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backends/cuda/common.cuh"

namespace kestrel::cuda {

namespace cublas {
using Handle = void*;
using StatusT = int;  // cublasStatus_t: 0 = success
enum Op : int { kOpN = 0, kOpT = 1 };
enum DataType : int { kR32F = 0, kR16F = 2, kR16BF = 14 };
inline constexpr int kCompute32F = 68;   // CUBLAS_COMPUTE_32F
inline constexpr int kGemmDefault = -1;  // CUBLAS_GEMM_DEFAULT
}  // namespace cublas

struct CublasApi {
  cublas::StatusT (*create)(cublas::Handle*);
  cublas::StatusT (*destroy)(cublas::Handle);
  cublas::StatusT (*set_stream)(cublas::Handle, cudaStream_t);
  cublas::StatusT (*set_workspace)(cublas::Handle, void*, size_t);
  // C (m x n, column-major, ldc) = alpha op(A) op(B) + beta C, as cublasGemmEx.
  cublas::StatusT (*gemm_ex)(cublas::Handle, int transa, int transb, int m, int n, int k, const void* alpha, const void* A,
                             int a_type, int lda, const void* B, int b_type, int ldb, const void* beta, void* C, int c_type,
                             int ldc, int compute_type, int algo);
  const char* (*status_string)(cublas::StatusT);
};

// Whether cuBLAS may be used: not with KESTREL_CUDA_CUBLAS=0 or KESTREL_CUDA_KERNELS=reference.
bool cublas_wanted();
// The loaded library, or nullptr (not found, or not wanted); loaded on the first call, once per
// process, so that a program that never runs a large batch never maps it. Why it is missing:
// cublas_missing_reason().
const CublasApi* cublas_api();
const char* cublas_missing_reason();
// KESTREL_CUDA_CUBLAS=dequant: batches of quantized weights go to cuBLAS too, dequantized to F16
// (gemm_cublas.cu; the baseline mmq.cu is measured against). Off by default.
bool cublas_dequant_requested();

// The bytes of workspace each stream gives cuBLAS (set once, so that calls inside a stream capture
// do not allocate).
inline constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

}  // namespace kestrel::cuda
