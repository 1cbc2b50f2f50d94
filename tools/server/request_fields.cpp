// The field readers every request parser of `kestrel serve` shares (openai_request.cpp,
// anthropic_request.cpp): each wrong type or value is an ApiError naming the field.
#include "server/request_fields.h"

#include <cmath>
#include <cstdio>

namespace kestrel::server {

namespace {
constexpr size_t kMaxStops = 16;
constexpr size_t kMaxStopBytes = 1024;  // each stop string is matched against held-back text per token
constexpr size_t kMaxEchoBytes = 200;   // of a client string quoted in an error message
}  // namespace

ApiError bad(const std::string& param, const std::string& message) {
  ApiError e;
  e.param = param;
  e.message = message;
  return e;
}

std::string quote(const std::string& key) { return "'" + key + "'"; }
// A client string quoted in an error message: cut short (json_text replaces invalid UTF-8).
std::string echoed(const std::string& s) { return s.size() > kMaxEchoBytes ? s.substr(0, kMaxEchoBytes) + "..." : s; }

// The member `key`, or null when absent (OpenAI treats null as "not given").
const json& member(const json& obj, const char* key) {
  static const json kNull;
  const auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

static std::string range_text(double lo, double hi) {
  auto fmt = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  return "[" + fmt(lo) + ", " + fmt(hi) + "]";
}

// A number field in [lo, hi], if present.
std::optional<ApiError> number(const json& b, const char* key, double lo, double hi, float* out) {
  const json& v = member(b, key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_number()) return bad(key, quote(key) + " must be a number");
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) return bad(key, quote(key) + " must be in " + range_text(lo, hi));
  *out = static_cast<float>(d);
  return std::nullopt;
}

// An integer field in [lo, hi], if present: JSON integers, or numbers with an integral value
// (1e3, 10.0). Unsigned values beyond int64 are out of range, not wrapped.
std::optional<ApiError> integer(const json& b, const char* key, int64_t lo, int64_t hi, std::optional<int64_t>* out) {
  const json& v = member(b, key);
  if (v.is_null()) return std::nullopt;
  const std::string range = quote(key) + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return bad(key, range);
    x = static_cast<int64_t>(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || d < -9.2e18 || d > 9.2e18) return bad(key, range);
    x = static_cast<int64_t>(d);
  } else {
    return bad(key, range);
  }
  if (x < lo || x > hi) return bad(key, range);
  *out = x;
  return std::nullopt;
}

std::optional<ApiError> boolean(const json& b, const char* key, bool* out) {
  const json& v = member(b, key);
  if (v.is_null()) return std::nullopt;
  if (!v.is_boolean()) return bad(key, quote(key) + " must be a boolean");
  *out = v.get<bool>();
  return std::nullopt;
}

std::optional<ApiError> parse_stop(const json& s, const std::string& key, std::vector<std::string>* out) {
  if (s.is_null()) return std::nullopt;
  const std::string shape = quote(key) + " must be a string or an array of at most 16 strings";
  std::vector<const json*> items;
  if (s.is_string()) {
    items.push_back(&s);
  } else if (s.is_array() && s.size() <= kMaxStops) {
    for (const json& x : s) items.push_back(&x);
  } else {
    return bad(key, shape);
  }
  for (const json* x : items) {
    if (!x->is_string()) return bad(key, shape);
    const std::string& text = x->get_ref<const std::string&>();
    if (text.size() > kMaxStopBytes)
      return bad(key, quote(key) + " strings must be at most " + std::to_string(kMaxStopBytes) + " bytes");
    if (text.find('\0') != std::string::npos) return bad(key, quote(key) + " strings must not contain NUL");
    if (!text.empty()) out->push_back(text);  // an empty stop string stops nothing
  }
  return std::nullopt;
}

std::optional<ApiError> check_model(const json& b, const std::string& model_id) {
  const json& m = member(b, "model");
  if (m.is_null()) return std::nullopt;  // lenient for curl users; OpenAI clients always send it
  if (!m.is_string()) return bad("model", "'model' must be a string");
  const std::string& name = m.get_ref<const std::string&>();
  if (name == model_id) return std::nullopt;
  const std::string shown = echoed(name);
  ApiError e = bad("model", "The model '" + shown + "' does not exist (this server serves '" + model_id + "')");
  e.http = 404;
  e.code = "model_not_found";
  return e;
}

// A content part array -> its text. Only text parts are supported; others are refused by type.
std::optional<ApiError> flatten_parts(const json& parts, const std::string& where, std::string* text) {
  for (size_t j = 0; j < parts.size(); ++j) {
    const json& part = parts[j];
    const std::string at = where + "[" + std::to_string(j) + "]";
    if (!part.is_object()) return bad(at, at + " must be an object with a 'type'");
    const json& type = member(part, "type");
    if (!type.is_string()) return bad(at + ".type", at + ".type must be a string");
    const std::string& t = type.get_ref<const std::string&>();
    if (t != "text") {
      const std::string shown = echoed(t);
      return bad(at + ".type", at + ": content parts of type '" + shown + "' are not supported (only 'text')");
    }
    const json& v = member(part, "text");
    if (!v.is_string()) return bad(at + ".text", at + ".text must be a string");
    *text += v.get_ref<const std::string&>();
  }
  return std::nullopt;
}

ApiError internal_error(const char* what, const std::exception& x) {
  std::fprintf(stderr, "kestrel serve: internal error parsing %s: %s\n", what, x.what());
  return status_error(500, "internal error");
}

}  // namespace kestrel::server
