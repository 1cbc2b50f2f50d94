// The OpenAI-compatible request and response shapes of `kestrel serve`: parsing the JSON of
// /v1/completions and /v1/chat/completions into generation parameters (with OpenAI-style errors
// for wrong types and values) and building the response objects and stream chunks.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kestrel.h"

namespace kestrel::server {

using nlohmann::json;

struct ApiError {
  int http = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, if any
  std::string code;
};
json error_body(const ApiError& e);

struct GenParams {
  int32_t max_tokens = 256;
  kestrel_sampler_options sampling{};
  std::vector<kestrel_token> bias_tokens;
  std::vector<float> bias_values;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// The fields both endpoints share (model checked by the caller). n_vocab bounds logit_bias ids.
std::optional<ApiError> parse_gen_params(const json& body, int32_t n_vocab, GenParams* out);
// messages -> the JSON array kestrel_chat_format reads (content parts flattened to text).
std::optional<ApiError> parse_messages(const json& body, std::string* messages_json);

const char* finish_reason_text(kestrel_finish_reason r);
json usage_json(const kestrel_request_result& r);

}  // namespace kestrel::server
