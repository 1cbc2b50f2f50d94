#include "server/openai_request.h"

#include "server/request_fields.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <random>

namespace kestrel::server {
namespace {

// OpenAI fields this server does not implement: accepted only when absent, null or at the value
// that turns them off, otherwise refused by name (never silently ignored).
std::optional<ApiError> refuse_unsupported(const json& b) {
  struct Field {
    const char* key;
    std::vector<json> off;
    const char* what;
  };
  static const std::vector<Field> kFields = {
      {"functions", {json::array()}, "the deprecated function calling: use 'tools'"},
      {"function_call", {"none", "auto"}, "the deprecated function calling: use 'tool_choice'"},
      {"echo", {false}, "echoing the prompt"},
      {"suffix", {""}, "insertion (suffix)"},
      {"best_of", {1}, "best_of (only 1)"},
      {"modalities", {json::array({"text"})}, "output modalities other than text"},
      {"audio", {}, "audio output"},
      {"prediction", {}, "predicted outputs"},
      {"store", {false}, "storing replies"},
  };
  for (const Field& f : kFields) {
    const json& v = member(b, f.key);
    if (v.is_null()) continue;
    bool off = false;
    for (const json& o : f.off) off = off || v == o;
    if (!off) return bad(f.key, quote(f.key) + " is not supported by this server (" + f.what + ")");
  }
  // Every other field must be one this server reads, or a caller tag that changes nothing by
  // definition ('user', 'metadata'): anything else is refused by name rather than ignored.
  static const std::vector<std::string> kRead = {
      "model", "messages", "prompt", "temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty",
      "repeat_penalty", "top_k", "seed", "max_tokens", "max_completion_tokens", "n", "stream", "stream_options",
      "stop", "logit_bias", "user", "metadata", "response_format", "grammar", "tools", "tool_choice",
      "parallel_tool_calls", "reasoning_format", "logprobs", "top_logprobs"};
  for (const auto& [key, value] : b.items()) {
    bool known = std::find(kRead.begin(), kRead.end(), key) != kRead.end();
    for (const Field& f : kFields) known = known || key == f.key;
    if (!known) return bad(echoed(key), quote(echoed(key)) + " is not a field this server implements");
  }
  return std::nullopt;
}

// Token id keys ("123") -> bias in [-100, 100]; -100 bans the token. Banning every token leaves
// nothing to sample, so that is refused here rather than failing inside the engine.
std::optional<ApiError> parse_logit_bias(const json& lb, int32_t n_vocab, GenParams* p) {
  if (lb.is_null()) return std::nullopt;
  if (!lb.is_object()) return bad("logit_bias", "'logit_bias' must be an object of token id -> bias");
  std::vector<bool> banned(static_cast<size_t>(std::max(n_vocab, 0)), false);
  size_t n_banned = 0;
  for (const auto& [k, val] : lb.items()) {
    int64_t id = k.empty() || k.size() > 10 ? -1 : 0;
    for (char c : k) id = (id < 0 || c < '0' || c > '9') ? -1 : id * 10 + (c - '0');
    if (id < 0 || id >= n_vocab) {
      const std::string shown = echoed(k);
      return bad("logit_bias", "'logit_bias' key '" + shown + "' is not a token id in [0, " + std::to_string(n_vocab) + ")");
    }
    if (!val.is_number() || !std::isfinite(val.get<double>()) || val.get<double>() < -100 || val.get<double>() > 100)
      return bad("logit_bias", "'logit_bias' values must be numbers in [-100, 100]");
    const double v = val.get<double>();
    p->bias_tokens.push_back(static_cast<kestrel_token>(id));
    p->bias_values.push_back(v <= -100 ? -INFINITY : static_cast<float>(v));
    if (v <= -100 && !banned[static_cast<size_t>(id)]) {
      banned[static_cast<size_t>(id)] = true;
      ++n_banned;
    }
  }
  if (n_vocab > 0 && n_banned == static_cast<size_t>(n_vocab))
    return bad("logit_bias", "'logit_bias' bans every token (-100 for all " + std::to_string(n_vocab) +
                                 "): nothing is left to sample");
  return std::nullopt;
}

// response_format: text (nothing), json_object (any JSON object) or json_schema (its schema, which
// the library compiles at submit); or llama.cpp's "grammar" (GBNF text). Not both. The schema is
// taken from `body` read again with its keys in order: json sorts them, and the reply's
// properties follow the schema's order.
std::optional<ApiError> parse_response_format(const json& b, std::string_view body, GenParams* p) {
  const json& g = member(b, "grammar");
  if (!g.is_null()) {
    if (!g.is_string() || g.get_ref<const std::string&>().empty()) return bad("grammar", "'grammar' must be a non-empty GBNF string");
    p->grammar = g.get<std::string>();
  }
  const json& rf = member(b, "response_format");
  if (rf.is_null()) return std::nullopt;
  const char* shape = "'response_format' must be an object with 'type' \"text\", \"json_object\" or \"json_schema\"";
  if (!rf.is_object() || !member(rf, "type").is_string()) return bad("response_format", shape);
  const std::string type = member(rf, "type").get<std::string>();
  if (type == "text") return std::nullopt;
  if (!p->grammar.empty()) return bad("grammar", "'grammar' and a JSON 'response_format' cannot both be given");
  for (const auto& [k, v] : rf.items())
    if (k != "type" && k != "json_schema")
      return bad("response_format." + echoed(k), "'response_format." + echoed(k) + "' is not a field this server implements");
  if (type == "json_object") {
    p->json_schema = R"({"type": "object"})";
    return std::nullopt;
  }
  if (type != "json_schema") return bad("response_format.type", shape);
  const json& js = member(rf, "json_schema");
  if (!js.is_object()) return bad("response_format.json_schema", "'response_format.json_schema' must be an object with a 'schema'");
  for (const auto& [k, v] : js.items())
    if (k != "name" && k != "schema" && k != "strict" && k != "description")
      return bad("response_format.json_schema." + echoed(k),
                 "'response_format.json_schema." + echoed(k) + "' is not a field this server implements");
  const json& schema = member(js, "schema");
  if (!schema.is_object() && !schema.is_boolean())
    return bad("response_format.json_schema.schema", "'response_format.json_schema.schema' must be a JSON Schema object");
  const json& strict = member(js, "strict");
  if (!strict.is_null() && !strict.is_boolean())
    return bad("response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean");
  // Strict or not, the schema is enforced (or refused).
  p->json_schema = nlohmann::ordered_json::parse(body)["response_format"]["json_schema"]["schema"].dump(
      -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
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
  if ((e = refuse_unsupported(b))) return e;
  if ((e = number(b, "temperature", 0, 2, &p.sampling.temperature))) return e;
  if ((e = number(b, "top_p", 0, 1, &p.sampling.top_p))) return e;
  if ((e = number(b, "min_p", 0, 1, &p.sampling.min_p))) return e;
  if ((e = number(b, "presence_penalty", -2, 2, &p.sampling.presence_penalty))) return e;
  if ((e = number(b, "frequency_penalty", -2, 2, &p.sampling.frequency_penalty))) return e;
  if ((e = number(b, "repeat_penalty", 0.01, 10, &p.sampling.repeat_penalty))) return e;
  std::optional<int64_t> v;
  if ((e = integer(b, "top_k", 0, 1 << 20, &v))) return e;
  if (v) p.sampling.top_k = static_cast<int32_t>(*v);
  // seed: any 64-bit integer, signed or unsigned.
  const json& seed = member(b, "seed");
  if (seed.is_number_unsigned()) {
    p.sampling.seed = seed.get<uint64_t>();
  } else if (!seed.is_null()) {
    v.reset();
    if ((e = integer(b, "seed", INT64_MIN, INT64_MAX, &v))) return e;
    p.sampling.seed = static_cast<uint64_t>(*v);
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {  // the newer name wins
    v.reset();
    if ((e = integer(b, key, 1, 1 << 20, &v))) return e;
    if (v) p.max_tokens = static_cast<int32_t>(*v);
  }
  v.reset();
  if ((e = integer(b, "n", 1, 1 << 20, &v))) return e;
  if (v) p.n = static_cast<int32_t>(*v);
  if ((e = boolean(b, "stream", &p.stream))) return e;
  const json& so = member(b, "stream_options");
  if (!so.is_null()) {
    if (!so.is_object()) return bad("stream_options", "'stream_options' must be an object");
    if ((e = boolean(so, "include_usage", &p.include_usage)))
      return bad("stream_options.include_usage", "'stream_options.include_usage' must be a boolean");
  }
  if ((e = parse_stop(member(b, "stop"), "stop", &p.stop))) return e;
  if ((e = parse_logit_bias(member(b, "logit_bias"), n_vocab, &p))) return e;
  *out = std::move(p);
  return std::nullopt;
}

std::optional<ApiError> parse_messages(const json& b, const JsonLimits& limits, std::string* messages_json) {
  const json& m = member(b, "messages");
  if (m.is_null()) return bad("messages", "'messages' is required");
  if (!m.is_array() || m.empty()) return bad("messages", "'messages' must be a non-empty array");
  if (m.size() > limits.max_messages)
    return bad("messages", "'messages' has " + std::to_string(m.size()) + " entries, more than the server's limit of " +
                               std::to_string(limits.max_messages) + " (--max-messages)");
  json out = json::array();
  for (size_t i = 0; i < m.size(); ++i) {
    const json& msg = m[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object() || !member(msg, "role").is_string())
      return bad(where, where + " must be an object with a string 'role'");
    json o = msg;  // bounded: parse_json_body limited the nesting depth
    const json& content = member(msg, "content");
    if (content.is_array()) {
      std::string text;
      if (auto e = flatten_parts(content, where + ".content", &text)) return e;
      o["content"] = std::move(text);
    } else if (!content.is_string() && !content.is_null()) {
      return bad(where + ".content", where + ".content must be a string or an array of content parts");
    }
    // Earlier tool calls: OpenAI sends arguments as JSON text; templates iterate them as objects.
    if (o.contains("tool_calls") && o["tool_calls"].is_array())
      for (json& c : o["tool_calls"]) {
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object()) continue;
        json& a = c["function"]["arguments"];
        if (!a.is_string()) continue;
        json parsed = json::parse(a.get<std::string>(), nullptr, /*allow_exceptions=*/false);
        if (parsed.is_object()) a = std::move(parsed);
      }
    out.push_back(std::move(o));
  }
  *messages_json = json_text(out);
  return std::nullopt;
}

std::optional<ApiError> parse_tools(const json& b, std::string_view body, bool chat, GenRequest* out) {
  const json& tools = member(b, "tools");
  const json& choice = member(b, "tool_choice");
  const json& format = member(b, "reasoning_format");
  if (!format.is_null()) {
    if (format != "none" && format != "auto" && format != "deepseek")
      return bad("reasoning_format", "'reasoning_format' must be \"auto\", \"deepseek\" (reasoning_content) or \"none\" (kept in content)");
    out->reasoning_inline = format == "none";
  }
  if (auto e = boolean(b, "parallel_tool_calls", &out->parallel_tool_calls)) return e;
  if (!tools.is_null() && !(tools.is_array() && tools.empty())) {
    if (!chat) return bad("tools", "'tools' is for /v1/chat/completions");
    if (!tools.is_array()) return bad("tools", "'tools' must be an array");
    for (size_t i = 0; i < tools.size(); ++i) {
      const json& t = tools[i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!t.is_object() || member(t, "type") != "function" || !member(t, "function").is_object() ||
          !member(t["function"], "name").is_string())
        return bad(at, at + " must be {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": ...}}");
    }
    // In the body's key order: a parameters schema's property order is the order calls write them.
    out->tools_json = nlohmann::ordered_json::parse(body)["tools"].dump(-1, ' ', false,
                                                                         nlohmann::ordered_json::error_handler_t::replace);
  }
  if (choice.is_null()) return std::nullopt;
  if (choice.is_string()) {
    const std::string c = choice.get<std::string>();
    if (c != "auto" && c != "none" && c != "required")
      return bad("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    out->tool_choice = c;
  } else if (choice.is_object() && member(choice, "type") == "function" && member(choice, "function").is_object() &&
             member(choice["function"], "name").is_string()) {
    out->tool_choice = choice["function"]["name"].get<std::string>();
  } else {
    return bad("tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
  }
  if (out->tool_choice != "auto" && out->tool_choice != "none") {
    if (out->tools_json.empty()) return bad("tool_choice", "'tool_choice' \"" + echoed(out->tool_choice) + "\" needs 'tools'");
    if (!out->params.grammar.empty() || !out->params.json_schema.empty())
      return bad("tool_choice", "'tool_choice' that forces a call cannot be combined with 'response_format' or 'grammar'");
  }
  return std::nullopt;
}

std::optional<ApiError> parse_logprobs(const json& b, bool chat, GenParams* out) {
  const json& lp = member(b, "logprobs");
  const json& top = member(b, "top_logprobs");
  std::optional<int64_t> v;
  if (chat) {  // logprobs: bool; top_logprobs: 0..20, only with logprobs
    bool on = false;
    if (auto e = boolean(b, "logprobs", &on)) return e;
    if (auto e = integer(b, "top_logprobs", 0, kMaxTopLogprobs, &v)) return e;
    if (v && !on) return bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    out->top_logprobs = on ? static_cast<int32_t>(v.value_or(0)) : -1;
    return std::nullopt;
  }
  if (!top.is_null()) return bad("top_logprobs", "'top_logprobs' is for chat; completions take 'logprobs': N");
  if (lp.is_boolean() && !lp.get<bool>()) return std::nullopt;
  if (auto e = integer(b, "logprobs", 0, 5, &v)) return e;  // completions: the number of alternatives
  if (v) out->top_logprobs = static_cast<int32_t>(*v);
  return std::nullopt;
}

std::optional<ApiError> parse_generation_request(std::string_view body, bool chat, const RequestEnv& env,
                                                 GenRequest* out) {
  try {
    json b;
    if (auto e = parse_json_body(body, env.limits, &b)) return e;
    if (auto e = check_model(b, env.model_id)) return e;
    GenRequest r;
    r.chat = chat;
    if (auto e = parse_gen_params(b, env.n_vocab, &r.params)) return e;
    if (auto e = parse_response_format(b, body, &r.params)) return e;
    if (auto e = parse_tools(b, body, chat, &r)) return e;
    if (auto e = parse_logprobs(b, chat, &r.params)) return e;
    if (r.params.n > env.limits.max_n)
      return bad("n", "'n' is " + std::to_string(r.params.n) + ", more than this server's limit of " +
                          std::to_string(env.limits.max_n) + " (--max-n)");
    if (chat) {
      if (auto e = parse_messages(b, env.limits, &r.messages_json)) return e;
    } else {
      const json& p = member(b, "prompt");
      const bool one = p.is_array() && p.size() == 1 && p[0].is_string();  // ["text"] is "text"
      if (!p.is_string() && !one)
        return bad("prompt", "'prompt' must be a string (arrays of prompts and token-id prompts are not supported)");
      r.prompt = one ? p[0].get<std::string>() : p.get<std::string>();
    }
    *out = std::move(r);
    return std::nullopt;
  } catch (const std::exception& x) {  // a bug above (a type we did not check): still a clean reply
    return internal_error("a generation request", x);
  }
}

std::optional<ApiError> parse_embeddings_request(std::string_view body, const RequestEnv& env, EmbeddingsRequest* out) {
  try {
    json b;
    if (auto e = parse_json_body(body, env.limits, &b)) return e;
    if (auto e = check_model(b, env.model_id)) return e;
    for (const auto& [key, value] : b.items())
      if (key != "model" && key != "input" && key != "encoding_format" && key != "dimensions" && key != "user")
        return bad(echoed(key), quote(echoed(key)) + " is not a field /v1/embeddings implements");
    EmbeddingsRequest r;
    const json& in = member(b, "input");
    const char* shape = "'input' must be a string, an array of strings, an array of token ids or an array of such arrays";
    auto ids_of = [&](const json& a, std::vector<kestrel_token>* ids) -> std::optional<ApiError> {
      for (const json& x : a) {
        const bool ok = x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() < env.n_vocab;
        if (!ok) return bad("input", "'input' token ids must be in [0, " + std::to_string(env.n_vocab) + ")");
        ids->push_back(static_cast<kestrel_token>(x.get<int64_t>()));
      }
      return std::nullopt;
    };
    if (in.is_string()) {
      r.texts.push_back(in.get<std::string>());
    } else if (in.is_array() && !in.empty() && in.size() <= kMaxEmbeddingInputs) {
      if (in[0].is_string()) {
        for (const json& x : in) {
          if (!x.is_string()) return bad("input", shape);
          r.texts.push_back(x.get<std::string>());
        }
      } else if (in[0].is_number()) {
        r.ids.emplace_back();
        if (auto e = ids_of(in, &r.ids.back())) return e;
      } else {
        for (const json& x : in) {
          if (!x.is_array()) return bad("input", shape);
          r.ids.emplace_back();
          if (auto e = ids_of(x, &r.ids.back())) return e;
        }
      }
    } else {
      return bad("input", in.is_array() ? "'input' must hold 1 to " + std::to_string(kMaxEmbeddingInputs) + " inputs" : shape);
    }
    for (const std::string& t : r.texts)
      if (t.empty()) return bad("input", "'input' must not hold an empty string");
    for (const auto& ids : r.ids)
      if (ids.empty()) return bad("input", "'input' must not hold an empty token list");
    const json& f = member(b, "encoding_format");
    if (!f.is_null() && f != "float" && f != "base64") return bad("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
    r.base64 = f == "base64";
    std::optional<int64_t> d;
    if (auto e = integer(b, "dimensions", 1, std::max(env.n_embd, 1), &d)) return e;
    r.dimensions = d ? static_cast<int32_t>(*d) : 0;
    *out = std::move(r);
    return std::nullopt;
  } catch (const std::exception& x) {
    return internal_error("a /v1/embeddings request", x);
  }
}

std::optional<ApiError> parse_tokenize_request(std::string_view body, const RequestEnv& env, TokenizeRequest* out) {
  try {
    json b;
    if (auto e = parse_json_body(body, env.limits, &b)) return e;
    TokenizeRequest r;
    const json& c = member(b, "content");
    if (!c.is_string()) return bad("content", "'content' must be a string");
    r.content = c.get<std::string>();
    if (auto e = boolean(b, "add_special", &r.add_special)) return e;
    if (auto e = boolean(b, "parse_special", &r.parse_special)) return e;
    *out = std::move(r);
    return std::nullopt;
  } catch (const std::exception& x) {
    return internal_error("a /tokenize request", x);
  }
}

std::optional<ApiError> parse_detokenize_request(std::string_view body, const RequestEnv& env,
                                                 DetokenizeRequest* out) {
  try {
    json b;
    if (auto e = parse_json_body(body, env.limits, &b)) return e;
    const json& t = member(b, "tokens");
    if (!t.is_array()) return bad("tokens", "'tokens' must be an array of token ids");
    DetokenizeRequest r;
    r.tokens.reserve(t.size());
    for (const json& x : t) {
      const bool ok = (x.is_number_unsigned() && x.get<uint64_t>() < static_cast<uint64_t>(std::max(env.n_vocab, 0))) ||
                      (x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() < env.n_vocab);
      if (!ok) return bad("tokens", "'tokens' must hold token ids in [0, " + std::to_string(env.n_vocab) + ")");
      r.tokens.push_back(static_cast<kestrel_token>(x.get<int64_t>()));
    }
    *out = std::move(r);
    return std::nullopt;
  } catch (const std::exception& x) {
    return internal_error("a /detokenize request", x);
  }
}

}  // namespace kestrel::server
