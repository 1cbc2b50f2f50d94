// One multi-turn conversation over a context: renders the whole conversation with the chat
// template each turn, keeps the KV cache of what was already processed and decodes only the
// tokens after the longest common prefix (normally just the new turn). With tools, each reply is
// split by the template's family (kestrel_reply_parser) into reasoning, content and tool calls; a
// forced tool_choice holds the sampler to the family's call grammar.
#pragma once
#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel.hpp"

namespace kestrel::cli {

struct ChatTurnStats {
  int32_t prompt_tokens = 0;  // the rendered conversation, in tokens
  int32_t cached_tokens = 0;  // of those, already in the KV cache
  int32_t new_tokens = 0;     // processed this turn (prompt_tokens - cached_tokens)
  int32_t generated = 0;      // reply tokens
  double prompt_s = 0, gen_s = 0;
  bool interrupted = false;   // stopped by the caller (Ctrl-C)
  bool truncated = false;     // stopped by the token limit or a full context
  int32_t dropped_messages = 0;  // oldest turns left out so the conversation fits the context
  nlohmann::ordered_json tool_calls = nlohmann::ordered_json::array();  // OpenAI's shape, arguments as text
};

struct ChatTools {
  std::string tools_json;             // a JSON array of OpenAI tools; "" for none
  std::string tool_choice = "auto";   // "auto", "none", "required" or a function's name
};

// Reply text as it streams: reasoning (true) or content (false).
using ChatTextFn = std::function<void(std::string_view text, bool reasoning)>;

class ChatSession {
 public:
  // template_source empty: the model's own template (or the documented fallback).
  // Throws kestrel::Error when the tools are not a JSON array of tools.
  ChatSession(kestrel_model* model, kestrel_context* ctx, const kestrel_sampler_options& sampling,
              std::string template_source, int32_t max_reply_tokens, ChatTools tools = {});
  void set_system(std::string text);
  // Adds the user's message, streams the reply through on_text and records it. `stop` is polled
  // between tokens. Throws kestrel::Error on failures (the conversation is left as before).
  ChatTurnStats reply(const std::string& user, const ChatTextFn& on_text, const std::atomic<bool>& stop);
  // Answers the oldest tool call still open with `result`; once none is open, the model replies
  // (nullopt while calls are still open). Throws kestrel::Error when no call is open.
  std::optional<ChatTurnStats> tool_result(const std::string& result, const ChatTextFn& on_text,
                                           const std::atomic<bool>& stop);
  size_t open_tool_calls() const { return open_calls_.size(); }
  // Forgets the conversation (the system message stays) and clears the cache.
  void reset();
  // The conversation as OpenAI-style messages, the system message first (what /save writes).
  nlohmann::ordered_json conversation() const;
  // Replaces the conversation with `messages` (a leading system message becomes the system
  // text); the KV cache keeps whatever prefix still matches. Throws kestrel::Error naming what is
  // wrong when they are not an array of {"role", "content"} objects.
  void load(const nlohmann::ordered_json& messages);
  // Sampling and the reply limit for the next turns (/set).
  void set_sampling(const kestrel_sampler_options& sampling);
  void set_max_reply_tokens(int32_t n) { max_reply_tokens_ = n; }
  int32_t max_reply_tokens() const { return max_reply_tokens_; }
  size_t cached_tokens() const { return cached_.size(); }

 private:
  std::string render() const;  // the conversation through the template (chat_tokenize it)
  int32_t sync_cache(const std::vector<kestrel_token>& prompt);  // returns tokens reused
  ReplyParserPtr make_parser(const std::string& prompt) const;  // tools only
  // Generates the assistant's reply to the conversation; messages_[keep..) is dropped on failure.
  ChatTurnStats respond(size_t keep, const ChatTextFn& on_text, const std::atomic<bool>& stop);

  kestrel_model* model_;
  kestrel_context* ctx_;
  SamplerPtr sampler_;
  std::string template_source_;
  int32_t max_reply_tokens_;
  std::string system_;
  nlohmann::ordered_json messages_ = nlohmann::ordered_json::array();
  std::vector<kestrel_token> cached_;  // exactly what the KV cache holds, positions 0..n-1
  ChatTools tools_;
  nlohmann::ordered_json open_calls_ = nlohmann::ordered_json::array();  // the last reply's unanswered calls
};

}  // namespace kestrel::cli
