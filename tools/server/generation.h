// One generation request between the engine and the HTTP side of `kestrel serve`: its prompt
// (chat template, tokenize), submitting it, and the output the engine's callbacks leave for the reply.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kestrel.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/openai_reply.h"
#include "server/openai_request.h"

namespace kestrel::server {

// Filled by the engine's worker thread, drained by the HTTP worker. The engine's callbacks hold
// a reference until on_done, so it outlives the request whatever the HTTP side does.
struct Generation {
  kestrel_engine* engine = nullptr;
  uint64_t id = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> pieces;  // text not taken yet
  std::deque<TokenLogprobs> logprobs;  // per token, not taken yet (requests that ask for them)
  int32_t top_logprobs = -1;           // -1: no logprobs
  const kestrel_model* model = nullptr;
  std::vector<float> row;              // the logits of the token on_piece gets next
  bool done = false;
  kestrel_request_result result{};
  bool started = false;  // the first token came (the prompt is in the KV cache)
  std::atomic<bool> client_gone{false};  // the next token callback cancels
  // For /metrics and the request log: the latencies are observed by the engine's callbacks.
  std::shared_ptr<ServerMetrics> metrics;   // null: nothing observed
  std::chrono::steady_clock::time_point arrival, last_token;  // last_token: the engine's thread only
  int32_t n_prompt = 0;
  std::atomic<int32_t> n_tokens{0};  // tokens generated so far

  // The client went away: stop generating (on_done still comes).
  void cancel();
  void wait_done();
  bool is_done();
};

// A chat reply split as it arrives into content, reasoning_content and tool_calls deltas
// (kestrel_reply_parser: the chat template's family, the request's tools and tool_choice).
class ReplySplitter {
 public:
  explicit ReplySplitter(kestrel_reply_parser* p) : p_(p) {}
  ~ReplySplitter() { kestrel_reply_parser_free(p_); }
  ReplySplitter(const ReplySplitter&) = delete;
  ReplySplitter& operator=(const ReplySplitter&) = delete;
  // What `text` adds (final: the reply is whole): an object with content, reasoning_content
  // and tool_calls where they changed; empty when nothing did.
  json push(std::string_view text, bool final);
  bool called_tools() const { return called_; }
  const kestrel_reply_parser* parser() const { return p_; }

 private:
  kestrel_reply_parser* p_;
  bool called_ = false;
};

// A request ready for the engine: what the client asked for and its prompt tokens.
struct PreparedRequest {
  GenRequest req;
  std::vector<kestrel_token> prompt;
  std::vector<std::shared_ptr<ReplySplitter>> splitters;  // chat: one per choice; completions: none
  std::chrono::steady_clock::time_point arrival{};  // when the request arrived (latencies count from it)
};

// Renders the chat template (chat, with the tools) or takes the prompt, and tokenizes it
// (kestrel_chat_tokenize for a rendered chat: one BOS); for chat, the reply's splitter and the
// grammar a forced tool call needs. A refusal is an ApiError (400 naming messages, prompt, tools).
std::optional<ApiError> prepare_prompt(const kestrel_model* model, PreparedRequest* out);

// Submits the prompt to the engine as choice `index` (its seed: the request's + index). On
// success *out is running; every refusal is an ApiError (400, 503 when shutting down). Its time to
// first token, inter-token latencies, end-to-end latency and finish reason go to `metrics` (if set).
std::optional<ApiError> start_generation(kestrel_engine* engine, const kestrel_model* model,
                                         const PreparedRequest& prepared, int index, std::shared_ptr<Generation>* out,
                                         std::shared_ptr<ServerMetrics> metrics = nullptr);

}  // namespace kestrel::server
