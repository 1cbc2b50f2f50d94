// SentencePiece specifics: the stories260K prompt, streaming detokenization and vocabulary
// errors. (The llama.cpp vectors of every vocabulary are in test_tokenizer_vectors.cpp.)
#include "tokenizer_test_util.h"

using namespace kestrel;

namespace {

std::unique_ptr<Tokenizer> load(const std::string& path) { return test::load_tokenizer(path); }

}  // namespace

TEST_CASE("stories260K specials and the prompt of the references") {
  const std::string path = test::testdata_file("models/stories260K-f32.gguf");
  if (path.empty()) return;
  auto tok = load(path);
  CHECK(tok->bos() == 1);
  CHECK(tok->eos() == 2);
  CHECK(tok->add_bos());
  CHECK(tok->is_eog(2));
  CHECK(tok->tokenize("Once upon a time", true, false).value() == std::vector<int32_t>{1, 403, 407, 261, 378});
  CHECK(tok->tokenize("", true, false).value() == std::vector<int32_t>{1});
  // "<s>" is plain text unless parse_special.
  CHECK(tok->tokenize("<s>", false, true).value() == std::vector<int32_t>{1});
  CHECK(tok->tokenize("<s>", false, false).value() != std::vector<int32_t>{1});
  CHECK(tok->check_ids(std::vector<int32_t>{0, 511}).ok());
  CHECK(tok->check_ids(std::vector<int32_t>{512}).code() == KESTREL_ERR_OUT_OF_RANGE);
}

TEST_CASE("streaming detokenizer never emits a partial UTF-8 sequence") {
  const std::string path = test::testdata_file("models/stories260K-f32.gguf");
  if (path.empty()) return;
  auto tok = load(path);
  const std::string text = "naïve café — 日本語 😀 ok";
  auto ids = tok->tokenize(text, false, false).value();
  CHECK(ids.size() > text.size() / 2);  // mostly byte tokens
  StreamingDetokenizer sd(*tok, false);
  std::string joined;
  for (int32_t id : ids) {
    const std::string piece = sd.push(id);
    // Each emitted piece is valid UTF-8 on its own: it ends on a boundary.
    size_t i = 0;
    while (i < piece.size()) i += utf8_len(static_cast<uint8_t>(piece[i]));
    CHECK(i == piece.size());
    joined += piece;
  }
  joined += sd.flush();
  CHECK(joined == " " + text);  // the streamed text keeps the dummy-prefix space
  CHECK(tok->detokenize(ids, false) == text);
  // A cut-off sequence is flushed as U+FFFD.
  StreamingDetokenizer cut(*tok, false);
  auto emoji = tok->tokenize("😀", false, false).value();
  for (size_t i = 0; i + 1 < emoji.size(); ++i) cut.push(emoji[i]);
  CHECK(cut.flush() == "\xef\xbf\xbd");
}

TEST_CASE("unknown vocabulary type and broken vocabularies are clean errors") {
  gguf::Writer w;
  w.set("tokenizer.ggml.model", gguf::Value::make_string("nonsense"));
  w.set("tokenizer.ggml.tokens", gguf::Value::make_string_array({"a", "b"}));
  auto f = gguf::File::from_bytes(w.to_bytes(), "v.gguf");
  REQUIRE(f.ok());
  auto t = Tokenizer::from_gguf(*f.value());
  CHECK(t.status().code() == KESTREL_ERR_UNSUPPORTED);
  CHECK(t.status().message().find("nonsense") != std::string::npos);

  gguf::Writer w2;
  w2.set("tokenizer.ggml.model", gguf::Value::make_string("llama"));
  w2.set("tokenizer.ggml.tokens", gguf::Value::make_string_array({"a", "b"}));
  w2.set("tokenizer.ggml.scores", gguf::Value::make_f32_array({0.0f}));
  auto f2 = gguf::File::from_bytes(w2.to_bytes(), "v2.gguf");
  REQUIRE(f2.ok());
  CHECK(Tokenizer::from_gguf(*f2.value()).status().code() == KESTREL_ERR_FORMAT);
}
