// Per-op profiling: runs a graph one node at a time, timing each, and accumulates time, calls,
// bytes of weights read and FLOPs per op kind ("matmul q4_0", "attention", "rms_norm", ...).
// Used by `kestrel bench --per-op` through kestrel_context_profile.
#pragma once
#include <map>
#include <string>

#include "backends/backend.h"
#include "tensor/graph.h"

namespace kestrel {

struct OpProfile {
  int64_t calls = 0;
  double seconds = 0;
  double bytes = 0;  // weights / KV read (the memory roofline's numerator)
  double flops = 0;
};

class Profiler {
 public:
  // Runs nodes [0, n) of g on `executor`, one at a time, adding to the totals.
  Status run(Executor& executor, Graph& g);
  void reset() { ops_.clear(); }
  // JSON array of {"op", "calls", "seconds", "bytes", "flops"}, slowest first.
  std::string json() const;

 private:
  std::map<std::string, OpProfile> ops_;
};

}  // namespace kestrel
