#include "server/openai_reply.h"

namespace kestrel::server {

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

namespace {

json envelope(const ReplyMeta& m, const char* object, json choices) {
  return {{"id", m.id}, {"object", object}, {"created", m.created}, {"model", m.model}, {"choices", std::move(choices)}};
}

const char* chunk_object(const ReplyMeta& m) { return m.chat ? "chat.completion.chunk" : "text_completion"; }

std::string event(const json& j) { return "data: " + json_text(j) + "\n\n"; }

// One streamed choice: chat sends a delta object, completions the text itself.
std::string chunk(const ReplyMeta& m, json delta_or_text, json finish) {
  json c = {{"index", 0}, {"finish_reason", std::move(finish)}, {"logprobs", nullptr}};
  c[m.chat ? "delta" : "text"] = std::move(delta_or_text);
  return event(envelope(m, chunk_object(m), json::array({std::move(c)})));
}

// Bytes a UTF-8 sequence starting with lead byte c has, or 0 if c cannot start one.
size_t sequence_length(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

}  // namespace

std::string completion_text(const ReplyMeta& m, const std::string& text, const kestrel_request_result& r) {
  json choice = {{"index", 0}, {"finish_reason", finish_reason_text(r.finish)}, {"logprobs", nullptr}};
  if (m.chat) choice["message"] = {{"role", "assistant"}, {"content", text}};
  else choice["text"] = text;
  json out = envelope(m, m.chat ? "chat.completion" : "text_completion", json::array({std::move(choice)}));
  out["usage"] = usage_json(r);
  return json_text(out);
}

std::string chat_message_text(const ReplyMeta& m, const json& message, const char* finish,
                              const kestrel_request_result& r) {
  json msg = {{"role", "assistant"}, {"content", message.value("content", "")}};
  if (message.contains("reasoning_content")) msg["reasoning_content"] = message["reasoning_content"];
  if (message.contains("tool_calls")) {
    msg["tool_calls"] = message["tool_calls"];
    for (json& c : msg["tool_calls"]) c.erase("index");  // streamed deltas have it, messages not
    if (msg["content"] == "") msg["content"] = nullptr;
  }
  json choice = {{"index", 0}, {"finish_reason", finish}, {"logprobs", nullptr}, {"message", std::move(msg)}};
  json out = envelope(m, "chat.completion", json::array({std::move(choice)}));
  out["usage"] = usage_json(r);
  return json_text(out);
}

std::string sse_delta(const ReplyMeta& m, const json& delta) { return chunk(m, delta, nullptr); }

std::string sse_finish(const ReplyMeta& m, const char* finish) {
  return chunk(m, m.chat ? json::object() : json(""), finish);
}

std::string sse_role(const ReplyMeta& m) { return chunk(m, {{"role", "assistant"}, {"content", ""}}, nullptr); }

std::string sse_text(const ReplyMeta& m, const std::string& text) {
  return chunk(m, m.chat ? json{{"content", text}} : json(text), nullptr);
}

std::string sse_finish(const ReplyMeta& m, kestrel_finish_reason finish) { return sse_finish(m, finish_reason_text(finish)); }

std::string sse_usage(const ReplyMeta& m, const kestrel_request_result& r) {
  json j = envelope(m, chunk_object(m), json::array());
  j["usage"] = usage_json(r);
  return event(j);
}

std::string sse_error(const ApiError& e) { return event(error_body(e)); }

std::string Utf8Holder::push(std::string_view piece) {
  std::string s = std::move(held_);
  held_.clear();
  s.append(piece);
  // The last lead byte within 3 bytes of the end: if its sequence is cut short (and what follows
  // it are continuation bytes), hold it back.
  for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
    const auto c = static_cast<unsigned char>(s[s.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    if (sequence_length(c) > back) held_ = s.substr(s.size() - back);
    break;
  }
  s.resize(s.size() - held_.size());
  return s;
}

std::string Utf8Holder::finish() {
  const bool any = !held_.empty();
  held_.clear();
  return any ? "\xEF\xBF\xBD" : "";
}

}  // namespace kestrel::server
