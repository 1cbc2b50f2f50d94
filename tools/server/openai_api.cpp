#include "server/openai_api.h"

namespace kestrel::server {

json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

std::string error_text(const ApiError& e) { return json_text(error_body(e)); }

ApiError status_error(int http, const std::string& message) {
  ApiError e;
  e.http = http;
  e.message = message;
  if (http >= 500) e.type = "server_error";
  if (http == 401) e.code = "invalid_api_key";
  if (http == 429) e.code = "rate_limit_exceeded";
  return e;
}

std::string json_text(const json& j) {
  try {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
  } catch (...) {  // replace leaves nothing to throw but allocation; keep the promise anyway
    return R"({"error":{"message":"internal error","type":"server_error","param":null,"code":null}})";
  }
}

namespace {

// Thrown by the parser callback to stop at the first container past the limit.
struct TooDeep {};

// nlohmann's messages start with "[json.exception.parse_error.101] ": a library detail.
std::string without_library_prefix(const std::string& what) {
  if (what.rfind("[json.exception.", 0) == 0) {
    const size_t end = what.find("] ");
    if (end != std::string::npos) return what.substr(end + 2);
  }
  return what;
}

}  // namespace

std::optional<ApiError> parse_json_body(std::string_view body, const JsonLimits& limits, json* out) {
  const int max_depth = limits.max_depth;
  // depth is the number of containers around the one starting, so the body object starts at 0.
  const json::parser_callback_t cb = [max_depth](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= max_depth)
      throw TooDeep{};
    return true;
  };
  try {
    *out = json::parse(body.begin(), body.end(), cb);
  } catch (const TooDeep&) {
    ApiError e = status_error(400, "The JSON body is nested more than " + std::to_string(max_depth) +
                                       " levels deep (the server's --max-json-depth)");
    e.code = "json_too_deep";
    return e;
  } catch (const json::exception& x) {
    return status_error(400, "Invalid JSON body: " + without_library_prefix(x.what()));
  }
  if (!out->is_object()) return status_error(400, "The request body must be a JSON object");
  return std::nullopt;
}

}  // namespace kestrel::server
