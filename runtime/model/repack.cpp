#include "model/repack.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "backends/cpu/simd.h"
#include "backends/ref/repacked.h"

namespace kestrel {

bool repack_applies(const std::string& backend) {
  const char* off = std::getenv("KESTREL_NO_REPACK");
  if (off && *off && std::strcmp(off, "0") != 0) return false;
  // "auto" is the CPU backend in every build today (backends/registry.cpp): when it learns to pick
  // a GPU, this must follow it.
  return (backend == "cpu" || backend == "auto" || backend.empty()) && cpu::has_avx2_fma();
}

Expected<uint64_t> repack_for_cpu(gguf::File& f, std::unordered_map<std::string, Tensor>& tensors) {
  uint64_t moved = 0;
  std::vector<uint8_t> group;
  for (const gguf::TensorInfo& ti : f.tensors()) {
    if (ti.type != DType::Q4_0 || ti.ne[2] != 1 || ti.ne[3] != 1 || !ref::q4_0_r8_fits(ti.ne[0], ti.ne[1])) continue;
    const int64_t K = ti.ne[0], n_groups = ti.ne[1] / 8;
    const size_t group_bytes = 8 * dtype_row_size(DType::Q4_0, K);
    group.resize(group_bytes);
    KS_RETURN_IF_ERROR(f.rewrite_tensor(ti, [&](uint8_t* p) {
      for (int64_t g = 0; g < n_groups; ++g) {  // one group at a time through a small copy
        std::memcpy(group.data(), p + g * group_bytes, group_bytes);
        ref::q4_0_to_r8(group.data(), K, 8, p + g * group_bytes);
      }
    }));
    tensors.at(ti.name).type = DType::Q4_0_R8;
    moved += ti.nbytes;
  }
  return moved;
}

}  // namespace kestrel
