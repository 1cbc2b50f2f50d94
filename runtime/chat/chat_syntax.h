// How a model family writes its reply: the syntax of its tool calls and of its reasoning, as data.
// One ChatSyntax per family (chat_syntax.cpp's table), chosen from the chat template's source by
// the markers it renders: the template is what taught the model the syntax, so it is the evidence.
// chat_reply.h parses replies with it; tool_grammar.h forces a tool call in it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel {

class Tokenizer;

// The shapes tool calls take. Literals below are matched with leading/trailing whitespace
// trimmed and any whitespace around them skipped, since models vary it.
enum class ToolShape {
  kJsonObject,  // open {"name": N, "<args_key>": {...}} close, repeated (Hermes, Qwen 2.5, Llama 3 bare JSON)
  kJsonArray,   // open [{"name": N, "<args_key>": {...}}, ...] close (Mistral Nemo, Granite, Apriel, Nemotron)
  kNameArgs,    // open N sep {...} close, repeated (Functionary, Mistral v11 [ARGS], Kimi K2, DeepSeek V3)
  kXmlArgs,     // open N name_end (key_open K key_close V value_close)* close (Qwen3-Coder, GLM-4.5)
  kHarmony,     // GPT-OSS: <|channel|>commentary to=functions.N ... <|message|>{...}<|call|>
};

struct ToolSyntax {
  ToolShape shape = ToolShape::kJsonObject;
  std::string open, close;                  // around one call (kJsonArray: around the array); may be ""
  std::string section_open, section_close;  // around all calls (Kimi, DeepSeek); optional when parsing
  std::string sep;                          // kNameArgs: between name and arguments; kXmlArgs: after the name
  std::string args_key = "arguments";       // kJson*: "arguments" ("parameters" for Llama 3)
  std::string key_open, key_close, value_close;  // kXmlArgs
  std::string name_prefix;                  // Kimi K2: "functions." before the name...
  bool name_index = false;                  // ...and ":<n>" after it
  bool python_tag = false;                  // Llama 3: <|python_tag|> also opens a JSON call
  bool at_start_only = false;               // open == "": a call only where the reply begins
  int id_chars = 0;                         // ids the template insists on (Mistral: 9 alphanumerics); 0: call_<24>
};

struct ChatSyntax {
  std::string name;       // "hermes", "llama3", ... (docs/TOOLS.md)
  ToolSyntax tools;
  std::string think_open, think_close;  // reasoning delimiters; empty: the family does not reason in tags
};

// The syntax of the model whose chat template is `template_source` (arch: general.architecture,
// for models whose template says nothing, e.g. gpt-oss). Unknown templates get the Hermes
// syntax (<tool_call>{json}</tool_call>), documented as the default.
ChatSyntax detect_chat_syntax(std::string_view template_source, std::string_view arch = {});

// The texts the family writes around calls and reasoning (its markers, and Harmony's message
// markers). A model's special tokens with these texts are shown in its output and allowed under
// the family's grammar: the reply must be parsed, and many models emit them as single tokens.
std::vector<std::string> chat_markers(const ChatSyntax& syntax);
// Those of a vocabulary's special tokens (control, unused, unknown) that hold a marker's text.
std::vector<int32_t> chat_marker_tokens(const ChatSyntax& syntax, const Tokenizer& tok);

// Every family's syntax, for tests and docs.
const std::vector<ChatSyntax>& chat_syntaxes();
const ChatSyntax* chat_syntax_named(std::string_view name);

}  // namespace kestrel
