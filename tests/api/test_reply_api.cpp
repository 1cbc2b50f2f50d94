// kestrel_reply_parser through the C API: a reply streamed in pieces (through a buffer too small
// for some deltas) adds up to content, reasoning_content and tool_calls with fresh ids; the
// grammar a forced tool_choice needs; every misuse refused with a status naming it.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "kestrel.h"

namespace {

const char* kHermes = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                      "{% if tools %}<tools>{{ tools | tojson }}</tools> answer in <tool_call></tool_call>{% endif %}"
                      "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}";
const char* kTools = R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";

kestrel_reply_parser* make(const char* tmpl, const char* tools, const char* prompt, const char* choice,
                           uint32_t flags = KESTREL_REPLY_PARALLEL_TOOLS) {
  kestrel_chat_options co;
  kestrel_chat_options_init(&co);
  co.template_source = tmpl;
  co.tools_json = tools;
  kestrel_reply_parser* p = nullptr;
  const kestrel_status st = kestrel_reply_parser_new(nullptr, &co, prompt, choice, flags, &p);
  REQUIRE_MESSAGE(st == KESTREL_OK, kestrel_last_error());
  return p;
}

// Pushes text in pieces of `step` bytes through a buffer of `cap` bytes; the deltas merged.
nlohmann::json stream(kestrel_reply_parser* p, const std::string& text, size_t step, size_t cap) {
  nlohmann::json sum = {{"content", ""}, {"reasoning_content", ""}, {"tool_calls", nlohmann::json::array()}};
  std::string buf(cap, '\0');
  for (size_t at = 0; at <= text.size(); at += step) {
    const bool final = at + step > text.size();
    const std::string piece = text.substr(at, step);
    size_t len = 0;
    kestrel_status st = kestrel_reply_parser_push(p, piece.data(), piece.size(), final, buf.data(), buf.size(), &len);
    if (st == KESTREL_ERR_BUFFER_TOO_SMALL) {
      // More text now is refused until the delta is taken.
      CHECK(kestrel_reply_parser_push(p, "x", 1, false, buf.data(), buf.size(), &len) == KESTREL_ERR_INVALID_ARGUMENT);
      std::string big(len + 1, '\0');
      st = kestrel_reply_parser_push(p, nullptr, 0, false, big.data(), big.size(), &len);
      REQUIRE(st == KESTREL_OK);
      big.resize(len);
      buf.assign(big.begin(), big.end());
      buf.resize(std::max(cap, len));
    } else {
      REQUIRE_MESSAGE(st == KESTREL_OK, kestrel_last_error());
    }
    const nlohmann::json d = nlohmann::json::parse(std::string(buf.data(), len));
    if (d.contains("content")) sum["content"] = sum["content"].get<std::string>() + d["content"].get<std::string>();
    if (d.contains("reasoning_content"))
      sum["reasoning_content"] = sum["reasoning_content"].get<std::string>() + d["reasoning_content"].get<std::string>();
    for (const auto& c : d.value("tool_calls", nlohmann::json::array())) sum["tool_calls"].push_back(c);
    buf.assign(cap, '\0');
  }
  return sum;
}

}  // namespace

TEST_CASE("a streamed reply adds up to reasoning, content and tool calls") {
  const std::string reply =
      "The user asks for weather.\n</think>\n\nLet me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Köln\"}}"
      "\n</tool_call>";
  for (size_t step : {1, 3, 7, 1000}) {
    for (size_t cap : {16, 4096}) {
      CAPTURE(step);
      CAPTURE(cap);
      kestrel_reply_parser* p = make(kHermes, kTools, "<|im_start|>assistant\n<think>\n", nullptr);
      const nlohmann::json r = stream(p, reply, step, cap);
      CHECK(r["reasoning_content"] == "The user asks for weather.");
      CHECK(r["content"] == "Let me look.");
      REQUIRE(r["tool_calls"].size() == 2);
      for (size_t i = 0; i < 2; ++i) {
        const auto& c = r["tool_calls"][i];
        CHECK(c["index"] == i);
        CHECK(c["type"] == "function");
        CHECK(c["function"]["name"] == "get_weather");
        CHECK(c["id"].get<std::string>().size() == 29);  // call_ + 24
        CHECK(c["id"].get<std::string>().rfind("call_", 0) == 0);
      }
      CHECK(r["tool_calls"][0]["id"] != r["tool_calls"][1]["id"]);
      CHECK(r["tool_calls"][1]["function"]["arguments"] == "{\"city\":\"Köln\"}");
      size_t len = 0;
      char b[8];
      CHECK(kestrel_reply_parser_push(p, "x", 1, true, b, sizeof b, &len) == KESTREL_ERR_INVALID_ARGUMENT);
      kestrel_reply_parser_free(p);
    }
  }
}

TEST_CASE("tool_choice: none leaves calls as content; required and named give a grammar") {
  const std::string call = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>";
  kestrel_reply_parser* none = make(kHermes, kTools, "", "none");
  CHECK(stream(none, call, 5, 4096)["content"] == call);
  kestrel_reply_parser_free(none);
  kestrel_reply_parser* no_tools = make(kHermes, nullptr, "", nullptr);
  CHECK(stream(no_tools, call, 5, 4096)["content"] == call);
  kestrel_reply_parser_free(no_tools);

  for (const char* choice : {"auto", "required", "get_weather"}) {
    kestrel_reply_parser* p = make(kHermes, kTools, "", choice);
    size_t len = 0;
    const kestrel_status st = kestrel_reply_parser_grammar(p, nullptr, 0, &len);
    CHECK((st == KESTREL_OK || st == KESTREL_ERR_BUFFER_TOO_SMALL));
    std::string g(len + 1, '\0');
    REQUIRE(kestrel_reply_parser_grammar(p, g.data(), g.size(), &len) == KESTREL_OK);
    g.resize(len);
    if (std::string(choice) == "auto") {
      CHECK(g.empty());
    } else {
      CHECK(g.find("root ::=") != std::string::npos);
      CHECK(g.find("get_weather") != std::string::npos);
    }
    kestrel_reply_parser_free(p);
  }
  // Mistral's ids: 9 alphanumerics.
  kestrel_reply_parser* m = make("[TOOL_CALLS] [ARGS] {{ messages }}", kTools, "", nullptr);
  const auto r = stream(m, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}", 4, 4096);
  REQUIRE(r["tool_calls"].size() == 1);
  CHECK(r["tool_calls"][0]["id"].get<std::string>().size() == 9);
  kestrel_reply_parser_free(m);
}

TEST_CASE("kestrel_reply_parser misuse is refused with a status") {
  kestrel_chat_options co;
  kestrel_chat_options_init(&co);
  co.template_source = kHermes;
  co.tools_json = kTools;
  kestrel_reply_parser* p = nullptr;
  CHECK(kestrel_reply_parser_new(nullptr, &co, "", "nope", 0, &p) == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(std::string(kestrel_last_error()).find("nope") != std::string::npos);
  CHECK(p == nullptr);
  CHECK(kestrel_reply_parser_new(nullptr, &co, "", nullptr, 1u << 7, &p) == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(kestrel_reply_parser_new(nullptr, &co, "", nullptr, 0, nullptr) == KESTREL_ERR_INVALID_ARGUMENT);
  co.tools_json = R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
    "properties": {"a": {"type": "string", "pattern": "x+"}}}}}])";
  CHECK(kestrel_reply_parser_new(nullptr, &co, "", "required", 0, &p) == KESTREL_ERR_UNSUPPORTED);
  CHECK(std::string(kestrel_last_error()).find("pattern") != std::string::npos);
  co.tools_json = "[not json";
  CHECK(kestrel_reply_parser_new(nullptr, &co, "", nullptr, 0, &p) == KESTREL_ERR_INVALID_ARGUMENT);
  co.tools_json = nullptr;
  CHECK(kestrel_reply_parser_new(nullptr, &co, "", "required", 0, &p) == KESTREL_ERR_INVALID_ARGUMENT);
  co.template_source = nullptr;
  CHECK(kestrel_reply_parser_new(nullptr, &co, "", nullptr, 0, &p) == KESTREL_ERR_INVALID_ARGUMENT);
  size_t len = 0;
  CHECK(kestrel_reply_parser_push(nullptr, "", 0, false, nullptr, 0, &len) == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(kestrel_reply_parser_grammar(nullptr, nullptr, 0, &len) == KESTREL_ERR_INVALID_ARGUMENT);
  kestrel_reply_parser_free(nullptr);
}
