// `kestrel bench --parallel N[,N..]`: generation through the engine (continuous batching) with N
// concurrent requests (bench_batch.cpp), the aggregate tokens/s of batched decode that kestrel
// perf's "decode by batch" predicts.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "common.h"

namespace kestrel::cli {

struct BatchBench {
  int32_t n_parallel = 1;  // concurrent requests
  int32_t n_prompt = 32;   // tokens per request's prompt (random, distinct per request)
  int32_t n_gen = 32;      // tokens each request generates
  int reps = 3;
  int32_t n_threads = 0;
  KvTypes kv_types{KESTREL_KV_F16, KESTREL_KV_F16};
};

// Appends a (test, cells) row for the markdown table; returns the test's JSON object.
nlohmann::json bench_batch(const kestrel_model* model, const BatchBench& b,
                           std::vector<std::pair<std::string, std::string>>* rows);

}  // namespace kestrel::cli
