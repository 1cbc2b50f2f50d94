#include "backends/host_memory.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

namespace kestrel {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
// The mappings' lengths, for munmap. Never destroyed: a static object's destructor may free
// device memory after this file's statics would have gone.
std::mutex& maps_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::unordered_map<void*, size_t>& maps() {
  static auto* m = new std::unordered_map<void*, size_t>;
  return *m;
}

}  // namespace

// Under AddressSanitizer never: its heap checks the bounds of every block, a mapping's it cannot.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KESTREL_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(KESTREL_ASAN)
const size_t kHostMappedBytes = SIZE_MAX;
#else
const size_t kHostMappedBytes = 4 * kHugePage;
#endif

void* host_alloc(size_t bytes) {
  if (bytes < kHostMappedBytes) return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  // A whole number of huge pages, starting on one: map a huge page more and trim both ends.
  const size_t len = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* m = mmap(nullptr, len + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  const uintptr_t at = reinterpret_cast<uintptr_t>(m), aligned = (at + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > at) munmap(m, aligned - at);
  if (const size_t tail = at + len + kHugePage - (aligned + len)) munmap(reinterpret_cast<void*>(aligned + len), tail);
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, len, MADV_HUGEPAGE);  // a hint: without it, plain pages
  std::lock_guard<std::mutex> lock(maps_mutex());
  maps()[p] = len;
  return p;
}

void host_free(void* p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lock(maps_mutex());
    auto it = maps().find(p);
    if (it != maps().end()) {
      const size_t len = it->second;
      maps().erase(it);
      munmap(p, len);
      return;
    }
  }
  std::free(p);
}

}  // namespace kestrel
