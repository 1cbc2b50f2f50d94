// CUDA graphs of a context's steps. A decode step is a few hundred small launches; enqueueing
// them costs the CPU about 4 µs each and leaves gaps between kernels on the GPU (docs/PERF.md,
// "Launch overhead"). Replaying the same launches as one captured graph costs ~1 µs per kernel.
//
// A launcher's kernels and arguments are a function of the nodes it runs (ops, parameters,
// tensors' types, layouts, shapes, strides and addresses, which tensors are the same), of the
// stream's scratch buffer and counters (kernels.h) and of nothing else: kernels read every
// per-step value (positions, slots, the attention batch) from device memory. So each run of nodes
// gets a signature holding exactly those, and a run whose signature was seen before replays that
// graph instead of launching. The second time a signature is seen, its launches are captured (the
// first sight may still grow the scratch or the counters, which capture forbids). A few signatures are kept, least recently used
// first out: the decode step of each batch size, the draft and verify steps of speculation.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "backends/backend.h"
#include "backends/cuda/kernels.h"

namespace kestrel::cuda {

// KESTREL_CUDA_GRAPHS=0 turns step graphs off (every run launches its kernels).
bool step_graphs_enabled_by_env();

// Stream capture forbids, anywhere in the process, copies on the legacy stream and device-wide
// synchronization (as cudaFree does); on the capturing thread also cudaMalloc. The Device's
// memory operations hold this shared; a capture holds it exclusively.
std::shared_lock<std::shared_mutex> device_work_lock();

class StepGraphs {
 public:
  static constexpr size_t kMinNodes = 8;  // shorter runs (bench --per-op's single nodes) launch
  static constexpr size_t kMaxGraphs = 8;

  explicit StepGraphs(bool enabled) : enabled_(enabled) {}
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // Runs nodes [begin, end) of `nodes` on s: by run_nodes() (which launches them), or by
  // capturing what run_nodes() launches and replaying it, or by replaying an earlier capture.
  Status run(const std::vector<Node>& nodes, size_t begin, size_t end, Stream& s,
             const std::function<Status()>& run_nodes);
  const ExecutorStats& stats() const { return stats_; }

 private:
  struct Entry {
    std::vector<uint64_t> sig;
    uint64_t hash = 0;
    uint64_t last_use = 0;
    cudaGraphExec_t exec = nullptr;
    bool failed = false;  // capture failed once: this signature launches
  };
  void sign(const std::vector<Node>& nodes, size_t begin, size_t end, const Stream& s);
  uint64_t tensor_id(const Tensor* t, bool* first);
  Entry* find();
  Entry& insert();
  Status capture(Entry& e, Stream& s, const std::function<Status()>& run_nodes);
  Status replay(const Entry& e, Stream& s);

  bool enabled_;
  uint64_t clock_ = 0;
  std::vector<Entry> entries_;
  ExecutorStats stats_;
  // The signature being built, and the ids of its tensors (open addressing, reused each run).
  std::vector<uint64_t> sig_;
  uint64_t hash_ = 0;
  std::vector<std::pair<const Tensor*, uint32_t>> ids_;
  uint32_t n_ids_ = 0;
};

}  // namespace kestrel::cuda
