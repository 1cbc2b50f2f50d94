// The field readers every request parser of `kestrel serve` shares (OpenAI's and Anthropic's):
// each wrong type or value is an ApiError naming the field; none throws on client input.
#pragma once
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "server/openai_api.h"

namespace kestrel::server {

ApiError bad(const std::string& param, const std::string& message);
std::string quote(const std::string& key);  // 'key'
// A client string quoted in an error message: cut short (json_text replaces invalid UTF-8).
std::string echoed(const std::string& s);
// The member `key`, or null when absent (null counts as "not given").
const json& member(const json& obj, const char* key);
// A number field in [lo, hi], if present.
std::optional<ApiError> number(const json& b, const char* key, double lo, double hi, float* out);
// An integer field in [lo, hi], if present: JSON integers, or numbers with an integral value.
std::optional<ApiError> integer(const json& b, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out);
std::optional<ApiError> boolean(const json& b, const char* key, bool* out);
// A string or an array of at most 16 strings (each at most 1 KiB, no NUL); empty ones dropped.
std::optional<ApiError> parse_stop(const json& s, const std::string& key, std::vector<std::string>* out);
// 'model' absent or the served one (404 model_not_found otherwise).
std::optional<ApiError> check_model(const json& b, const std::string& model_id);
// A content part array -> its text; parts other than text are refused by type.
std::optional<ApiError> flatten_parts(const json& parts, const std::string& where, std::string* text);
// A bug in a parser (a type not checked): logged, and a clean 500.
ApiError internal_error(const char* what, const std::exception& x);

}  // namespace kestrel::server
