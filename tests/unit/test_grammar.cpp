// GBNF grammars (sampling/grammar.h) on text, and JSON Schema -> GBNF (sampling/json_schema.h):
// what a grammar accepts, checked against std::regex on random strings; the schema grammars
// against valid and invalid instances; every refusal names its keyword.
#include <doctest/doctest.h>

#include <random>
#include <regex>
#include <string>

#include "sampling/grammar.h"
#include "sampling/grammar_matcher.h"
#include "sampling/json_schema.h"

namespace kestrel {
namespace {

std::shared_ptr<const Grammar> grammar(const std::string& gbnf) {
  auto g = parse_grammar(gbnf);
  REQUIRE_MESSAGE(g.ok(), g.status().to_string());
  return std::make_shared<const Grammar>(std::move(g.value()));
}

// Whether the grammar accepts the whole text.
bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& text) {
  return GrammarMatcher(g, nullptr).would_accept(text, true);
}

std::string parse_error(const std::string& gbnf) {
  auto g = parse_grammar(gbnf);
  return g.ok() ? "" : g.status().to_string();
}

}  // namespace

TEST_CASE("grammar: literals, classes, repetition and rules") {
  auto g = grammar(R"G(root ::= "a"{2,3} tail
tail ::= [x-z] | "!" [^a-c]? | ( "(" root ")" )
)G");
  CHECK(accepts(g, "aax"));
  CHECK(accepts(g, "aaaz"));
  CHECK(accepts(g, "aa!"));
  CHECK(accepts(g, "aa!d"));
  CHECK(accepts(g, "aa(aay)"));
  CHECK_FALSE(accepts(g, "ax"));
  CHECK_FALSE(accepts(g, "aaaax"));
  CHECK_FALSE(accepts(g, "aa!b"));
  CHECK_FALSE(accepts(g, "aa(aay"));
  CHECK_FALSE(accepts(g, "aa"));  // a prefix, not complete
  CHECK(GrammarMatcher(g, nullptr).would_accept("aa"));

  // Escapes, any character, multi-byte classes, comments and line breaks inside groups.
  auto u = grammar("# a comment\nroot ::= \"\\x41\\u00e9\\n\" [\u03b1-\u03c9]+ . ( \"x\" |\n  \"\\\"\" )  # tail\n");
  CHECK(accepts(u, "A\xc3\xa9\n\xce\xb1\xce\xb2!x"));
  CHECK(accepts(u, "A\xc3\xa9\n\xcf\x89\xe2\x82\xac\""));
  CHECK_FALSE(accepts(u, "A\xc3\xa9\nab!x"));
  // A partial UTF-8 sequence is accepted only while some completion can match.
  GrammarMatcher m(u, nullptr);
  CHECK(m.would_accept("A\xc3\xa9\n\xce"));       // U+0380..U+03BF: some in [α-ω]
  CHECK_FALSE(m.would_accept("A\xc3\xa9\n\xd0"));  // U+0400..: none
  CHECK_FALSE(m.would_accept("A\xc3\xa9\n\x80"));  // a continuation byte first
  // A lead byte's smallest value is its length's smallest (not overlong): 0xF0 starts U+10000.
  auto brace = grammar("root ::= \"{\" | [\u0800-\u0801]");
  CHECK_FALSE(GrammarMatcher(brace, nullptr).would_accept("\xf0"));
  CHECK_FALSE(GrammarMatcher(brace, nullptr).would_accept("\xc2"));
  CHECK(GrammarMatcher(brace, nullptr).would_accept("\xe0"));
  CHECK_FALSE(GrammarMatcher(brace, nullptr).would_accept("\xe0\xa1"));
  CHECK_FALSE(GrammarMatcher(brace, nullptr).would_accept("\xf4\x90"));  // past U+10FFFF
}

TEST_CASE("grammar: repetitions of rules that can match nothing stay small") {
  // x{5,40} over a rule with two empty alternatives: 2^40 ways to match nothing, one state.
  auto g = grammar("root ::= x{5,40} \"b\"\nx ::= \"\" | \"\" | \"a\"");
  CHECK(accepts(g, "b"));
  CHECK(accepts(g, "aaab"));
  CHECK(accepts(g, std::string(40, 'a') + "b"));
  CHECK_FALSE(accepts(g, std::string(41, 'a') + "b"));
  // A grammar whose parse grows with every character ends the text, in bounded time.
  auto r = grammar("root ::= .{1,40} root .");
  GrammarMatcher m(r, nullptr);
  CHECK_FALSE(m.accept_text(std::string(256, 'x')));
}

TEST_CASE("grammar: random strings against an equivalent regex") {
  struct Pair {
    const char* gbnf;
    const char* regex;
  };
  const Pair pairs[] = {
      {"root ::= ( \"ab\" | [c-e]+ ){1,3} \"x\"?", "(ab|[c-e]+){1,3}x?"},
      {"root ::= a* b+ ( \"c\" | d )?\na ::= \"a\"\nb ::= \"b\" | \"ab\"\nd ::= [d-e]{2}", "a*(b|ab)+(c|[d-e]{2})?"},
      {"root ::= [^x]{0,4} \"x\" root?", "([^x]{0,4}x)+"},
  };
  std::mt19937 rng(7);
  const std::string alphabet = "abcdex";
  for (const Pair& p : pairs) {
    CAPTURE(p.gbnf);
    auto g = grammar(p.gbnf);
    const std::regex re(p.regex);
    for (int n = 0; n < 3000; ++n) {
      std::string s(static_cast<size_t>(rng() % 9), 'a');
      for (char& c : s) c = alphabet[rng() % alphabet.size()];
      CAPTURE(s);
      CHECK(accepts(g, s) == std::regex_match(s, re));
    }
  }
}

TEST_CASE("grammar: errors name the place or the rule") {
  CHECK(parse_error("root ::= foo").find("undefined rule 'foo'") != std::string::npos);
  CHECK(parse_error("start ::= \"a\"").find("no 'root' rule") != std::string::npos);
  CHECK(parse_error("root ::= root \"a\"").find("left recursion") != std::string::npos);
  CHECK(parse_error("root ::= ( \"a\"? )*").find("left recursion") != std::string::npos);
  CHECK(parse_error("root ::= x\nx ::= y \"a\"\ny ::= \"\" | x").find("left recursion") != std::string::npos);
  CHECK(parse_error("root ::= \"abc").find("unterminated string") != std::string::npos);
  CHECK(parse_error("root ::= [a-").find("unterminated character class") != std::string::npos);
  CHECK(parse_error("root ::= \"\\q\"").find("unknown escape") != std::string::npos);
  CHECK(parse_error("root ::= \"a\"{5,2}").find("n < m") != std::string::npos);
  CHECK(parse_error("root ::= \"a\"{2000}").find("over 1000") != std::string::npos);
  CHECK(parse_error("root ::= \"a\"\nroot ::= \"b\"").find("defined twice") != std::string::npos);
  CHECK(parse_error("root ::= * \"a\"").find("nothing before it") != std::string::npos);
  CHECK(parse_error("root ::= \"a\"\n\nfoo ::= \"b\" )").find("line 3, column 13") != std::string::npos);
  // Hostile sizes: a long literal repeated a thousand times, groups nested a hundred deep.
  CHECK(parse_error("root ::= \"" + std::string(2000, 'x') + "\"{1000}").find("grows past") != std::string::npos);
  CHECK(parse_error("root ::= " + std::string(100, '(') + "\"a\"" + std::string(100, ')')).find("nested deeper") !=
        std::string::npos);
  CHECK(parse_error("root ::= " + std::string(60, '(') + "\"a\"" + std::string(60, ')')).empty());
}

namespace {
std::shared_ptr<const Grammar> schema_grammar(const std::string& schema) {
  auto text = json_schema_to_gbnf(schema);
  REQUIRE_MESSAGE(text.ok(), text.status().to_string());
  return grammar(text.value());
}
std::string schema_error(const std::string& schema) {
  auto text = json_schema_to_gbnf(schema);
  return text.ok() ? "" : text.status().to_string();
}
}  // namespace

TEST_CASE("json schema: nested objects, arrays, enums, refs and formats") {
  auto g = schema_grammar(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "minLength": 1, "maxLength": 8},
      "age": {"type": "integer", "minimum": 0},
      "tags": {"type": "array", "items": {"enum": ["a", "b", 3]}, "minItems": 1, "maxItems": 2},
      "home": {"$ref": "#/$defs/place"},
      "when": {"type": "string", "format": "date-time"},
      "id": {"type": "string", "format": "uuid"},
      "score": {"type": ["number", "null"]}
    },
    "required": ["name", "tags"],
    "additionalProperties": false,
    "$defs": {"place": {"type": "object", "properties": {"city": {"const": "Oslo"}, "next": {"anyOf": [{"$ref": "#/$defs/place"}, {"type": "null"}]}},
                        "required": ["city"], "additionalProperties": false}}
  })");
  CHECK(accepts(g, R"({"name":"x","tags":["a"]})"));
  CHECK(accepts(g, "{ \"name\": \"Ann\",\n  \"age\": 0, \"tags\": [3, \"b\"] }"));
  CHECK(accepts(g, R"({"name":"x","tags":["a"],"home":{"city":"Oslo","next":{"city":"Oslo","next":null}}})"));
  CHECK(accepts(g, R"({"name":"x","age":42,"tags":["a"],"when":"2026-11-27T07:05:28.5Z","id":"0123abcd-0000-4000-8000-00000000beef","score":-1.5e3})"));
  CHECK(accepts(g, R"({"name":"\u00e9\"","tags":["a"],"score":null})"));
  CHECK_FALSE(accepts(g, R"({"tags":["a"]})"));                    // name is required
  CHECK_FALSE(accepts(g, R"({"name":"","tags":["a"]})"));          // minLength
  CHECK_FALSE(accepts(g, R"({"name":"123456789","tags":["a"]})"));  // maxLength
  CHECK_FALSE(accepts(g, R"({"name":"x","tags":[]})"));             // minItems
  CHECK_FALSE(accepts(g, R"({"name":"x","tags":["a","b","a"]})"));  // maxItems
  CHECK_FALSE(accepts(g, R"({"name":"x","tags":["c"]})"));          // enum
  CHECK_FALSE(accepts(g, R"({"name":"x","age":-1,"tags":["a"]})"));  // minimum 0
  CHECK_FALSE(accepts(g, R"({"name":"x","tags":["a"],"other":1})"));  // additionalProperties
  CHECK_FALSE(accepts(g, R"({"tags":["a"],"name":"x"})"));          // the schema's order
  CHECK_FALSE(accepts(g, R"({"name":"x","tags":["a"],"home":{"city":"Bergen"}})"));
  CHECK_FALSE(accepts(g, R"({"name":"x","tags":["a"],"when":"2026-13-01T00:00:00Z"})"));

  // Additional properties by default, and of a schema.
  auto open = schema_grammar(R"({"properties": {"a": {"type": "boolean"}}})");
  CHECK(accepts(open, R"({"a":true,"b":[1,{"c":null}]})"));
  CHECK(accepts(open, R"({"b":1})"));
  CHECK(accepts(open, R"({})"));
  auto typed = schema_grammar(R"({"type": "object", "additionalProperties": {"type": "integer"}})");
  CHECK(accepts(typed, R"({"x":1,"y":2})"));
  CHECK_FALSE(accepts(typed, R"({"x":"1"})"));
  // JSON mode.
  auto any = grammar(json_value_gbnf(true));
  CHECK(accepts(any, R"({"a":[1,2.5,"x",true,null,{}]})"));
  CHECK_FALSE(accepts(any, R"([1])"));
  CHECK_FALSE(accepts(any, R"({"a":01})"));
}

TEST_CASE("json schema: what cannot be enforced is refused by name") {
  for (const char* kw : {"pattern", "maximum", "uniqueItems", "not", "if", "patternProperties", "minProperties", "multipleOf",
                         "prefixItems", "contains", "exclusiveMaximum"}) {
    CAPTURE(kw);
    const std::string schema = std::string(R"({"type": "object", "properties": {"p": {")") + kw + R"(": 1}}})";
    const std::string err = schema_error(schema);
    CHECK(err.find(std::string("'") + kw + "'") != std::string::npos);
    CHECK(err.find("/properties/p") != std::string::npos);
  }
  CHECK(schema_error(R"({"type": "integer", "minimum": 5})").find("'minimum': 5") != std::string::npos);
  CHECK(schema_error(R"({"type": "string", "format": "email"})").find("'format': 'email'") != std::string::npos);
  CHECK(schema_error(R"({"allOf": [{"type": "string"}, {"minLength": 2}]})").find("'allOf' of more than one") != std::string::npos);
  CHECK(schema_error(R"({"$ref": "https://example.com/s.json"})").find("'$ref'") != std::string::npos);
  CHECK(schema_error(R"({"type": "object", "required": ["x"], "properties": {}})").find("required property 'x'") != std::string::npos);
  CHECK(schema_error(R"({"type": "strnig"})").find("unknown type 'strnig'") != std::string::npos);
  CHECK(schema_error(R"({"type": "object")").find("not valid JSON") != std::string::npos);
  CHECK(schema_error("false").find("matches nothing") != std::string::npos);
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += R"({"type": "array", "items": )";
  deep += "{}" + std::string(100, '}');
  CHECK(schema_error(deep).find("nested deeper than 64") != std::string::npos);
  CHECK(schema_error(R"({"anyOf": [{"$ref": "#"}, {"type": "null"}]})").find("left recursion") != std::string::npos);
}

}  // namespace kestrel
