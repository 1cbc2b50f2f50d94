// Load-time placement of weights for the CPU backend's kernels. From a mapped file, every weight
// matrix is copied into one anonymous arena backed by huge pages where the kernel grants them
// (decode is TLB-bound on 4 KiB file pages: docs/PERF.md), and its file pages are released, so
// the resident size stays the file's; 2-D Q4_0, Q4_K and Q8_0 matrices are regrouped on the way,
// eight rows at a time (Q4_0_R8, Q4_K_R8, Q8_0_R8: backends/ref/repacked.h). A file read into
// memory has those regrouped in place. Tensors in `skip` stay mapped (read ahead into the page
// cache). Done when the model's matmuls run on the CPU kernels (backend "cpu", or
// "auto" resolving to it) and the CPU has AVX2; KESTREL_NO_REPACK=1 keeps the file's pages and
// layouts (A/B runs, or to share one page cache between processes).
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "core/status.h"
#include "gguf/gguf.h"
#include "tensor/tensor.h"

namespace kestrel {

// The anonymous memory the placed weights live in.
class RepackedWeights {
 public:
  RepackedWeights() = default;
  ~RepackedWeights();
  RepackedWeights(const RepackedWeights&) = delete;
  RepackedWeights& operator=(const RepackedWeights&) = delete;
  uint64_t placed_bytes() const { return placed_; }      // copied into the arena
  uint64_t regrouped_bytes() const { return regrouped_; }  // now in a grouped layout

 private:
  friend Expected<std::unique_ptr<RepackedWeights>> repack_for_cpu(
      gguf::File&, std::unordered_map<std::string, Tensor>&, const std::unordered_set<std::string>&);
  void* map_ = nullptr;  // the arena (mapped files only)
  size_t map_len_ = 0;
  uint64_t placed_ = 0, regrouped_ = 0;
};

// True when a model loaded for `backend` will have its weights read by the CPU backend's kernels.
bool repack_applies(const std::string& backend);
// Places the weight matrices of f not named in `skip` (e.g. an embedding table only gathered
// from) and points their entries in `tensors` at them, retyped where regrouped.
Expected<std::unique_ptr<RepackedWeights>> repack_for_cpu(gguf::File& f,
                                                          std::unordered_map<std::string, Tensor>& tensors,
                                                          const std::unordered_set<std::string>& skip);

}  // namespace kestrel
