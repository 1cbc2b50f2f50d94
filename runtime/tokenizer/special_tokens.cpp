// Special-token splitting, with Hugging Face's AddedVocabulary semantics: the text is scanned left
// to right and at each position the longest eligible token wins (leftmost-longest, like its
// Aho-Corasick matcher). User-defined tokens are always eligible, control and unknown-type tokens
// only with parse_special. lstrip/rstrip swallow the whitespace beside a match; single_word
// rejects a match touching a word character. Then Tokenizer::tokenize encodes the fragments.
#include <algorithm>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kestrel {

// A byte trie over the texts of control, user-defined and unknown-type tokens.
class SpecialTokenMatcher {
 public:
  struct Fragment {
    std::string_view text;
    int32_t id;  // -1: plain text
  };

  explicit SpecialTokenMatcher(const Vocab& v) : nodes_(1) {
    for (int32_t id = 0; id < v.n(); ++id) {
      const TokenType t = v.type[id];
      if (v.text[id].empty() || !(t == TokenType::CONTROL || t == TokenType::USER_DEFINED || t == TokenType::UNKNOWN))
        continue;
      if (v.find(v.text[id]) != id) continue;  // a duplicate text: the first id wins
      int32_t node = 0;
      for (char ch : v.text[id]) node = child_or_add(node, static_cast<uint8_t>(ch));
      nodes_[node].token = id;
      first_[static_cast<uint8_t>(v.text[id][0])] = true;
      empty_ = false;
    }
  }

  void partition(const Vocab& v, std::string_view text, bool parse_special, std::vector<Fragment>& out) const {
    size_t emitted = 0;  // text before this offset is already in `out`
    for (size_t pos = 0; pos < text.size();) {
      if (empty_ || !first_[static_cast<uint8_t>(text[pos])]) {
        ++pos;
        continue;
      }
      int32_t id = -1;
      size_t end = pos;
      int32_t node = 0;
      for (size_t i = pos; i < text.size() && (node = child(node, static_cast<uint8_t>(text[i]))) >= 0; ++i) {
        const int32_t t = nodes_[node].token;
        if (t >= 0 && (parse_special || v.type[t] == TokenType::USER_DEFINED)) id = t, end = i + 1;
      }
      if (id < 0) {
        ++pos;
        continue;
      }
      const uint8_t fl = v.added_flags[id];
      if ((fl & kSingleWord) && (word_char_before(text, pos) || word_char_at(text, end))) {
        pos = end;  // a rejected match still consumes its span, as Hugging Face's matcher does
        continue;
      }
      size_t start = pos;
      if (fl & kLStrip) start = std::max(emitted, space_start_before(text, pos));
      if (fl & kRStrip) end = space_end_after(text, end);
      if (start > emitted) out.push_back({text.substr(emitted, start - emitted), -1});
      out.push_back({{}, id});
      emitted = pos = end;
    }
    if (emitted < text.size()) out.push_back({text.substr(emitted), -1});
  }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
    int32_t token = -1;
  };

  int32_t child(int32_t node, uint8_t c) const {
    const auto& nx = nodes_[node].next;
    auto it = std::lower_bound(nx.begin(), nx.end(), c, [](const auto& e, uint8_t b) { return e.first < b; });
    return it != nx.end() && it->first == c ? it->second : -1;
  }
  int32_t child_or_add(int32_t node, uint8_t c) {
    const int32_t found = child(node, c);
    if (found >= 0) return found;
    const int32_t id = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
    auto& nx = nodes_[node].next;
    nx.insert(std::lower_bound(nx.begin(), nx.end(), c, [](const auto& e, uint8_t b) { return e.first < b; }),
              {c, id});
    return id;
  }

  // Decodes the code point that ends right before `pos` (or kInvalid).
  static uint32_t cp_before(std::string_view s, size_t pos, size_t* start) {
    size_t b = pos;
    do --b;
    while (b > 0 && pos - b < 4 && (static_cast<uint8_t>(s[b]) & 0xC0) == 0x80);
    size_t i = b;
    const uint32_t cp = unicode::next_cp(s, i);
    if (i != pos) {  // not a whole character ending at pos: treat the last byte alone
      *start = pos - 1;
      return unicode::kInvalid;
    }
    *start = b;
    return cp;
  }
  static bool is_word(uint32_t cp) {  // Rust regex \w: letters, marks, digits, connectors
    if (cp == unicode::kInvalid) return false;
    if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
    const unicode::Category c = unicode::category(cp);
    return c == unicode::Category::Letter || c == unicode::Category::Mark || c == unicode::Category::Number ||
           cp == 0x203F || cp == 0x2040 || cp == 0x2054 || cp == 0xFE33 || cp == 0xFE34 || cp == 0xFF3F ||
           (cp >= 0xFE4D && cp <= 0xFE4F);
  }
  static bool word_char_before(std::string_view s, size_t pos) {
    size_t st;
    return pos > 0 && is_word(cp_before(s, pos, &st));
  }
  static bool word_char_at(std::string_view s, size_t pos) {
    return pos < s.size() && is_word(unicode::next_cp(s, pos));
  }
  static size_t space_start_before(std::string_view s, size_t pos) {
    while (pos > 0) {
      size_t st;
      const uint32_t cp = cp_before(s, pos, &st);
      if (cp == unicode::kInvalid || !unicode::is_whitespace(cp)) break;
      pos = st;
    }
    return pos;
  }
  static size_t space_end_after(std::string_view s, size_t pos) {
    while (pos < s.size()) {
      size_t i = pos;
      const uint32_t cp = unicode::next_cp(s, i);
      if (cp == unicode::kInvalid || !unicode::is_whitespace(cp)) break;
      pos = i;
    }
    return pos;
  }

  std::vector<Node> nodes_;
  bool first_[256] = {};
  bool empty_ = true;
};

Tokenizer::Tokenizer(Vocab v) : vocab_(std::move(v)), specials_(std::make_unique<SpecialTokenMatcher>(vocab_)) {
  info_.model = vocab_.model;
  info_.pre = vocab_.pre;
  info_.normalizer = vocab_.normalizer == Normalizer::NFC ? "nfc" : "";
}

Tokenizer::~Tokenizer() = default;

Expected<std::vector<int32_t>> Tokenizer::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<SpecialTokenMatcher::Fragment> frags;
  specials_->partition(vocab_, text, parse_special, frags);  // empty text: no fragment, no dummy prefix
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (add_special && vocab_.add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
  bool after_special = true;
  std::string normalized;
  for (const auto& fr : frags) {
    if (fr.id >= 0) {
      out.push_back(fr.id);
      after_special = true;
      continue;
    }
    std::string_view plain = fr.text;
    if (vocab_.normalizer == Normalizer::NFC) {
      normalized = unicode::nfc(plain);
      plain = normalized;
    }
    KS_RETURN_IF_ERROR(encode_fragment(plain, after_special, out));
    after_special = false;
  }
  if (add_special && vocab_.add_eos && vocab_.eos >= 0) out.push_back(vocab_.eos);
  if (add_special && vocab_.add_sep && vocab_.sep >= 0) out.push_back(vocab_.sep);
  return out;
}

}  // namespace kestrel
