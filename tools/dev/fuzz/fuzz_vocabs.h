// The vocabularies the tokenizer fuzzer runs on, built in code (no files): GGUF tokenizer keys
// written with the library's GGUF writer and read back through Tokenizer::from_gguf, as a model
// file would be.
//   0  byte-level BPE ("gpt2", GPT-2 pre-tokenizer): the 256 GPT-2 byte characters and a few
//      merges ("Ġt", "he", "Ġthe", "in", "ing", "é"'s two bytes), plus two special tokens
//   1  SentencePiece ("llama", score-ordered): <unk> <s> </s>, 256 byte-fallback tokens
//      <0x00>..<0xFF>, "▁" and a few scored pieces; dummy-prefix space on
//   2  SentencePiece-BPE ("llama" with merges): the same pieces, merged by rank
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace kestrel::fuzz {

// GPT-2's byte -> printable character map (bytes_to_unicode).
inline std::string gpt2_byte_char(int b) {
  int cp = b, extra = 0;
  const auto printable = [](int i) { return (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF); };
  if (!printable(b)) {
    for (int i = 0; i < b; ++i) extra += !printable(i);
    cp = 256 + extra;
  }
  std::string s;
  if (cp < 0x80) s += static_cast<char>(cp);
  else s += static_cast<char>(0xC0 | (cp >> 6)), s += static_cast<char>(0x80 | (cp & 0x3F));
  return s;
}

inline gguf::Writer byte_level_bpe_vocab() {
  std::vector<std::string> texts;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) texts.push_back(gpt2_byte_char(b)), types.push_back(1);
  const std::string G = gpt2_byte_char(' '), e1 = gpt2_byte_char(0xC3), e2 = gpt2_byte_char(0xA9);
  const std::vector<std::string> merged = {G + "t", "h" + std::string("e"), G + "t" + "he", "i" + std::string("n"),
                                           "in" + std::string("g"), e1 + e2};
  for (const std::string& m : merged) texts.push_back(m), types.push_back(1);
  texts.push_back("<|endoftext|>"), types.push_back(3);
  texts.push_back("<tool>"), types.push_back(4);
  gguf::Writer w;
  w.set("tokenizer.ggml.model", gguf::Value::make_string("gpt2"));
  w.set("tokenizer.ggml.pre", gguf::Value::make_string("gpt-2"));
  w.set("tokenizer.ggml.tokens", gguf::Value::make_string_array(texts));
  w.set("tokenizer.ggml.token_type", gguf::Value::make_i32_array(types));
  w.set("tokenizer.ggml.merges", gguf::Value::make_string_array({G + " t", "h e", G + "t he", "i n", "in g", e1 + " " + e2}));
  w.set("tokenizer.ggml.eos_token_id", gguf::Value::make_u32(static_cast<uint32_t>(texts.size() - 2)));
  return w;
}

inline gguf::Writer spm_vocab(bool with_merges) {
  std::vector<std::string> texts = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  std::vector<float> scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    texts.push_back(buf), types.push_back(6), scores.push_back(0);
  }
  const std::string sp = "\xe2\x96\x81";  // ▁
  const std::vector<std::string> pieces = {sp, "a", "b", "t", "h", "e", sp + "a", "ab", sp + "ab", "he", sp + "t", sp + "the", "\xc3\xa9"};
  float score = -1;
  for (const std::string& p : pieces) texts.push_back(p), types.push_back(1), scores.push_back(score -= 0.5f);
  gguf::Writer w;
  w.set("tokenizer.ggml.model", gguf::Value::make_string("llama"));
  w.set("tokenizer.ggml.tokens", gguf::Value::make_string_array(texts));
  w.set("tokenizer.ggml.token_type", gguf::Value::make_i32_array(types));
  w.set("tokenizer.ggml.scores", gguf::Value::make_f32_array(scores));
  w.set("tokenizer.ggml.add_space_prefix", gguf::Value::make_bool(true));
  if (with_merges)
    w.set("tokenizer.ggml.merges", gguf::Value::make_string_array({sp + " a", "a b", sp + "a b", "h e", sp + " t", sp + "t he"}));
  return w;
}

// The tokenizer of vocabulary k (0..2); nullptr when it does not build (a bug the fuzzer reports).
inline std::unique_ptr<Tokenizer> build_vocab(int k) {
  const gguf::Writer w = k == 0 ? byte_level_bpe_vocab() : spm_vocab(k == 2);
  auto f = gguf::File::from_bytes(w.to_bytes(), "fuzz-vocab.gguf");
  if (!f.ok()) return nullptr;
  auto t = Tokenizer::from_gguf(*f.value());
  return t.ok() ? std::move(t.value()) : nullptr;
}

}  // namespace kestrel::fuzz
