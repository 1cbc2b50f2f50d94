// Unicode helpers (NFC against known Unicode results, categories, lowercase), the pre-tokenizer
// table (every preset compiles; splits of known strings) and the BPE merge loop's linearity.
#include <chrono>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer_test_util.h"

using namespace kestrel;

TEST_CASE("NFC: composition, ordering, singletons, exclusions, Hangul, invalid bytes") {
  using unicode::nfc;
  CHECK(nfc("Cafe\xcc\x81") == "Caf\xc3\xa9");                 // e + U+0301 -> U+00E9
  CHECK(nfc("Caf\xc3\xa9") == "Caf\xc3\xa9");                  // already NFC
  CHECK(nfc("plain ASCII") == "plain ASCII");
  CHECK(nfc("\xe2\x84\xa6") == "\xce\xa9");                    // U+2126 OHM SIGN -> U+03A9 (singleton)
  CHECK(nfc("\xe0\xa4\x95\xe0\xa4\xbc") == "\xe0\xa4\x95\xe0\xa4\xbc");  // U+0915 U+093C: U+0958 is excluded
  CHECK(nfc("\xe0\xa5\x98") == "\xe0\xa4\x95\xe0\xa4\xbc");    // U+0958 decomposes and stays decomposed
  CHECK(nfc("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8") == "\xea\xb0\x81");  // jamo G A G -> U+AC01
  CHECK(nfc("\xea\xb0\x80\xe1\x86\xa8") == "\xea\xb0\x81");    // LV + T -> LVT
  // a + U+0323 (ccc 220) + U+0302 (ccc 230), and the other order: both -> U+1EAD.
  CHECK(nfc("a\xcc\xa3\xcc\x82") == "\xe1\xba\xad");
  CHECK(nfc("a\xcc\x82\xcc\xa3") == "\xe1\xba\xad");
  // U+1E0B U+0323 -> U+1E0D U+0307 (reordering then a different composition).
  CHECK(nfc("\xe1\xb8\x8b\xcc\xa3") == "\xe1\xb8\x8d\xcc\x87");
  // Invalid bytes pass through and act as boundaries.
  CHECK(nfc("e\xff\xcc\x81") == "e\xff\xcc\x81");
  CHECK(nfc("\xcc\x81") == "\xcc\x81");  // a lone combining mark
}

TEST_CASE("character properties") {
  CHECK(unicode::category('a') == unicode::Category::Letter);
  CHECK(unicode::category(0x4E00) == unicode::Category::Letter);
  CHECK(unicode::category(0x0301) == unicode::Category::Mark);
  CHECK(unicode::category(0x0663) == unicode::Category::Number);
  CHECK(unicode::category(0x3002) == unicode::Category::Punctuation);
  CHECK(unicode::category('$') == unicode::Category::Symbol);
  CHECK(unicode::category(0x3000) == unicode::Category::Separator);
  CHECK(unicode::category(0x00AD) == unicode::Category::Control);
  CHECK(unicode::category(0x0378) == unicode::Category::Unassigned);
  CHECK(unicode::to_lower('Q') == 'q');
  CHECK(unicode::to_lower(0x0130) == 'i');     // İ -> i (first code point of "i̇")
  CHECK(unicode::to_lower(0x1E9E) == 0x00DF);  // ẞ -> ß
  CHECK(unicode::to_lower(0x0410) == 0x0430);  // Cyrillic А
  CHECK(unicode::to_lower(0x0101) == 0x0101);
  CHECK(unicode::nfd_first(0x00E9) == 'e');
  CHECK(unicode::nfd_first(0x1EAD) == 'a');
  CHECK(unicode::nfd_first(0xAC01) == 0x1100);
  CHECK(unicode::is_whitespace(0x3000));
  CHECK_FALSE(unicode::is_whitespace(0x200B));
  size_t i = 0;
  CHECK(unicode::next_cp("\xed\xa0\x80", i) == unicode::kInvalid);  // a surrogate
  CHECK(i == 1);
}

TEST_CASE("every built-in pre-tokenizer compiles; known splits") {
  for (const std::string& name : pre_tokenizer_preset_names()) {
    const PreTokenizerPreset* p = find_pre_tokenizer_preset(name);
    REQUIRE(p);
    std::vector<std::string> rx(p->regexes.begin(), p->regexes.end());
    auto c = PreTokenizer::compile(rx, name);
    CHECK_MESSAGE(c.ok(), c.status().to_string());
    if (!c.ok()) continue;
    std::vector<std::string_view> pieces;
    const std::string text = "Hello, World! 123 日本語 can't\n\n  x";
    REQUIRE(c->split(text, pieces).ok());
    std::string joined;
    for (auto p2 : pieces) joined += p2;
    CHECK_MESSAGE(joined == text, name);  // pieces cover the text exactly
  }
  CHECK(find_pre_tokenizer_preset("") == find_pre_tokenizer_preset("default"));
  CHECK(find_pre_tokenizer_preset("no-such-name") == nullptr);

  auto split = [](const char* name, const std::string& text) {
    const PreTokenizerPreset* p = find_pre_tokenizer_preset(name);
    auto c = PreTokenizer::compile(std::vector<std::string>(p->regexes.begin(), p->regexes.end()), name);
    std::vector<std::string_view> pieces;
    REQUIRE(c->split(text, pieces).ok());
    return std::vector<std::string>(pieces.begin(), pieces.end());
  };
  using V = std::vector<std::string>;
  CHECK(split("gpt-2", "Hello world's  end") == V{"Hello", " world", "'s", " ", " end"});
  CHECK(split("llama-bpe", "I'M 12345 ok\n\n") == V{"I", "'M", " ", "123", "45", " ok", "\n\n"});
  CHECK(split("qwen2", "ab12") == V{"ab", "1", "2"});
  CHECK(split("superbpe", "1234567") == V{"1", "234", "567"});  // empty matches as split points
  CHECK(split("gpt-4o", "HelloWorld's") == V{"Hello", "World's"});
}

TEST_CASE("BPE merging stays fast on one very long word" * doctest::timeout(20)) {
  const std::string vocab = test::testdata_file("tokenizer/ggml-vocab-gpt-2.gguf");
  if (vocab.empty()) return;
  auto tok = test::load_tokenizer(vocab);
  std::string word;
  for (int i = 0; i < 100000; ++i) word += "ab";  // one pre-token of 200,000 bytes
  const auto t0 = std::chrono::steady_clock::now();
  auto ids = tok->tokenize(word, false, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(ids.ok());
  CHECK(tok->detokenize(ids.value(), false) == word);
  MESSAGE("200 kB word: " << ids->size() << " tokens in " << s << " s");
}

namespace {

std::vector<std::string> split_all(const PreTokenizer& p, const std::string& text) {
  std::vector<std::string_view> pieces;
  REQUIRE(p.split(text, pieces).ok());
  return std::vector<std::string>(pieces.begin(), pieces.end());
}

}  // namespace

TEST_CASE("built-in presets split like the Split regexes of the Hugging Face tokenizer.json files") {
  struct Pair {
    const char* hf;
    const char* preset;
  };
  for (const Pair pr : {Pair{"llama3", "llama-bpe"}, Pair{"qwen3", "qwen2"}, Pair{"deepseek_v3", "deepseek-v3"}}) {
    const std::string tj = test::testdata_file(std::string("tokenizer/hf/") + pr.hf + "/tokenizer.json");
    const std::string cj = test::testdata_file(std::string("tokenizer/hf/") + pr.hf + "/cases.json");
    if (tj.empty() || cj.empty()) continue;
    const nlohmann::json tokenizer_json = test::read_json(tj), cases = test::read_json(cj);
    std::vector<std::string> hf_rx;
    for (const auto& p : tokenizer_json["pre_tokenizer"]["pretokenizers"])
      if (p["type"] == "Split") hf_rx.push_back(p["pattern"]["Regex"].get<std::string>());
    REQUIRE(!hf_rx.empty());
    auto hf = PreTokenizer::compile(hf_rx, pr.hf);
    REQUIRE(hf.ok());
    const PreTokenizerPreset* preset = find_pre_tokenizer_preset(pr.preset);
    REQUIRE(preset);
    auto ours = PreTokenizer::compile(std::vector<std::string>(preset->regexes.begin(), preset->regexes.end()), pr.preset);
    REQUIRE(ours.ok());
    int n = 0;
    for (const auto& c : cases["cases"]) {
      const std::string text = c["text"].get<std::string>();
      CHECK_MESSAGE(split_all(*hf, text) == split_all(*ours, text), std::string(pr.preset) << ": " << c["name"].get<std::string>());
      ++n;
    }
    MESSAGE(std::string(pr.preset) << " vs " << std::string(pr.hf) << " tokenizer.json: " << n << " strings");
  }
}

// Byte-level BPE gives back any valid UTF-8 text, and any bytes at all when the byte stand-ins are
// ordinary tokens. (DeepSeek-LLM made some stand-ins, e.g. "þ" for 0xFE, user-defined tokens:
// they decode as their text, so a stray 0xFE byte comes back as "þ", as in llama.cpp.)
TEST_CASE("random bytes never fail, crash or lose data (byte-level)") {
  const char* vocabs[] = {"tokenizer/ggml-vocab-gpt-2.gguf", "tokenizer/ggml-vocab-llama-spm.gguf",
                          "tokenizer/ggml-vocab-bert-bge.gguf", "tokenizer/ggml-vocab-deepseek-llm.gguf"};
  uint64_t s = 12345;
  auto rnd = [&]() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(s >> 33);
  };
  static const char kAlphabet[] = " a\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80<|>";
  for (const char* rel : vocabs) {
    const std::string path = test::testdata_file(rel);
    if (path.empty()) continue;
    auto tok = test::load_tokenizer(path);
    for (int iter = 0; iter < 200; ++iter) {
      std::string text(rnd() % 64, '\0');
      for (char& ch : text)
        ch = static_cast<char>(iter % 2 ? rnd() % 256 : kAlphabet[rnd() % (sizeof kAlphabet - 1)]);
      for (bool special : {false, true}) {
        auto ids = tok->tokenize(text, special, special);
        REQUIRE(ids.ok());
        CHECK(tok->check_ids(ids.value()).ok());
        const bool lossless = unicode::is_valid_utf8(text) || std::string(rel).find("gpt-2") != std::string::npos;
        if (tok->info().algorithm == "bpe" && !special && lossless) CHECK(tok->detokenize(ids.value(), false) == text);
      }
    }
  }
}
