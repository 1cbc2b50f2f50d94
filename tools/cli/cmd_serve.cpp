// kestrel serve: the OpenAI-compatible HTTP server (tools/server) over an engine. `kestrel serve
// --help` lists every option and limit with its default.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common.h"
#include "demo_model.h"
#include "server/server.h"

namespace kestrel::cli {
namespace {

long long in_range(const Args& a, const char* name, long long dflt, long long lo, long long hi) {
  const long long v = a.integer(name, dflt);
  if (v < lo || v > hi)
    throw UsageError(std::string(name) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

double seconds(const Args& a, const char* name, double dflt) {
  const double v = a.number(name, dflt);
  if (!(v > 0 && v <= 86400)) throw UsageError(std::string(name) + " must be in (0, 86400] seconds");
  return v;
}

// The limits flags into the HTTP layer's and the request parser's limits.
void limits_from_args(const Args& a, server::ServerOptions* so) {
  server::http::Limits& h = so->http;
  h.max_body_bytes = static_cast<size_t>(in_range(a, "--max-body", static_cast<long long>(h.max_body_bytes), 1, 1LL << 30));
  h.header_timeout_s = seconds(a, "--header-timeout", h.header_timeout_s);
  h.body_timeout_s = seconds(a, "--body-timeout", h.body_timeout_s);
  h.max_connections = static_cast<int>(in_range(a, "--max-connections", h.max_connections, 1, 1 << 20));
  h.max_connections_per_client =
      static_cast<int>(in_range(a, "--max-connections-per-client", h.max_connections_per_client, 1, 1 << 20));
  h.n_workers = static_cast<int>(in_range(a, "--http-threads", h.n_workers, 1, 1024));
  server::JsonLimits& j = so->json;
  // The library's own JSON readers recurse too: keep depth far from any stack limit.
  j.max_depth = static_cast<int>(in_range(a, "--max-json-depth", j.max_depth, 2, 1000));
  j.max_messages = static_cast<size_t>(in_range(a, "--max-messages", static_cast<long long>(j.max_messages), 1, 1 << 20));
  j.max_n = static_cast<int>(in_range(a, "--max-n", j.max_n, 1, 64));
}

}  // namespace

Opts serve_options() {
  const server::http::Limits h;
  const server::JsonLimits j;
  auto num = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return std::string(b);
  };
  auto dflt = [](auto v) { return " (default " + std::to_string(v) + ")"; };
  return model_options(true) +
         Opts{{"--host", "ADDR", "address to listen on (default 127.0.0.1)"},
              {"--port", "N", "port (default 8080; 0: any free port, printed)"},
              {"--api-key", "KEY", "require 'Authorization: Bearer KEY' (default $KESTREL_API_KEY, else none)"},
              {"--cors", "ORIGIN", "let browser pages from ORIGIN (or *) call the server: CORS headers (default off)"},
              {"--no-log-requests", "", "no stderr line per request"},
              {"--alias", "NAME", "the model name clients send and /v1/models shows (default the file name)"},
              {"--parallel", "N", "requests decoding at once, 1..64 (default 4)"},
              ctx_option("KV cache tokens shared by all requests (default 0: min(model's, 4096))"),
              {"--batch", "N", "tokens per engine step (default 256)"},
              {"--max-body", "BYTES", "largest request body; 413 beyond" + dflt(h.max_body_bytes)},
              {"--max-json-depth", "N", "deepest nesting in a request body; 400 beyond" + dflt(j.max_depth)},
              {"--max-messages", "N", "most entries in a chat request's messages; 400 beyond" + dflt(j.max_messages)},
              {"--max-n", "N", "most choices one request may ask for with 'n'; 400 beyond" + dflt(j.max_n)},
              {"--header-timeout", "S", "seconds for the request line and headers; 408 after (default " + num(h.header_timeout_s) + ")"},
              {"--body-timeout", "S", "seconds for the body after the headers; 408 after (default " + num(h.body_timeout_s) + ")"},
              {"--max-connections", "N", "open connections at once; 503 beyond" + dflt(h.max_connections)},
              {"--max-connections-per-client", "N", "open connections from one address; 429 beyond" + dflt(h.max_connections_per_client)},
              {"--http-threads", "N", "threads running requests, more start when all are busy" + dflt(h.n_workers)}} +
         spec_options() + cache_options() + Opts{trace_option()};
}

int cmd_serve(const Args& a) {
  const TraceFile trace(a);
  const SpecArgs spec = spec_from_args(a);
  const KvTypes kv_types = kv_types_from_args(a);
  server::ServerOptions so;
  so.host = a.str("--host", "127.0.0.1");
  so.port = static_cast<int>(in_range(a, "--port", 8080, 0, 65535));
  so.api_key = a.str("--api-key", "");
  if (so.api_key.empty() && std::getenv("KESTREL_API_KEY")) so.api_key = std::getenv("KESTREL_API_KEY");
  limits_from_args(a, &so);
  so.cors_origin = a.str("--cors", "");
  so.log_requests = !a.has("--no-log-requests");
  so.backend = a.str("--device", "auto");
  so.n_threads = static_cast<int>(a.integer("--threads", 0));
  const long long parallel = a.integer("--parallel", 4), ctx = a.integer("--ctx-size", 0), batch = a.integer("--batch", 256);
  if (parallel < 1 || parallel > 64) throw UsageError("--parallel must be in [1, 64]");
  so.n_parallel = static_cast<int>(parallel);
  if (ctx < 0 || batch < 1) throw UsageError("--ctx-size must be >= 0 and --batch >= 1");
  // SIGINT/SIGTERM must reach the server's signal thread only: block them before any thread
  // (the engine's worker, the thread pool) exists, so that they all inherit the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ModelPtr model = load_model_from_args(a, false, /*allow_demo=*/true);
  ModelPtr draft = load_draft_model(a, spec);
  std::string path = model_path_from_args(a);
  if (path.empty()) path = kDemoModelName;
  const size_t slash = path.find_last_of('/');
  so.model_id = a.str("--alias", slash == std::string::npos ? path : path.substr(slash + 1));
  kestrel_engine_options eo;
  kestrel_engine_options_init(&eo);
  kv_types.apply(eo);
  eo.n_parallel = static_cast<uint32_t>(parallel);
  eo.n_ctx = static_cast<uint32_t>(ctx);
  eo.n_batch = static_cast<uint32_t>(batch);
  eo.n_threads = static_cast<int32_t>(a.integer("--threads", 0));
  eo.draft_model = draft.get();
  eo.speculative = &spec.opts;
  kestrel_engine* engine = nullptr;
  check(kestrel_engine_new(model.get(), &eo, &engine));
  const int rc = server::serve(model.get(), engine, so);
  kestrel_engine_free(engine);
  return rc;
}

}  // namespace kestrel::cli
