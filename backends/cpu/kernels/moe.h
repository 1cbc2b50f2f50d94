// CPU kernels of the mixture-of-experts path.
#pragma once
#include <atomic>
#include <cstdint>

#include "core/thread_pool.h"
#include "tensor/graph.h"

namespace kestrel::cpu {

// MATMUL_ID: the (slot, token) pairs of the batch are grouped by expert, each group's activation
// columns gathered into one matrix, and each used expert multiplied once through cpu::matmul, so
// every expert's weights are read once per call however many tokens chose it.
void matmul_id(const Node& n, ThreadPool& pool);

// Process-wide counters of the expert matmuls run (tests and `bench --per-op` read them).
struct ExpertMatmulStats {
  std::atomic<uint64_t> expert_matmuls{0};  // per-expert matrix products
  std::atomic<uint64_t> weight_bytes{0};    // expert weight bytes those products read
  void reset() {
    expert_matmuls = 0;
    weight_bytes = 0;
  }
};
ExpertMatmulStats& expert_matmul_stats();

}  // namespace kestrel::cpu
