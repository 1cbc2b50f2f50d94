// kestrel serve: the OpenAI-compatible HTTP server (tools/server) over an engine.
//   kestrel serve -m MODEL [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--parallel N] [--ctx N]
//                 [--draft MODEL | --spec ngram] [--spec-k N]   (speculative decoding for every request)
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common.h"
#include "server/server.h"

namespace kestrel::cli {

int cmd_serve(int argc, char** argv) {
  std::vector<std::string> options = kModelOptions;
  for (const char* o : {"--host", "--port", "--api-key", "--parallel", "-c,--ctx", "--batch", "--alias"}) options.push_back(o);
  options.insert(options.end(), kSpecOptions.begin(), kSpecOptions.end());
  Args a(argc, argv, options, {});
  const SpecArgs spec = spec_from_args(a);
  server::ServerOptions so;
  so.host = a.str("--host", "127.0.0.1");
  so.port = static_cast<int>(a.integer("--port", 8080));
  if (so.port < 0 || so.port > 65535) throw UsageError("serve: --port must be in [0, 65535]");
  so.api_key = a.str("--api-key", "");
  if (so.api_key.empty() && std::getenv("KESTREL_API_KEY")) so.api_key = std::getenv("KESTREL_API_KEY");
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
