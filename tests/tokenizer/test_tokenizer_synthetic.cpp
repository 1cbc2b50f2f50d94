// Small vocabularies built in memory with the GGUF writer: special-token matching (Hugging Face
// semantics and flags), SentencePiece-BPE byte fallback, WordPiece, and clean errors for bad
// tokenizer keys (unknown pre-tokenizer -> logged fallback, bad regex, unknown normalizer, ...).
#include <mutex>

#include "core/log.h"
#include "tokenizer_test_util.h"

using namespace kestrel;
using kestrel::test::ids_str;

namespace {

// GPT-2's byte -> printable character map (the test's own copy).
std::string byte_char(int b) {
  static std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    int extra = 0;
    for (int i = 0; i < 256; ++i) {
      const bool printable = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF);
      const int cp = printable ? i : 256 + extra++;
      std::string s;
      if (cp < 0x80) s += static_cast<char>(cp);
      else s += static_cast<char>(0xC0 | (cp >> 6)), s += static_cast<char>(0x80 | (cp & 0x3F));
      t[i] = s;
    }
    return t;
  }();
  return table[b];
}

struct Tok {
  std::string text;
  TokenType type;
  int32_t flags = 0;
};

// A byte-level vocabulary: the 256 byte tokens (ids 0..255), then `extra`.
gguf::Writer byte_level_writer(const std::vector<Tok>& extra, const std::vector<std::string>& merges) {
  std::vector<std::string> texts;
  std::vector<int32_t> types, flags;
  for (int b = 0; b < 256; ++b) texts.push_back(byte_char(b)), types.push_back(1), flags.push_back(0);
  for (const Tok& t : extra) texts.push_back(t.text), types.push_back(static_cast<int32_t>(t.type)), flags.push_back(t.flags);
  gguf::Writer w;
  w.set("tokenizer.ggml.model", gguf::Value::make_string("gpt2"));
  w.set("tokenizer.ggml.pre", gguf::Value::make_string("gpt-2"));
  w.set("tokenizer.ggml.tokens", gguf::Value::make_string_array(texts));
  w.set("tokenizer.ggml.token_type", gguf::Value::make_i32_array(types));
  w.set("tokenizer.kestrel.added_token_flags", gguf::Value::make_i32_array(flags));
  w.set("tokenizer.ggml.merges", gguf::Value::make_string_array(merges));
  return w;
}

Expected<std::unique_ptr<Tokenizer>> build(const gguf::Writer& w) {
  auto f = gguf::File::from_bytes(w.to_bytes(), "synthetic.gguf");
  REQUIRE_MESSAGE(f.ok(), f.status().to_string());
  return Tokenizer::from_gguf(*f.value());
}

std::vector<int32_t> ids_of(const std::string& s) {  // byte tokens of plain text (no merges)
  std::vector<int32_t> out;
  for (char c : s) out.push_back(static_cast<uint8_t>(c));
  return out;
}

std::vector<int32_t> cat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

}  // namespace

TEST_CASE("special tokens: parse_special, leftmost-longest, lstrip / rstrip / single_word") {
  gguf::Writer w = byte_level_writer({{"<mask>", TokenType::USER_DEFINED, kLStrip},   // 256
                                      {"<ctl>", TokenType::CONTROL, kRStrip},         // 257
                                      {"<sw>", TokenType::USER_DEFINED, kSingleWord}, // 258
                                      {"ab", TokenType::USER_DEFINED},                // 259
                                      {"bcd", TokenType::USER_DEFINED},               // 260
                                      {"<unk>", TokenType::UNKNOWN},                  // 261
                                      {"<unused>", TokenType::UNUSED}},               // 262
                                     {});
  auto t = build(w);
  REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  const Tokenizer& tok = *t.value();
  auto enc = [&](const std::string& s, bool parse) { return tok.tokenize(s, false, parse).value(); };

  // User-defined tokens match even without parse_special; lstrip swallows the space before.
  CHECK(enc("a <mask> b", false) == cat({ids_of("a"), {256}, ids_of(" b")}));
  // Control tokens only with parse_special; rstrip swallows the spaces after.
  CHECK(enc("a <ctl>  b", true) == cat({ids_of("a "), {257}, ids_of("b")}));
  CHECK(enc("a <ctl>  b", false) == ids_of("a <ctl>  b"));
  // single_word: no match inside a word.
  CHECK(enc("x<sw> y", false) == ids_of("x<sw> y"));
  CHECK(enc("x <sw> y", false) == cat({ids_of("x "), {258}, ids_of(" y")}));
  // Leftmost-longest (Hugging Face), not llama.cpp's longest-token-first: "ab" then "c", "d".
  CHECK(enc("abcd", false) == cat({{259}, ids_of("cd")}));
  CHECK(enc("xbcd", false) == cat({ids_of("x"), {260}}));
  // Unknown-type tokens need parse_special; unused tokens never match.
  CHECK(enc("<unk>", true) == std::vector<int32_t>{261});
  CHECK(enc("<unk>", false) == ids_of("<unk>"));
  CHECK(enc("<unused>", true) == ids_of("<unused>"));
  // Detokenization: control/unknown/unused hidden unless render_special, user-defined shown.
  const std::vector<int32_t> ids = {257, 256, 261, 262, 97};
  CHECK(tok.detokenize(ids, false) == "<mask>a");
  CHECK(tok.detokenize(ids, true) == "<ctl><mask><unk><unused>a");
  CHECK(tok.is_special(257));
  CHECK_FALSE(tok.is_special(256));
}

TEST_CASE("byte-level BPE: merges by rank, invalid UTF-8 stays lossless") {
  const std::string a = byte_char('a'), b = byte_char('b'), sp = byte_char(' ');
  // ids: 256 "ab", 257 "Ġa", 258 "abab"
  gguf::Writer w = byte_level_writer({{a + b, TokenType::NORMAL}, {sp + a, TokenType::NORMAL}, {a + b + a + b, TokenType::NORMAL}},
                                     {a + " " + b, sp + " " + a, a + b + " " + a + b});
  auto t = build(w);
  REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  const Tokenizer& tok = *t.value();
  CHECK(tok.info().algorithm == "bpe");
  CHECK(tok.info().n_merges == 3);
  CHECK(tok.tokenize("abab", false, false).value() == std::vector<int32_t>{258});
  CHECK(tok.tokenize("ababa", false, false).value() == std::vector<int32_t>{258, 'a'});
  // " ab": "Ġ a" (rank 1) and "a b" (rank 0) compete: rank 0 first.
  CHECK(tok.tokenize(" ab", false, false).value() == std::vector<int32_t>{' ', 256});
  const std::string bad = "a\xff\xc3(b\xe2\x82";
  auto ids = tok.tokenize(bad, false, false).value();
  CHECK(tok.detokenize(ids, false) == bad);
  StreamingDetokenizer sd(tok, false);
  std::string streamed;
  const std::vector<int32_t> emoji = tok.tokenize("é😀", false, false).value();
  for (int32_t id : emoji) streamed += sd.push(id);
  CHECK(streamed == "é😀");
  CHECK(sd.flush().empty());
}

TEST_CASE("SentencePiece-BPE (llama + merges): ranks, byte fallback, dummy prefix") {
  std::vector<std::string> texts = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    texts.push_back(buf);
    types.push_back(6);
  }
  const std::string sp = "\xe2\x96\x81";
  for (const std::string& s : {sp, std::string("a"), std::string("b"), sp + "a", std::string("ab"), sp + "ab"})
    texts.push_back(s), types.push_back(1);
  const int32_t id_sp_ab = static_cast<int32_t>(texts.size()) - 1, id_ab = id_sp_ab - 1;
  auto make = [&](bool prefix) {
    gguf::Writer w;
    w.set("tokenizer.ggml.model", gguf::Value::make_string("llama"));
    w.set("tokenizer.ggml.tokens", gguf::Value::make_string_array(texts));
    w.set("tokenizer.ggml.token_type", gguf::Value::make_i32_array(types));
    w.set("tokenizer.ggml.merges", gguf::Value::make_string_array({sp + " a", "a b", sp + "a b"}));
    w.set("tokenizer.ggml.add_space_prefix", gguf::Value::make_bool(prefix));
    return build(w);
  };
  auto t = make(true);
  REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  const Tokenizer& tok = *t.value();
  CHECK(tok.info().algorithm == "spm-bpe");
  CHECK(tok.tokenize("ab ab", false, false).value() == std::vector<int32_t>{id_sp_ab, id_sp_ab});
  CHECK(tok.tokenize("ab ab", true, false).value() == std::vector<int32_t>{1, id_sp_ab, id_sp_ab});
  // 'c' is no token: its byte token; '€' -> three byte tokens.
  CHECK(tok.tokenize("abc", false, false).value() == std::vector<int32_t>{id_sp_ab, 3 + 'c'});
  CHECK(tok.tokenize("\xe2\x82\xac", false, false).value() == std::vector<int32_t>{id_sp_ab - 5, 3 + 0xE2, 3 + 0x82, 3 + 0xAC});
  CHECK(tok.detokenize(tok.tokenize("ab ab€c", true, false).value(), false) == "ab ab€c");
  auto t2 = make(false);
  REQUIRE(t2.ok());
  CHECK(t2.value()->tokenize("ab ab", false, false).value() == std::vector<int32_t>{id_ab, id_sp_ab});
  CHECK(t2.value()->detokenize(std::vector<int32_t>{id_sp_ab}, false) == " ab");
}

TEST_CASE("WordPiece with Hugging Face '##' continuations") {
  gguf::Writer w;
  w.set("tokenizer.ggml.model", gguf::Value::make_string("bert"));
  w.set("tokenizer.ggml.tokens", gguf::Value::make_string_array(
                                     {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "hel", "##lo", "world", "##s", ",", "cafe"}));
  w.set("tokenizer.ggml.token_type", gguf::Value::make_i32_array({3, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1}));
  w.set("tokenizer.ggml.bos_token_id", gguf::Value::make_u32(2));
  w.set("tokenizer.ggml.seperator_token_id", gguf::Value::make_u32(3));
  w.set("tokenizer.ggml.unknown_token_id", gguf::Value::make_u32(1));
  auto t = build(w);
  REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  const Tokenizer& tok = *t.value();
  CHECK(tok.info().algorithm == "wpm");
  CHECK(tok.tokenize("Hello, Worlds", false, false).value() == std::vector<int32_t>{4, 9, 7, 8});
  CHECK(tok.tokenize("Hello, Worlds", true, false).value() == std::vector<int32_t>{2, 4, 9, 7, 8, 3});
  CHECK(tok.tokenize("Café xyz", false, false).value() == std::vector<int32_t>{10, 1});
  CHECK(tok.detokenize(std::vector<int32_t>{2, 4, 9, 7, 8, 3}, false) == "hello , worlds");
}

namespace {
std::mutex g_log_mu;
std::vector<std::string> g_log;
void capture(kestrel_log_level, const char* msg, void*) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_log.push_back(msg);
}
}  // namespace

TEST_CASE("unknown pre-tokenizer: one logged warning and the gpt-2 regex") {
  gguf::Writer w = byte_level_writer({}, {});
  w.set("tokenizer.ggml.pre", gguf::Value::make_string("no-such-pre"));
  g_log.clear();
  log_set_callback(capture, nullptr);
  auto t = build(w);
  log_set_callback(nullptr, nullptr);
  REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  CHECK(t.value()->info().pre_source == "fallback:gpt-2");
  REQUIRE(g_log.size() == 1);
  CHECK(g_log[0].find("no-such-pre") != std::string::npos);
  CHECK(t.value()->tokenize("Hi there", false, false).value() == ids_of("Hi there"));
}

TEST_CASE("bad tokenizer keys are clean errors naming the key") {
  auto error_of = [](gguf::Writer w) { return build(w).status(); };
  {
    gguf::Writer w = byte_level_writer({}, {});
    w.set("tokenizer.kestrel.pre_regex", gguf::Value::make_string_array({R"(\p{L}+)", "(unclosed"}));
    const Status st = error_of(w);
    CHECK(st.code() == KESTREL_ERR_FORMAT);
    CHECK(st.message().find("tokenizer.kestrel.pre_regex") != std::string::npos);
    CHECK(st.message().find("[1] '(unclosed'") != std::string::npos);
  }
  {
    gguf::Writer w = byte_level_writer({}, {});
    w.set("tokenizer.kestrel.pre_regex", gguf::Value::make_string("\\s+"));
    CHECK(error_of(w).code() == KESTREL_ERR_FORMAT);
  }
  {
    gguf::Writer w = byte_level_writer({}, {});
    w.set("tokenizer.kestrel.normalizer", gguf::Value::make_string("nfkc"));
    const Status st = error_of(w);
    CHECK(st.code() == KESTREL_ERR_UNSUPPORTED);
    CHECK(st.message().find("'nfkc'") != std::string::npos);
  }
  {
    gguf::Writer w = byte_level_writer({}, {"ab"});
    const Status st = error_of(w);
    CHECK(st.code() == KESTREL_ERR_FORMAT);
    CHECK(st.message().find("tokenizer.ggml.merges") != std::string::npos);
  }
  {
    gguf::Writer w = byte_level_writer({}, {});
    w.set("tokenizer.ggml.merges", gguf::Value::make_i32_array({1, 2}));
    CHECK(error_of(w).code() == KESTREL_ERR_FORMAT);
  }
  {
    gguf::Writer w = byte_level_writer({}, {});
    w.set("tokenizer.kestrel.added_token_flags", gguf::Value::make_i32_array({0, 1}));
    CHECK(error_of(w).message().find("added_token_flags") != std::string::npos);
  }
  {
    gguf::Writer w = byte_level_writer({}, {});
    w.set("tokenizer.kestrel.ignore_merges", gguf::Value::make_string("yes"));
    CHECK(error_of(w).message().find("ignore_merges") != std::string::npos);
  }
  {
    gguf::Writer w = byte_level_writer({}, {});
    w.set("tokenizer.ggml.add_bos_token", gguf::Value::make_string("true"));
    CHECK(error_of(w).code() == KESTREL_ERR_FORMAT);
  }
}

TEST_CASE("a kestrel pre_regex overrides the built-in table") {
  gguf::Writer w = byte_level_writer({}, {});
  w.set("tokenizer.kestrel.pre_regex", gguf::Value::make_string_array({R"(\d{1,2})", R"(\p{L}+)"}));
  auto t = build(w);
  REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  CHECK(t.value()->info().pre_source == "tokenizer.kestrel.pre_regex");
  CHECK(t.value()->info().pre_regex.size() == 2);
  CHECK(t.value()->tokenize("ab12345", false, false).value() == ids_of("ab12345"));
}
