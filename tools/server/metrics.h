// GET /metrics of `kestrel serve` in the Prometheus text format (version 0.0.4): the engine's
// statistics (kestrel_engine_stats: requests, tokens, KV blocks, prefix cache) and what the server
// measures itself (HTTP requests, finish reasons, latency histograms). Names start with kestrel_,
// counters end in _total, durations are in seconds; rates come from PromQL, e.g.
// rate(kestrel_prefix_cache_hits_total[5m]) / rate(kestrel_prefix_cache_queries_total[5m]).
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kestrel.h"

namespace kestrel::server {

// A Prometheus histogram: observations counted in buckets by upper bound (+Inf implied), with
// their sum. Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v);
  // Appends the _bucket (cumulative), _sum and _count lines of `name`.
  void write(const std::string& name, std::string* out) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); the last one is +Inf
  double sum_ = 0;
};

// What the server measures itself. Generations hold a reference (their engine callbacks observe
// the latencies), so it outlives the server when the engine finishes requests after it.
struct ServerMetrics {
  ServerMetrics();
  std::atomic<int64_t> http_requests{0};  // HTTP requests that reached routing
  std::atomic<int64_t> http_errors{0};    // answered with an error (the layer's refusals included)
  std::array<std::atomic<int64_t>, 5> finished{};  // generations by kestrel_finish_reason
  Histogram ttft;   // request received -> first token, per generation
  Histogram itl;    // between consecutive tokens of a generation
  Histogram e2e;    // request received -> generation finished
  Histogram queue;  // submitted to the engine -> first place in a batch (kestrel_request_result.queue_s)
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  void count_finish(kestrel_finish_reason r);
};

// The exposition text; false (with *why) when the engine's statistics cannot be read.
bool metrics_text(const kestrel_engine* engine, const ServerMetrics& m, std::string* out, std::string* why);

// The engine's statistics as JSON text (kestrel_engine_stats); "" with *why on failure.
std::string engine_stats(const kestrel_engine* engine, std::string* why);

}  // namespace kestrel::server
