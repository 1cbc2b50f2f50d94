#include "server/generation.h"

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "kestrel.hpp"

namespace kestrel::server {

void Generation::cancel() {
  client_gone = true;
  kestrel_cancel(engine, id);  // ERR_OUT_OF_RANGE when it has just finished: nothing to do
}

void Generation::wait_done() {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
}

bool Generation::is_done() {
  std::lock_guard<std::mutex> lock(mu);
  return done;
}

namespace {

// The engine's callbacks get a heap shared_ptr as `user`: a reference released by on_done.
Generation* of(void* user) { return static_cast<std::shared_ptr<Generation>*>(user)->get(); }

// logprobs: the row each token is sampled from comes just before the token (on_piece).
void on_logits(const float* logits, int32_t n_vocab, void* user) {
  Generation* g = of(user);
  g->row.assign(logits, logits + n_vocab);
}

using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool on_piece(kestrel_token t, const char* piece, size_t len, void* user) {
  Generation* g = of(user);
  if (t >= 0) {  // a token (-1: the text held back for stop strings, at the end)
    const Clock::time_point now = Clock::now();
    if (g->metrics && g->n_tokens == 0) g->metrics->ttft.observe(seconds(now - g->arrival));
    if (g->metrics && g->n_tokens > 0) g->metrics->itl.observe(seconds(now - g->last_token));
    g->last_token = now;
    ++g->n_tokens;
  }
  TokenLogprobs lp;
  const bool with_logprobs = g->top_logprobs >= 0 && t >= 0 && !g->row.empty() && !kestrel_model_token_is_eog(g->model, t);
  if (with_logprobs) {
    lp.token = t;
    lp.top.resize(static_cast<size_t>(g->top_logprobs));
    kestrel_logprobs(g->row.data(), static_cast<int32_t>(g->row.size()), t, &lp.logprob, lp.top.data(), g->top_logprobs);
    g->row.clear();
  }
  std::lock_guard<std::mutex> lock(g->mu);
  g->started = true;
  if (with_logprobs) g->logprobs.push_back(std::move(lp));
  if (len > 0) g->pieces.emplace_back(piece, len);
  g->cv.notify_all();
  return !g->client_gone;
}

void on_finished(const kestrel_request_result* r, void* user) {
  auto* ref = static_cast<std::shared_ptr<Generation>*>(user);
  {
    Generation* g = ref->get();
    if (g->metrics) {
      g->metrics->count_finish(r->finish);
      g->metrics->e2e.observe(seconds(Clock::now() - g->arrival));
      // Requests cancelled while still waiting were never admitted: no queue time to count.
      if (r->struct_size >= offsetof(kestrel_request_result, queue_s) + sizeof r->queue_s &&
          (r->queue_s > 0 || r->n_generated > 0))
        g->metrics->queue.observe(r->queue_s);
    }
    std::lock_guard<std::mutex> lock(g->mu);
    g->result = *r;
    g->done = true;
    g->cv.notify_all();
  }
  delete ref;
}

ApiError library_error(int http, const std::string& param) {
  ApiError e = status_error(http, kestrel_last_error());
  e.param = param;
  return e;
}

std::optional<ApiError> render_chat(const kestrel_model* model, const GenRequest& req, std::string* prompt) {
  kestrel_chat_options co;
  kestrel_chat_options_init(&co);
  co.add_generation_prompt = true;
  co.tools_json = req.tools_json.empty() ? nullptr : req.tools_json.c_str();
  co.extra_context_json = req.extra_context_json.empty() ? nullptr : req.extra_context_json.c_str();
  const std::string& messages = req.messages_json;
  size_t len = 0;
  kestrel_status st = kestrel_chat_format(model, messages.c_str(), &co, nullptr, 0, &len);
  if (st == KESTREL_ERR_BUFFER_TOO_SMALL || st == KESTREL_OK) {
    prompt->resize(len + 1);
    st = kestrel_chat_format(model, messages.c_str(), &co, prompt->data(), prompt->size(), &len);
    prompt->resize(st == KESTREL_OK ? len : 0);
  }
  if (st == KESTREL_OK) return std::nullopt;
  if (st == KESTREL_ERR_INTERNAL) {
    std::fprintf(stderr, "kestrel serve: chat template: %s\n", kestrel_last_error());
    return status_error(500, "internal error");
  }
  return library_error(400, "messages");
}

// A splitter per choice: each parses its own reply; the engine takes each parser's marker
// tokens and, when a tool call is forced, its grammar (kestrel_request.reply).
std::optional<ApiError> make_splitter(const kestrel_model* model, const std::string& prompt, PreparedRequest* out) {
  GenRequest& req = out->req;
  kestrel_chat_options co;
  kestrel_chat_options_init(&co);
  co.tools_json = req.tools_json.empty() ? nullptr : req.tools_json.c_str();
  uint32_t flags = req.parallel_tool_calls ? KESTREL_REPLY_PARALLEL_TOOLS : 0;
  if (req.reasoning_inline) flags |= KESTREL_REPLY_REASONING_INLINE;
  kestrel_reply_parser* p = nullptr;
  const kestrel_status st = kestrel_reply_parser_new(model, &co, prompt.c_str(), req.tool_choice.c_str(), flags, &p);
  if (st != KESTREL_OK)
    return library_error(400, std::string(kestrel_last_error()).find("tool_choice") != std::string::npos ? "tool_choice" : "tools");
  out->splitters.push_back(std::make_shared<ReplySplitter>(p));
  for (int i = 1; i < req.params.n; ++i) {
    if (kestrel_reply_parser_new(model, &co, prompt.c_str(), req.tool_choice.c_str(), flags, &p) != KESTREL_OK)
      return library_error(500, "");
    out->splitters.push_back(std::make_shared<ReplySplitter>(p));
  }
  return std::nullopt;
}

}  // namespace

json ReplySplitter::push(std::string_view text, bool final) {
  size_t len = 0;
  std::string out(256, '\0');
  kestrel_status st = kestrel_reply_parser_push(p_, text.data(), text.size(), final, out.data(), out.size(), &len);
  if (st == KESTREL_ERR_BUFFER_TOO_SMALL) {  // the delta waits in the parser
    out.resize(len + 1);
    st = kestrel_reply_parser_push(p_, nullptr, 0, false, out.data(), out.size(), &len);
  }
  if (st != KESTREL_OK) throw std::runtime_error(std::string("reply parser: ") + kestrel_last_error());
  out.resize(len);
  json d = json::parse(out);
  if (d.contains("tool_calls")) called_ = true;
  return d;
}

std::optional<ApiError> prepare_prompt(const kestrel_model* model, PreparedRequest* out) {
  const GenRequest& req = out->req;
  std::vector<kestrel_token>* tokens = &out->prompt;
  std::string rendered;
  if (req.chat) {
    if (auto e = render_chat(model, req, &rendered)) return e;
    if (auto e = make_splitter(model, rendered, out)) return e;
  }
  try {
    // A rendered template holds special-token text (<|im_start|>..., often BOS); a raw prompt is plain text.
    *tokens = req.chat ? chat_tokenize(model, rendered) : tokenize(model, req.prompt, true, false);
  } catch (const Error& e) {
    ApiError a = status_error(400, e.what());
    a.param = req.chat ? "messages" : "prompt";
    return a;
  }
  if (tokens->empty()) {
    ApiError a = status_error(400, "The prompt is empty");
    a.param = "prompt";
    return a;
  }
  return std::nullopt;
}

std::optional<ApiError> start_generation(kestrel_engine* engine, const kestrel_model* model,
                                         const PreparedRequest& prepared, int index, std::shared_ptr<Generation>* out,
                                         std::shared_ptr<ServerMetrics> metrics) {
  const GenRequest& req = prepared.req;
  const std::vector<kestrel_token>& tokens = prepared.prompt;
  GenParams gp = req.params;
  gp.sampling.seed += static_cast<uint64_t>(index);
  std::vector<const char*> stops;
  for (const auto& s : gp.stop) stops.push_back(s.c_str());
  gp.sampling.logit_bias_tokens = gp.bias_tokens.data();
  gp.sampling.logit_bias_values = gp.bias_values.data();
  gp.sampling.n_logit_bias = static_cast<int32_t>(gp.bias_tokens.size());
  auto g = std::make_shared<Generation>();
  g->engine = engine;
  g->model = model;
  g->top_logprobs = gp.top_logprobs;
  g->metrics = std::move(metrics);
  g->arrival = prepared.arrival == Clock::time_point{} ? Clock::now() : prepared.arrival;
  g->n_prompt = static_cast<int32_t>(tokens.size());
  auto* ref = new std::shared_ptr<Generation>(g);  // the engine's reference, released by on_done
  kestrel_request r;
  kestrel_request_init(&r);
  r.prompt = tokens.data();
  r.n_prompt = static_cast<int32_t>(tokens.size());
  r.max_tokens = gp.max_tokens;
  r.sampling = &gp.sampling;
  r.stop_strings = stops.data();
  r.n_stop_strings = static_cast<int32_t>(stops.size());
  r.grammar = gp.grammar.empty() ? nullptr : gp.grammar.c_str();
  r.json_schema = gp.json_schema.empty() ? nullptr : gp.json_schema.c_str();
  r.reply = prepared.splitters.empty() ? nullptr : prepared.splitters[static_cast<size_t>(index)]->parser();
  r.on_token = on_piece;
  if (gp.top_logprobs >= 0) r.on_logits = on_logits;
  r.on_done = on_finished;
  r.user = ref;
  // g->id is read only by this thread's callers (to cancel), never by the engine's callbacks.
  const kestrel_status st = kestrel_submit(engine, &r, &g->id);
  if (st == KESTREL_OK) {
    *out = std::move(g);
    return std::nullopt;
  }
  delete ref;  // on_done never comes for a refused request
  switch (st) {
    case KESTREL_ERR_CONTEXT_FULL: {
      ApiError e = library_error(400, req.chat ? "messages" : "prompt");
      e.code = "context_length_exceeded";
      return e;
    }
    case KESTREL_ERR_CANCELLED: return status_error(503, "The server is shutting down");
    case KESTREL_ERR_INVALID_ARGUMENT:
    case KESTREL_ERR_OUT_OF_RANGE: return library_error(400, "");
    case KESTREL_ERR_UNSUPPORTED:  // a schema keyword the grammar cannot enforce: refused, never ignored
      return library_error(400, gp.json_schema.empty() ? "grammar" : "response_format");
    default:
      std::fprintf(stderr, "kestrel serve: submit failed: %s: %s\n", kestrel_status_name(st), kestrel_last_error());
      return status_error(st == KESTREL_ERR_OUT_OF_MEMORY ? 503 : 500,
                          st == KESTREL_ERR_OUT_OF_MEMORY ? "The server is out of memory; try again later" : "internal error");
  }
}

}  // namespace kestrel::server
