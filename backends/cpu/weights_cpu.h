// Load-time placement of weights for the CPU backend's kernels (Device::place_weights). From a
// mapped file, every weight matrix is copied into one anonymous arena backed by huge pages where
// the kernel grants them (decode is TLB-bound on 4 KiB file pages: docs/PERF.md), and its file
// pages are released, so the resident size stays the file's; 2-D Q4_0, Q4_K and Q8_0 matrices are
// regrouped on the way, eight rows at a time (repacked.h; Tensor::layout = kLayoutGrouped8). A
// file read into memory has those regrouped in place. Tensors in `skip` stay mapped (read ahead
// into the page cache). Done when the CPU has AVX2 (the kernels that read the grouped layouts);
// KESTREL_NO_REPACK=1 keeps the file's pages and layouts (A/B runs, or to share one page cache
// between processes).
#pragma once
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "backends/backend.h"

namespace kestrel::cpu {

// The anonymous memory the placed weights live in (owned by the CPU device: one per model).
class PlacedArena {
 public:
  PlacedArena() = default;
  ~PlacedArena();
  PlacedArena(const PlacedArena&) = delete;
  PlacedArena& operator=(const PlacedArena&) = delete;
  const PlacedWeights& stats() const { return stats_; }

 private:
  friend Status place_weights(gguf::File&, std::unordered_map<std::string, Tensor>&,
                              const std::unordered_set<std::string>&, PlacedArena*);
  void* map_ = nullptr;  // the arena (mapped files only)
  size_t map_len_ = 0;
  PlacedWeights stats_;
};

// False without AVX2, or with KESTREL_NO_REPACK set: the weights stay as the file has them.
bool regroup_enabled();
// Places the weight matrices of f not named in `skip` into *out and points their entries in
// `tensors` at them, with layout kLayoutGrouped8 where regrouped.
Status place_weights(gguf::File& f, std::unordered_map<std::string, Tensor>& tensors,
                     const std::unordered_set<std::string>& skip, PlacedArena* out);

}  // namespace kestrel::cpu
