// GGUF vocabularies against Hugging Face tokenizers' own ids (testdata tokenizer/hf/*/cases.json,
// made with tokenizers 0.23.2): Llama 3 on the rebuilt llama-bpe GGUF, and Qwen with the NFC
// normalizer switched on (tokenizer.kestrel.normalizer = "nfc") on the rebuilt qwen2 GGUF, which
// is exactly where llama.cpp and Hugging Face disagree.
#include "tokenizer_test_util.h"

using namespace kestrel;
using kestrel::test::ids_str;

namespace {

// Checks ids_plain (add_special=false, parse_special=true) of every case whose ids the vocabulary
// can produce (ids below id_limit); returns the number checked.
int check_hf_cases(const Tokenizer& tok, const nlohmann::json& j, int32_t id_limit, int* passed) {
  int checked = 0;
  for (const auto& c : j["cases"]) {
    const auto want = c["ids_plain"].get<std::vector<int32_t>>();
    if (std::any_of(want.begin(), want.end(), [&](int32_t id) { return id >= id_limit; })) continue;
    const std::string text = c["text"].get<std::string>();
    auto ids = tok.tokenize(text, false, true);
    REQUIRE(ids.ok());
    ++checked;
    *passed += ids.value() == want;
    CHECK_MESSAGE(ids.value() == want, c["name"].get<std::string>() << ": got [" << ids_str(ids.value()) << "] want ["
                                                                    << ids_str(want) << "]");
  }
  return checked;
}

}  // namespace

TEST_CASE("llama-bpe GGUF equals Hugging Face Llama 3 (ignore_merges, (?i:) contractions)") {
  const std::string vocab = test::testdata_file("tokenizer/ggml-vocab-llama-bpe.gguf");
  const std::string cases = test::testdata_file("tokenizer/hf/llama3/cases.json");
  if (vocab.empty() || cases.empty()) return;
  auto tok = test::load_tokenizer(vocab);
  CHECK(tok->info().ignore_merges);
  CHECK(tok->info().pre_source == "builtin:llama-bpe");
  const nlohmann::json j = test::read_json(cases);
  int passed = 0;
  const int checked = check_hf_cases(*tok, j, tok->n_vocab(), &passed);
  CHECK(checked == static_cast<int>(j["cases"].size()));
  // With add_special the GGUF adds <|begin_of_text|>, which this tokenizer.json does not.
  for (const auto& c : j["cases"]) {
    auto want = c["ids_with_special"].get<std::vector<int32_t>>();
    want.insert(want.begin(), 128000);
    CHECK(tok->tokenize(c["text"].get<std::string>(), true, true).value() == want);
  }
  MESSAGE("llama3: " << passed << "/" << checked << " HF cases");
}

TEST_CASE("qwen2 GGUF with the NFC normalizer equals Hugging Face Qwen3") {
  const std::string vocab = test::testdata_file("tokenizer/ggml-vocab-qwen2.gguf");
  const std::string cases = test::testdata_file("tokenizer/hf/qwen3/cases.json");
  if (vocab.empty() || cases.empty()) return;
  auto f = test::gguf_with(vocab, {{"tokenizer.kestrel.normalizer", gguf::Value::make_string("nfc")}});
  auto t = Tokenizer::from_gguf(*f);
  REQUIRE_MESSAGE(t.ok(), t.status().to_string());
  const Tokenizer& tok = *t.value();
  CHECK(tok.info().normalizer == "nfc");
  const nlohmann::json j = test::read_json(cases);
  // Qwen3 added <think>, <tool_call>, <|fim_*|>... (ids above 151645); the Qwen2 vocabulary has
  // [PAD] rows there, so cases that use them cannot match.
  int passed = 0;
  const int checked = check_hf_cases(tok, j, 151646, &passed);
  CHECK(checked >= 110);
  // The strings llama.cpp gets wrong without NFC must be among those checked.
  int nfc_cases = 0;
  for (const auto& c : j["cases"]) {
    const std::string name = c["name"].get<std::string>();
    if (name == "nfc_nfd_cafe" || name == "zalgo" || name == "hangul_jamo" || name == "stacked_combining") {
      ++nfc_cases;
      CHECK(tok.tokenize(c["text"].get<std::string>(), false, true).value() == c["ids_plain"].get<std::vector<int32_t>>());
    }
  }
  CHECK(nfc_cases == 4);
  MESSAGE("qwen3 (qwen2 vocabulary + NFC): " << passed << "/" << checked << " HF cases");
}
