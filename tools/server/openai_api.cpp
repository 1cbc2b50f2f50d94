#include "server/openai_api.h"

#include <cmath>
#include <random>

namespace kestrel::server {

json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

namespace {

ApiError bad(const std::string& param, const std::string& message) {
  ApiError e;
  e.param = param;
  e.message = message;
  return e;
}

// A number field in [lo, hi], if present (null counts as absent).
std::optional<ApiError> number(const json& b, const char* key, double lo, double hi, float* out) {
  if (!b.contains(key) || b[key].is_null()) return std::nullopt;
  if (!b[key].is_number()) return bad(key, std::string("'") + key + "' must be a number");
  const double v = b[key].get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    return bad(key, std::string("'") + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  *out = static_cast<float>(v);
  return std::nullopt;
}

std::optional<ApiError> integer(const json& b, const char* key, int64_t lo, int64_t hi, int64_t* out) {
  if (!b.contains(key) || b[key].is_null()) return std::nullopt;
  if (!b[key].is_number_integer()) return bad(key, std::string("'") + key + "' must be an integer");
  const int64_t v = b[key].get<int64_t>();
  if (v < lo || v > hi)
    return bad(key, std::string("'") + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  *out = v;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_gen_params(const json& b, int32_t n_vocab, GenParams* out) {
  GenParams p;
  kestrel_sampler_options_init(&p.sampling);
  // OpenAI's defaults: temperature 1, nucleus off; no top-k / min-p unless asked.
  p.sampling.temperature = 1.0f;
  p.sampling.top_p = 1.0f;
  p.sampling.top_k = 0;
  p.sampling.min_p = 0.0f;
  p.sampling.seed = std::random_device{}();
  std::optional<ApiError> e;
  if ((e = number(b, "temperature", 0, 2, &p.sampling.temperature))) return e;
  if ((e = number(b, "top_p", 0, 1, &p.sampling.top_p))) return e;
  if ((e = number(b, "min_p", 0, 1, &p.sampling.min_p))) return e;
  if ((e = number(b, "presence_penalty", -2, 2, &p.sampling.presence_penalty))) return e;
  if ((e = number(b, "frequency_penalty", -2, 2, &p.sampling.frequency_penalty))) return e;
  if ((e = number(b, "repeat_penalty", 0.01, 10, &p.sampling.repeat_penalty))) return e;
  int64_t v = 0;
  if ((e = integer(b, "top_k", 0, 1 << 20, &v))) return e;
  if (b.contains("top_k") && !b["top_k"].is_null()) p.sampling.top_k = static_cast<int32_t>(v);
  if ((e = integer(b, "seed", INT64_MIN, INT64_MAX, &v))) return e;
  if (b.contains("seed") && !b["seed"].is_null()) p.sampling.seed = static_cast<uint64_t>(v);
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    v = 0;
    if ((e = integer(b, key, 1, 1 << 20, &v))) return e;
    if (v > 0) p.max_tokens = static_cast<int32_t>(v);
  }
  v = 1;
  if ((e = integer(b, "n", 1, 1, &v))) return bad("n", "only n = 1 is supported");
  if (b.contains("stream") && !b["stream"].is_null()) {
    if (!b["stream"].is_boolean()) return bad("stream", "'stream' must be a boolean");
    p.stream = b["stream"].get<bool>();
  }
  if (b.contains("stream_options") && b["stream_options"].is_object())
    p.include_usage = b["stream_options"].value("include_usage", false);
  if (b.contains("stop") && !b["stop"].is_null()) {
    const json& s = b["stop"];
    if (s.is_string()) {
      p.stop.push_back(s.get<std::string>());
    } else if (s.is_array() && s.size() <= 16) {
      for (const json& x : s) {
        if (!x.is_string()) return bad("stop", "'stop' must be a string or an array of strings");
        p.stop.push_back(x.get<std::string>());
      }
    } else {
      return bad("stop", "'stop' must be a string or an array of at most 16 strings");
    }
  }
  if (b.contains("logit_bias") && !b["logit_bias"].is_null()) {
    if (!b["logit_bias"].is_object()) return bad("logit_bias", "'logit_bias' must be an object of token id -> bias");
    for (const auto& [k, val] : b["logit_bias"].items()) {
      char* end = nullptr;
      const long id = std::strtol(k.c_str(), &end, 10);
      if (k.empty() || *end || id < 0 || id >= n_vocab)
        return bad("logit_bias", "'logit_bias' key '" + k + "' is not a token id in [0, " + std::to_string(n_vocab) + ")");
      if (!val.is_number() || val.get<double>() < -100 || val.get<double>() > 100)
        return bad("logit_bias", "'logit_bias' values must be numbers in [-100, 100]");
      p.bias_tokens.push_back(static_cast<kestrel_token>(id));
      p.bias_values.push_back(val.get<double>() <= -100 ? -INFINITY : static_cast<float>(val.get<double>()));
    }
  }
  *out = std::move(p);
  return std::nullopt;
}

std::optional<ApiError> parse_messages(const json& b, std::string* messages_json) {
  if (!b.contains("messages")) return bad("messages", "'messages' is required");
  const json& m = b["messages"];
  if (!m.is_array() || m.empty()) return bad("messages", "'messages' must be a non-empty array");
  json out = json::array();
  for (size_t i = 0; i < m.size(); ++i) {
    const json& msg = m[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string())
      return bad(where, where + " must be an object with a string 'role'");
    json o = msg;
    if (msg.contains("content") && msg["content"].is_array()) {  // content parts: keep the text ones
      std::string text;
      for (const json& part : msg["content"])
        if (part.is_object() && part.value("type", "") == "text" && part.contains("text") && part["text"].is_string())
          text += part["text"].get<std::string>();
      o["content"] = text;
    } else if (msg.contains("content") && !msg["content"].is_string() && !msg["content"].is_null()) {
      return bad(where + ".content", where + ".content must be a string or an array of content parts");
    }
    out.push_back(std::move(o));
  }
  *messages_json = out.dump();
  return std::nullopt;
}

const char* finish_reason_text(kestrel_finish_reason r) {
  switch (r) {
    case KESTREL_FINISH_LENGTH: return "length";
    default: return "stop";
  }
}

json usage_json(const kestrel_request_result& r) {
  return {{"prompt_tokens", r.n_prompt},
          {"completion_tokens", r.n_generated},
          {"total_tokens", r.n_prompt + r.n_generated},
          {"prompt_tokens_details", {{"cached_tokens", r.n_cached}}}};
}

}  // namespace kestrel::server
