// The requests of `kestrel serve`, parsed from the raw body into plain structs with no model and
// no engine involved (so the fuzzer and the unit tests call exactly what the server calls):
// /v1/chat/completions, /v1/completions, /tokenize, /detokenize. Every wrong type, value or
// unsupported feature is an ApiError (400, naming the field); nothing here throws.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel.h"
#include "server/openai_api.h"

namespace kestrel::server {

// What a request is checked against.
struct RequestEnv {
  JsonLimits limits;
  int32_t n_vocab = 0;   // bounds logit_bias and /detokenize ids
  std::string model_id;  // the only 'model' accepted (when a request names one)
  int32_t n_embd = 0;    // bounds an embedding's 'dimensions'
};

struct GenParams {
  int32_t max_tokens = 256;
  kestrel_sampler_options sampling{};
  std::vector<kestrel_token> bias_tokens;
  std::vector<float> bias_values;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Constrained decoding (response_format json_object / json_schema, or llama.cpp's "grammar"):
  // at most one is set; the library compiles it at submit (an unsupported keyword: 400).
  std::string grammar;
  std::string json_schema;
  // logprobs: -1 off; else the token's log-probability and this many alternatives (chat's
  // logprobs + top_logprobs, completions' logprobs: N).
  int32_t top_logprobs = -1;
  // Choices (n): choice i samples with seed + i; the server's --max-n caps it.
  int32_t n = 1;
};

inline constexpr int kMaxTopLogprobs = 20;

struct GenRequest {
  bool chat = false;
  std::string messages_json;  // chat: the array kestrel_chat_format reads (content parts flattened)
  std::string prompt;         // completions
  GenParams params;
  // Chat replies (kestrel_reply_parser): tools ("" none), tool_choice ("auto", "none",
  // "required" or a function's name), parallel_tool_calls, and reasoning_format "none" (reasoning
  // kept in content) against the default (reasoning_content).
  std::string tools_json;
  std::string tool_choice = "auto";
  bool parallel_tool_calls = true;
  bool reasoning_inline = false;
  std::string extra_context_json;  // more chat template variables (Anthropic's thinking: enable_thinking)
};

// /v1/embeddings: texts (or token-id lists) to embed.
struct EmbeddingsRequest {
  std::vector<std::string> texts;               // input as text
  std::vector<std::vector<kestrel_token>> ids;  // or as token ids (one of the two is filled)
  bool base64 = false;                          // encoding_format
  int32_t dimensions = 0;                       // 0: the model's n_embd
};
inline constexpr size_t kMaxEmbeddingInputs = 2048;  // OpenAI's limit

struct TokenizeRequest {
  std::string content;
  bool add_special = false;
  bool parse_special = true;
};

struct DetokenizeRequest {
  std::vector<kestrel_token> tokens;
};

std::optional<ApiError> parse_generation_request(std::string_view body, bool chat, const RequestEnv& env,
                                                 GenRequest* out);
std::optional<ApiError> parse_tokenize_request(std::string_view body, const RequestEnv& env, TokenizeRequest* out);
std::optional<ApiError> parse_embeddings_request(std::string_view body, const RequestEnv& env, EmbeddingsRequest* out);
std::optional<ApiError> parse_detokenize_request(std::string_view body, const RequestEnv& env,
                                                 DetokenizeRequest* out);

// The pieces of parse_generation_request, for tests.
std::optional<ApiError> parse_gen_params(const json& body, int32_t n_vocab, GenParams* out);
std::optional<ApiError> parse_messages(const json& body, const JsonLimits& limits, std::string* messages_json);
std::optional<ApiError> parse_logprobs(const json& body, bool chat, GenParams* out);
std::optional<ApiError> parse_tools(const json& body, std::string_view text, bool chat, GenRequest* out);

}  // namespace kestrel::server
