// The OpenAI response objects of `kestrel serve` as text: a whole completion and the server-sent
// events of a streamed one (data: {chunk}\n\n ... data: [DONE]\n\n, exactly as OpenAI sends
// them). Generated text may hold anything the model emits: every object is written with
// json_text, so invalid UTF-8 becomes U+FFFD and nothing throws.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kestrel.h"
#include "server/openai_api.h"

namespace kestrel::server {

// What every object of one reply repeats.
struct ReplyMeta {
  std::string id;  // chatcmpl-... / cmpl-...
  int64_t created = 0;
  std::string model;
  bool chat = false;
  int index = 0;  // the choice an event or choice object is for (n > 1)
};

// One generated token's log-probability and its most likely alternatives (logprobs).
struct TokenLogprobs {
  kestrel_token token = -1;
  float logprob = 0;
  std::vector<kestrel_token_logprob> top;
};

// OpenAI's logprobs object for these tokens: chat {"content": [{token, logprob, bytes,
// top_logprobs}], "refusal": null}; completions {tokens, token_logprobs, top_logprobs,
// text_offset}, offsets counted from *offset (advanced past the tokens). Null when none asked.
json logprobs_json(const ReplyMeta& m, const kestrel_model* model, const std::vector<TokenLogprobs>& tokens,
                   size_t* offset);

const char* finish_reason_text(kestrel_finish_reason r);
json usage_json(const kestrel_request_result& r);
// n choices of one prompt: the prompt once, the completions summed.
json usage_json(const std::vector<kestrel_request_result>& choices);

// One choice object (index m.index): a completion's text, or a chat message (content,
// reasoning_content, tool_calls as ReplySplitter gives them), with its finish reason.
json completion_choice(const ReplyMeta& m, const std::string& text, const char* finish, const json& logprobs);
json chat_choice(const ReplyMeta& m, const json& message, const char* finish, const json& logprobs);
// The whole reply object around its choices.
std::string reply_text(const ReplyMeta& m, json choices, json usage);

// A non-streamed reply: chat.completion or text_completion.
std::string completion_text(const ReplyMeta& m, const std::string& text, const kestrel_request_result& r,
                            const json& logprobs = nullptr);

// Streamed replies, one event each.
std::string sse_role(const ReplyMeta& m);                                 // chat: the assistant role first
std::string sse_text(const ReplyMeta& m, const std::string& text, const json& logprobs = nullptr);  // a piece of text
std::string sse_delta(const ReplyMeta& m, const json& delta, const json& logprobs = nullptr);  // chat: a split delta
std::string sse_finish(const ReplyMeta& m, kestrel_finish_reason finish);  // empty delta + finish_reason
std::string sse_finish(const ReplyMeta& m, const char* finish);
std::string sse_usage(const ReplyMeta& m, const kestrel_request_result& r);  // stream_options.include_usage
std::string sse_usage(const ReplyMeta& m, const json& usage);
std::string sse_error(const ApiError& e);                                  // ends a failed stream
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// Streamed text is cut at character boundaries: a piece ending inside a UTF-8 sequence keeps
// that tail until the next piece completes it (or shows it can't: then it passes on and
// json_text replaces the bad bytes). What is still held at the end becomes U+FFFD.
class Utf8Holder {
 public:
  std::string push(std::string_view piece);
  std::string finish();

 private:
  std::string held_;
};

}  // namespace kestrel::server
