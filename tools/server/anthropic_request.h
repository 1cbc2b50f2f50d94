// Anthropic's Messages API requests (POST /v1/messages, /v1/messages/count_tokens) turned into
// the engine's GenRequest: the system prompt, text, tool_use / tool_result and thinking blocks
// become the OpenAI-style conversation the chat template reads; tools, tool_choice,
// stop_sequences and sampling map onto the same library features the OpenAI routes use.
// Every field it does not implement, and every block type it cannot render (image, document,
// server tools), is a 400 naming it.
#pragma once
#include <optional>
#include <string_view>

#include "server/openai_request.h"

namespace kestrel::server {

// count_tokens: max_tokens, sampling and stream are not read (nor allowed).
std::optional<ApiError> parse_messages_request(std::string_view body, const RequestEnv& env, bool count_tokens,
                                               GenRequest* out);

}  // namespace kestrel::server
