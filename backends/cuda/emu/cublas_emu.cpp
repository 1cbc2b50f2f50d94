#include "backends/cuda/emu/cublas_emu.h"

#include <string>

#include "backends/cuda/emu/cuda_runtime_emu.h"
#include "core/fp16.h"

namespace kestrel::cuda_emu {
namespace {

namespace cb = kestrel::cuda::cublas;

// cublasStatus_t values.
constexpr cb::StatusT kSuccess = 0, kNotInitialized = 1, kInvalidValue = 7, kNotSupported = 15;

struct EmuHandle {
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

cb::StatusT create(cb::Handle* h) {
  if (!h) return kInvalidValue;
  *h = new EmuHandle;
  return kSuccess;
}
cb::StatusT destroy(cb::Handle h) {
  delete static_cast<EmuHandle*>(h);
  return kSuccess;
}
cb::StatusT set_stream(cb::Handle h, cudaStream_t s) {
  if (!h) return kNotInitialized;
  static_cast<EmuHandle*>(h)->stream = s;
  return kSuccess;
}
cb::StatusT set_workspace(cb::Handle h, void* w, size_t bytes) {
  if (!h) return kNotInitialized;
  if (bytes && !w) return kInvalidValue;
  static_cast<EmuHandle*>(h)->workspace = w, static_cast<EmuHandle*>(h)->workspace_bytes = bytes;
  return kSuccess;
}

double element(const void* p, int type, int64_t i) {
  if (type == cb::kR32F) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  return type == cb::kR16F ? fp16_to_fp32(h) : bf16_to_fp32(h);
}

cb::StatusT gemm_ex(cb::Handle h, int transa, int transb, int m, int n, int k, const void* alpha, const void* A, int a_type,
                    int lda, const void* B, int b_type, int ldb, const void* beta, void* C, int c_type, int ldc,
                    int compute_type, int /*algo*/) {
  if (!h) return kNotInitialized;
  const auto op_ok = [](int t) { return t == cb::kOpN || t == cb::kOpT; };
  const auto type_ok = [](int t) { return t == cb::kR32F || t == cb::kR16F || t == cb::kR16BF; };
  if (!op_ok(transa) || !op_ok(transb) || m < 0 || n < 0 || k < 0 || !alpha || !beta) return kInvalidValue;
  // cuBLAS's leading-dimension rules: at least the stored rows of each column-major operand.
  const auto at_least = [](int x) { return x < 1 ? 1 : x; };
  if (lda < at_least(transa == cb::kOpN ? m : k) || ldb < at_least(transb == cb::kOpN ? k : n) || ldc < at_least(m))
    return kInvalidValue;
  if (compute_type != cb::kCompute32F || c_type != cb::kR32F || a_type != b_type || !type_ok(a_type)) return kNotSupported;
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  auto* c = static_cast<float*>(C);
  auto run = [=]() -> std::string {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double a = element(A, a_type, transa == cb::kOpN ? i + p * lda : p + i * lda);
          const double b = element(B, b_type, transb == cb::kOpN ? p + j * ldb : j + p * ldb);
          s += a * b;
        }
        float& out = c[i + j * ldc];
        out = static_cast<float>(static_cast<double>(al) * s + (be != 0.0f ? static_cast<double>(be) * out : 0.0));
      }
    return "";
  };
  if (!record_if_capturing(static_cast<EmuHandle*>(h)->stream, run)) run();
  return kSuccess;
}

const char* status_string(cb::StatusT s) {
  switch (s) {
    case kSuccess: return "CUBLAS_STATUS_SUCCESS";
    case kNotInitialized: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case kInvalidValue: return "CUBLAS_STATUS_INVALID_VALUE";
    case kNotSupported: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}

}  // namespace

const kestrel::cuda::CublasApi& emulated_cublas() {
  static const kestrel::cuda::CublasApi api{create, destroy, set_stream, set_workspace, gemm_ex, status_string};
  return api;
}

}  // namespace kestrel::cuda_emu
