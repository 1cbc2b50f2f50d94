// The only file with CUDA #ifs. Picks a backend by name; "auto" prefers a usable GPU and falls
// back to the CPU with one log line saying why.
#include <mutex>

#include "backends/backend.h"
#include "core/log.h"

#ifdef KESTREL_WITH_CUDA
#include "backends/cuda/cuda_probe.h"
#endif

namespace kestrel {

std::unique_ptr<Device> make_ref_device();  // backends/ref/backend_ref.cpp
std::unique_ptr<Device> make_cpu_device();  // backends/cpu/backend_cpu.cpp

namespace {

#ifdef KESTREL_WITH_CUDA
// Logs the CUDA situation once per process; true if a device is usable.
bool cuda_usable() {
  static std::once_flag once;
  static bool usable = false;
  std::call_once(once, [] {
    std::string why;
    const int n = cuda::device_count(&why);
    if (n == 0) {
      KS_LOG_INFO("CUDA backend compiled, no device (%s): using CPU", why.c_str());
    } else {
      // The CUDA kernels arrive with the CUDA backend issue; until then the CPU runs the graph.
      KS_LOG_INFO("CUDA device %s found, but this build has no CUDA kernels yet: using CPU",
                  cuda::device_name().c_str());
    }
    usable = false;
  });
  return usable;
}
#endif

}  // namespace

std::vector<std::string> compiled_backends() {
  std::vector<std::string> v = {"cpu", "ref"};
#ifdef KESTREL_WITH_CUDA
  v.push_back("cuda");
#endif
  return v;
}

Expected<std::unique_ptr<Device>> create_device(const std::string& name) {
  if (name == "cpu") return make_cpu_device();
  if (name == "ref") return make_ref_device();
  if (name == "auto" || name.empty()) {
#ifdef KESTREL_WITH_CUDA
    cuda_usable();
#endif
    return make_cpu_device();
  }
  if (name == "cuda") {
#ifdef KESTREL_WITH_CUDA
    cuda_usable();
    return Error(KESTREL_ERR_UNSUPPORTED, "backend 'cuda': no usable CUDA device or kernels in this build");
#else
    return Error(KESTREL_ERR_UNSUPPORTED, "backend 'cuda': this build has no CUDA support");
#endif
  }
  return Error(KESTREL_ERR_INVALID_ARGUMENT, "unknown backend '" + name + "' (expected auto, cpu, ref or cuda)");
}

}  // namespace kestrel
