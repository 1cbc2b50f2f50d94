// A model's reply split into what an OpenAI client expects: content, reasoning_content and
// tool_calls, by the family's syntax (chat_syntax.h).
//
// Streaming parses the text so far with `partial` and sends what changed (reply_delta): a partial
// parse never shows text it may take back. Content that could still become the start of a tool
// call or a reasoning tag is held back, a tool call appears only once it is whole, and reasoning
// still open is reasoning. So the deltas of every prefix add up to the parse of the whole.
// A tool call that does not parse (bad JSON, an unknown shape) is content, never dropped.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "chat/chat_syntax.h"

namespace kestrel {

struct ToolCall {
  std::string id;         // as the model wrote it (Mistral), else "" (the caller assigns one)
  std::string name;
  std::string arguments;  // JSON text of an object
  bool operator==(const ToolCall&) const = default;
};

struct ChatReply {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;
  bool operator==(const ChatReply&) const = default;
};

struct ReplyOptions {
  bool partial = false;         // the text may continue (streaming)
  bool parse_tools = true;      // false: tool-call syntax is content
  bool reasoning_open = false;  // the prompt ended inside reasoning (its open tag): the reply starts there
  bool reasoning_inline = false;  // reasoning_format "none": keep it in content, tags included
  // The request's tools (OpenAI's array), for argument types in XML-style calls; may be null.
  const nlohmann::ordered_json* tools = nullptr;
};

ChatReply parse_reply(const ChatSyntax& syntax, std::string_view text, const ReplyOptions& opts);

// What `now` adds to `before` (an earlier partial parse of a prefix of the same text): the new
// tail of content and reasoning, and the tool calls not in `before`.
ChatReply reply_delta(const ChatReply& before, const ChatReply& now);

// Whether the prompt (as rendered) leaves the model inside reasoning: it ends with the open tag.
bool prompt_opens_reasoning(const ChatSyntax& syntax, std::string_view prompt);

}  // namespace kestrel
