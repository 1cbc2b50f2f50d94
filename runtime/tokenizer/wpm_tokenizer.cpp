// WordPiece (tokenizer.ggml.model = "bert"), as llama.cpp's WPM: code points are reduced to the
// first code point of their canonical decomposition (accent stripping) and lowercased; the text
// is split on whitespace, punctuation, ASCII symbols and CJK ideographs (each its own word);
// control characters are dropped; each word is matched greedily, longest token first, and a word
// with an unmatched remainder becomes [UNK].
// Two vocabulary spellings are accepted: llama.cpp's (word-initial tokens carry a U+2581 phantom
// space, continuations are bare) and Hugging Face's (continuations carry "##").
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kestrel {
namespace {

constexpr std::string_view kSpace = "\xe2\x96\x81";  // U+2581

bool is_chinese_char(uint32_t cp) {  // the ranges of BERT's _is_chinese_char (as llama.cpp has them)
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

class WpmTokenizer final : public Tokenizer {
 public:
  explicit WpmTokenizer(Vocab v) : Tokenizer(std::move(v)) {
    size_t phantom = 0, hashes = 0;
    for (const std::string& t : vocab_.text) {
      if (t.compare(0, kSpace.size(), kSpace) == 0) ++phantom;
      else if (t.size() > 2 && t.compare(0, 2, "##") == 0) ++hashes;
    }
    phantom_ = phantom >= hashes;
    info_.algorithm = "wpm";
  }

 protected:
  bool strips_leading_space() const override { return true; }

  std::string decode_normal(const std::string& t) const override {
    if (phantom_) {
      if (t.compare(0, kSpace.size(), kSpace) == 0) return " " + t.substr(kSpace.size());
      return t;
    }
    if (t.size() > 2 && t.compare(0, 2, "##") == 0) return t.substr(2);
    return " " + t;
  }

  Status encode_fragment(std::string_view text, bool, std::vector<int32_t>& out) const override {
    std::vector<std::string> words(1);
    for (size_t i = 0; i < text.size();) {
      uint32_t cp = unicode::next_cp(text, i);
      if (cp == unicode::kInvalid) continue;
      cp = unicode::nfd_first(cp);
      if (unicode::is_whitespace(cp)) {
        if (!words.back().empty()) words.emplace_back();
        continue;
      }
      const unicode::Category cat = unicode::category(cp);
      if (cp == 0 || cp == 0xFFFD || cat == unicode::Category::Control) continue;
      std::string s;
      unicode::append_utf8(s, unicode::to_lower(cp));
      if (cat == unicode::Category::Punctuation || (cp < 0x7F && cat == unicode::Category::Symbol) ||
          is_chinese_char(cp)) {
        if (!words.back().empty()) words.emplace_back();
        words.back() = s;  // a word of its own
        words.emplace_back();
      } else {
        words.back() += s;
      }
    }
    for (const std::string& w : words)
      if (!w.empty()) phantom_ ? encode_word_phantom(w, out) : encode_word_hf(w, out);
    return Status::Ok();
  }

 private:
  // llama.cpp: greedy over "▁" + word; any position without a match turns the word into [UNK].
  void encode_word_phantom(const std::string& word, std::vector<int32_t>& out) const {
    const std::string w = std::string(kSpace) + word;
    const std::string_view wv = w;
    const size_t first = out.size();
    for (size_t i = 0; i < wv.size();) {
      int32_t id = -1;
      size_t j = std::min(wv.size(), i + vocab_.max_token_len);
      for (; j > i; --j)
        if ((id = vocab_.find(wv.substr(i, j - i))) >= 0) break;
      if (id < 0) {
        out.resize(first);
        break;
      }
      out.push_back(id);
      i = j;
    }
    if (out.size() == first && vocab_.unk >= 0) out.push_back(vocab_.unk);
  }

  // Hugging Face WordPiece: continuations are "##" tokens; words over 100 characters are [UNK].
  void encode_word_hf(const std::string& word, std::vector<int32_t>& out) const {
    size_t chars = 0;
    for (char c : word) chars += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
    const size_t first = out.size();
    std::string key;
    for (size_t i = 0; i < word.size() && chars <= 100;) {
      int32_t id = -1;
      size_t j = word.size();
      for (; j > i; --j) {
        key.assign(i > 0 ? "##" : "");
        key.append(word, i, j - i);
        if ((id = vocab_.find(key)) >= 0) break;
      }
      if (id < 0) {
        out.resize(first);
        break;
      }
      out.push_back(id);
      i = j;
    }
    if (out.size() == first && vocab_.unk >= 0) out.push_back(vocab_.unk);
  }

  bool phantom_ = true;
};

}  // namespace

Expected<std::unique_ptr<Tokenizer>> make_wpm_tokenizer(Vocab v) {
  return std::unique_ptr<Tokenizer>(std::make_unique<WpmTokenizer>(std::move(v)));
}

}  // namespace kestrel
