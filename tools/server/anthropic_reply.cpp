#include "server/anthropic_reply.h"

namespace kestrel::server {
namespace {

// Anthropic's error type for an HTTP status.
const char* error_type(int http) {
  switch (http) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return http >= 500 ? "api_error" : "invalid_request_error";
  }
}

// Tool call ids as Anthropic writes them (toolu_...).
std::string tool_use_id(const std::string& id) { return id.rfind("call_", 0) == 0 ? "toolu_" + id.substr(5) : id; }

json tool_input(const json& call) {
  const json args = json::parse(call["function"].value("arguments", "{}"), nullptr, false);
  return args.is_object() ? args : json::object();
}

const char* stop_reason(const kestrel_request_result& r, bool called_tools) {
  if (called_tools) return "tool_use";
  if (r.finish == KESTREL_FINISH_LENGTH) return "max_tokens";
  return r.stop_string >= 0 ? "stop_sequence" : "end_turn";
}

json stop_sequence(const AnthropicMeta& m, const kestrel_request_result& r) {
  if (r.stop_string < 0 || static_cast<size_t>(r.stop_string) >= m.stops.size()) return nullptr;
  return m.stops[static_cast<size_t>(r.stop_string)];
}

std::string event(const char* type, const json& data) { return std::string("event: ") + type + "\ndata: " + json_text(data) + "\n\n"; }

class AnthropicFormat final : public StreamFormat {
 public:
  explicit AnthropicFormat(AnthropicMeta m) : m_(std::move(m)) {}

  std::string start(const ReplyMeta&) override {
    const json msg = {{"id", m_.id},           {"type", "message"},       {"role", "assistant"},
                      {"model", m_.model},     {"content", json::array()}, {"stop_reason", nullptr},
                      {"stop_sequence", nullptr}, {"usage", {{"input_tokens", m_.n_prompt}, {"output_tokens", 0}}}};
    return event("message_start", {{"type", "message_start"}, {"message", msg}});
  }

  std::string delta(const ReplyMeta&, const json& d, const json&) override {
    // (Each block is opened before its delta is written: index_ is the open block's.)
    std::string out;
    if (d.contains("reasoning_content")) {
      out += open("thinking", {{"type", "thinking"}, {"thinking", ""}});
      out += block_delta({{"type", "thinking_delta"}, {"thinking", d["reasoning_content"]}});
    }
    if (d.contains("content")) {
      out += open("text", {{"type", "text"}, {"text", ""}});
      out += block_delta({{"type", "text_delta"}, {"text", d["content"]}});
    }
    for (const json& c : d.value("tool_calls", json::array())) {
      out += open("tool_use", {{"type", "tool_use"}, {"id", tool_use_id(c.value("id", ""))}, {"name", c["function"]["name"]},
                               {"input", json::object()}});
      out += block_delta({{"type", "input_json_delta"}, {"partial_json", tool_input(c).dump()}});
      out += close();
    }
    return out;
  }

  std::string finish(const ReplyMeta&, const kestrel_request_result& r, bool called_tools) override {
    std::string out = close();
    return out +
           event("message_delta", {{"type", "message_delta"},
                                   {"delta", {{"stop_reason", stop_reason(r, called_tools)}, {"stop_sequence", stop_sequence(m_, r)}}},
                                   {"usage", {{"output_tokens", r.n_generated}}}}) +
           event("message_stop", {{"type", "message_stop"}});
  }

  std::string end(const ReplyMeta&, const std::vector<kestrel_request_result>&) override { return ""; }

  std::string error(const ApiError& e) override { return "event: error\ndata: " + anthropic_error_text(e) + "\n\n"; }

 private:
  // Opens a block of `type` unless one is open already (closing another kind first).
  std::string open(const std::string& type, const json& block) {
    if (open_ == type && type != "tool_use") return "";
    std::string out = close();
    index_ = next_++;
    open_ = type;
    return out + event("content_block_start", {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
  }
  std::string block_delta(const json& delta) const {
    return event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", delta}});
  }
  std::string close() {
    if (open_.empty()) return "";
    open_.clear();
    return event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
  }

  AnthropicMeta m_;
  std::string open_;  // the open block's type; "" when none
  int index_ = -1, next_ = 0;
};

}  // namespace

std::string anthropic_error_text(const ApiError& e) {
  return json_text({{"type", "error"}, {"error", {{"type", error_type(e.http)}, {"message", e.message}}}});
}

std::string anthropic_message_text(const AnthropicMeta& m, const json& reply, const kestrel_request_result& r,
                                   bool called_tools) {
  json content = json::array();
  if (reply.contains("reasoning_content"))
    content.push_back({{"type", "thinking"}, {"thinking", reply["reasoning_content"]}, {"signature", ""}});
  if (!reply.value("content", "").empty() || (!reply.contains("tool_calls") && !reply.contains("reasoning_content")))
    content.push_back({{"type", "text"}, {"text", reply.value("content", "")}});
  for (const json& c : reply.value("tool_calls", json::array()))
    content.push_back({{"type", "tool_use"}, {"id", tool_use_id(c.value("id", ""))}, {"name", c["function"]["name"]},
                       {"input", tool_input(c)}});
  return json_text({{"id", m.id},
                    {"type", "message"},
                    {"role", "assistant"},
                    {"model", m.model},
                    {"content", std::move(content)},
                    {"stop_reason", stop_reason(r, called_tools)},
                    {"stop_sequence", stop_sequence(m, r)},
                    {"usage", {{"input_tokens", r.n_prompt}, {"output_tokens", r.n_generated},
                               {"cache_read_input_tokens", r.n_cached}}}});
}

std::shared_ptr<StreamFormat> anthropic_stream_format(AnthropicMeta m) { return std::make_shared<AnthropicFormat>(std::move(m)); }

}  // namespace kestrel::server
