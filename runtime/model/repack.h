// Load-time weight layouts for the CPU backend's kernels: every 2-D Q4_0 matrix that fits is
// regrouped eight rows at a time (Q4_0_R8, backends/ref/repacked.h), in place, so memory stays
// the file's size. Done when the model's matmuls run on the CPU kernels (backend "cpu", or "auto"
// resolving to it) and the CPU has AVX2; KESTREL_NO_REPACK=1 turns it off (A/B measurements).
#pragma once
#include <string>
#include <unordered_map>

#include "core/status.h"
#include "gguf/gguf.h"
#include "tensor/tensor.h"

namespace kestrel {

// True when a model loaded for `backend` will have its weights read by the CPU backend's kernels.
bool repack_applies(const std::string& backend);
// Rewrites the eligible tensors of f in place and retypes their entries in `tensors`; returns the
// number of bytes regrouped.
Expected<uint64_t> repack_for_cpu(gguf::File& f, std::unordered_map<std::string, Tensor>& tensors);

}  // namespace kestrel
