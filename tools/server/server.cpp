#include "server/server.h"

#include <httplib.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "kestrel.hpp"
#include "server/openai_api.h"
#include "server/web_page.h"

namespace kestrel::server {
namespace {

using Clock = std::chrono::steady_clock;

// One request's output, filled by the engine's callbacks and drained by the HTTP thread.
struct Stream {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> pieces;
  bool done = false;
  std::atomic<bool> client_gone{false};
  kestrel_request_result result{};
  void wait_done() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
  }
};

bool on_piece(kestrel_token, const char* piece, size_t len, void* user) {
  auto* s = static_cast<Stream*>(user);
  std::lock_guard<std::mutex> lock(s->mu);
  if (len > 0) s->pieces.emplace_back(piece, len);
  s->cv.notify_all();
  return !s->client_gone;
}

void on_finished(const kestrel_request_result* r, void* user) {
  auto* s = static_cast<Stream*>(user);
  std::lock_guard<std::mutex> lock(s->mu);
  s->result = *r;
  s->done = true;
  s->cv.notify_all();
}

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

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

class Server {
 public:
  Server(const kestrel_model* m, kestrel_engine* e, const ServerOptions& o) : model_(m), engine_(e), opts_(o) {}
  int run();

 private:
  void reply_error(httplib::Response& res, const ApiError& e) {
    res.status = e.http;
    res.set_content(error_body(e).dump(), "application/json");
    ++n_errors_;
  }
  bool parse_body(const httplib::Request& req, httplib::Response& res, json* body);
  bool check_model(const json& body, httplib::Response& res);
  void generate(const httplib::Request& req, httplib::Response& res, bool chat);
  void route();

  const kestrel_model* model_;
  kestrel_engine* engine_;
  ServerOptions opts_;
  httplib::Server svr_;
  std::atomic<bool> draining_{false};
  std::atomic<int> active_{0};
  std::atomic<int64_t> n_http_{0}, n_errors_{0};
  Clock::time_point started_ = Clock::now();
};

bool Server::parse_body(const httplib::Request& req, httplib::Response& res, json* body) {
  try {
    *body = json::parse(req.body);
  } catch (const json::exception& e) {
    reply_error(res, {400, std::string("Invalid JSON body: ") + e.what()});
    return false;
  }
  if (!body->is_object()) {
    reply_error(res, {400, "The request body must be a JSON object"});
    return false;
  }
  return true;
}

bool Server::check_model(const json& body, httplib::Response& res) {
  if (!body.contains("model")) return true;  // lenient for curl users; OpenAI clients always send it
  if (!body["model"].is_string()) {
    reply_error(res, {400, "'model' must be a string", "invalid_request_error", "model"});
    return false;
  }
  const std::string m = body["model"].get<std::string>();
  if (m != opts_.model_id) {
    reply_error(res, {404, "The model '" + m + "' does not exist (this server serves '" + opts_.model_id + "')",
                      "invalid_request_error", "model", "model_not_found"});
    return false;
  }
  return true;
}

void Server::generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  json body;
  if (!parse_body(req, res, &body) || !check_model(body, res)) return;
  GenParams gp;
  if (auto e = parse_gen_params(body, kestrel_model_n_vocab(model_), &gp)) return reply_error(res, *e);
  std::string prompt;
  if (chat) {
    std::string messages;
    if (auto e = parse_messages(body, &messages)) return reply_error(res, *e);
    kestrel_chat_options co;
    kestrel_chat_options_init(&co);
    co.add_generation_prompt = true;
    size_t len = 0;
    kestrel_status st = kestrel_chat_format(model_, messages.c_str(), &co, nullptr, 0, &len);
    if (st == KESTREL_ERR_BUFFER_TOO_SMALL || st == KESTREL_OK) {
      prompt.resize(len + 1);
      st = kestrel_chat_format(model_, messages.c_str(), &co, prompt.data(), prompt.size(), &len);
      prompt.resize(len);
    }
    if (st != KESTREL_OK) return reply_error(res, {400, kestrel_last_error(), "invalid_request_error", "messages"});
  } else {
    if (!body.contains("prompt") || !body["prompt"].is_string())
      return reply_error(res, {400, "'prompt' must be a string", "invalid_request_error", "prompt"});
    prompt = body["prompt"].get<std::string>();
  }
  std::vector<kestrel_token> tokens;
  try {
    tokens = tokenize(model_, prompt, true, chat);
  } catch (const Error& e) {
    return reply_error(res, {400, e.what(), "invalid_request_error", chat ? "messages" : "prompt"});
  }
  if (tokens.size() >= 2 && tokens[0] == tokens[1]) tokens.erase(tokens.begin());  // template wrote BOS too
  if (tokens.empty()) return reply_error(res, {400, "The prompt is empty", "invalid_request_error", "prompt"});

  auto stream = std::make_shared<Stream>();
  std::vector<const char*> stops;
  for (const auto& s : gp.stop) stops.push_back(s.c_str());
  gp.sampling.logit_bias_tokens = gp.bias_tokens.data();
  gp.sampling.logit_bias_values = gp.bias_values.data();
  gp.sampling.n_logit_bias = static_cast<int32_t>(gp.bias_tokens.size());
  kestrel_request r;
  kestrel_request_init(&r);
  r.prompt = tokens.data();
  r.n_prompt = static_cast<int32_t>(tokens.size());
  r.max_tokens = gp.max_tokens;
  r.sampling = &gp.sampling;
  r.stop_strings = stops.data();
  r.n_stop_strings = static_cast<int32_t>(stops.size());
  r.on_token = on_piece;
  r.on_done = on_finished;
  r.user = stream.get();
  uint64_t id = 0;
  const kestrel_status st = kestrel_submit(engine_, &r, &id);
  if (st != KESTREL_OK) {
    ApiError e{400, kestrel_last_error()};
    if (st == KESTREL_ERR_CONTEXT_FULL) e.code = "context_length_exceeded";
    if (st == KESTREL_ERR_CANCELLED) e = {503, "The server is shutting down", "server_error"};
    return reply_error(res, e);
  }
  ++active_;  // until the request is done: what a shutdown waits for
  const std::string cid = random_id(chat ? "chatcmpl" : "cmpl");
  const int64_t created = now_s();
  const std::string object = chat ? "chat.completion" : "text_completion";
  if (!gp.stream) {
    stream->wait_done();
    --active_;
    std::string text;
    for (const auto& p : stream->pieces) text += p;
    json choice = {{"index", 0}, {"finish_reason", finish_reason_text(stream->result.finish)}, {"logprobs", nullptr}};
    if (chat) choice["message"] = {{"role", "assistant"}, {"content", text}};
    else choice["text"] = text;
    const json out = {{"id", cid}, {"object", object}, {"created", created}, {"model", opts_.model_id},
                      {"choices", json::array({choice})}, {"usage", usage_json(stream->result)}};
    if (stream->result.finish == KESTREL_FINISH_ERROR)
      return reply_error(res, {500, "generation failed", "server_error"});
    res.set_content(out.dump(), "application/json");
    return;
  }
  // Server-sent events exactly as OpenAI sends them: data: {chunk}\n\n ... data: [DONE]\n\n
  auto chunk = [=](const json& delta_or_text, const json& finish) {
    json c = {{"index", 0}, {"finish_reason", finish}, {"logprobs", nullptr}};
    if (chat) c["delta"] = delta_or_text;
    else c["text"] = delta_or_text;
    json j = {{"id", cid}, {"object", chat ? "chat.completion.chunk" : "text_completion"}, {"created", created},
              {"model", opts_.model_id}, {"choices", json::array({c})}};
    return "data: " + j.dump() + "\n\n";
  };
  const bool include_usage = gp.include_usage;
  const std::string model_id = opts_.model_id;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [=, this](size_t, httplib::DataSink& sink) {
        auto send = [&](const std::string& s) {
          if (stream->client_gone || !sink.write(s.data(), s.size())) {
            stream->client_gone = true;  // the next token callback cancels the request
            kestrel_cancel(engine_, id);
            return false;
          }
          return true;
        };
        if (chat && !send(chunk({{"role", "assistant"}, {"content", ""}}, nullptr))) return false;
        for (;;) {
          std::deque<std::string> got;
          bool done;
          {
            std::unique_lock<std::mutex> lock(stream->mu);
            stream->cv.wait_for(lock, std::chrono::milliseconds(200), [&] { return stream->done || !stream->pieces.empty(); });
            got.swap(stream->pieces);
            done = stream->done;
          }
          for (const auto& p : got)
            if (!send(chunk(chat ? json{{"content", p}} : json(p), nullptr))) return false;
          if (done) break;
          if (!sink.is_writable()) {
            stream->client_gone = true;
            kestrel_cancel(engine_, id);
            return false;
          }
        }
        if (!send(chunk(chat ? json::object() : json(""), finish_reason_text(stream->result.finish)))) return false;
        if (include_usage) {
          const json u = {{"id", cid}, {"object", chat ? "chat.completion.chunk" : "text_completion"},
                          {"created", created}, {"model", model_id}, {"choices", json::array()},
                          {"usage", usage_json(stream->result)}};
          if (!send("data: " + u.dump() + "\n\n")) return false;
        }
        if (!send("data: [DONE]\n\n")) return false;
        sink.done();
        return true;
      },
      [=, this](bool) {
        // Whatever happened to the connection, the request ends before its Stream goes.
        if (!stream->done) {
          stream->client_gone = true;
          kestrel_cancel(engine_, id);
        }
        stream->wait_done();
        --active_;
      });
}

void Server::route() {
  svr_.set_payload_max_length(opts_.max_body_bytes);
  svr_.set_tcp_nodelay(true);  // one small write per token: no Nagle delay
  svr_.new_task_queue = [n = opts_.n_http_threads] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
  svr_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    ++n_http_;
    const bool open = req.path == "/" || req.path == "/health";
    if (!open && !opts_.api_key.empty()) {
      const std::string auth = req.get_header_value("Authorization");
      const std::string want = "Bearer " + opts_.api_key;
      if (!same_secret(auth, want)) {
        reply_error(res, {401, "Missing or invalid API key (send 'Authorization: Bearer KEY')", "invalid_request_error",
                          "", "invalid_api_key"});
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (draining_ && req.method == "POST") {
      reply_error(res, {503, "The server is shutting down", "server_error"});
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr_.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e{res.status, res.status == 413 ? "The request body is too large" : res.status == 404 ? "Not found" : "Bad request"};
    reply_error(res, e);
  });
  svr_.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    reply_error(res, {500, what, "server_error"});
  });
  svr_.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& r) { generate(q, r, true); });
  svr_.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) { generate(q, r, false); });
  svr_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json m = {{"object", "list"},
                    {"data", json::array({{{"id", opts_.model_id}, {"object", "model"}, {"created", now_s()}, {"owned_by", "kestrel"}}})}};
    res.set_content(m.dump(), "application/json");
  });
  svr_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  svr_.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(kWebPage, "text/html; charset=utf-8"); });
  svr_.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    json body;
    if (!parse_body(req, res, &body)) return;
    if (!body.contains("content") || !body["content"].is_string())
      return reply_error(res, {400, "'content' must be a string", "invalid_request_error", "content"});
    const bool add_special = body.value("add_special", false), parse_special = body.value("parse_special", true);
    res.set_content(json{{"tokens", tokenize(model_, body["content"].get<std::string>(), add_special, parse_special)}}.dump(),
                    "application/json");
  });
  svr_.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    json body;
    if (!parse_body(req, res, &body)) return;
    if (!body.contains("tokens") || !body["tokens"].is_array())
      return reply_error(res, {400, "'tokens' must be an array of token ids", "invalid_request_error", "tokens"});
    std::vector<kestrel_token> ids;
    const int32_t V = kestrel_model_n_vocab(model_);
    for (const json& t : body["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= V)
        return reply_error(res, {400, "'tokens' must hold token ids in [0, " + std::to_string(V) + ")",
                                 "invalid_request_error", "tokens"});
      ids.push_back(t.get<kestrel_token>());
    }
    res.set_content(json{{"content", detokenize(model_, ids, false)}}.dump(), "application/json");
  });
  svr_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    char buf[4096];
    size_t len = 0;
    check(kestrel_engine_stats(engine_, buf, sizeof buf, &len));
    const json s = json::parse(std::string(buf, len));
    const double up = std::chrono::duration<double>(Clock::now() - started_).count();
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, double v) {
      out += std::string("# HELP kestrel_") + name + " " + help + "\n# TYPE kestrel_" + name + " " + type + "\n";
      out += std::string("kestrel_") + name + " " + std::to_string(v) + "\n";
    };
    metric("http_requests_total", "counter", "HTTP requests received", static_cast<double>(n_http_));
    metric("http_errors_total", "counter", "HTTP requests answered with an error", static_cast<double>(n_errors_));
    metric("requests_total", "counter", "Generation requests submitted", s["requests_total"].get<double>());
    metric("requests_running", "gauge", "Requests decoding now", s["requests_running"].get<double>());
    metric("queue_depth", "gauge", "Requests waiting for a slot", s["requests_waiting"].get<double>());
    metric("requests_preempted_total", "counter", "Preemptions (recompute)", s["requests_preempted"].get<double>());
    metric("tokens_prompt_total", "counter", "Prompt tokens", s["tokens_prompt"].get<double>());
    metric("tokens_cached_total", "counter", "Prompt tokens taken from the prefix cache", s["tokens_cached"].get<double>());
    metric("tokens_generated_total", "counter", "Generated tokens", s["tokens_generated"].get<double>());
    metric("spec_drafted_total", "counter", "Speculative decoding: tokens drafted (finished requests)",
           s["speculative"]["drafted"].get<double>());
    metric("spec_accepted_total", "counter", "Speculative decoding: drafted tokens accepted (finished requests)",
           s["speculative"]["accepted"].get<double>());
    metric("kv_blocks_used", "gauge", "KV blocks held by requests", s["kv"]["blocks_used"].get<double>());
    metric("kv_blocks_cached", "gauge", "KV blocks kept for prefix reuse", s["kv"]["blocks_cached"].get<double>());
    metric("kv_blocks_free", "gauge", "KV blocks free", s["kv"]["blocks_free"].get<double>());
    metric("prefix_cache_hit_rate", "gauge", "Prompt tokens found in the prefix cache / prompt tokens looked up",
           s["prefix_cache_hit_rate"].get<double>());
    metric("tokens_per_second", "gauge", "Generated tokens per second since start",
           up > 0 ? s["tokens_generated"].get<double>() / up : 0.0);
    res.set_content(out, "text/plain; version=0.0.4");
  });
}

int Server::run() {
  route();
  // SIGINT/SIGTERM go to one waiting thread (blocked everywhere else; the caller blocks them
  // before starting any thread): stop taking new requests, let the running ones finish (30 s at
  // most), then stop the listener.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  int port = opts_.port;
  if (port == 0) {
    port = svr_.bind_to_any_port(opts_.host);
    if (port < 0) port = 0;
  } else if (!svr_.bind_to_port(opts_.host, port)) {
    port = 0;
  }
  if (port == 0) {
    std::fprintf(stderr, "kestrel serve: cannot listen on %s:%d\n", opts_.host.c_str(), opts_.port);
    return 1;
  }
  std::printf("kestrel serve: listening on http://%s:%d\n", opts_.host.c_str(), port);
  std::fflush(stdout);
  std::atomic<bool> stopped{false};
  std::thread sig([&] {
    int signo = 0;
    while (!stopped) {
      timespec ts{0, 200 * 1000 * 1000};
      signo = sigtimedwait(&set, nullptr, &ts);
      if (signo == SIGINT || signo == SIGTERM) break;
    }
    if (stopped) return;
    std::fprintf(stderr, "kestrel serve: signal %d, draining %d request(s)\n", signo, active_.load());
    draining_ = true;
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (active_ > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    svr_.stop();
  });
  svr_.listen_after_bind();
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
