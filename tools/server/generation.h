// One generation request between the engine and the HTTP side of `kestrel serve`: its prompt
// (chat template, tokenize), submitting it, and the output the engine's callbacks leave for the reply.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "kestrel.h"
#include "server/openai_api.h"
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
  bool done = false;
  kestrel_request_result result{};
  std::atomic<bool> client_gone{false};  // the next token callback cancels

  // The client went away: stop generating (on_done still comes).
  void cancel();
  void wait_done();
  bool is_done();
};

// A request ready for the engine: what the client asked for and its prompt tokens.
struct PreparedRequest {
  GenRequest req;
  std::vector<kestrel_token> prompt;
};

// Renders the chat template (chat) or takes the prompt, and tokenizes it (kestrel_chat_tokenize
// for a rendered chat: one BOS). A refusal is an ApiError (400 naming messages or prompt).
std::optional<ApiError> prompt_tokens(const kestrel_model* model, const GenRequest& req,
                                      std::vector<kestrel_token>* tokens);

// Submits the prompt to the engine. On success *out is running; every refusal is an ApiError
// (400, 503 when shutting down).
std::optional<ApiError> start_generation(kestrel_engine* engine, const PreparedRequest& prepared,
                                         std::shared_ptr<Generation>* out);

}  // namespace kestrel::server
