#include "chat/tool_grammar.h"

#include "sampling/grammar.h"
#include "sampling/json_schema.h"

namespace kestrel {
namespace {

using ojson = nlohmann::ordered_json;

struct Tool {
  std::string name;
  ojson params;
};

// A tool's parameters name what the function takes: objects that list their properties take no
// others unless the schema says so (a model left free to add keys may never close the object).
void close_objects(ojson& s) {
  if (s.is_array()) {
    for (ojson& x : s) close_objects(x);
    return;
  }
  if (!s.is_object()) return;
  if (s.contains("properties") && !s.contains("additionalProperties")) s["additionalProperties"] = false;
  for (auto& [key, value] : s.items())
    if (key != "enum" && key != "const" && key != "default" && key != "examples") close_objects(value);
}

Status bad(const std::string& what) { return Error(KESTREL_ERR_INVALID_ARGUMENT, "tools: " + what); }

Expected<std::vector<Tool>> read_tools(const ojson& tools, const std::string& only) {
  if (!tools.is_array() || tools.empty()) return bad("a non-empty array is needed to call a tool");
  std::vector<Tool> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ojson& t = tools[i];
    const std::string where = "tools[" + std::to_string(i) + "]";
    if (!t.is_object() || t.value("type", ojson("function")) != "function" || !t.contains("function") ||
        !t["function"].is_object())
      return bad(where + " must be {\"type\": \"function\", \"function\": {...}}");
    const ojson& f = t["function"];
    if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
      return bad(where + ".function.name must be a non-empty string");
    Tool tool{f["name"].get<std::string>(), f.value("parameters", ojson::object())};
    for (const char c : tool.name)
      if (!(isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
        return bad(where + ".function.name may hold only letters, digits, '_', '-' and '.'");
    if (!tool.params.is_object()) return bad(where + ".function.parameters must be an object");
    if (!tool.params.contains("type")) tool.params["type"] = "object";
    if (tool.params["type"] != "object") return bad(where + ".function.parameters must be of type object");
    if (!tool.params.contains("properties") && !tool.params.contains("additionalProperties"))
      tool.params["properties"] = ojson::object();  // no parameters: {}
    close_objects(tool.params);
    if (only.empty() || tool.name == only) out.push_back(std::move(tool));
  }
  if (out.empty()) return bad("tool_choice names '" + only + "', which is not among the tools");
  return out;
}

// The arguments rule of one tool: its parameters schema as JSON.
Expected<std::string> json_args(const Tool& t, size_t i, std::string* rules) {
  std::string prefix = "t";  // (appending: GCC 12 warns falsely on "t" + ...)
  prefix += std::to_string(i);
  prefix += "-";
  auto top = json_schema_rules(t.params, prefix, rules);
  if (!top.ok())
    return Status(Error(top.status().code(), "tools: function '" + t.name + "' parameters: " + top.status().message()));
  return top;
}

// The arguments of one tool as XML-style parameters: raw text for strings, JSON otherwise, the
// required ones in order and the others optional.
Expected<std::string> xml_args(const ToolSyntax& s, const Tool& t, size_t i, std::string* rules) {
  std::string seq;
  const ojson props = t.params.value("properties", ojson::object());
  const ojson required = t.params.value("required", ojson::array());
  if (!props.is_object()) return bad("function '" + t.name + "': parameters.properties must be an object");
  size_t k = 0;
  for (const auto& [key, schema] : props.items()) {
    std::string value;
    const bool plain_string = schema.is_object() && schema.value("type", ojson()) == "string" &&
                              !schema.contains("enum") && !schema.contains("const") && !schema.contains("format");
    if (plain_string) {
      const int64_t lo = schema.value("minLength", int64_t{0}), hi = schema.value("maxLength", int64_t{-1});
      if (lo < 0 || lo > 1000 || hi > 1000 || (hi >= 0 && hi < lo))
        return Status(Error(KESTREL_ERR_UNSUPPORTED, "tools: function '" + t.name + "' parameter '" + key +
                                                         "': minLength/maxLength must be in [0, 1000]"));
      value = "[^<]{" + std::to_string(lo) + "," + (hi >= 0 ? std::to_string(hi) : "") + "}";
    } else {
      Tool one{t.name, schema};
      auto v = json_args(one, i * 1000 + k, rules);
      KS_RETURN_IF_ERROR(v.status());
      value = v.value();
    }
    ++k;
    bool req = false;
    for (const ojson& r : required) req = req || r == key;
    const std::string item = gbnf_literal(s.key_open) + " " + gbnf_literal(key) + " " + gbnf_literal(s.key_close) +
                             " " + value + " " + gbnf_literal(s.value_close);
    seq += req ? " " + item : " ( " + item + " )?";
  }
  return seq;
}

}  // namespace

Expected<std::string> tool_call_gbnf(const ChatSyntax& syntax, const ojson& tools, const ToolGrammarOptions& opts) {
  auto got = read_tools(tools, opts.only);
  KS_RETURN_IF_ERROR(got.status());
  const ToolSyntax& s = syntax.tools;
  std::string rules, calls;
  for (size_t i = 0; i < got.value().size(); ++i) {
    const Tool& t = got.value()[i];
    const std::string name = gbnf_literal(t.name);
    std::string call;
    if (s.shape == ToolShape::kXmlArgs) {
      auto a = xml_args(s, t, i, &rules);
      KS_RETURN_IF_ERROR(a.status());
      call = gbnf_literal(s.open) + " " + name + " " + gbnf_literal(s.sep) + a.value() + " " + gbnf_literal(s.close);
    } else {
      auto a = json_args(t, i, &rules);
      KS_RETURN_IF_ERROR(a.status());
      switch (s.shape) {
        case ToolShape::kJsonObject:
        case ToolShape::kJsonArray:
          call = "\"{\\\"name\\\": \\\"\" " + name + " \"\\\", \\\"" + s.args_key + "\\\": \" " + a.value() + " \"}\"";
          break;
        case ToolShape::kNameArgs:
          call = gbnf_literal(s.name_prefix) + " " + name + (s.name_index ? " \":\" [0-9]{1,3}" : "") + " " +
                 gbnf_literal(s.sep) + " " + a.value();
          break;
        case ToolShape::kHarmony:  // then <|call|>, an end-of-generation token the grammar lets through
          call = "\"<|channel|>commentary to=functions.\" " + name + " \" <|constrain|>json<|message|>\" " + a.value();
          break;
        case ToolShape::kXmlArgs: break;
      }
      if (s.shape == ToolShape::kJsonObject || s.shape == ToolShape::kNameArgs)
        call = gbnf_literal(s.open) + " " + call + " " + gbnf_literal(s.close);
    }
    calls += (calls.empty() ? "" : " | ") + std::string("( ") + call + " )";
  }
  // Parallel calls: Harmony ends a turn at each call, Llama 3 takes one; the others at most
  // kMaxForcedCalls (a weak model may never choose to stop).
  const bool parallel = opts.parallel && s.shape != ToolShape::kHarmony && !s.at_start_only;
  const std::string more = "{0," + std::to_string(kMaxForcedCalls - 1) + "}";
  std::string body;
  if (s.shape == ToolShape::kJsonArray) {
    body = gbnf_literal(s.open) + " \"[\" call" + (parallel ? " ( \", \" call )" + more : "") + " \"]\" " +
           gbnf_literal(s.close);
  } else {
    body = "call" + (parallel ? " ( \"\\n\" call )" + more : std::string());
    if (!s.section_open.empty()) body = gbnf_literal(s.section_open) + " " + body + " " + gbnf_literal(s.section_close);
  }
  // A prompt that opened reasoning: the reasoning is closed at once (as llama.cpp does), since a
  // forced call cannot wait on reasoning that may never end.
  if (opts.reasoning_open && !syntax.think_close.empty())
    body = gbnf_literal(syntax.think_close) + " \"\\n\\n\" " + body;
  std::string gbnf = "root ::= " + body + "\ncall ::= " + calls + "\n" + rules + json_primitives_gbnf();
  auto g = parse_grammar(gbnf);
  if (!g.ok()) return Status(Error(KESTREL_ERR_UNSUPPORTED, "tools: a grammar for these tools cannot be built: " + g.status().message()));
  return gbnf;
}

}  // namespace kestrel
