// What every backend whose tensors live in host memory shares (the reference and CPU backends):
// aligned allocations, plain copies, and a kernel for every op.
#pragma once
#include <cstdlib>
#include <cstring>

#include "backends/backend.h"

namespace kestrel {

class HostBackend : public Backend {
 public:
  void* alloc(size_t bytes) override { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); }
  void release(void* p) override { std::free(p); }
  void write(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void read(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  bool supports(const Node&) const override { return true; }
  std::vector<std::string> kernels() const override {
    std::vector<std::string> k;
    for (int i = 0; i < static_cast<int>(Op::COUNT); ++i) k.push_back(op_name(static_cast<Op>(i)));
    return k;
  }
};

}  // namespace kestrel
