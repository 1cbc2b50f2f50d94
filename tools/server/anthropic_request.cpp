#include "server/anthropic_request.h"

#include <algorithm>
#include <random>

#include "server/request_fields.h"

namespace kestrel::server {
namespace {

using ojson = nlohmann::ordered_json;

std::string at(const std::string& where, size_t i) { return where + "[" + std::to_string(i) + "]"; }

// A string, or an array of text blocks, as text.
std::optional<ApiError> text_of(const json& v, const std::string& where, std::string* out) {
  if (v.is_string()) {
    *out = v.get<std::string>();
    return std::nullopt;
  }
  if (!v.is_array()) return bad(where, where + " must be a string or an array of text blocks");
  return flatten_parts(v, where, out);
}

// One message's content blocks into OpenAI-style messages (appended to *out).
std::optional<ApiError> convert_message(const json& m, const std::string& where, json* out) {
  if (!m.is_object()) return bad(where, where + " must be an object with 'role' and 'content'");
  const json& role = member(m, "role");
  if (role != "user" && role != "assistant") return bad(where + ".role", where + ".role must be \"user\" or \"assistant\"");
  for (const auto& [key, value] : m.items())
    if (key != "role" && key != "content") return bad(where + "." + echoed(key), where + " has no field " + quote(echoed(key)));
  const json& content = member(m, "content");
  if (content.is_string()) {
    out->push_back({{"role", role}, {"content", content}});
    return std::nullopt;
  }
  if (!content.is_array()) return bad(where + ".content", where + ".content must be a string or an array of blocks");
  std::string text, thinking;
  json calls = json::array();
  size_t results = 0;
  // The fields each block type may have (cache_control: the prefix cache shares prompts anyway).
  static const std::vector<std::pair<std::string, std::vector<std::string>>> kFields = {
      {"text", {"type", "text", "cache_control"}},
      {"thinking", {"type", "thinking", "signature"}},
      {"tool_use", {"type", "id", "name", "input", "cache_control"}},
      {"tool_result", {"type", "tool_use_id", "content", "is_error", "cache_control"}}};
  for (size_t i = 0; i < content.size(); ++i) {
    const json& b = content[i];
    const std::string w = at(where + ".content", i);
    const json& type = member(b, "type");
    if (!b.is_object() || !type.is_string()) return bad(w, w + " must be an object with a string 'type'");
    const std::string t = type.get<std::string>();
    for (const auto& [name, fields] : kFields)
      if (name == t)
        for (const auto& [key, value] : b.items())
          if (std::find(fields.begin(), fields.end(), key) == fields.end())
            return bad(w + "." + echoed(key), w + " has no field " + quote(echoed(key)));
    if (t == "text") {
      if (!member(b, "text").is_string()) return bad(w + ".text", w + ".text must be a string");
      text += b["text"].get<std::string>();
    } else if (t == "thinking" && role == "assistant") {
      if (!member(b, "thinking").is_string()) return bad(w + ".thinking", w + ".thinking must be a string");
      thinking += b["thinking"].get<std::string>();
    } else if (t == "tool_use" && role == "assistant") {
      if (!member(b, "id").is_string() || !member(b, "name").is_string() || !member(b, "input").is_object())
        return bad(w, w + " must have a string 'id', a string 'name' and an object 'input'");
      calls.push_back({{"id", b["id"]}, {"type", "function"}, {"function", {{"name", b["name"]}, {"arguments", b["input"]}}}});
    } else if (t == "tool_result" && role == "user") {
      if (!member(b, "tool_use_id").is_string()) return bad(w + ".tool_use_id", w + ".tool_use_id must be a string");
      std::string result;
      if (!member(b, "content").is_null())
        if (auto e = text_of(b["content"], w + ".content", &result)) return e;
      if (member(b, "is_error") == true) result = "Error: " + result;
      ++results;
      out->push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", result}});
    } else {
      return bad(w + ".type", w + ": blocks of type '" + echoed(t) + "' are not supported in " + role.get<std::string>() +
                                  " messages (text, tool_use, tool_result, thinking)");
    }
  }
  if (role == "user") {  // its tool results went first, as their own messages
    if (!text.empty() || results == 0) out->push_back({{"role", "user"}, {"content", text}});
    return std::nullopt;
  }
  json a = {{"role", "assistant"}, {"content", calls.empty() || !text.empty() ? json(text) : json(nullptr)}};
  if (!thinking.empty()) a["reasoning_content"] = thinking;
  if (!calls.empty()) a["tool_calls"] = std::move(calls);
  out->push_back(std::move(a));
  return std::nullopt;
}

// tools (Anthropic: name, description, input_schema) into OpenAI's function tools, key order kept.
std::optional<ApiError> convert_tools(std::string_view body, GenRequest* out) {
  const ojson all = ojson::parse(body);
  const ojson& tools = all["tools"];
  if (!tools.is_array()) return bad("tools", "'tools' must be an array");
  ojson converted = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const std::string w = at("tools", i);
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
      return bad(w, w + " must be an object with a string 'name' and an 'input_schema'");
    if (t.contains("type") && t["type"] != "custom")
      return bad(w + ".type", w + ": server tools ('" + echoed(t["type"].dump()) + "') are not supported, only custom tools");
    for (const auto& [key, value] : t.items())
      if (key != "name" && key != "description" && key != "input_schema" && key != "type" && key != "cache_control")
        return bad(w + "." + echoed(key), w + " has no field " + quote(echoed(key)));
    if (!t.contains("input_schema") || !t["input_schema"].is_object())
      return bad(w + ".input_schema", w + ".input_schema must be an object (a JSON Schema)");
    ojson f = {{"name", t["name"]}, {"parameters", t["input_schema"]}};
    if (t.contains("description")) f["description"] = t["description"];
    converted.push_back({{"type", "function"}, {"function", std::move(f)}});
  }
  if (!converted.empty()) out->tools_json = converted.dump(-1, ' ', false, ojson::error_handler_t::replace);
  return std::nullopt;
}

std::optional<ApiError> convert_tool_choice(const json& c, GenRequest* out) {
  if (c.is_null()) return std::nullopt;
  const json& type = member(c, "type");
  if (!c.is_object() || !type.is_string()) return bad("tool_choice", "'tool_choice' must be an object with a 'type'");
  const std::string t = type.get<std::string>();
  if (t == "auto") out->tool_choice = "auto";
  else if (t == "any") out->tool_choice = "required";
  else if (t == "none") out->tool_choice = "none";
  else if (t == "tool" && member(c, "name").is_string()) out->tool_choice = c["name"].get<std::string>();
  else return bad("tool_choice.type", "'tool_choice.type' must be auto, any, none, or tool (with a 'name')");
  bool one_call = false;
  if (auto e = boolean(c, "disable_parallel_tool_use", &one_call)) return e;
  out->parallel_tool_calls = !one_call;
  if (out->tool_choice != "auto" && out->tool_choice != "none" && out->tools_json.empty())
    return bad("tool_choice", "'tool_choice' of type '" + t + "' needs 'tools'");
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_messages_request(std::string_view body, const RequestEnv& env, bool count_tokens,
                                               GenRequest* out) {
  try {
    json b;
    if (auto e = parse_json_body(body, env.limits, &b)) return e;
    if (auto e = check_model(b, env.model_id)) return e;
    static const std::vector<std::string> kCount = {"model", "messages", "system", "tools", "tool_choice", "thinking"};
    static const std::vector<std::string> kMore = {"max_tokens", "stop_sequences", "temperature", "top_p", "top_k",
                                                   "stream", "metadata"};
    for (const auto& [key, value] : b.items()) {
      bool known = std::find(kCount.begin(), kCount.end(), key) != kCount.end();
      known = known || (!count_tokens && std::find(kMore.begin(), kMore.end(), key) != kMore.end());
      if (!known) return bad(echoed(key), quote(echoed(key)) + " is not a field this server implements");
    }
    GenRequest r;
    r.chat = true;
    GenParams& p = r.params;
    kestrel_sampler_options_init(&p.sampling);
    p.sampling.temperature = 1.0f;  // Anthropic's defaults: temperature 1, no nucleus or top-k
    p.sampling.top_p = 1.0f;
    p.sampling.top_k = 0;
    p.sampling.min_p = 0.0f;
    p.sampling.seed = std::random_device{}();
    if (!count_tokens) {
      std::optional<int64_t> v;
      if (member(b, "max_tokens").is_null()) return bad("max_tokens", "'max_tokens' is required");
      if (auto e = integer(b, "max_tokens", 1, 1 << 20, &v)) return e;
      p.max_tokens = static_cast<int32_t>(*v);
      if (auto e = number(b, "temperature", 0, 1, &p.sampling.temperature)) return e;
      if (auto e = number(b, "top_p", 0, 1, &p.sampling.top_p)) return e;
      v.reset();
      if (auto e = integer(b, "top_k", 0, 1 << 20, &v)) return e;
      if (v) p.sampling.top_k = static_cast<int32_t>(*v);
      if (auto e = boolean(b, "stream", &p.stream)) return e;
      if (auto e = parse_stop(member(b, "stop_sequences"), "stop_sequences", &p.stop)) return e;
      const json& md = member(b, "metadata");  // a caller tag (user_id): changes nothing by definition
      if (!md.is_null() && !md.is_object()) return bad("metadata", "'metadata' must be an object");
    }
    json messages = json::array();
    const json& system = member(b, "system");
    if (!system.is_null()) {
      std::string text;
      if (auto e = text_of(system, "system", &text)) return e;
      messages.push_back({{"role", "system"}, {"content", text}});
    }
    const json& ms = member(b, "messages");
    if (!ms.is_array() || ms.empty()) return bad("messages", "'messages' must be a non-empty array");
    if (ms.size() > env.limits.max_messages)
      return bad("messages", "'messages' has more entries than the server's limit (--max-messages)");
    for (size_t i = 0; i < ms.size(); ++i)
      if (auto e = convert_message(ms[i], at("messages", i), &messages)) return e;
    r.messages_json = json_text(messages);
    if (!member(b, "tools").is_null())
      if (auto e = convert_tools(body, &r)) return e;
    if (auto e = convert_tool_choice(member(b, "tool_choice"), &r)) return e;
    const json& thinking = member(b, "thinking");
    if (!thinking.is_null()) {
      const json& t = member(thinking, "type");
      if (t == "enabled") {
        std::optional<int64_t> budget;
        if (auto e = integer(thinking, "budget_tokens", 1024, 1 << 20, &budget)) return bad("thinking.budget_tokens", e->message);
        if (!budget) return bad("thinking.budget_tokens", "'thinking.budget_tokens' is required (at least 1024)");
        if (!count_tokens && *budget >= p.max_tokens)
          return bad("thinking.budget_tokens", "'thinking.budget_tokens' must be less than 'max_tokens'");
        r.extra_context_json = R"({"enable_thinking": true})";
      } else if (t == "disabled") {
        r.extra_context_json = R"({"enable_thinking": false})";
      } else {
        return bad("thinking.type", "'thinking.type' must be \"enabled\" or \"disabled\"");
      }
    }
    *out = std::move(r);
    return std::nullopt;
  } catch (const std::exception& x) {
    return internal_error("a /v1/messages request", x);
  }
}

}  // namespace kestrel::server
