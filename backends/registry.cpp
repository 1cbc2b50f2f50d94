// The only file with CUDA #ifs. Picks a backend by name; "auto" prefers a usable GPU and falls
// back to the CPU with one log line saying why.
#include <cstdlib>
#include <mutex>

#include "backends/backend.h"
#include "core/log.h"

#ifdef KESTREL_WITH_CUDA
#include "backends/cuda/backend_cuda.h"
#endif

namespace kestrel {

std::unique_ptr<Device> make_ref_device();  // backends/ref/backend_ref.cpp
std::unique_ptr<Device> make_cpu_device();  // backends/cpu/backend_cpu.cpp

namespace {

#ifdef KESTREL_WITH_CUDA
// "auto": a real GPU when one is usable (never the emulator: it is a test tool), else the CPU,
// logging once per process why the GPU was not taken.
Expected<std::unique_ptr<Device>> auto_device() {
  static std::once_flag once;
  if (!cuda::emulated()) {
    auto d = cuda::make_device();
    if (d.ok()) return d;
    std::call_once(once, [&] { KS_LOG_INFO("CUDA backend compiled, %s: using CPU", d.status().message().c_str()); });
  }
  return make_cpu_device();
}
#endif

}  // namespace

bool repack_disabled_by_env() {
  const char* off = std::getenv("KESTREL_NO_REPACK");
  return off && *off && std::string(off) != "0";
}

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
    // KESTREL_BACKEND names what "auto" means for this process (tests run the C API's default
    // model options on the emulated GPU this way); an explicit name above or below wins.
    if (const char* env = std::getenv("KESTREL_BACKEND"); env && *env && std::string(env) != "auto")
      return create_device(env);
#ifdef KESTREL_WITH_CUDA
    return auto_device();
#else
    return make_cpu_device();
#endif
  }
  if (name == "cuda") {
#ifdef KESTREL_WITH_CUDA
    auto d = cuda::make_device();
    if (!d.ok()) return Error(d.status().code(), "backend 'cuda': " + d.status().message());
    return d;
#else
    return Error(KESTREL_ERR_UNSUPPORTED, "backend 'cuda': this build has no CUDA support");
#endif
  }
  return Error(KESTREL_ERR_INVALID_ARGUMENT, "unknown backend '" + name + "' (expected auto, cpu, ref or cuda)");
}

}  // namespace kestrel
