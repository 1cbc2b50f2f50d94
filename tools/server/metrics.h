// GET /metrics of `kestrel serve`: the engine's statistics and the server's counters in the
// Prometheus text format.
#pragma once
#include <cstdint>
#include <string>

#include "kestrel.h"

namespace kestrel::server {

struct HttpCounters {
  int64_t requests = 0;  // HTTP requests received
  int64_t errors = 0;    // of those, answered with an error
  double uptime_s = 0;
};

// The exposition text; false (with *why) when the engine's statistics cannot be read.
bool metrics_text(const kestrel_engine* engine, const HttpCounters& http, std::string* out, std::string* why);

}  // namespace kestrel::server
