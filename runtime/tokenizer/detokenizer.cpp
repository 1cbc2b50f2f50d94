// Token -> text: pieces per token type, whole-sequence detokenization, and streaming
// detokenization under the UTF-8 rule of tokenizer.h: a character split over several byte tokens
// is held until it completes, invalid bytes become U+FFFD, and no partial character is emitted.
#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

constexpr char kReplacement[] = "\xef\xbf\xbd";  // U+FFFD

// What a lead byte allows: the length of its sequence and the range of its second byte (the
// later ones are always 80..BF). Length 0: the byte starts no valid sequence.
struct Lead {
  int len;
  uint8_t lo, hi;
};

Lead lead(uint8_t c) {
  if (c < 0x80) return {1, 0, 0};
  if (c >= 0xC2 && c <= 0xDF) return {2, 0x80, 0xBF};
  if (c == 0xE0) return {3, 0xA0, 0xBF};  // below A0: overlong
  if (c == 0xED) return {3, 0x80, 0x9F};  // above 9F: a surrogate
  if (c >= 0xE1 && c <= 0xEF) return {3, 0x80, 0xBF};
  if (c == 0xF0) return {4, 0x90, 0xBF};  // below 90: overlong
  if (c >= 0xF1 && c <= 0xF3) return {4, 0x80, 0xBF};
  if (c == 0xF4) return {4, 0x80, 0x8F};  // above 8F: beyond U+10FFFF
  return {0, 0, 0};                       // 80..C1 (continuations, overlong leads), F5..FF
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

size_t utf8_repair(std::string_view s, bool final, std::string& out) {
  out.reserve(out.size() + s.size());
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    const Lead l = lead(c);
    if (l.len == 1) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    if (l.len == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    // Bytes after the lead that still fit: [i, j) is the longest valid start of a sequence.
    size_t j = i + 1;
    while (j < s.size() && j < i + static_cast<size_t>(l.len)) {
      const uint8_t b = static_cast<uint8_t>(s[j]);
      const bool fits = j == i + 1 ? b >= l.lo && b <= l.hi : (b & 0xC0) == 0x80;
      if (!fits) break;
      ++j;
    }
    if (j == i + static_cast<size_t>(l.len)) {
      out.append(s.substr(i, j - i));
    } else if (j == s.size() && !final) {
      return i;  // may still complete: held
    } else {
      out += kReplacement;  // one for the maximal subpart; the byte that broke it starts afresh
    }
    i = j;
  }
  return i;
}

std::string utf8_repaired(std::string_view bytes) {
  std::string out;
  utf8_repair(bytes, /*final=*/true, out);
  return out;
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  if (id < 0 || id >= n_vocab()) return "";
  const std::string& t = vocab_.text[id];
  switch (vocab_.type[id]) {
    case TokenType::NORMAL: return decode_normal(t);
    case TokenType::USER_DEFINED: return decode_user_defined(t);
    case TokenType::BYTE: {
      const int hi = t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' ? hex_digit(t[3]) : -1;
      const int lo = hi >= 0 ? hex_digit(t[4]) : -1;
      if (lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
      return t;
    }
    case TokenType::CONTROL:
    case TokenType::UNKNOWN:
    case TokenType::UNUSED: return render_special ? t : "";
  }
  return "";
}

std::string Tokenizer::detokenize(std::span<const int32_t> ids, bool render_special) const {
  if (!render_special) {
    if (!ids.empty() && vocab_.add_bos && ids.front() == vocab_.bos) ids = ids.subspan(1);
    if (!ids.empty() && vocab_.add_eos && ids.back() == vocab_.eos) ids = ids.first(ids.size() - 1);
  }
  std::string out;
  bool strip = strips_leading_space();
  for (int32_t id : ids) {
    std::string piece = token_to_piece(id, render_special);
    if (strip && !piece.empty()) {
      if (piece[0] == ' ') piece.erase(0, 1);
      strip = false;
    }
    out += piece;
  }
  return out;
}

void StreamingDetokenizer::render_also(std::vector<int32_t> ids) {
  std::sort(ids.begin(), ids.end());
  render_also_ = std::move(ids);
}

std::string StreamingDetokenizer::push(int32_t id) {
  pending_ += tok_.token_to_piece(id, render_special_ || std::binary_search(render_also_.begin(), render_also_.end(), id));
  std::string out;
  pending_.erase(0, utf8_repair(pending_, /*final=*/false, out));
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out;
  utf8_repair(pending_, /*final=*/true, out);
  pending_.clear();
  return out;
}

}  // namespace kestrel
