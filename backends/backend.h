// The Backend interface: a narrow vtable that executes whole ranges of a graph, so a device
// backend can capture and fuse. A node a backend does not support runs on the CPU backend.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "tensor/graph.h"

namespace kestrel {

struct BackendInfo {
  std::string name;    // "cpu", "ref", "cuda"
  std::string device;  // human-readable device description
  bool host_memory = true;  // tensors live in host memory (mmap'd weights usable as they are)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const BackendInfo& info() const = 0;
  virtual void* alloc(size_t bytes) = 0;  // nullptr on failure
  virtual void release(void* ptr) = 0;
  // True when tensors in this host range can be used in place (zero-copy mmap).
  virtual bool wrap_host(const void* ptr, size_t bytes) { return info().host_memory; }
  virtual void write(void* dst, const void* src, size_t bytes) = 0;  // host -> backend
  virtual void read(void* dst, const void* src, size_t bytes) = 0;   // backend -> host
  virtual bool supports(const Node& node) const = 0;
  // Executes nodes [begin, end) of g in order.
  virtual Status run(Graph& g, size_t begin, size_t end) = 0;
  virtual void sync() {}
  // Names of the kernels this backend has (for `kestrel info` and tests).
  virtual std::vector<std::string> kernels() const = 0;
};

// backends/registry.cpp: "auto" picks the best available; "cpu"; "ref" (the scalar oracle);
// "cuda" (when compiled and a device exists).
Expected<std::unique_ptr<Backend>> create_backend(const std::string& name, int n_threads);
std::vector<std::string> compiled_backends();

std::unique_ptr<Backend> make_ref_backend();
std::unique_ptr<Backend> make_cpu_backend(int n_threads);

}  // namespace kestrel
