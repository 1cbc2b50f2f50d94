// `kestrel serve`: an OpenAI-compatible HTTP server over the library's engine (continuous
// batching, paged KV with prefix sharing). Routes: POST /v1/chat/completions, /v1/completions
// (streaming as OpenAI's SSE), /v1/embeddings, /v1/messages (Anthropic), GET /v1/models, /health,
// /metrics (Prometheus), POST /tokenize, /detokenize, and GET / (a self-contained web chat page).
// HTTP is the server's own layer (server/http): slow or hostile clients hold no worker thread,
// and every limit is a flag. It tells what it does on stderr: a startup summary, then one line
// per request (method, path, status, prompt/generated tokens, seconds).
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
  std::string cors_origin;      // --cors ORIGIN: Access-Control-Allow-Origin on every reply and
                                // preflight OPTIONS answered; empty: off (no CORS headers)
  bool log_requests = true;     // one stderr line per request
  // Shown by the startup summary (the engine does not report them): what the engine was made with.
  std::string backend;  // -d/--device as asked: "auto", "cpu", "cuda" (empty: auto)
  int n_threads = 0;    // -t/--threads (0: all physical cores)
  int n_parallel = 0;   // kestrel_engine_options.n_parallel (0: not shown)
};

// Serves until SIGINT/SIGTERM (then drains running requests and returns 0), or returns 1 if the
// address cannot be bound. Once bound, prints the summary (model, backend, threads, context,
// parallel slots, addresses) to stderr, then "listening on http://HOST:PORT" to stdout. The
// caller blocks SIGINT and SIGTERM in every thread before starting any (serve waits for them).
int serve(const kestrel_model* model, kestrel_engine* engine, const ServerOptions& opts);

}  // namespace kestrel::server
