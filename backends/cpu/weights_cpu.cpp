#include "backends/cpu/weights_cpu.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cpu/simd.h"
#include "backends/cpu/repacked.h"

namespace kestrel::cpu {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr int64_t kSlice = int64_t{2} << 20;  // bytes copied between two releases of file pages

bool regroups(const gguf::TensorInfo& ti) {
  return ti.ne[2] == 1 && ti.ne[3] == 1 && grouped_fits(ti.type, ti.ne[0], ti.ne[1]);
}
// A table left in the file (an untied token embedding, read a row per token): map it in now
// (MADV_POPULATE_READ waits for it; the older MADV_WILLNEED only starts the reads). Otherwise each
// new token's row waited for a read from the file (0.1-0.3 ms per token in this VM, 1-2% of
// decode; docs/PERF.md item 17).
void read_ahead(const uint8_t* p, size_t n) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t b = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  void* start = reinterpret_cast<void*>(b);
  const size_t len = reinterpret_cast<uintptr_t>(p) + n - b;
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif
  if (madvise(start, len, MADV_POPULATE_READ) != 0) madvise(start, len, MADV_WILLNEED);
}
size_t arena_share(const gguf::TensorInfo& ti) { return (ti.nbytes + 63) / 64 * 64; }

// Drops this process's pages of a file mapping wholly inside [from, to) (the page cache keeps them).
void release_file_pages(const uint8_t* from, const uint8_t* to) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t a = (reinterpret_cast<uintptr_t>(from) + page - 1) & ~(page - 1);
  const uintptr_t b = reinterpret_cast<uintptr_t>(to) & ~(page - 1);
  if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_DONTNEED);
}

// Copies (or regroups) a mapped tensor into dst a slice at a time, releasing the file pages behind
// it, so the resident size never holds much of a matrix twice.
void place(const gguf::TensorInfo& ti, const uint8_t* src, uint8_t* dst) {
  const int64_t n = static_cast<int64_t>(ti.nbytes);
  const int64_t K = ti.ne[0];
  const bool regroup = regroups(ti);
  // A slice is whole 8-row groups when regrouping.
  const int64_t unit = regroup ? 8 * static_cast<int64_t>(dtype_row_size(ti.type, K)) : 1;
  const int64_t step = std::max<int64_t>(1, kSlice / unit) * unit;
  const uint8_t* released = src;
  for (int64_t at = 0; at < n; at += step) {
    const int64_t len = std::min(step, n - at);
    if (regroup) {
      to_grouped(ti.type, src + at, K, 8 * (len / unit), dst + at);
    } else {
      std::memcpy(dst + at, src + at, static_cast<size_t>(len));
    }
    release_file_pages(released, src + at + len);
    released = src + at + len;
  }
}

}  // namespace

PlacedArena::~PlacedArena() {
  if (map_) munmap(map_, map_len_);
}

bool regroup_enabled() {
  return !repack_disabled_by_env() && has_avx2_fma();
}

Status place_weights(gguf::File& f, std::unordered_map<std::string, Tensor>& tensors,
                     const std::unordered_set<std::string>& skip, PlacedArena* out) {
  if (!f.mapped()) {  // the File owns a buffer: regroup in place, a group at a time
    std::vector<uint8_t> group;
    for (const gguf::TensorInfo& ti : f.tensors()) {
      if (!regroups(ti) || skip.count(ti.name)) continue;
      const int64_t K = ti.ne[0];
      const size_t group_bytes = 8 * dtype_row_size(ti.type, K);
      group.resize(group_bytes);
      uint8_t* p = f.owned_tensor_data(ti);
      for (int64_t g = 0; g < ti.ne[1] / 8; ++g) {
        std::memcpy(group.data(), p + g * group_bytes, group_bytes);
        to_grouped(ti.type, group.data(), K, 8, p + g * group_bytes);
      }
      tensors.at(ti.name).layout = kLayoutGrouped8;
      out->stats_.regrouped_bytes += ti.nbytes;
    }
    return Status::Ok();
  }
  // Weight matrices (2+ dimensions): everything the matmuls stream through.
  std::vector<const gguf::TensorInfo*> todo;
  size_t arena = 0;
  for (const gguf::TensorInfo& ti : f.tensors()) {
    if (ti.n_dims < 2 || ti.nbytes == 0) continue;
    if (skip.count(ti.name)) {  // stays in the file
      read_ahead(f.tensor_data(ti), ti.nbytes);
      continue;
    }
    todo.push_back(&ti);
    arena += arena_share(ti);
  }
  if (todo.empty()) return Status::Ok();
  const size_t len = (arena + kHugePage - 1) / kHugePage * kHugePage;
  void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return Error(KESTREL_ERR_OUT_OF_MEMORY, f.path() + ": no memory to place " + std::to_string(arena) +
                                                " bytes of weights (" + std::strerror(errno) + ")");
  out->map_ = m, out->map_len_ = len;
  madvise(m, len, MADV_HUGEPAGE);  // a hint: without it, plain pages
  uint8_t* at = static_cast<uint8_t*>(m);
  for (const gguf::TensorInfo* ti : todo) {
    place(*ti, f.tensor_data(*ti), at);
    Tensor& t = tensors.at(ti->name);
    t.data = at;
    if (regroups(*ti)) {
      t.layout = kLayoutGrouped8;
      out->stats_.regrouped_bytes += ti->nbytes;
    }
    out->stats_.placed_bytes += ti->nbytes;
    at += arena_share(*ti);
  }
  return Status::Ok();
}

}  // namespace kestrel::cpu
