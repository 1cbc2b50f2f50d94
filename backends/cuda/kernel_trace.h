// The CUDA backend's side of `--trace`: while a trace records, an executor launches its nodes one
// launch unit at a time (no graph replay) with a CUDA event before each and one after the last;
// finish() waits for them and adds one span per unit on the trace's "cuda stream" track, at the
// host time its events map to, so kernels line up under the host's decode spans. In CUDA builds
// with NVTX (header-only, from the toolkit) each unit is also an NVTX range, for Nsight Systems.
#pragma once
#include <string>
#include <vector>

#include "backends/cuda/common.cuh"
#include "core/status.h"

namespace kestrel::cuda {

class KernelTrace {
 public:
  explicit KernelTrace(cudaStream_t s) : stream_(s) {}
  ~KernelTrace();
  // Waits for the stream (so that the first event maps to the host's clock), then marks the start.
  Status begin();
  // The next launch unit (a node, or a fused run of nodes) is `label`.
  Status unit(std::string label);
  // Marks the end, waits, and writes the spans.
  Status finish();

 private:
  Status mark();
  cudaStream_t stream_;
  double host_t0_us_ = 0;  // trace::now_us() when the first event ran
  std::vector<std::string> labels_;
  std::vector<cudaEvent_t> events_;  // events_[i] before unit i; the last after them all
  bool nvtx_open_ = false;
};

// "matmul q4_0", "attention", "add + rms_norm + mul": the names of nodes[i, i + count), as the
// CPU backend's trace names its ops (a product with its weight type).
std::string trace_label(const std::vector<Node>& nodes, size_t i, size_t count);

}  // namespace kestrel::cuda
