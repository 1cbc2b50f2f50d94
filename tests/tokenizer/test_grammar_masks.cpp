// Token masks of the grammar matcher (sampling/grammar_matcher.h) over real vocabularies: the
// trie walk must allow exactly the tokens whose bytes the grammar accepts from the current state
// (checked token by token against would_accept), along a text tokenized by the vocabulary itself
// (so pieces that split a UTF-8 character, and SentencePiece's byte-fallback tokens, occur), and
// end-of-generation tokens exactly where the text is complete.
#include <doctest/doctest.h>

#include "sampling/grammar_matcher.h"
#include "sampling/json_schema.h"
#include "tokenizer/tokenizer_test_util.h"

namespace kestrel {

namespace {

void check_masks_along(const Tokenizer& tok, const std::string& gbnf, const std::string& text) {
  CAPTURE(text);
  auto m = make_grammar_matcher(gbnf, tok);
  REQUIRE_MESSAGE(m.ok(), m.status().to_string());
  GrammarMatcher& g = *m.value();
  auto ids = tok.tokenize(text, false, false);
  REQUIRE(ids.ok());
  const auto trie = TokenTrie::of(tok);
  std::vector<int32_t> path = ids.value();
  path.push_back(tok.eos());
  // The oracle (would_accept per token) costs most; in a sanitizer build each step checks every
  // fourth id, a different quarter each step, and the text's own token.
  const int32_t stride = test::thorough() ? 1 : 4;
  for (size_t step = 0; step < path.size(); ++step) {
    CAPTURE(step);
    auto mask = g.allowed();
    REQUIRE(mask.ok());
    int64_t wrong = 0, allowed = 0;
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
      if (stride > 1 && id % stride != static_cast<int32_t>(step % stride) && id != path[step]) continue;
      bool want = false;
      if (trie->is_eog(id)) want = g.would_accept("", true);
      else if (!tok.is_special(id) && !trie->piece(id).empty()) want = g.would_accept(trie->piece(id));
      wrong += (*mask.value())[static_cast<size_t>(id)] != (want ? 1 : 0);
      allowed += want;
    }
    CHECK(wrong == 0);
    CHECK(allowed > 0);
    REQUIRE_MESSAGE((*mask.value())[static_cast<size_t>(path[step])] == 1, "the text's own token " << path[step]);
    REQUIRE(g.accept(path[step]).ok());
  }
  CHECK(g.complete());
}

const char* kText = "{\"name\": \"Åsa \xe2\x80\x94 \xf0\x9f\x98\x80 caf\xc3\xa9\", \"n\": [12, -3.5e2]}";
const char* kSchema = R"({"type": "object", "properties": {"name": {"type": "string"},
  "n": {"type": "array", "items": {"type": "number"}, "maxItems": 4}}, "required": ["name", "n"],
  "additionalProperties": false})";

}  // namespace

TEST_CASE("grammar masks: byte-level BPE (128k vocabulary) and SentencePiece with byte fallback") {
  for (const char* file : {"tokenizer/ggml-vocab-llama-bpe.gguf", "tokenizer/ggml-vocab-llama-spm.gguf"}) {
    CAPTURE(file);
    const std::string path = test::testdata_file(file);
    if (path.empty()) continue;
    auto tok = test::load_tokenizer(path);
    auto gbnf = json_schema_to_gbnf(kSchema);
    REQUIRE(gbnf.ok());
    check_masks_along(*tok, gbnf.value(), kText);
    check_masks_along(*tok, json_value_gbnf(false), kText);
    // Counted repetitions past a token's length share masks (lifted states) but for the long
    // tokens: a long string under minLength / maxLength, near and far from both bounds.
    // A string of 72 code points: a run of 60 dashes (long tokens), a 3-byte character.
    const std::string text = "[\"ab cd " + std::string(60, '-') + " \xe2\x80\x94 end\"]";
    for (const char* bounds : {R"("minLength": 40, "maxLength": 200)", R"("maxLength": 72)", R"("minLength": 70)",
                               R"("minLength": 90)"}) {
      CAPTURE(bounds);
      auto g = json_schema_to_gbnf(std::string(R"({"type": "array", "items": {"type": "string", )") + bounds + "}}");
      REQUIRE(g.ok());
      check_masks_along(*tok, g.value(), bounds == std::string(R"("minLength": 90)") ? "[\"" + std::string(95, 'a') + "\"]" : text);
    }
    // Every count of a short chain shares its top state's mask (lifted states): nested bounded
    // repetitions, multi-character items, and items that can match nothing.
    auto nested = json_schema_to_gbnf(R"({"type": "array", "maxItems": 3, "items": {"type": "string", "maxLength": 10}})");
    REQUIRE(nested.ok());
    check_masks_along(*tok, nested.value(), "[\"abc def\", \"\xe2\x80\x94x\", \"0123456789\"]");
    // (" "?: SentencePiece writes a space before the first word.)
    check_masks_along(*tok, "root ::= \" \"? (\"ab\" | [0-9]){3,20} (\"-\" [a-z]{2,5}){0,3}", "ab12ab-abc-de");
    check_masks_along(*tok, "root ::= \" \"? (\"a\" | \"\"){2,40} \"z\"", "aaaz");
  }
}

TEST_CASE("grammar masks: a token the grammar does not allow is refused") {
  const std::string path = test::testdata_file("tokenizer/ggml-vocab-llama-bpe.gguf");
  if (path.empty()) return;
  auto tok = test::load_tokenizer(path);
  auto m = make_grammar_matcher("root ::= \"yes\" | \"no\"", *tok);
  REQUIRE(m.ok());
  auto ids = tok->tokenize("maybe", false, false);
  REQUIRE(ids.ok());
  const Status st = m.value()->accept(ids.value()[0]);
  CHECK(st.code() == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK_FALSE(m.value()->allowed().ok());
  CHECK_FALSE(m.value()->accept(tok->eos()).ok());
}

}  // namespace kestrel
