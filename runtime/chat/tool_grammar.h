// tool_choice "required" and a named function, enforced: a GBNF grammar (sampling/grammar.h)
// whose sentences are tool calls in the family's syntax (chat_syntax.h), each call's arguments
// matching its tool's `parameters` schema (sampling/json_schema.h). The model cannot answer in
// prose, and what it writes parses back (chat_reply.h) into calls whose arguments validate.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "chat/chat_syntax.h"
#include "core/status.h"

namespace kestrel {

inline constexpr int kMaxForcedCalls = 4;  // calls in one reply under a forced choice

struct ToolGrammarOptions {
  std::string only;              // a named tool_choice: that function only; "": any of the tools
  bool parallel = true;          // more than one call (families that allow it)
  bool reasoning_open = false;   // the prompt left the model inside reasoning: it may finish that first
};

// tools: OpenAI's array ({"type": "function", "function": {"name", "parameters"}}). A tool
// whose parameters use a keyword the grammar cannot enforce is KESTREL_ERR_UNSUPPORTED naming the
// tool and the keyword; malformed tools or an unknown `only` are KESTREL_ERR_INVALID_ARGUMENT.
Expected<std::string> tool_call_gbnf(const ChatSyntax& syntax, const nlohmann::ordered_json& tools,
                                     const ToolGrammarOptions& opts);

}  // namespace kestrel
