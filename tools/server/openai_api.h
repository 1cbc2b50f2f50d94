// The JSON edges of `kestrel serve`: the OpenAI-style error object, request bodies parsed under
// limits (nesting depth checked while parsing, so a deep document costs no recursion anywhere
// later), and json_text, the one way the server turns JSON into text (invalid UTF-8 becomes
// U+FFFD instead of an exception).
#pragma once
#include <nlohmann/json.hpp>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace kestrel::server {

using nlohmann::json;

struct ApiError {
  int http = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, if any
  std::string code;
};
// {"error":{"message","type","param","code"}} (param and code null when empty).
json error_body(const ApiError& e);
// error_body as text; never throws.
std::string error_text(const ApiError& e);
// An ApiError for a status the HTTP layer or the server decides (401, 404, 413, 500, ...).
ApiError status_error(int http, const std::string& message);

// Serializes compactly; invalid UTF-8 in strings becomes U+FFFD. Never throws.
std::string json_text(const json& j);

// The limits on a request's JSON, checked before any work (`kestrel serve` flags).
struct JsonLimits {
  int max_depth = 64;          // --max-json-depth: arrays/objects nested (the body itself is 1)
  size_t max_messages = 4096;  // --max-messages: entries of a chat request's 'messages'
  int max_n = 8;               // --max-n: choices one request may ask for ('n')
};

// Parses a request body that must be a JSON object nested at most limits.max_depth deep.
std::optional<ApiError> parse_json_body(std::string_view body, const JsonLimits& limits, json* out);

}  // namespace kestrel::server
