// `kestrel serve`: an OpenAI-compatible HTTP server over the library's engine (continuous
// batching, paged KV with prefix sharing). Routes: POST /v1/chat/completions, /v1/completions
// (streaming as OpenAI's SSE), GET /v1/models, /health, /metrics (Prometheus), POST /tokenize,
// /detokenize, and GET / (a self-contained web chat page). HTTP is the server's own layer
// (server/http): slow or hostile clients hold no worker thread, and every limit is a flag.
#pragma once
#include <string>

#include "kestrel.h"
#include "server/http/http_server.h"
#include "server/openai_api.h"

namespace kestrel::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;       // 0: any free port (printed)
  std::string api_key;   // empty: no auth
  std::string model_id;  // the name /v1/models reports and requests must use
  http::Limits http;     // sizes, deadlines, connections, worker threads
  JsonLimits json;       // request JSON: nesting depth, message count
  double drain_timeout_s = 30;  // on SIGINT/SIGTERM: how long running requests may take to finish
};

// Serves until SIGINT/SIGTERM (then drains running requests and returns 0), or returns 1 if the
// address cannot be bound. Prints "listening on http://HOST:PORT" to stdout once bound. The
// caller blocks SIGINT and SIGTERM in every thread before starting any (serve waits for them).
int serve(const kestrel_model* model, kestrel_engine* engine, const ServerOptions& opts);

}  // namespace kestrel::server
