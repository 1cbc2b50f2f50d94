// What the CUDA backend tells the registry (only included where KESTREL_WITH_CUDA is set).
#pragma once
#include <string>

namespace kestrel::cuda {

// Number of usable CUDA devices; 0 with the reason in *why when there are none.
int device_count(std::string* why);
// Name and compute capability of device 0, e.g. "NVIDIA H100 80GB HBM3 (sm_90)".
std::string device_name();

}  // namespace kestrel::cuda
