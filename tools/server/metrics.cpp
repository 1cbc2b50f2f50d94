#include "server/metrics.h"

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

}  // namespace

bool metrics_text(const kestrel_engine* engine, const HttpCounters& http, std::string* out, std::string* why) {
  size_t len = 0;
  std::string buf(4096, '\0');
  kestrel_status st = kestrel_engine_stats(engine, buf.data(), buf.size(), &len);
  if (st == KESTREL_ERR_BUFFER_TOO_SMALL) {
    buf.assign(len + 1, '\0');
    st = kestrel_engine_stats(engine, buf.data(), buf.size(), &len);
  }
  if (st != KESTREL_OK) {
    *why = kestrel_last_error();
    return false;
  }
  const json s = json::parse(buf.data(), buf.data() + len, nullptr, /*allow_exceptions=*/false);
  if (s.is_discarded()) {
    *why = "the engine's statistics are not JSON";
    return false;
  }
  std::string& o = *out;
  o.clear();
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    o += std::string("# HELP kestrel_") + name + " " + help + "\n# TYPE kestrel_" + name + " " + type + "\n";
    o += std::string("kestrel_") + name + " " + std::to_string(v) + "\n";
  };
  metric("http_requests_total", "counter", "HTTP requests received", static_cast<double>(http.requests));
  metric("http_errors_total", "counter", "HTTP requests answered with an error", static_cast<double>(http.errors));
  metric("requests_total", "counter", "Generation requests submitted", stat(s, {"requests_total"}));
  metric("requests_running", "gauge", "Requests decoding now", stat(s, {"requests_running"}));
  metric("queue_depth", "gauge", "Requests waiting for a slot", stat(s, {"requests_waiting"}));
  metric("requests_preempted_total", "counter", "Preemptions (recompute)", stat(s, {"requests_preempted"}));
  metric("tokens_prompt_total", "counter", "Prompt tokens", stat(s, {"tokens_prompt"}));
  metric("tokens_cached_total", "counter", "Prompt tokens taken from the prefix cache", stat(s, {"tokens_cached"}));
  metric("tokens_generated_total", "counter", "Generated tokens", stat(s, {"tokens_generated"}));
  metric("spec_drafted_total", "counter", "Speculative decoding: tokens drafted (finished requests)",
         stat(s, {"speculative", "drafted"}));
  metric("spec_accepted_total", "counter", "Speculative decoding: drafted tokens accepted (finished requests)",
         stat(s, {"speculative", "accepted"}));
  metric("kv_blocks_used", "gauge", "KV blocks held by requests", stat(s, {"kv", "blocks_used"}));
  metric("kv_blocks_cached", "gauge", "KV blocks kept for prefix reuse", stat(s, {"kv", "blocks_cached"}));
  metric("kv_blocks_free", "gauge", "KV blocks free", stat(s, {"kv", "blocks_free"}));
  metric("prefix_cache_hit_rate", "gauge", "Prompt tokens found in the prefix cache / prompt tokens looked up",
         stat(s, {"prefix_cache_hit_rate"}));
  metric("tokens_per_second", "gauge", "Generated tokens per second since start",
         http.uptime_s > 0 ? stat(s, {"tokens_generated"}) / http.uptime_s : 0.0);
  return true;
}

}  // namespace kestrel::server
