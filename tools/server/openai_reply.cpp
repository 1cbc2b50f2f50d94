#include "server/openai_reply.h"

#include <cmath>

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
std::string chunk(const ReplyMeta& m, json delta_or_text, json finish, json logprobs = nullptr) {
  json c = {{"index", m.index}, {"finish_reason", std::move(finish)}, {"logprobs", std::move(logprobs)}};
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

json usage_json(const std::vector<kestrel_request_result>& choices) {
  kestrel_request_result sum = choices.at(0);
  for (size_t i = 1; i < choices.size(); ++i) sum.n_generated += choices[i].n_generated;
  return usage_json(sum);
}

json completion_choice(const ReplyMeta& m, const std::string& text, const char* finish, const json& logprobs) {
  json choice = {{"index", m.index}, {"finish_reason", finish}, {"logprobs", logprobs}};
  if (m.chat) choice["message"] = {{"role", "assistant"}, {"content", text}};
  else choice["text"] = text;
  return choice;
}

json chat_choice(const ReplyMeta& m, const json& message, const char* finish, const json& logprobs) {
  json msg = {{"role", "assistant"}, {"content", message.value("content", "")}};
  if (message.contains("reasoning_content")) msg["reasoning_content"] = message["reasoning_content"];
  if (message.contains("tool_calls")) {
    msg["tool_calls"] = message["tool_calls"];
    for (json& c : msg["tool_calls"]) c.erase("index");  // streamed deltas have it, messages not
    if (msg["content"] == "") msg["content"] = nullptr;
  }
  return {{"index", m.index}, {"finish_reason", finish}, {"logprobs", logprobs}, {"message", std::move(msg)}};
}

std::string reply_text(const ReplyMeta& m, json choices, json usage) {
  json out = envelope(m, m.chat ? "chat.completion" : "text_completion", std::move(choices));
  out["usage"] = std::move(usage);
  return json_text(out);
}

std::string completion_text(const ReplyMeta& m, const std::string& text, const kestrel_request_result& r,
                            const json& logprobs) {
  return reply_text(m, json::array({completion_choice(m, text, finish_reason_text(r.finish), logprobs)}), usage_json(r));
}

std::string sse_delta(const ReplyMeta& m, const json& delta, const json& logprobs) {
  return chunk(m, delta, nullptr, logprobs);
}

std::string sse_finish(const ReplyMeta& m, const char* finish) {
  return chunk(m, m.chat ? json::object() : json(""), finish);
}

std::string sse_role(const ReplyMeta& m) { return chunk(m, {{"role", "assistant"}, {"content", ""}}, nullptr); }

std::string sse_text(const ReplyMeta& m, const std::string& text, const json& logprobs) {
  return chunk(m, m.chat ? json{{"content", text}} : json(text), nullptr, logprobs);
}

namespace {

// A token's raw bytes (possibly part of a UTF-8 character).
std::string piece_of(const kestrel_model* model, kestrel_token t) {
  char buf[256];
  size_t len = 0;
  if (kestrel_token_to_piece(model, t, false, buf, sizeof buf, &len) == KESTREL_OK) return std::string(buf, len);
  std::string big(len + 1, '\0');
  if (kestrel_token_to_piece(model, t, false, big.data(), big.size(), &len) != KESTREL_OK) return "";
  big.resize(len);
  return big;
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (const char c : s) b.push_back(static_cast<unsigned char>(c));
  return b;
}

// OpenAI writes -9999 for a probability too small to represent.
double finite(float lp) { return std::isfinite(lp) ? lp : -9999.0; }

}  // namespace

json logprobs_json(const ReplyMeta& m, const kestrel_model* model, const std::vector<TokenLogprobs>& tokens,
                   size_t* offset) {
  if (tokens.empty()) return nullptr;
  if (m.chat) {
    json content = json::array();
    for (const TokenLogprobs& t : tokens) {
      const std::string piece = piece_of(model, t.token);
      json top = json::array();
      for (const kestrel_token_logprob& a : t.top) {
        const std::string p = piece_of(model, a.token);
        top.push_back({{"token", p}, {"logprob", finite(a.logprob)}, {"bytes", bytes_of(p)}});
      }
      content.push_back(
          {{"token", piece}, {"logprob", finite(t.logprob)}, {"bytes", bytes_of(piece)}, {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json out = {{"tokens", json::array()}, {"token_logprobs", json::array()}, {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (const TokenLogprobs& t : tokens) {
    const std::string piece = piece_of(model, t.token);
    out["tokens"].push_back(piece);
    out["token_logprobs"].push_back(finite(t.logprob));
    json top = json::object();
    for (const kestrel_token_logprob& a : t.top) top[piece_of(model, a.token)] = finite(a.logprob);
    out["top_logprobs"].push_back(std::move(top));
    out["text_offset"].push_back(*offset);
    *offset += piece.size();
  }
  return out;
}

std::string sse_finish(const ReplyMeta& m, kestrel_finish_reason finish) { return sse_finish(m, finish_reason_text(finish)); }

std::string sse_usage(const ReplyMeta& m, const kestrel_request_result& r) { return sse_usage(m, usage_json(r)); }

std::string sse_usage(const ReplyMeta& m, const json& usage) {
  json j = envelope(m, chunk_object(m), json::array());
  j["usage"] = usage;
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
