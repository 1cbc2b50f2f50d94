// kestrel serve's request parsing and reply building, without a model or a socket: every
// malformed body of issue 18 gets a 400 naming its field (never an exception, never a 500),
// nesting depth and message count are limits checked while parsing, and replies holding invalid
// UTF-8 are still valid JSON. Also: `kestrel serve --help` documents every limit.
#include <doctest/doctest.h>

#include <cstdio>
#include <random>
#include <string>

#include "common/testdata.h"
#include "server/http/http_server.h"
#include "server/openai_api.h"
#include "server/openai_reply.h"
#include "server/openai_request.h"

using namespace kestrel::server;

namespace {

constexpr int32_t kVocab = 8;

RequestEnv env() { return RequestEnv{JsonLimits{}, kVocab, std::string("m")}; }

std::optional<ApiError> chat(const std::string& body, GenRequest* out = nullptr) {
  GenRequest r;
  return parse_generation_request(body, true, env(), out ? out : &r);
}

std::optional<ApiError> completion(const std::string& body, GenRequest* out = nullptr) {
  GenRequest r;
  return parse_generation_request(body, false, env(), out ? out : &r);
}

std::optional<ApiError> tokenize_req(const std::string& body) {
  TokenizeRequest r;
  return parse_tokenize_request(body, env(), &r);
}

std::optional<ApiError> detokenize_req(const std::string& body) {
  DetokenizeRequest r;
  return parse_detokenize_request(body, env(), &r);
}

// A chat body with one user message and extra top-level fields.
std::string chat_with(const std::string& fields) {
  return R"({"messages":[{"role":"user","content":"hi"}])" + (fields.empty() ? "" : "," + fields) + "}";
}

std::string nested_array(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// Valid JSON whose strings hold valid UTF-8.
bool valid_json(const std::string& text) {
  return !nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false).is_discarded();
}

void check_400(const std::optional<ApiError>& e, const std::string& param) {
  REQUIRE(e.has_value());
  CHECK(e->http == 400);
  CHECK(e->param == param);
  CHECK(!e->message.empty());
  CHECK(valid_json(error_text(*e)));
}

}  // namespace

TEST_CASE("a deep JSON value anywhere in a request is refused while parsing (issue 18: 100,000 deep crashed)") {
  // The crash: a 100,000-deep array in an extra message field reached a recursive dump().
  const std::string deep = R"({"messages":[{"role":"user","content":"x","extra":)" + nested_array(100000) + "}]}";
  std::optional<ApiError> e;
  REQUIRE_NOTHROW(e = chat(deep));
  REQUIRE(e.has_value());
  CHECK(e->http == 400);
  CHECK(e->code == "json_too_deep");
  CHECK(e->message.find("64") != std::string::npos);
  CHECK(e->message.find("--max-json-depth") != std::string::npos);
  for (const std::string& body : {nested_array(100000), R"({"content":)" + nested_array(100000) + "}"}) {
    REQUIRE_NOTHROW(e = tokenize_req(body));
    REQUIRE(e.has_value());
    CHECK(e->code == "json_too_deep");
    REQUIRE_NOTHROW(e = detokenize_req(body));
    REQUIRE(e.has_value());
    CHECK(e->code == "json_too_deep");
  }
  // The limit itself: the body object is level 1, so 6 levels of extra arrays under
  // body{ messages[ msg{ make 9, one past 8.
  RequestEnv small = env();
  small.limits.max_depth = 8;
  GenRequest r;
  const std::string at_limit = R"({"messages":[{"role":"user","content":"x","extra":)" + nested_array(5) + "}]}";
  const std::string past = R"({"messages":[{"role":"user","content":"x","extra":)" + nested_array(6) + "}]}";
  CHECK_FALSE(parse_generation_request(at_limit, true, small, &r).has_value());
  CHECK(r.messages_json.find("[[[[[]]]]]") != std::string::npos);  // extra fields reach the template
  e = parse_generation_request(past, true, small, &r);
  REQUIRE(e.has_value());
  CHECK(e->code == "json_too_deep");
}

TEST_CASE("more messages than --max-messages are refused") {
  RequestEnv small = env();
  small.limits.max_messages = 3;
  auto body = [](int n) {
    std::string m;
    for (int i = 0; i < n; ++i) m += std::string(i ? "," : "") + R"({"role":"user","content":"x"})";
    return R"({"messages":[)" + m + "]}";
  };
  GenRequest r;
  CHECK_FALSE(parse_generation_request(body(3), true, small, &r).has_value());
  const auto e = parse_generation_request(body(4), true, small, &r);
  check_400(e, "messages");
  CHECK(e->message.find("--max-messages") != std::string::npos);
}

TEST_CASE("the malformed requests that got a 500 in issue 18 get a 400 naming the field") {
  check_400(chat(chat_with(R"("stream":true,"stream_options":{"include_usage":"yes"})")), "stream_options.include_usage");
  check_400(chat(chat_with(R"("stream":true,"stream_options":5)")), "stream_options");
  check_400(chat(R"({"messages":[{"role":"user","content":[5]}]})"), "messages[0].content[0]");
  check_400(chat(R"({"messages":[{"role":"user","content":[{"type":"text","text":5}]}]})"), "messages[0].content[0].text");
  check_400(chat(R"({"messages":[{"role":"user","content":[{"type":7}]}]})"), "messages[0].content[0].type");
  const auto image = chat(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})");
  check_400(image, "messages[0].content[0].type");
  CHECK(image->message.find("'image_url'") != std::string::npos);
  check_400(tokenize_req(R"({"content":"x","add_special":"x"})"), "add_special");
  check_400(tokenize_req(R"({"content":"x","parse_special":1})"), "parse_special");
  // Invalid UTF-8 in a string: a parse error whose message (quoting the bytes) is still valid JSON.
  const auto utf8 = chat("{\"model\":\"\xff\xfe\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}");
  REQUIRE(utf8.has_value());
  CHECK(utf8->http == 400);
  CHECK(utf8->message.rfind("Invalid JSON body: ", 0) == 0);
  CHECK(utf8->message.find("json.exception") == std::string::npos);  // no library-internal text
  CHECK(valid_json(error_text(*utf8)));
  // Every token banned: nothing to sample. -100 on all but one is fine; "1" and "01" are one token.
  std::string all, most;
  for (int i = 0; i < kVocab; ++i) all += std::string(i ? "," : "") + "\"" + std::to_string(i) + "\":-100";
  for (int i = 0; i + 1 < kVocab; ++i) most += std::string(i ? "," : "") + "\"" + std::to_string(i) + "\":-100";
  check_400(chat(chat_with("\"logit_bias\":{" + all + "}")), "logit_bias");
  CHECK_FALSE(chat(chat_with("\"logit_bias\":{" + most + "}")).has_value());
  CHECK_FALSE(chat(chat_with("\"logit_bias\":{" + most + ",\"06\":-100}")).has_value());
}

TEST_CASE("every field's wrong types and values are a 400 naming it") {
  struct Case {
    const char* fields;
    const char* param;
  };
  const Case cases[] = {
      {R"("temperature":"0.5")", "temperature"}, {R"("temperature":3)", "temperature"},
      {R"("temperature":-0.5)", "temperature"}, {R"("top_p":[])", "top_p"},
      {R"("min_p":-0.1)", "min_p"}, {R"("presence_penalty":{})", "presence_penalty"},
      {R"("frequency_penalty":true)", "frequency_penalty"}, {R"("repeat_penalty":0)", "repeat_penalty"},
      {R"("max_tokens":-1)", "max_tokens"}, {R"("max_tokens":0)", "max_tokens"},
      {R"("max_tokens":"10")", "max_tokens"}, {R"("max_tokens":10.5)", "max_tokens"},
      {R"("max_tokens":1e30)", "max_tokens"}, {R"("max_tokens":18446744073709551615)", "max_tokens"},
      {R"("max_completion_tokens":-5)", "max_completion_tokens"}, {R"("top_k":-1)", "top_k"},
      {R"("top_k":"5")", "top_k"}, {R"("seed":"1")", "seed"}, {R"("seed":1.5)", "seed"},
      {R"("n":9)", "n"}, {R"("n":0)", "n"}, {R"("n":"1")", "n"}, {R"("stream":"true")", "stream"}, {R"("stream":1)", "stream"},
      {R"("stop":[1,2])", "stop"}, {R"("stop":{"a":1})", "stop"}, {R"("stop":5)", "stop"},
      {R"("stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"])", "stop"},
      {R"("stop":"a\u0000b")", "stop"}, {R"("logit_bias":[])", "logit_bias"}, {R"("logit_bias":"x")", "logit_bias"},
      {R"("logit_bias":{"abc":1})", "logit_bias"}, {R"("logit_bias":{"-1":1})", "logit_bias"},
      {R"("logit_bias":{" 5":1})", "logit_bias"}, {R"("logit_bias":{"+5":1})", "logit_bias"},
      {R"("logit_bias":{"8":1})", "logit_bias"}, {R"("logit_bias":{"99999999999999999999":1})", "logit_bias"},
      {R"("logit_bias":{"5":"x"})", "logit_bias"}, {R"("logit_bias":{"5":101})", "logit_bias"},
      {R"("logit_bias":{"5":null})", "logit_bias"}, {R"("model":5)", "model"}, {R"("model":["m"])", "model"},
      // Features we do not implement are refused by name, not ignored.
      {R"("tools":[{"type":"retrieval"}])", "tools[0]"}, {R"("tools":"x")", "tools"},
      {R"("tools":[{"type":"function","function":{"name":5}}])", "tools[0]"},
      {R"("tool_choice":"required")", "tool_choice"}, {R"("tool_choice":"sometimes")", "tool_choice"},
      {R"("tool_choice":{"type":"function"})", "tool_choice"}, {R"("parallel_tool_calls":"yes")", "parallel_tool_calls"},
      {R"("tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required","grammar":"root ::= \"a\"")",
       "tool_choice"},
      {R"("reasoning_format":"xml")", "reasoning_format"}, {R"("functions":[{"name":"f"}])", "functions"},
      {R"("response_format":{"type":"xml"})", "response_format.type"}, {R"("logprobs":"yes")", "logprobs"},
      {R"("logprobs":true,"top_logprobs":21)", "top_logprobs"},
      {R"("response_format":"json")", "response_format"}, {R"("response_format":{"type":"json_schema"})", "response_format.json_schema"},
      {R"("response_format":{"type":"json_schema","json_schema":{"schema":5}})", "response_format.json_schema.schema"},
      {R"("response_format":{"type":"json_schema","json_schema":{"schema":{},"strict":"yes"}})", "response_format.json_schema.strict"},
      {R"("response_format":{"type":"json_schema","json_schema":{"schema":{},"extra":1}})", "response_format.json_schema.extra"},
      {R"("response_format":{"type":"json_object","extra":1})", "response_format.extra"},
      {R"("grammar":5)", "grammar"}, {R"("grammar":"")", "grammar"},
      {R"("grammar":"root ::= \"a\"","response_format":{"type":"json_object"})", "grammar"},
      {R"("top_logprobs":3)", "top_logprobs"}, {R"("echo":true)", "echo"}, {R"("best_of":2)", "best_of"},
      {R"("suffix":"x")", "suffix"}, {R"("modalities":["audio"])", "modalities"}, {R"("audio":{})", "audio"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.fields);
    check_400(chat(chat_with(c.fields)), c.param);
  }
  const Case messages[] = {
      {R"({"messages":{}})", "messages"}, {R"({"messages":[]})", "messages"}, {R"({"messages":"hi"})", "messages"},
      {R"({})", "messages"}, {R"({"messages":null})", "messages"}, {R"({"messages":[1]})", "messages[0]"},
      {R"({"messages":[{"content":"x"}]})", "messages[0]"}, {R"({"messages":[{"role":1,"content":"x"}]})", "messages[0]"},
      {R"({"messages":[{"role":"user","content":5}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":{}}]})", "messages[0].content"},
      {R"({"messages":[{"role":"user","content":[{"text":"x"}]}]})", "messages[0].content[0].type"},
  };
  for (const Case& c : messages) {
    CAPTURE(c.fields);
    check_400(chat(c.fields), c.param);
  }
  check_400(completion(R"({"prompt":42})"), "prompt");
  check_400(completion(R"({"prompt":"x","tools":[{"type":"function","function":{"name":"f"}}]})"), "tools");
  check_400(completion(R"({"prompt":null})"), "prompt");
  check_400(completion(R"({"prompt":["a","b"]})"), "prompt");
  check_400(completion(R"({"prompt":[1,2]})"), "prompt");
  check_400(completion(R"({"prompt":"x","echo":true})"), "echo");
  check_400(tokenize_req(R"({"content":null})"), "content");
  check_400(tokenize_req(R"({"content":["x"]})"), "content");
  for (const char* t : {R"("1")", "[1.5]", "[-1]", "[8]", "[18446744073709551615]", R"(["1"])", "[null]", "{}"}) {
    CAPTURE(t);
    check_400(detokenize_req(std::string(R"({"tokens":)") + t + "}"), "tokens");
  }
  // Not JSON, not an object, or a number no double holds (nlohmann refuses 1e999 while parsing).
  for (const char* body : {"", "{", "[1,2]", "\"x\"", "null", "{\"a\":1}x", "{\"a\":1,}", "{\"temperature\":1e999}"}) {
    CAPTURE(body);
    check_400(chat(body), "");
  }
  const auto wrong_model = chat(chat_with(R"("model":")" + std::string(1000, 'x') + "\""));
  REQUIRE(wrong_model.has_value());
  CHECK(wrong_model->http == 404);
  CHECK(wrong_model->code == "model_not_found");
  CHECK(wrong_model->message.size() < 400);  // a long name is not echoed whole
}

TEST_CASE("null, absent, off values and caller tags are accepted; unknown fields are refused by name") {
  GenRequest r;
  const auto unknown = chat(chat_with(R"("model":"m","some_future_field":[1,{"x":2}])"), &r);
  REQUIRE(unknown.has_value());
  CHECK(unknown->http == 400);
  CHECK(unknown->param == "some_future_field");
  CHECK(unknown->message.find("'some_future_field'") != std::string::npos);
  REQUIRE(chat(chat_with(R"("store":true)"), &r).has_value());  // storing replies: not implemented
  REQUIRE_FALSE(chat(chat_with(R"("model":"m","temperature":null,"max_tokens":10.0,"seed":18446744073709551615,)"
                               R"("stop":["","x"],"stream":true,"stream_options":{"include_usage":true},)"
                               R"("tools":[],"tool_choice":"auto","response_format":{"type":"text"},"logprobs":false,)"
                               R"("user":"u","metadata":{"a":"b"},"store":false)"),
                     &r)
                    .has_value());
  CHECK(r.params.max_tokens == 10);
  CHECK(r.params.json_schema.empty());
  CHECK(r.params.grammar.empty());
  CHECK(r.params.sampling.seed == UINT64_MAX);
  CHECK(r.params.stop == std::vector<std::string>{"x"});  // an empty stop string stops nothing
  CHECK(r.params.stream);
  CHECK(r.params.include_usage);
  REQUIRE_FALSE(chat(R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},)"
                     R"({"role":"assistant","content":null,"name":"n"}]})",
                     &r)
                    .has_value());
  const auto msgs = nlohmann::json::parse(r.messages_json);
  CHECK(msgs[0]["content"] == "ab");
  // Structured output reaches the request as a schema or a grammar (compiled by the library).
  REQUIRE_FALSE(chat(chat_with(R"("response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,)"
                               R"("schema":{"type":"object","properties":{"a":{"type":"integer"}}}}})"),
                     &r)
                    .has_value());
  CHECK(nlohmann::json::parse(r.params.json_schema) == nlohmann::json::parse(R"({"type":"object","properties":{"a":{"type":"integer"}}})"));
  REQUIRE_FALSE(chat(chat_with(R"("response_format":{"type":"json_object"})"), &r).has_value());
  CHECK(nlohmann::json::parse(r.params.json_schema) == nlohmann::json::parse(R"({"type":"object"})"));
  REQUIRE_FALSE(chat(chat_with(R"("grammar":"root ::= \"yes\"")"), &r).has_value());
  CHECK(r.params.grammar == "root ::= \"yes\"");
  CHECK(msgs[1]["name"] == "n");
  REQUIRE_FALSE(completion(R"({"prompt":["once"],"max_tokens":3,"logprobs":0,"echo":false,"best_of":1})", &r).has_value());
  CHECK(r.prompt == "once");
  CHECK(r.params.max_tokens == 3);
  CHECK_FALSE(tokenize_req(R"({"content":"x","add_special":null,"parse_special":false})").has_value());
  CHECK_FALSE(detokenize_req(R"({"tokens":[0,7]})").has_value());
}

TEST_CASE("replies holding invalid UTF-8 are valid JSON (issue 18: type_error.316 killed the server)") {
  const std::string bad = "ok \xff\xfe cut \xe4\xb8";  // stray bytes and a character cut short
  kestrel_request_result r{};
  r.finish = KESTREL_FINISH_STOP;
  r.n_prompt = 3;
  r.n_generated = 2;
  for (bool is_chat : {true, false}) {
    ReplyMeta m{"id-1", 1, "model \xc3", is_chat};
    std::string text;
    REQUIRE_NOTHROW(text = completion_text(m, bad, r));
    REQUIRE(valid_json(text));
    const auto j = nlohmann::json::parse(text);
    const std::string got = (is_chat ? j["choices"][0]["message"]["content"] : j["choices"][0]["text"]).get<std::string>();
    CHECK(got.rfind("ok \xEF\xBF\xBD", 0) == 0);  // U+FFFD in place of the bad bytes
    for (const std::string& ev : {sse_text(m, bad), sse_role(m), sse_finish(m, KESTREL_FINISH_LENGTH), sse_usage(m, r)}) {
      REQUIRE(ev.rfind("data: ", 0) == 0);
      REQUIRE(ev.size() > 8);
      CHECK(ev.substr(ev.size() - 2) == "\n\n");
      CHECK(valid_json(ev.substr(6, ev.size() - 8)));
    }
  }
  ApiError e;
  e.message = "no such model '\xff'";
  CHECK(valid_json(error_text(e)));
  CHECK(valid_json(sse_error(e).substr(6)));
}

TEST_CASE("streamed text is cut at character boundaries") {
  Utf8Holder h;
  CHECK(h.push("a\xE2") == "a");  // '€' = E2 82 AC, split over three pieces
  CHECK(h.push("\x82") == "");
  CHECK(h.push("\xAC!") == "\xE2\x82\xAC!");
  CHECK(h.finish() == "");
  CHECK(h.push("\xF0\x9F") == "");  // an emoji cut in two
  CHECK(h.push("\x98\x80") == "\xF0\x9F\x98\x80");
  CHECK(h.push("\xff") == "\xff");  // can never start a character: passed on (json_text replaces it)
  CHECK(h.push("x\xE4\xB8") == "x");
  CHECK(h.push("y") == "\xE4\xB8y");  // the held bytes could not complete: passed on
  CHECK(h.push("\xE4") == "");
  CHECK(h.finish() == "\xEF\xBF\xBD");  // what never completed is one U+FFFD
  CHECK(h.push("z") == "z");
}

TEST_CASE("mutated request bodies never throw and never get a 500 (cases not written by hand)") {
  const std::string seeds[] = {
      R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stream":true,)"
      R"("stream_options":{"include_usage":true},"logit_bias":{"1":-100,"2":5},"stop":["a","b"],"max_tokens":5,)"
      R"("temperature":0.5,"top_p":0.9,"top_k":4,"seed":3,"tools":[],"n":1})",
      R"({"prompt":"x","max_tokens":3,"echo":false,"logprobs":0,"suffix":"","best_of":1})",
      R"({"content":"x","add_special":true,"parse_special":false})",
      R"({"tokens":[0,1,2,7]})",
  };
  const std::string alphabet = "{}[],:\"0123456789-.eE truefalsnul\\u\xff\xc3";
  std::mt19937 rng(1234);
  int n_ok = 0, n_400 = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string body = seeds[iter % 4];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits && !body.empty(); ++k) {
      const size_t at = rng() % body.size();
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0: body[at] = c; break;
        case 1: body.insert(body.begin() + static_cast<long>(at), c); break;
        default: body.erase(at, 1 + rng() % 8); break;
      }
    }
    CAPTURE(body);
    std::optional<ApiError> results[4];
    GenRequest g;
    TokenizeRequest t;
    DetokenizeRequest d;
    REQUIRE_NOTHROW(results[0] = parse_generation_request(body, true, env(), &g));
    REQUIRE_NOTHROW(results[1] = parse_generation_request(body, false, env(), &g));
    REQUIRE_NOTHROW(results[2] = parse_tokenize_request(body, env(), &t));
    REQUIRE_NOTHROW(results[3] = parse_detokenize_request(body, env(), &d));
    for (const auto& e : results) {
      if (!e) {
        ++n_ok;
        continue;
      }
      ++n_400;
      REQUIRE((e->http == 400 || e->http == 404));
      REQUIRE(valid_json(error_text(*e)));
    }
  }
  CHECK(n_ok > 100);  // the mutations reach past the JSON parser
  CHECK(n_400 > 100);
}

TEST_CASE("kestrel serve --help documents every limit with its default") {
  FILE* p = popen((kestrel::test::cli_path() + " serve --help 2>&1").c_str(), "r");
  REQUIRE(p);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  CHECK(pclose(p) == 0);
  const kestrel::server::http::Limits h;
  const JsonLimits j;
  const std::pair<const char*, std::string> flags[] = {
      {"--max-body", std::to_string(h.max_body_bytes)},
      {"--max-json-depth", std::to_string(j.max_depth)},
      {"--max-messages", std::to_string(j.max_messages)},
      {"--header-timeout", "default 10"},
      {"--body-timeout", "default 60"},
      {"--max-connections", std::to_string(h.max_connections)},
      {"--max-connections-per-client", std::to_string(h.max_connections_per_client)},
      {"--http-threads", std::to_string(h.n_workers)},
  };
  for (const auto& [flag, dflt] : flags) {
    CAPTURE(flag);
    const size_t at = out.find(std::string("  ") + flag + " ");
    REQUIRE(at != std::string::npos);
    CHECK(out.substr(at, 160).find(dflt) != std::string::npos);  // on its line (or the next)
  }
}

TEST_CASE("tools, tool_choice and reasoning_format reach the request; tool-call arguments become objects") {
  GenRequest r;
  const std::string body = chat_with(
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"z":{},"a":{}}}}}],)"
      R"("tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false,"reasoning_format":"none")");
  REQUIRE_FALSE(parse_generation_request(body, true, env(), &r).has_value());
  CHECK(r.tool_choice == "f");
  CHECK_FALSE(r.parallel_tool_calls);
  CHECK(r.reasoning_inline);
  CHECK(r.tools_json.find(R"("z":{},"a":{})") != std::string::npos);  // the body's key order
  GenRequest h;
  REQUIRE_FALSE(parse_generation_request(
                    R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[)"
                    R"({"id":"c1","type":"function","function":{"name":"f","arguments":"{\"x\": 1}"}}]},)"
                    R"({"role":"tool","tool_call_id":"c1","content":"2"}]})",
                    true, env(), &h)
                    .has_value());
  const auto m = nlohmann::json::parse(h.messages_json);
  CHECK(m[1]["tool_calls"][0]["function"]["arguments"] == nlohmann::json::parse(R"({"x": 1})"));
  CHECK(m[2]["role"] == "tool");
}
