#include "chat/chat_syntax.h"

#include <algorithm>
#include <utility>

#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

ChatSyntax syntax(std::string name, ToolShape shape, std::string open, std::string close) {
  ChatSyntax s;
  s.name = std::move(name);
  s.tools.shape = shape;
  s.tools.open = std::move(open);
  s.tools.close = std::move(close);
  return s;
}

ChatSyntax json_object(std::string name, std::string open, std::string close, std::string args_key = "arguments") {
  ChatSyntax s = syntax(std::move(name), ToolShape::kJsonObject, std::move(open), std::move(close));
  s.tools.args_key = std::move(args_key);
  return s;
}

ChatSyntax json_array(std::string name, std::string open, std::string close) {
  return syntax(std::move(name), ToolShape::kJsonArray, std::move(open), std::move(close));
}

ChatSyntax name_args(std::string name, std::string open, std::string sep, std::string close) {
  ChatSyntax s = syntax(std::move(name), ToolShape::kNameArgs, std::move(open), std::move(close));
  s.tools.sep = std::move(sep);
  return s;
}

ChatSyntax xml_args(std::string name, std::string open, std::string name_end, std::string key_open,
                    std::string key_close, std::string value_close, std::string close) {
  ChatSyntax s = syntax(std::move(name), ToolShape::kXmlArgs, std::move(open), std::move(close));
  s.tools.sep = std::move(name_end);
  s.tools.key_open = std::move(key_open);
  s.tools.key_close = std::move(key_close);
  s.tools.value_close = std::move(value_close);
  return s;
}

struct Family {
  std::vector<std::string> markers;  // all present in the template source
  std::string arch;                  // or: the model's architecture (when the markers are absent)
  ChatSyntax syntax;
};

std::vector<Family> build_families() {
  std::vector<Family> f;
  // GPT-OSS: reasoning is the analysis channel.
  f.push_back({{"<|channel|>", "<|message|>"}, "gpt-oss", syntax("harmony", ToolShape::kHarmony, "", "")});
  {
    ChatSyntax s = name_args("kimi-k2", "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>");
    s.tools.section_open = "<|tool_calls_section_begin|>";
    s.tools.section_close = "<|tool_calls_section_end|>";
    s.tools.name_prefix = "functions.";
    s.tools.name_index = true;
    f.push_back({{"<|tool_calls_section_begin|>"}, "", s});
  }
  {
    // DeepSeek V3 and R1 (and its distills): the call's type, then the name, then fenced JSON.
    ChatSyntax s = name_args("deepseek-v3", "<｜tool▁call▁begin｜>function<｜tool▁sep｜>", "\n```json\n",
                             "\n```<｜tool▁call▁end｜>");
    s.tools.section_open = "<｜tool▁calls▁begin｜>";
    s.tools.section_close = "<｜tool▁calls▁end｜>";
    f.push_back({{"<｜tool▁calls▁begin｜>", "```json"}, "", s});
    // DeepSeek V3.1: the name, then bare JSON.
    ChatSyntax t = name_args("deepseek-v3.1", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>");
    t.tools.section_open = s.tools.section_open;
    t.tools.section_close = s.tools.section_close;
    f.push_back({{"<｜tool▁calls▁begin｜>"}, "", t});
  }
  f.push_back({{"<tool_call>", "<function=", "<parameter="},
               "",
               xml_args("qwen3-coder", "<tool_call>\n<function=", ">\n", "<parameter=", ">\n", "\n</parameter>\n",
                        "</function>\n</tool_call>")});
  f.push_back({{"<arg_key>"}, "", xml_args("glm-4.5", "<tool_call>", "\n", "<arg_key>", "</arg_key>\n<arg_value>",
                                           "</arg_value>\n", "</tool_call>")});
  f.push_back({{"<function=", "<|python_tag|>"}, "", name_args("functionary-v3.1", "<function=", ">", "</function>")});
  {
    ChatSyntax s = json_object("llama3", "", "", "parameters");
    s.tools.python_tag = true;
    s.tools.at_start_only = true;
    f.push_back({{"<|python_tag|>"}, "", s});
  }
  {
    ChatSyntax s = name_args("mistral-v11", "[TOOL_CALLS]", "[ARGS]", "");
    s.tools.id_chars = 9;
    f.push_back({{"[TOOL_CALLS]", "[ARGS]"}, "", s});
    ChatSyntax t = json_array("mistral-nemo", "[TOOL_CALLS]", "");
    t.tools.id_chars = 9;
    f.push_back({{"[TOOL_CALLS]"}, "", t});
  }
  f.push_back({{"<|tool_call|>"}, "", json_array("granite", "<|tool_call|>", "")});
  f.push_back({{"<tool_calls>["}, "", json_array("apriel", "<tool_calls>", "</tool_calls>")});
  f.push_back({{"<TOOLCALL>"}, "", json_array("nemotron-v2", "<TOOLCALL>", "</TOOLCALL>")});
  f.push_back({{"functools["}, "", json_array("firefunction-v2", "functools", "")});
  f.push_back({{"<tool_call>"}, "", json_object("hermes", "<tool_call>", "</tool_call>")});
  // Reasoning delimiters, by what the template renders.
  for (Family& x : f) {
    if (x.syntax.tools.shape == ToolShape::kHarmony) continue;
    x.syntax.think_open = "<think>";
    x.syntax.think_close = "</think>";
  }
  return f;
}

const std::vector<Family>& families() {
  static const std::vector<Family> f = build_families();
  return f;
}

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

}  // namespace

ChatSyntax detect_chat_syntax(std::string_view source, std::string_view arch) {
  ChatSyntax found;
  bool have = false;
  for (const Family& f : families()) {
    bool all = !f.markers.empty();
    for (const std::string& m : f.markers) all = all && contains(source, m);
    if (all || (!arch.empty() && f.arch == arch)) {
      found = f.syntax;
      have = true;
      break;
    }
  }
  if (!have) found = families().back().syntax;  // Hermes: the default
  // Reasoning in tags only where the template shows the tags (a template without them never
  // taught the model to think aloud in them).
  if (contains(source, "[THINK]")) {
    found.think_open = "[THINK]";
    found.think_close = "[/THINK]";
  } else if (!contains(source, "<think>")) {
    found.think_open.clear();
    found.think_close.clear();
  }
  return found;
}

std::vector<std::string> chat_markers(const ChatSyntax& s) {
  std::vector<std::string> m;
  const ToolSyntax& t = s.tools;
  for (const std::string* x : {&t.open, &t.close, &t.section_open, &t.section_close, &t.sep, &t.key_open, &t.key_close,
                               &t.value_close, &s.think_open, &s.think_close})
    if (!x->empty()) m.push_back(*x);
  if (t.python_tag) m.push_back("<|python_tag|>");
  if (t.shape == ToolShape::kHarmony)
    for (const char* x : {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|call|>", "<|return|>"})
      m.push_back(x);
  return m;
}

std::vector<int32_t> chat_marker_tokens(const ChatSyntax& syntax, const Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (const std::string& m : chat_markers(syntax)) {
    auto t = tok.tokenize(m, /*add_special=*/false, /*parse_special=*/true);
    if (!t.ok()) continue;
    for (const int32_t id : t.value())
      if (tok.is_special(id) && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

const std::vector<ChatSyntax>& chat_syntaxes() {
  static const std::vector<ChatSyntax> all = [] {
    std::vector<ChatSyntax> v;
    for (const Family& f : families()) v.push_back(f.syntax);
    return v;
  }();
  return all;
}

const ChatSyntax* chat_syntax_named(std::string_view name) {
  for (const ChatSyntax& s : chat_syntaxes())
    if (s.name == name) return &s;
  return nullptr;
}

}  // namespace kestrel
