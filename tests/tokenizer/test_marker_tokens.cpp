// A chat family's marker tokens (chat/chat_syntax.h) in a real vocabulary: Llama 3's
// <|python_tag|> is a control token, hidden from text by default; as a marker it is shown by the
// streaming detokenizer and allowed by a grammar that spells its text, while other control
// tokens stay out of both.
#include <doctest/doctest.h>

#include <algorithm>

#include "chat/chat_syntax.h"
#include "sampling/grammar_matcher.h"
#include "tokenizer/tokenizer_test_util.h"

using namespace kestrel;

TEST_CASE("marker tokens: shown in the output and allowed under the grammar") {
  const std::string path = test::testdata_file("tokenizer/ggml-vocab-llama-bpe.gguf");
  if (path.empty()) return;
  auto tok = test::load_tokenizer(path);
  const ChatSyntax* llama3 = chat_syntax_named("llama3");
  REQUIRE(llama3);
  auto tag = tok->tokenize("<|python_tag|>", false, true);
  REQUIRE(tag.ok());
  REQUIRE(tag.value().size() == 1);
  const int32_t id = tag.value()[0];
  REQUIRE(tok->is_special(id));
  const std::vector<int32_t> ids = chat_marker_tokens(*llama3, *tok);
  CHECK(std::find(ids.begin(), ids.end(), id) != ids.end());
  CHECK(chat_marker_tokens(*chat_syntax_named("hermes"), *tok).empty());  // <tool_call> is plain text here

  StreamingDetokenizer hidden(*tok, false), shown(*tok, false);
  shown.render_also(ids);
  CHECK(hidden.push(id).empty());
  CHECK(shown.push(id) == "<|python_tag|>");
  auto eot = tok->tokenize("<|eot_id|>", false, true);
  REQUIRE(eot.ok());
  CHECK(shown.push(eot.value()[0]).empty());  // not a marker: still hidden

  const std::string gbnf = R"(root ::= "<|python_tag|>" "{")";
  auto with = make_grammar_matcher(gbnf, *tok, ids);
  auto without = make_grammar_matcher(gbnf, *tok);
  REQUIRE(with.ok());
  REQUIRE(without.ok());
  auto m1 = with.value()->allowed();
  auto m2 = without.value()->allowed();
  REQUIRE(m1.ok());
  REQUIRE(m2.ok());
  CHECK((*m1.value())[static_cast<size_t>(id)] == 1);
  CHECK((*m2.value())[static_cast<size_t>(id)] == 0);
  CHECK(with.value()->accept(id).ok());
  CHECK(with.value()->accept_text("{"));
  CHECK(with.value()->complete());
}
