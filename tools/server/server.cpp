#include "server/server.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "kestrel.hpp"
#include "server/anthropic_reply.h"
#include "server/anthropic_request.h"
#include "server/embeddings.h"
#include "server/generation.h"
#include "server/generation_reply.h"
#include "server/metrics.h"
#include "server/openai_reply.h"
#include "server/openai_request.h"
#include "server/web_page.h"

namespace kestrel::server {
namespace {

using Clock = std::chrono::steady_clock;

// Constant-time comparison: the time taken does not depend on where the strings differ.
bool same_secret(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() != b.size();
  for (size_t i = 0; i < n; ++i)
    diff |= static_cast<unsigned char>(i < a.size() ? a[i] : 0) ^ static_cast<unsigned char>(i < b.size() ? b[i] : 0);
  return diff == 0;
}

std::string random_id(const char* prefix) {
  static std::atomic<uint64_t> n{0};
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%llx%06llx", prefix,
                static_cast<unsigned long long>(std::chrono::system_clock::now().time_since_epoch().count() & 0xffffffffffULL),
                static_cast<unsigned long long>(++n));
  return buf;
}

// What a request's reply-done callback needs to log it: the generations it started.
struct RequestLog {
  std::vector<std::shared_ptr<Generation>> gens;
};

// A path in a log line: printable ASCII already (the HTTP parser made sure), cut short.
std::string shown(const std::string& s) { return s.size() <= 200 ? s : s.substr(0, 200) + "..."; }

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class Server {
 public:
  Server(const kestrel_model* m, kestrel_engine* e, const ServerOptions& o) : model_(m), engine_(e), opts_(o), http_(o.http) {
    env_.limits = o.json;
    env_.n_vocab = kestrel_model_n_vocab(m);
    env_.n_embd = embedding_width(m);
    env_.model_id = o.model_id;
  }
  int run();

 private:
  using Method = void (Server::*)(const http::Request&, http::Response&);
  void add(const char* method, const char* path, Method fn);
  void routes();
  bool pre_route(const http::Request& req, http::Response& res);
  // The error object: OpenAI's, or Anthropic's on the /v1/messages routes.
  void reply_error(http::Response& res, const ApiError& e, bool anthropic = false);
  void reply_json(http::Response& res, const json& j);
  // A request in flight until the returned token is released (a drain waits for none left).
  std::shared_ptr<void> enter();
  void drain_on_signal(const std::atomic<bool>& stopped);
  // Running generations, so that a drain past its deadline can cancel them (their replies then end).
  // Also lists it in the request's log record (res.user).
  void track(const std::shared_ptr<Generation>& g, http::Response& res);
  void cancel_all();
  // The access log line of a finished reply (stderr).
  void log_reply(const http::Request& req, const http::Response& res, double seconds, bool complete);
  // Model, backend, context, slots, threads and addresses (stderr), once bound.
  void print_summary(int port);

  // POST /v1/chat/completions and /v1/completions: build_request, then respond.
  void generate(const http::Request& req, http::Response& res, bool chat);
  std::optional<ApiError> build_request(const http::Request& req, bool chat, PreparedRequest* out);
  void respond(const PreparedRequest& pr, http::Response& res);
  void chat(const http::Request& req, http::Response& res) { generate(req, res, true); }
  void completions(const http::Request& req, http::Response& res) { generate(req, res, false); }
  void models(const http::Request& req, http::Response& res);
  void health(const http::Request& req, http::Response& res);
  void page(const http::Request& req, http::Response& res);
  void tokenize_route(const http::Request& req, http::Response& res);
  void embeddings_route(const http::Request& req, http::Response& res);
  // Anthropic's Messages API: POST /v1/messages (plain or streamed) and /v1/messages/count_tokens.
  void messages(const http::Request& req, http::Response& res);
  void count_tokens(const http::Request& req, http::Response& res);
  void detokenize_route(const http::Request& req, http::Response& res);
  void metrics(const http::Request& req, http::Response& res);

  const kestrel_model* model_;
  kestrel_engine* engine_;
  ServerOptions opts_;
  RequestEnv env_;
  Embedder embedder_{model_};  // POST /v1/embeddings (its own context, made at first use)
  std::atomic<bool> draining_{false};
  std::atomic<int> in_flight_{0};
  std::shared_ptr<ServerMetrics> metrics_ = std::make_shared<ServerMetrics>();
  std::mutex gens_mu_;
  std::vector<std::weak_ptr<Generation>> gens_;
  http::HttpServer http_;  // last: destroyed first, with every reply that holds an enter() token
};

std::shared_ptr<void> Server::enter() {
  ++in_flight_;
  return std::shared_ptr<void>(nullptr, [this](void*) { --in_flight_; });
}

void Server::track(const std::shared_ptr<Generation>& g, http::Response& res) {
  if (!res.user) res.user = std::make_shared<RequestLog>();
  static_cast<RequestLog*>(res.user.get())->gens.push_back(g);
  std::lock_guard<std::mutex> lock(gens_mu_);
  std::erase_if(gens_, [](const std::weak_ptr<Generation>& w) { return w.expired(); });
  gens_.push_back(g);
}

void Server::cancel_all() {
  std::lock_guard<std::mutex> lock(gens_mu_);
  for (const auto& w : gens_)
    if (auto g = w.lock(); g && !g->is_done()) g->cancel();
}

void Server::reply_error(http::Response& res, const ApiError& e, bool anthropic) {
  res.status = e.http;
  res.content_type = "application/json";
  res.body = anthropic ? anthropic_error_text(e) : error_text(e);
  ++metrics_->http_errors;
}

bool anthropic_path(std::string_view path) { return path.rfind("/v1/messages", 0) == 0; }

void Server::reply_json(http::Response& res, const json& j) {
  res.status = 200;
  res.content_type = "application/json";
  res.body = json_text(j);
}

// Every handler runs inside one catch-all: a bug is a generic 500 and a log line, never a crash
// and never a library's exception text sent to the client.
void Server::add(const char* method, const char* path, Method fn) {
  http_.route(method, path, [this, fn, method, path](const http::Request& req, http::Response& res) {
    auto hold = enter();
    try {
      (this->*fn)(req, res);
      return;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kestrel serve: internal error in %s %s: %s\n", method, path, e.what());
    } catch (...) {
      std::fprintf(stderr, "kestrel serve: internal error in %s %s\n", method, path);
    }
    std::shared_ptr<void> log = std::move(res.user);  // the generations it started, for the log line
    res = http::Response{};  // drops a stream already set (its request is cancelled)
    res.user = std::move(log);
    reply_error(res, status_error(500, "internal error"), anthropic_path(path));
  });
}

bool Server::pre_route(const http::Request& req, http::Response& res) {
  ++metrics_->http_requests;
  if (!opts_.cors_origin.empty() && req.method == "OPTIONS") {  // a browser's CORS preflight: no key needed
    res.status = 204;
    res.content_type.clear();
    res.headers.emplace_back("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    // The headers the browser asks for when they are plain header names (OpenAI's and Anthropic's
    // browser clients send their own x-stainless-* and anthropic-* headers), else the usual ones.
    std::string asked = req.header("Access-Control-Request-Headers");
    const bool plain = !asked.empty() && asked.size() <= 1024 &&
                       asked.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_, ") ==
                           std::string::npos;
    res.headers.emplace_back("Access-Control-Allow-Headers",
                             plain ? asked : "Authorization, Content-Type, x-api-key, anthropic-version");
    res.headers.emplace_back("Access-Control-Max-Age", "86400");
    return true;
  }
  const bool open = req.path == "/" || req.path == "/health";
  const bool anthropic = anthropic_path(req.path);
  // Bearer, or (Anthropic's clients) x-api-key.
  const bool authorized = same_secret(req.header("Authorization"), "Bearer " + opts_.api_key) ||
                          same_secret(req.header("x-api-key"), opts_.api_key);
  if (!open && !opts_.api_key.empty() && !authorized) {
    reply_error(res, status_error(401, "Missing or invalid API key (send 'Authorization: Bearer KEY' or 'x-api-key: KEY')"),
                anthropic);
    return true;
  }
  if (draining_ && req.method == "POST") {
    reply_error(res, status_error(503, "The server is shutting down"), anthropic);
    return true;
  }
  return false;
}

void Server::generate(const http::Request& req, http::Response& res, bool chat) {
  PreparedRequest pr;
  pr.arrival = req.received;
  if (auto e = build_request(req, chat, &pr)) return reply_error(res, *e);
  respond(pr, res);
}

// The body parsed, the chat template rendered and the prompt tokenized: nothing submitted yet.
std::optional<ApiError> Server::build_request(const http::Request& req, bool chat, PreparedRequest* out) {
  if (auto e = parse_generation_request(req.body, chat, env_, &out->req)) return e;
  return prepare_prompt(model_, out);
}

// Submits the prepared request (n choices), then replies: one completion object, or the SSE
// stream. Choices after the first wait for its first token, so that they find the prompt's KV
// blocks in the prefix cache instead of computing them again.
void Server::respond(const PreparedRequest& pr, http::Response& res) {
  Choices c;
  c.splitters = pr.splitters;
  for (int i = 0; i < pr.req.params.n; ++i) {
    if (i == 1) {
      Generation& first = *c.gens[0];
      std::unique_lock<std::mutex> lock(first.mu);
      first.cv.wait(lock, [&] { return first.started || first.done; });
    }
    std::shared_ptr<Generation> g;
    if (auto e = start_generation(engine_, model_, pr, i, &g, metrics_)) {
      for (auto& started : c.gens) started->cancel();
      return reply_error(res, *e);
    }
    track(g, res);
    c.gens.push_back(std::move(g));
  }
  ReplyMeta meta;
  meta.id = random_id(pr.req.chat ? "chatcmpl" : "cmpl");
  meta.created = now_s();
  meta.model = opts_.model_id;
  meta.chat = pr.req.chat;
  if (!pr.req.params.stream) {
    reply_whole(c, meta, res);
    if (res.status != 200) ++metrics_->http_errors;
    return;
  }
  reply_streamed(std::move(c), meta, openai_stream_format(pr.req.params.include_usage), enter(), res);
}

void Server::models(const http::Request&, http::Response& res) {
  reply_json(res, {{"object", "list"},
                   {"data", json::array({{{"id", opts_.model_id}, {"object", "model"}, {"created", now_s()},
                                          {"owned_by", "kestrel"}}})}});
}

void Server::health(const http::Request&, http::Response& res) { reply_json(res, {{"status", "ok"}}); }

void Server::page(const http::Request&, http::Response& res) {
  res.content_type = "text/html; charset=utf-8";
  res.body = kWebPage;
}

void Server::embeddings_route(const http::Request& req, http::Response& res) {
  EmbeddingsRequest er;
  if (auto e = parse_embeddings_request(req.body, env_, &er)) return reply_error(res, *e);
  std::string body;
  if (auto e = embedder_.run(er, opts_.model_id, &body)) return reply_error(res, *e);
  res.status = 200;
  res.content_type = "application/json";
  res.body = std::move(body);
}

void Server::messages(const http::Request& req, http::Response& res) {
  PreparedRequest pr;
  pr.arrival = req.received;
  if (auto e = parse_messages_request(req.body, env_, false, &pr.req)) return reply_error(res, *e, true);
  if (auto e = prepare_prompt(model_, &pr)) return reply_error(res, *e, true);
  Choices c;
  c.splitters = pr.splitters;
  std::shared_ptr<Generation> g;
  if (auto e = start_generation(engine_, model_, pr, 0, &g, metrics_)) return reply_error(res, *e, true);
  track(g, res);
  c.gens.push_back(g);
  AnthropicMeta am;
  am.id = random_id("msg");
  am.id[3] = '_';  // msg_...: Anthropic's form
  am.model = opts_.model_id;
  am.n_prompt = static_cast<int32_t>(pr.prompt.size());
  am.stops = pr.req.params.stop;
  ReplyMeta meta;
  meta.id = am.id;
  meta.model = am.model;
  meta.chat = true;
  if (pr.req.params.stream) return reply_streamed(std::move(c), meta, anthropic_stream_format(am), enter(), res);
  g->wait_done();
  if (g->result.finish == KESTREL_FINISH_ERROR) {
    std::fprintf(stderr, "kestrel serve: request %llu failed in the engine: %s\n", static_cast<unsigned long long>(g->id),
                 kestrel_status_name(g->result.status));
    return reply_error(res, status_error(500, "generation failed"), true);
  }
  json lp;
  const json reply = whole_reply(*g, c.splitters[0].get(), meta, &lp);
  res.status = 200;
  res.content_type = "application/json";
  res.body = anthropic_message_text(am, reply, g->result, c.splitters[0]->called_tools());
}

void Server::count_tokens(const http::Request& req, http::Response& res) {
  PreparedRequest pr;
  if (auto e = parse_messages_request(req.body, env_, true, &pr.req)) return reply_error(res, *e, true);
  if (auto e = prepare_prompt(model_, &pr)) return reply_error(res, *e, true);
  reply_json(res, {{"input_tokens", pr.prompt.size()}});
}

void Server::tokenize_route(const http::Request& req, http::Response& res) {
  TokenizeRequest tr;
  if (auto e = parse_tokenize_request(req.body, env_, &tr)) return reply_error(res, *e);
  std::vector<kestrel_token> ids;
  try {
    ids = tokenize(model_, tr.content, tr.add_special, tr.parse_special);
  } catch (const Error& e) {
    ApiError a = status_error(400, e.what());
    a.param = "content";
    return reply_error(res, a);
  }
  reply_json(res, {{"tokens", ids}});
}

void Server::detokenize_route(const http::Request& req, http::Response& res) {
  DetokenizeRequest dr;
  if (auto e = parse_detokenize_request(req.body, env_, &dr)) return reply_error(res, *e);
  std::string text;
  try {
    text = detokenize(model_, dr.tokens, false);
  } catch (const Error& e) {
    ApiError a = status_error(400, e.what());
    a.param = "tokens";
    return reply_error(res, a);
  }
  reply_json(res, {{"content", text}});  // a lone byte token's text is not UTF-8: json_text replaces it
}

void Server::metrics(const http::Request&, http::Response& res) {
  std::string text, why;
  if (!metrics_text(engine_, *metrics_, &text, &why)) {
    std::fprintf(stderr, "kestrel serve: /metrics: %s\n", why.c_str());
    return reply_error(res, status_error(500, "internal error"));
  }
  res.content_type = "text/plain; version=0.0.4";
  res.body = std::move(text);
}

void Server::log_reply(const http::Request& req, const http::Response& res, double seconds, bool complete) {
  char tail[96];
  std::snprintf(tail, sizeof tail, " %.3fs%s", seconds, complete ? "" : " (reply cut short)");
  std::string line = req.method + " " + shown(req.path) + " " + std::to_string(res.status);
  if (const auto* rl = static_cast<const RequestLog*>(res.user.get()); rl && !rl->gens.empty()) {
    int64_t gen = 0;
    for (const auto& g : rl->gens) gen += g->is_done() ? g->result.n_generated : g->n_tokens.load();
    line += " prompt=" + std::to_string(rl->gens[0]->n_prompt) + " gen=" + std::to_string(gen);
    if (rl->gens.size() > 1) line += " n=" + std::to_string(rl->gens.size());
  }
  std::fprintf(stderr, "%s%s\n", line.c_str(), tail);
}

namespace {

// "0.26M", "7.6B": a parameter count in a few characters.
std::string short_count(double n) {
  char buf[32];
  if (n >= 1e9) std::snprintf(buf, sizeof buf, "%.1fB", n / 1e9);
  else if (n >= 1e6) std::snprintf(buf, sizeof buf, "%.1fM", n / 1e6);
  else std::snprintf(buf, sizeof buf, "%.0fK", n / 1e3);
  return buf;
}

// "the model's FILE (ARCH, N params, mostly TYPE)" from kestrel_model_describe.
std::string model_line(const kestrel_model* model) {
  size_t len = 0;
  std::string buf(1 << 16, '\0');
  kestrel_status st = kestrel_model_describe(model, buf.data(), buf.size(), &len);
  if (st == KESTREL_ERR_BUFFER_TOO_SMALL) {
    buf.assign(len + 1, '\0');
    st = kestrel_model_describe(model, buf.data(), buf.size(), &len);
  }
  const json d = st == KESTREL_OK ? json::parse(buf.data(), buf.data() + len, nullptr, false) : json();
  if (!d.is_object()) return "(not described)";
  std::string line = d.value("file", std::string("?")) + " (" + d.value("architecture", std::string("?"));
  if (d.contains("n_params") && d["n_params"].is_number())
    line += ", " + short_count(d["n_params"].get<double>()) + " params";
  std::string type;
  double most = 0;
  if (d.contains("tensor_types") && d["tensor_types"].is_object())
    for (const auto& [t, bytes] : d["tensor_types"].items())
      if (bytes.is_number() && bytes.get<double>() > most) most = bytes.get<double>(), type = t;
  if (!type.empty()) line += ", mostly " + type;
  return line + ")";
}

}  // namespace

// The engine's own numbers win where kestrel_engine_stats reports them (n_ctx, n_parallel,
// n_threads, backend); the caller's ServerOptions fill in the rest.
void Server::print_summary(int port) {
  std::string why;
  const json s = json::parse(engine_stats(engine_, &why), nullptr, false);
  const json st = s.is_object() ? s : json::object();
  auto num = [&](const char* k, double dflt) {
    return st.contains(k) && st[k].is_number() ? st[k].get<double>() : dflt;
  };
  const json kv = st.contains("kv") && st["kv"].is_object() ? st["kv"] : json::object();
  const double blocks = kv.value("blocks", 0.0), block_size = kv.value("block_size", 0.0);
  const auto n_ctx = static_cast<long long>(num("n_ctx", blocks * block_size));
  const auto n_parallel = static_cast<long long>(num("n_parallel", opts_.n_parallel));
  const auto n_threads = static_cast<long long>(num("n_threads", opts_.n_threads));
  std::string backend = opts_.backend;
  if (st.contains("backend") && st["backend"].is_string()) backend = st["backend"].get<std::string>();
  if (backend.empty()) backend = "auto";
  std::fprintf(stderr, "kestrel serve: model %s as \"%s\"\n", model_line(model_).c_str(), opts_.model_id.c_str());
  std::string engine = "kestrel serve: backend " + backend + ", " +
                       (n_threads > 0 ? std::to_string(n_threads) + " threads" : "threads: all physical cores");
  if (n_ctx > 0) engine += "; context " + std::to_string(n_ctx) + " tokens";
  if (blocks > 0) engine += " (" + std::to_string(static_cast<long long>(blocks)) + " KV blocks of " +
                            std::to_string(static_cast<long long>(block_size)) + ")";
  if (n_parallel > 0) engine += (n_ctx > 0 ? " shared by " : "; ") + std::to_string(n_parallel) + " parallel slots";
  std::fprintf(stderr, "%s\n", engine.c_str());
  const std::string base = "http://" + opts_.host + ":" + std::to_string(port);
  std::fprintf(stderr,
               "kestrel serve: OpenAI API %s/v1, Anthropic API %s, chat page %s/, metrics %s/metrics; "
               "API key %s; CORS %s; request log %s\n",
               base.c_str(), base.c_str(), base.c_str(), base.c_str(), opts_.api_key.empty() ? "none" : "required",
               opts_.cors_origin.empty() ? "off" : opts_.cors_origin.c_str(), opts_.log_requests ? "on" : "off");
}

void Server::routes() {
  http_.set_pre_routing([this](const http::Request& q, http::Response& r) { return pre_route(q, r); });
  // The replies the HTTP layer decides itself (400 malformed, 404, 405, 408, 413, 414, 429, 431, 503...).
  http_.set_error_formatter([this](int status, const std::string& message, http::Response& res) {
    reply_error(res, status_error(status, message));
  });
  if (!opts_.cors_origin.empty()) http_.set_common_headers({{"Access-Control-Allow-Origin", opts_.cors_origin}});
  if (opts_.log_requests)
    http_.set_on_reply([this](const http::Request& q, const http::Response& r, double s, bool complete) {
      log_reply(q, r, s, complete);
    });
  add("POST", "/v1/chat/completions", &Server::chat);
  add("POST", "/v1/completions", &Server::completions);
  add("GET", "/v1/models", &Server::models);
  add("GET", "/health", &Server::health);
  add("GET", "/", &Server::page);
  add("POST", "/tokenize", &Server::tokenize_route);
  add("POST", "/v1/embeddings", &Server::embeddings_route);
  add("POST", "/v1/messages", &Server::messages);
  add("POST", "/v1/messages/count_tokens", &Server::count_tokens);
  add("POST", "/detokenize", &Server::detokenize_route);
  add("GET", "/metrics", &Server::metrics);
}

// SIGINT/SIGTERM go to this thread alone (blocked everywhere: the caller blocks them before any
// thread starts): stop taking new requests, let the running ones finish (drain_timeout_s at
// most), then stop the HTTP layer.
void Server::drain_on_signal(const std::atomic<bool>& stopped) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int signo = 0;
  while (!stopped) {
    timespec ts{0, 200 * 1000 * 1000};
    signo = sigtimedwait(&set, nullptr, &ts);
    if (signo == SIGINT || signo == SIGTERM) break;
  }
  if (stopped) return;
  std::fprintf(stderr, "kestrel serve: signal %d, draining %d request(s)\n", signo, in_flight_.load());
  draining_ = true;
  const auto deadline = Clock::now() + std::chrono::duration<double>(opts_.drain_timeout_s);
  while (in_flight_ > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (in_flight_ > 0) {
    std::fprintf(stderr, "kestrel serve: %d request(s) still running, cancelling them\n", in_flight_.load());
    cancel_all();  // their replies end with what was generated
  }
  http_.stop();
}

int Server::run() {
  signal(SIGPIPE, SIG_IGN);  // a client that hangs up is a failed write, not a dead server
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  routes();
  std::string why;
  const int port = http_.bind(opts_.host, opts_.port, &why);
  if (port < 0) {
    std::fprintf(stderr, "kestrel serve: cannot listen on %s:%d: %s\n", opts_.host.c_str(), opts_.port, why.c_str());
    return 1;
  }
  print_summary(port);
  std::printf("kestrel serve: listening on http://%s:%d\n", opts_.host.c_str(), port);
  std::fflush(stdout);
  std::atomic<bool> stopped{false};
  std::thread sig([&] { drain_on_signal(stopped); });
  http_.run();
  stopped = true;
  sig.join();
  std::fprintf(stderr, "kestrel serve: stopped\n");
  return 0;
}

}  // namespace

int serve(const kestrel_model* model, kestrel_engine* engine, const ServerOptions& opts) {
  Server s(model, engine, opts);
  return s.run();
}

}  // namespace kestrel::server
