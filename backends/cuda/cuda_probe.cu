// Device discovery through the CUDA runtime API (never the driver stub -lcuda).
#include <cuda_runtime.h>

#include "backends/cuda/cuda_probe.h"

namespace kestrel::cuda {

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    if (why) *why = cudaGetErrorString(err);
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA devices";
  return n;
}

std::string device_name() {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "unknown CUDA device";
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")";
}

}  // namespace kestrel::cuda
