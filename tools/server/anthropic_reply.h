// Anthropic's Messages API replies: the message object (content blocks: thinking, text,
// tool_use; stop_reason end_turn / max_tokens / stop_sequence / tool_use; usage), the streamed
// events (message_start, content_block_start / delta / stop, message_delta, message_stop), and
// the error object {"type": "error", "error": {"type", "message"}}.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "server/generation_reply.h"

namespace kestrel::server {

struct AnthropicMeta {
  std::string id;  // msg_...
  std::string model;
  int32_t n_prompt = 0;
  std::vector<std::string> stops;  // the request's stop_sequences (kestrel_request_result.stop_string indexes them)
};

// {"type": "error", "error": {"type": "invalid_request_error" | "authentication_error" | ..., "message"}}
std::string anthropic_error_text(const ApiError& e);

// The whole message from a finished reply (whole_reply's content, reasoning_content, tool_calls).
std::string anthropic_message_text(const AnthropicMeta& m, const json& reply, const kestrel_request_result& r,
                                   bool called_tools);

// The streamed events (one choice).
std::shared_ptr<StreamFormat> anthropic_stream_format(AnthropicMeta m);

}  // namespace kestrel::server
