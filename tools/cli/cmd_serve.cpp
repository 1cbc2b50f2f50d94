// kestrel serve: the OpenAI-compatible HTTP server (tools/server) over an engine. `kestrel serve
// --help` lists every option and limit with its default.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common.h"
#include "server/server.h"

namespace kestrel::cli {
namespace {

void print_help() {
  const server::http::Limits h;
  const server::JsonLimits j;
  std::printf(
      "usage: kestrel serve -m MODEL [options]\n"
      "  -m, --model FILE        the GGUF model\n"
      "  -t, --threads N         compute threads (default 0: the model's setting)\n"
      "  -d, --device NAME       backend (default auto)\n"
      "  --host ADDR             address to listen on (default 127.0.0.1)\n"
      "  --port N                port (default 8080; 0: any free port, printed)\n"
      "  --api-key KEY           require 'Authorization: Bearer KEY' (default $KESTREL_API_KEY, else none)\n"
      "  --alias NAME            the model name clients send and /v1/models shows (default the file name)\n"
      "  --parallel N            requests decoding at once (default 4, at most 64)\n"
      "  -c, --ctx N             KV cache tokens shared by all requests (default 0: min(model's, 4096))\n"
      "  --batch N               tokens per engine step (default 256)\n"
      "  --draft MODEL, --spec none|draft|ngram, --spec-k N   speculative decoding for every request\n"
      "  --kv-type f16|f32|f8_e4m3   the KV cache's type (default f16; f8_e4m3: half the memory)\n"
      "limits (checked before any work; a client past one gets a 4xx error):\n"
      "  --max-body BYTES        largest request body (default %zu = %zu MiB; 413 beyond)\n"
      "  --max-json-depth N      deepest nesting of arrays/objects in a request body (default %d; 400 beyond)\n"
      "  --max-messages N        most entries in a chat request's 'messages' (default %zu; 400 beyond)\n"
      "  --max-n N               most choices one request may ask for with 'n' (default %d; 400 beyond)\n"
      "  --header-timeout S      seconds for the request line and headers to arrive (default %g; 408 after)\n"
      "  --body-timeout S        seconds for the whole body to arrive after the headers (default %g; 408 after)\n"
      "  --max-connections N     open connections at once (default %d; beyond: 503, closed)\n"
      "  --max-connections-per-client N\n"
      "                          open connections from one address (default %d; beyond: 429, closed)\n"
      "  --http-threads N        threads running requests, started at once (default %d); more start when all\n"
      "                          are busy (a stream holds one), up to --max-connections; slow clients hold none\n"
      "  (fixed: request line %zu bytes (414), headers %zu bytes or %zu lines (431), idle keep-alive %gs,\n"
      "   a stalled reply write %gs; SIGINT/SIGTERM let running requests finish for up to 30 s)\n",
      h.max_body_bytes, h.max_body_bytes >> 20, j.max_depth, j.max_messages, j.max_n, h.header_timeout_s, h.body_timeout_s, h.max_connections,
      h.max_connections_per_client, h.n_workers, h.max_request_line, h.max_header_bytes, h.max_headers,
      h.idle_timeout_s, h.send_timeout_s);
}

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

int cmd_serve(int argc, char** argv) {
  std::vector<std::string> options = kModelOptions;
  for (const char* o : {"--host", "--port", "--api-key", "--parallel", "-c,--ctx", "--batch", "--alias", "--max-body",
                        "--max-json-depth", "--max-messages", "--max-n", "--header-timeout", "--body-timeout",
                        "--max-connections", "--max-connections-per-client", "--http-threads"})
    options.push_back(o);
  options.insert(options.end(), kSpecOptions.begin(), kSpecOptions.end());
  options.insert(options.end(), kCacheOptions.begin(), kCacheOptions.end());
  Args a(argc, argv, options, {"-h,--help"});
  if (a.has("--help")) {
    print_help();
    return 0;
  }
  const SpecArgs spec = spec_from_args(a);
  const kestrel_kv_type kv_type = kv_type_from_args(a);
  server::ServerOptions so;
  so.host = a.str("--host", "127.0.0.1");
  so.port = static_cast<int>(in_range(a, "--port", 8080, 0, 65535));
  so.api_key = a.str("--api-key", "");
  if (so.api_key.empty() && std::getenv("KESTREL_API_KEY")) so.api_key = std::getenv("KESTREL_API_KEY");
  limits_from_args(a, &so);
  const long long parallel = a.integer("--parallel", 4), ctx = a.integer("--ctx", 0), batch = a.integer("--batch", 256);
  if (parallel < 1 || parallel > 64) throw UsageError("serve: --parallel must be in [1, 64]");
  if (ctx < 0 || batch < 1) throw UsageError("serve: --ctx must be >= 0 and --batch >= 1");
  // SIGINT/SIGTERM must reach the server's signal thread only: block them before any thread
  // (the engine's worker, the thread pool) exists, so that they all inherit the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ModelPtr model = load_model_from_args(a);
  ModelPtr draft = load_draft_model(a, spec);
  std::string path = a.required("--model");
  const size_t slash = path.find_last_of('/');
  so.model_id = a.str("--alias", slash == std::string::npos ? path : path.substr(slash + 1));
  kestrel_engine_options eo;
  kestrel_engine_options_init(&eo);
  eo.kv_type = kv_type;
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
