// Loading cuBLAS at run time (cublas.h). Tried in order: the soname (LD_LIBRARY_PATH, the loader's
// cache), then $CUDA_HOME/lib64 and /usr/local/cuda/lib64, where the toolkit puts it.
#include "backends/cuda/cublas.h"
#include "backends/cuda/kernels.h"

#include <cstdlib>
#include <cstring>
#include <string>

#ifdef KESTREL_CUDA_EMULATE
#include "backends/cuda/emu/cublas_emu.h"
#else
#include <cublas_api.h>
#include <dlfcn.h>
// The values cublas.h spells out are cuBLAS's and CUDA's.
namespace {
namespace cb = kestrel::cuda::cublas;
constexpr bool same(int a, int b) { return a == b; }
static_assert(same(CUBLAS_OP_N, cb::kOpN) && same(CUBLAS_OP_T, cb::kOpT));
static_assert(same(CUDA_R_32F, cb::kR32F) && same(CUDA_R_16F, cb::kR16F) && same(CUDA_R_16BF, cb::kR16BF));
static_assert(same(CUBLAS_COMPUTE_32F, cb::kCompute32F) && same(CUBLAS_GEMM_DEFAULT, cb::kGemmDefault));
}  // namespace
#endif

namespace kestrel::cuda {
namespace {

std::string& missing() {
  static std::string why;
  return why;
}

#ifndef KESTREL_CUDA_EMULATE
void* open_library() {
  const std::string name = "libcublas.so.13";
  if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  std::string tried = name;
  std::string dirs[2] = {std::getenv("CUDA_HOME") ? std::string(std::getenv("CUDA_HOME")) + "/lib64" : "", "/usr/local/cuda/lib64"};
  for (const std::string& d : dirs) {
    if (d.empty()) continue;
    const std::string path = d + "/" + name;
    if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    tried += ", " + path;
  }
  const char* err = dlerror();
  missing() = "cuBLAS not found (tried " + tried + (err ? std::string("; ") + err : std::string()) + ")";
  return nullptr;
}

template <class F>
bool bind(void* lib, const char* symbol, F& f) {
  f = reinterpret_cast<F>(dlsym(lib, symbol));
  if (!f) missing() = std::string("cuBLAS has no ") + symbol;
  return f != nullptr;
}
#endif

const CublasApi* load() {
#ifdef KESTREL_CUDA_EMULATE
  return &cuda_emu::emulated_cublas();
#else
  static CublasApi api{};
  void* lib = open_library();
  if (!lib) return nullptr;
  if (!bind(lib, "cublasCreate_v2", api.create) || !bind(lib, "cublasDestroy_v2", api.destroy) ||
      !bind(lib, "cublasSetStream_v2", api.set_stream) || !bind(lib, "cublasSetWorkspace_v2", api.set_workspace) ||
      !bind(lib, "cublasGemmEx", api.gemm_ex) || !bind(lib, "cublasGetStatusString", api.status_string))
    return nullptr;
  return &api;
#endif
}

}  // namespace

bool cublas_wanted() {
  const char* v = std::getenv("KESTREL_CUDA_CUBLAS");
  return !(v && std::strcmp(v, "0") == 0) && !reference_kernels_only();
}

const CublasApi* cublas_api() {
  if (!cublas_wanted()) return nullptr;
  static const CublasApi* api = load();  // once per process
  return api;
}

bool cublas_dequant_requested() {
  const char* v = std::getenv("KESTREL_CUDA_CUBLAS");
  return v && std::strcmp(v, "dequant") == 0 && cublas_wanted();
}

const char* cublas_missing_reason() {
  if (!cublas_wanted()) return "switched off (KESTREL_CUDA_CUBLAS=0 or KESTREL_CUDA_KERNELS=reference)";
  return missing().c_str();
}

}  // namespace kestrel::cuda
