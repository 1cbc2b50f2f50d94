// What every backend whose memory is the host's shares (the reference and CPU backends): aligned
// allocations (host_memory.h) and plain copies.
#pragma once
#include <cstdlib>
#include <cstring>

#include "backends/backend.h"
#include "backends/host_memory.h"

namespace kestrel {

class HostDevice : public Device {
 public:
  Expected<void*> alloc(size_t bytes) override {
    void* p = host_alloc(bytes);
    if (!p) return Error(KESTREL_ERR_OUT_OF_MEMORY, info().name + ": cannot allocate " + std::to_string(bytes) + " bytes");
    return p;
  }
  void release(void* p) override { host_free(p); }
  Status write(void* dst, const void* src, size_t n) override { return host_copy(dst, src, n); }
  Status read(void* dst, const void* src, size_t n) override { return host_copy(dst, src, n); }
  Status copy(void* dst, const void* src, size_t n) override { return host_copy(dst, src, n); }

 private:
  static Status host_copy(void* dst, const void* src, size_t n) {
    if (n) std::memmove(dst, src, n);
    return Status::Ok();
  }
};

}  // namespace kestrel
