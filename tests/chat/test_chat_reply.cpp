// Replies split into content, reasoning and tool calls (chat/chat_reply.h), per family, over
// recorded model outputs (well-formed and malformed), whole and streamed: the deltas of every
// prefix (each split point) add up to the whole parse. The family each real template in
// ../shared/testdata/chat_templates selects, and the tool-call grammars (chat/tool_grammar.h):
// each family's own canonical call is a sentence of its grammar and parses back.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "chat/chat_reply.h"
#include "chat/tool_grammar.h"
#include "common/testdata.h"
#include "sampling/grammar_matcher.h"

namespace {

using kestrel::ChatReply;
using kestrel::ChatSyntax;
using kestrel::ReplyOptions;
using kestrel::ToolCall;
using ojson = nlohmann::ordered_json;

const ChatSyntax& family(const char* name) {
  const ChatSyntax* s = kestrel::chat_syntax_named(name);
  REQUIRE_MESSAGE(s != nullptr, name);
  return *s;
}

// The whole parse, checked against the sum of the streamed deltas at every split point (one
// byte at a time: every prefix is parsed as partial).
ChatReply parse_checked(const ChatSyntax& s, const std::string& text, ReplyOptions o = {}) {
  o.partial = false;
  const ChatReply whole = kestrel::parse_reply(s, text, o);
  ReplyOptions po = o;
  po.partial = true;
  ChatReply before, sum;
  for (size_t n = 0; n <= text.size(); ++n) {
    const ChatReply now = n == text.size() ? whole : kestrel::parse_reply(s, std::string_view(text).substr(0, n), po);
    INFO("family ", s.name, ", prefix of ", n, " bytes: ", text.substr(0, n));
    // Nothing shown is taken back.
    REQUIRE(now.content.compare(0, before.content.size(), before.content) == 0);
    REQUIRE(now.reasoning.compare(0, before.reasoning.size(), before.reasoning) == 0);
    REQUIRE(now.tool_calls.size() >= before.tool_calls.size());
    for (size_t i = 0; i < before.tool_calls.size(); ++i) REQUIRE(now.tool_calls[i] == before.tool_calls[i]);
    const ChatReply d = kestrel::reply_delta(before, now);
    sum.content += d.content;
    sum.reasoning += d.reasoning;
    for (const ToolCall& c : d.tool_calls) sum.tool_calls.push_back(c);
    before = now;
  }
  CHECK(sum == whole);
  return whole;
}

ToolCall call(const char* name, const char* args, const char* id = "") {
  return ToolCall{id, name, ojson::parse(args).dump()};
}

}  // namespace

TEST_CASE("each family's tool calls parse, whole and streamed at every split point") {
  struct Case {
    const char* family;
    std::string text;
    std::string content;
    std::vector<ToolCall> calls;
    std::string reasoning;
  };
  const std::vector<Case> cases = {
      {"hermes",
       "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
       "Let me check.",
       {call("get_weather", R"({"city":"Paris"})"), call("get_time", "{}")}},
      {"hermes", "<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"a\": [1, 2]}}\n</tool_call>",
       "", {call("w", R"({"a":[1,2]})")}, "The user wants weather."},
      {"llama3", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "",
       {call("get_weather", R"({"city":"Paris"})")}},
      {"llama3", "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", "",
       {call("get_weather", R"({"city":"Oslo"})")}},
      {"llama3", "The answer is {x}.", "The answer is {x}.", {}},
      {"mistral-nemo",
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abc123XYZ\"}, "
       "{\"name\": \"get_time\", \"arguments\": {}}]",
       "", {call("get_weather", R"({"city":"Paris"})", "abc123XYZ"), call("get_time", "{}")}},
      {"mistral-v11", "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{}", "",
       {call("get_weather", R"({"city":"Paris"})"), call("get_time", "{}")}},
      {"harmony",
       "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
       "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
       "", {call("get_weather", R"({"city":"Paris"})")}, "Need the weather."},
      {"harmony", "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|return|>",
       "Hello!", {}, "Think."},
      {"deepseek-v3",
       "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\"}\n"
       "```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜>"
       "<｜tool▁calls▁end｜>",
       "Sure.", {call("get_weather", R"({"city":"Paris"})"), call("get_time", "{}")}},
      {"deepseek-v3.1",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜>"
       "<｜tool▁calls▁end｜>",
       "", {call("get_weather", R"({"city":"Paris"})")}},
      {"glm-4.5",
       "<think>hmm</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
       "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
       "", {call("get_weather", R"({"city":"Paris","days":3})")}, "hmm"},
      {"qwen3-coder",
       "I will look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n3\n"
       "</parameter>\n</function>\n</tool_call>",
       "I will look.", {call("get_weather", R"({"city":"New York","days":3})")}},
      {"kimi-k2",
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
       "{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{}"
       "<|tool_call_end|><|tool_calls_section_end|>",
       "", {call("get_weather", R"({"city":"Paris"})"), call("get_time", "{}")}},
      {"functionary-v3.1", "<function=get_weather>{\"city\": \"Paris\"}</function>", "",
       {call("get_weather", R"({"city":"Paris"})")}},
      {"granite", "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]", "",
       {call("get_weather", R"({"city":"Paris"})")}},
      {"apriel", "Calling.\n<tool_calls>[{\"name\": \"f\", \"arguments\": {\"x\": 1}}]</tool_calls>", "Calling.",
       {call("f", R"({"x":1})")}},
      {"nemotron-v2", "<TOOLCALL>[{\"name\": \"f\", \"arguments\": {\"x\": 1}}]</TOOLCALL>", "", {call("f", R"({"x":1})")}},
      {"firefunction-v2", " functools[{\"name\": \"f\", \"arguments\": {\"x\": 1}}]", "", {call("f", R"({"x":1})")}},
      // Malformed: the text is content, never dropped.
      {"hermes", "<tool_call>\n{\"name\": \"x\", \"arguments\": {bad}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"x\", \"arguments\": {bad}}\n</tool_call>", {}},
      {"hermes", "Hi <tool_call>{\"name\": \"x\", \"argu", "Hi <tool_call>{\"name\": \"x\", \"argu", {}},
      {"hermes", "<tool_call>{\"nom\": \"x\"}</tool_call> ok", "<tool_call>{\"nom\": \"x\"}</tool_call> ok", {}},
      {"mistral-v11", "[TOOL_CALLS]get weather[ARGS]{}", "[TOOL_CALLS]get weather[ARGS]{}", {}},
      {"kimi-k2", "<|tool_call_begin|>get_weather<|tool_call_argument_begin|>{}<|tool_call_end|>",
       "<|tool_call_begin|>get_weather<|tool_call_argument_begin|>{}<|tool_call_end|>", {}},
      {"qwen3-coder", "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>",
       "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>", {}},
      {"harmony", "plain text, no channels", "plain text, no channels", {}},
  };
  for (const Case& c : cases) {
    INFO(c.family, ": ", c.text);
    const ChatReply r = parse_checked(family(c.family), c.text);
    CHECK(r.content == c.content);
    CHECK(r.reasoning == c.reasoning);
    REQUIRE(r.tool_calls.size() == c.calls.size());
    for (size_t i = 0; i < c.calls.size(); ++i) CHECK(r.tool_calls[i] == c.calls[i]);
  }
}

TEST_CASE("reasoning: tags, a prompt that opened it, reasoning kept inline, tools off") {
  const ChatSyntax& s = family("hermes");
  ChatReply r = parse_checked(s, "<think>\nstep 1\nstep 2\n</think>\n\nThe answer is 4.");
  CHECK(r.reasoning == "step 1\nstep 2");
  CHECK(r.content == "The answer is 4.");
  ReplyOptions open;
  open.reasoning_open = true;
  r = parse_checked(s, "I should add.\n</think>\n\n4", open);
  CHECK(r.reasoning == "I should add.");
  CHECK(r.content == "4");
  r = parse_checked(s, "never closed", open);  // all reasoning
  CHECK(r.reasoning == "never closed");
  CHECK(r.content.empty());
  ReplyOptions inline_;
  inline_.reasoning_inline = true;
  r = parse_checked(s, "<think>x</think>y", inline_);
  CHECK(r.content == "<think>x</think>y");
  CHECK(r.reasoning.empty());
  ReplyOptions no_tools;
  no_tools.parse_tools = false;
  r = parse_checked(s, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", no_tools);
  CHECK(r.content == "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>");
  CHECK(r.tool_calls.empty());
  // Not at the start: not reasoning.
  r = parse_checked(s, "a <think>b</think>");
  CHECK(r.content == "a <think>b</think>");
  CHECK(kestrel::prompt_opens_reasoning(s, "<|im_start|>assistant\n<think>\n"));
  CHECK_FALSE(kestrel::prompt_opens_reasoning(s, "<|im_start|>assistant\n"));
}

TEST_CASE("XML-style values take the tool's parameter types") {
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"zip": {"type": "string"}, "n": {"type": "integer"}, "tags": {"type": "array"}}}}}])");
  ReplyOptions o;
  o.tools = &tools;
  const ChatReply r = parse_checked(family("qwen3-coder"),
                                    "<tool_call>\n<function=f>\n<parameter=zip>\n01234\n</parameter>\n<parameter=n>\n7\n"
                                    "</parameter>\n<parameter=tags>\n[\"a\"]\n</parameter>\n</function>\n</tool_call>",
                                    o);
  REQUIRE(r.tool_calls.size() == 1);
  CHECK(r.tool_calls[0].arguments == R"({"zip":"01234","n":7,"tags":["a"]})");
}

TEST_CASE("the real templates select their families") {
  const std::string readme = kestrel::test::testdata_file("chat_templates/README.md");
  if (readme.empty()) return;  // skipped (or failed, in CI) by testdata_file
  const std::string dir = std::filesystem::path(readme).parent_path().string();
  const std::map<std::string, std::string> want = {
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "hermes"},
      {"Qwen-Qwen2.5-7B-Instruct", "hermes"},
      {"Qwen-QwQ-32B", "hermes"},
      {"Qwen3-Coder", "qwen3-coder"},
      {"Qwen3.5-4B", "qwen3-coder"},
      {"GLM-4.7-Flash", "glm-4.5"},
      {"Kimi-K2-Instruct", "kimi-k2"},
      {"moonshotai-Kimi-K2", "kimi-k2"},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "deepseek-v3"},
      {"npm-lenml-deepseek_v3", "deepseek-v3"},
      {"meta-llama-Llama-3.1-8B-Instruct", "llama3"},
      {"meta-llama-Llama-3.3-70B-Instruct", "llama3"},
      {"meetkai-functionary-medium-v3.1", "functionary-v3.1"},
      {"mistralai-Mistral-Nemo-Instruct-2407", "mistral-nemo"},
      {"unsloth-mistral-Devstral-Small-2507", "mistral-v11"},
      {"mistralai-Ministral-3-14B-Reasoning-2512", "mistral-v11"},
      {"ibm-granite-granite-3.3-2B-Instruct", "granite"},
      {"NVIDIA-Nemotron-Nano-v2", "nemotron-v2"},
      {"fireworks-ai-llama-3-firefunction-v2", "firefunction-v2"},
      {"Apriel-1.6-15b-Thinker-fixed", "apriel"},
  };
  for (const auto& [file, fam] : want) {
    std::ifstream f(dir + "/" + file + ".json");
    REQUIRE_MESSAGE(f.good(), file);
    const std::string tmpl = ojson::parse(f)["template"].get<std::string>();
    const ChatSyntax s = kestrel::detect_chat_syntax(tmpl);
    CHECK_MESSAGE(s.name == fam, file);
  }
  CHECK(kestrel::detect_chat_syntax("{{ messages }}", "gpt-oss").name == "harmony");
  CHECK(kestrel::detect_chat_syntax("{{ messages }}").name == "hermes");  // the default
  CHECK(kestrel::detect_chat_syntax("{{ messages }}").think_open.empty());
  CHECK(kestrel::detect_chat_syntax("<think>{{ messages }}").think_open == "<think>");
}

TEST_CASE("each family's tool grammar accepts its canonical call, which parses back") {
  const ojson tools = ojson::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "maxLength": 20}, "days": {"type": "integer"}}, "required": ["city", "days"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}])");
  // One canonical call per family, exactly as the grammar writes it.
  const std::map<std::string, std::string> canonical = {
      {"hermes", "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\",\"days\":3}}</tool_call>"},
      {"llama3", "{\"name\": \"get_weather\", \"parameters\": {\"city\":\"Paris\",\"days\":3}}"},
      {"mistral-nemo", "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\",\"days\":3}}]"},
      {"mistral-v11", "[TOOL_CALLS]get_weather[ARGS]{\"city\":\"Paris\",\"days\":3}"},
      {"harmony", "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\",\"days\":3}"},
      {"deepseek-v3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
                      "{\"city\":\"Paris\",\"days\":3}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {"deepseek-v3.1", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\":\"Paris\",\"days\":3}"
                        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {"glm-4.5", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
                  "<arg_value>3</arg_value>\n</tool_call>"},
      {"qwen3-coder", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
                      "</parameter>\n</function>\n</tool_call>"},
      {"kimi-k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
                  "{\"city\":\"Paris\",\"days\":3}<|tool_call_end|><|tool_calls_section_end|>"},
      {"functionary-v3.1", "<function=get_weather>{\"city\":\"Paris\",\"days\":3}</function>"},
      {"granite", "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\",\"days\":3}}]"},
      {"apriel", "<tool_calls>[{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\",\"days\":3}}]</tool_calls>"},
      {"nemotron-v2", "<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\",\"days\":3}}]</TOOLCALL>"},
      {"firefunction-v2", "functools[{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\",\"days\":3}}]"},
  };
  REQUIRE(canonical.size() == kestrel::chat_syntaxes().size());
  for (const ChatSyntax& s : kestrel::chat_syntaxes()) {
    INFO("family ", s.name);
    const std::string text = canonical.at(s.name);
    auto gbnf = kestrel::tool_call_gbnf(s, tools, {});
    REQUIRE_MESSAGE(gbnf.ok(), gbnf.status().message());
    auto g = kestrel::parse_grammar(gbnf.value());
    REQUIRE(g.ok());
    kestrel::GrammarMatcher m(std::make_shared<kestrel::Grammar>(std::move(g.value())), nullptr);
    CHECK(m.would_accept(text, /*complete=*/true));
    // Prose, a wrong name, and arguments the schema refuses are not sentences.
    CHECK_FALSE(m.would_accept("Sure! " + text));
    std::string wrong = text;
    wrong.replace(wrong.find("get_weather"), 11, "get_weathex");
    CHECK_FALSE(m.would_accept(wrong));
    std::string no_days = text;
    if (no_days.find("days") != std::string::npos) {
      no_days.replace(no_days.find("3"), 1, "x");
      CHECK_FALSE(m.would_accept(no_days, true));
    }
    const ChatReply r = parse_checked(s, text);
    REQUIRE(r.tool_calls.size() == 1);
    CHECK(r.tool_calls[0].name == "get_weather");
    CHECK(ojson::parse(r.tool_calls[0].arguments) == ojson::parse(R"({"city":"Paris","days":3})"));
    // A named choice: only that function.
    kestrel::ToolGrammarOptions named;
    named.only = "get_time";
    auto only = kestrel::tool_call_gbnf(s, tools, named);
    REQUIRE(only.ok());
    kestrel::GrammarMatcher mo(std::make_shared<kestrel::Grammar>(kestrel::parse_grammar(only.value()).value()), nullptr);
    CHECK_FALSE(mo.would_accept(text, true));
  }
}

TEST_CASE("tool grammars refuse what they cannot enforce, naming it") {
  const ChatSyntax& s = family("hermes");
  auto unsupported = kestrel::tool_call_gbnf(
      s, ojson::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
          "properties": {"a": {"type": "string", "pattern": "^x"}}}}}])"),
      {});
  REQUIRE_FALSE(unsupported.ok());
  CHECK(unsupported.status().code() == KESTREL_ERR_UNSUPPORTED);
  CHECK(unsupported.status().message().find("'f'") != std::string::npos);
  CHECK(unsupported.status().message().find("pattern") != std::string::npos);
  kestrel::ToolGrammarOptions named;
  named.only = "nope";
  auto unknown = kestrel::tool_call_gbnf(
      s, ojson::parse(R"([{"type": "function", "function": {"name": "f"}}])"), named);
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().message().find("nope") != std::string::npos);
  for (const char* bad : {R"([])", R"([{"type": "function"}])", R"([{"type": "function", "function": {"name": "a b"}}])",
                          R"({"a": 1})"}) {
    auto r = kestrel::tool_call_gbnf(s, ojson::parse(bad), {});
    CHECK_MESSAGE(r.status().code() == KESTREL_ERR_INVALID_ARGUMENT, bad);
  }
}
