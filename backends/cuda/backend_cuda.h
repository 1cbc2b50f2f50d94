// What the CUDA backend tells the registry (backends/registry.cpp; compiled only with CUDA).
#pragma once
#include <memory>

#include "backends/backend.h"

namespace kestrel::cuda {

// The backend on device 0, or why there is none (no driver, no device).
Expected<std::unique_ptr<Device>> make_device();
// True in the KESTREL_CUDA_EMULATE build: the SIMT emulator stands in for the GPU.
bool emulated();

}  // namespace kestrel::cuda
