#include "server/metrics.h"

#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

namespace kestrel::server {
namespace {

using nlohmann::json;

// A number at a JSON path of the stats object, or 0 when the engine does not report it.
double stat(const json& s, std::initializer_list<const char*> path) {
  const json* j = &s;
  for (const char* k : path) {
    if (!j->is_object() || !j->contains(k)) return 0;
    j = &(*j)[k];
  }
  return j->is_number() ? j->get<double>() : 0;
}

// Integers as integers, other values in the shortest form that reads back the same; +Inf, NaN.
std::string num(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const bool integral = std::abs(v) < 1e15 && v == std::floor(v);
  const auto r = integral ? std::to_chars(buf, buf + sizeof buf, static_cast<long long>(v))
                          : std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// Bucket bounds in seconds: time to first token and end-to-end from tens of milliseconds (a
// short prompt on a GPU) to minutes (a long prompt queued behind others on a CPU); inter-token
// latency from a millisecond (small models, speculative decoding) to seconds.
const std::vector<double> kTtftBounds = {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5,
                                         5,     7.5,  10,    20,   40,    80,  160, 320, 640};
const std::vector<double> kItlBounds = {0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
                                        0.1,   0.15,   0.2,   0.3,  0.4,   0.5,  0.75,  1,    2.5,  5,    10};
const std::vector<double> kE2eBounds = {0.05, 0.1, 0.25, 0.5, 1,  2.5, 5,   10,  15,  20,  30,
                                        40,   50,  60,   120, 240, 480, 960, 1920, 3600};

}  // namespace

void Histogram::observe(double v) {
  if (!(v >= 0)) v = 0;  // NaN or a clock step back
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += v;
}

void Histogram::write(const std::string& name, std::string* out) const {
  std::vector<uint64_t> counts;
  double sum;
  {
    std::lock_guard<std::mutex> lock(mu_);
    counts = counts_;
    sum = sum_;
  }
  uint64_t cumulative = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    cumulative += counts[i];
    const std::string le = i < bounds_.size() ? num(bounds_[i]) : "+Inf";
    *out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  *out += name + "_sum " + num(sum) + "\n";
  *out += name + "_count " + std::to_string(cumulative) + "\n";
}

ServerMetrics::ServerMetrics() : ttft(kTtftBounds), itl(kItlBounds), e2e(kE2eBounds), queue(kTtftBounds) {}

void ServerMetrics::count_finish(kestrel_finish_reason r) {
  const auto i = static_cast<size_t>(r);
  if (i < finished.size()) ++finished[i];
}

std::string engine_stats(const kestrel_engine* engine, std::string* why) {
  size_t len = 0;
  std::string buf(4096, '\0');
  kestrel_status st = kestrel_engine_stats(engine, buf.data(), buf.size(), &len);
  if (st == KESTREL_ERR_BUFFER_TOO_SMALL) {
    buf.assign(len + 1, '\0');
    st = kestrel_engine_stats(engine, buf.data(), buf.size(), &len);
  }
  if (st != KESTREL_OK) {
    *why = kestrel_last_error();
    return "";
  }
  buf.resize(len);
  return buf;
}

bool metrics_text(const kestrel_engine* engine, const ServerMetrics& m, std::string* out, std::string* why) {
  const std::string text = engine_stats(engine, why);
  if (text.empty()) return false;
  const json s = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (s.is_discarded()) {
    *why = "the engine's statistics are not JSON";
    return false;
  }
  std::string& o = *out;
  o.clear();
  auto family = [&](const char* name, const char* type, const char* help) {
    o += std::string("# HELP kestrel_") + name + " " + help + "\n# TYPE kestrel_" + name + " " + type + "\n";
  };
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    family(name, type, help);
    o += std::string("kestrel_") + name + " " + num(v) + "\n";
  };
  // Requests and tokens.
  metric("http_requests_total", "counter", "HTTP requests received", static_cast<double>(m.http_requests.load()));
  metric("http_errors_total", "counter", "HTTP requests answered with an error",
         static_cast<double>(m.http_errors.load()));
  metric("requests_total", "counter", "Generation requests submitted to the engine (one per choice)",
         stat(s, {"requests_total"}));
  family("requests_finished_total", "counter", "Generation requests finished, by reason");
  const char* reasons[] = {"none", "stop", "length", "cancelled", "error"};
  for (size_t i = 1; i < m.finished.size(); ++i)
    o += std::string("kestrel_requests_finished_total{reason=\"") + reasons[i] + "\"} " +
         std::to_string(m.finished[i].load()) + "\n";
  metric("requests_running", "gauge", "Requests decoding now", stat(s, {"requests_running"}));
  metric("queue_depth", "gauge", "Requests waiting for a slot", stat(s, {"requests_waiting"}));
  metric("requests_preempted_total", "counter", "Preemptions (recompute)", stat(s, {"requests_preempted"}));
  metric("tokens_prompt_total", "counter", "Prompt tokens", stat(s, {"tokens_prompt"}));
  metric("tokens_cached_total", "counter", "Prompt tokens taken from the prefix cache", stat(s, {"tokens_cached"}));
  metric("tokens_generated_total", "counter", "Generated tokens", stat(s, {"tokens_generated"}));
  // The prefix cache in vLLM's terms: tokens looked up and tokens found.
  metric("prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache",
         stat(s, {"tokens_prompt"}));
  metric("prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache", stat(s, {"tokens_cached"}));
  metric("prefix_cache_hit_rate", "gauge",
         "Prefix-cache hits / queries since start (a rate over time: the two counters in PromQL)",
         stat(s, {"prefix_cache_hit_rate"}));
  metric("spec_drafted_total", "counter", "Speculative decoding: tokens drafted (finished requests)",
         stat(s, {"speculative", "drafted"}));
  metric("spec_accepted_total", "counter", "Speculative decoding: drafted tokens accepted (finished requests)",
         stat(s, {"speculative", "accepted"}));
  // The KV cache.
  const double blocks = stat(s, {"kv", "blocks"}), used = stat(s, {"kv", "blocks_used"});
  metric("kv_blocks_used", "gauge", "KV blocks held by requests", used);
  metric("kv_blocks_cached", "gauge", "KV blocks kept for prefix reuse (free to take)",
         stat(s, {"kv", "blocks_cached"}));
  metric("kv_blocks_free", "gauge", "KV blocks free", stat(s, {"kv", "blocks_free"}));
  metric("kv_cache_usage_ratio", "gauge", "KV blocks held by requests / all KV blocks (0 to 1)",
         blocks > 0 ? used / blocks : 0.0);
  // Latencies.
  family("time_to_first_token_seconds", "histogram", "Time from a request's arrival to its first token");
  m.ttft.write("kestrel_time_to_first_token_seconds", &o);
  family("inter_token_latency_seconds", "histogram", "Time between consecutive tokens of a request");
  m.itl.write("kestrel_inter_token_latency_seconds", &o);
  family("e2e_request_latency_seconds", "histogram", "Time from a request's arrival to its last token");
  m.e2e.write("kestrel_e2e_request_latency_seconds", &o);
  family("request_queue_time_seconds", "histogram", "Time a request waited for its first place in a batch");
  m.queue.write("kestrel_request_queue_time_seconds", &o);
  metric("uptime_seconds", "gauge", "Seconds since the server started",
         std::chrono::duration<double>(std::chrono::steady_clock::now() - m.started).count());
  return true;
}

}  // namespace kestrel::server
