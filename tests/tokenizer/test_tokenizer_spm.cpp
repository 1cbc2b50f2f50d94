// SentencePiece vocabularies against llama.cpp's test vectors (add_special=false,
// parse_special=false), round trips, streaming detokenization and vocabulary errors.
#include <doctest/doctest.h>

#include "common/testdata.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

using namespace kestrel;

namespace {

std::vector<std::string> split_cases(const std::string& inp) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  size_t pos = 0;
  for (size_t p; (p = inp.find(sep, pos)) != std::string::npos; pos = p + sep.size()) out.push_back(inp.substr(pos, p - pos));
  return out;
}

std::vector<std::vector<int32_t>> read_out(const std::string& text) {
  std::vector<std::vector<int32_t>> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t e = text.find('\n', pos);
    if (e == std::string::npos) e = text.size();
    std::vector<int32_t> ids;
    const std::string line = text.substr(pos, e - pos);
    for (size_t i = 0; i < line.size();) {
      while (i < line.size() && line[i] == ' ') ++i;
      size_t j = i;
      while (j < line.size() && line[j] != ' ') ++j;
      if (j > i) ids.push_back(std::stoi(line.substr(i, j - i)));
      i = j;
    }
    out.push_back(ids);
    pos = e + 1;
  }
  return out;
}

std::unique_ptr<Tokenizer> load(const std::string& path) {
  auto f = gguf::File::open(path);
  REQUIRE_MESSAGE(f.ok(), f.status().to_string());
  auto t = Tokenizer::from_gguf(*f.value());
  REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  return std::move(t.value());
}

void check_vectors(const std::string& vocab_rel, const std::string& vectors_rel) {
  const std::string vocab = test::testdata_file(vocab_rel);
  const std::string inp = test::testdata_file(vectors_rel + ".inp");
  const std::string outp = test::testdata_file(vectors_rel + ".out");
  if (vocab.empty() || inp.empty() || outp.empty()) return;
  auto tok = load(vocab);
  const auto cases = split_cases(test::read_text_file(inp));
  const auto want = read_out(test::read_text_file(outp));
  REQUIRE(cases.size() == 46);
  REQUIRE(want.size() >= cases.size());
  int roundtrip = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    auto ids = tok->tokenize(cases[i], false, false);
    REQUIRE(ids.ok());
    CHECK_MESSAGE(ids.value() == want[i], vocab_rel << " case " << i << ": '" << cases[i] << "'");
    // Round trip: SentencePiece keeps every byte except the dummy-prefix space it adds itself
    // (so texts that start with a space lose exactly that one).
    const std::string back = tok->detokenize(ids.value(), false);
    const std::string& text = cases[i];
    const bool ok = back == text || (!text.empty() && text[0] == ' ' && back == text.substr(1));
    CHECK_MESSAGE(ok, vocab_rel << " round trip of case " << i);
    roundtrip += ok;
  }
  MESSAGE(vocab_rel << ": " << cases.size() << " vectors, " << roundtrip << " round trips");
}

}  // namespace

TEST_CASE("SentencePiece vectors: stories260K (byte fallback), llama-spm, phi-3") {
  check_vectors("models/stories260K-f32.gguf", "tokenizer/stories260K");
  check_vectors("tokenizer/ggml-vocab-llama-spm.gguf", "tokenizer/ggml-vocab-llama-spm.gguf");
  check_vectors("tokenizer/ggml-vocab-phi-3.gguf", "tokenizer/ggml-vocab-phi-3.gguf");
}

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
