// A backend's device and one executor over it, for tests that run graphs or make KV caches
// without a model (the library pairs them through Model and Context).
#pragma once
#include <memory>
#include <stdexcept>
#include <string>

#include "backends/backend.h"

namespace kestrel::test {

struct TestBackend {
  std::unique_ptr<Device> device;
  std::unique_ptr<Executor> executor;
  Status run(Graph& g, size_t begin, size_t end) { return executor->run(g, begin, end); }
  operator Device&() { return *device; }  // NOLINT(implicit): KvCache::create(o, *backend)
};

// nullptr when the backend cannot be made here (e.g. "cuda" without a device).
inline std::unique_ptr<TestBackend> try_backend(const std::string& name, int n_threads = 1) {
  auto d = create_device(name);
  if (!d.ok()) return nullptr;
  auto b = std::make_unique<TestBackend>();
  b->device = std::move(d.value());
  auto e = b->device->create_executor(n_threads);
  if (!e.ok()) return nullptr;
  b->executor = std::move(e.value());
  return b;
}
inline std::unique_ptr<TestBackend> make_backend(const std::string& name, int n_threads = 1) {
  auto b = try_backend(name, n_threads);
  if (!b) throw std::runtime_error("test: cannot make backend '" + name + "'");
  return b;
}
inline std::unique_ptr<TestBackend> make_ref_backend() { return make_backend("ref"); }
inline std::unique_ptr<TestBackend> make_cpu_backend(int n_threads) { return make_backend("cpu", n_threads); }

}  // namespace kestrel::test
