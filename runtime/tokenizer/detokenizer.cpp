// Token -> text: pieces per token type, whole-sequence detokenization, and streaming
// detokenization where pieces are buffered until they end on a UTF-8 boundary, so a character
// split over several byte tokens is never emitted half-way.
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

// Bytes of s that form complete sequences; an invalid byte counts as complete (flush replaces).
size_t complete_prefix(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    const size_t len = utf8_len(c);
    if (len == 1) {
      ++i;
      continue;
    }
    if (i + len > s.size()) {
      // Incomplete only if every byte present is a continuation byte.
      for (size_t j = i + 1; j < s.size(); ++j)
        if ((static_cast<uint8_t>(s[j]) & 0xC0) != 0x80) return s.size();
      return i;
    }
    i += len;
  }
  return i;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

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

std::string StreamingDetokenizer::push(int32_t id) {
  pending_ += tok_.token_to_piece(id, render_special_);
  const size_t n = complete_prefix(pending_);
  std::string out = pending_.substr(0, n);
  pending_.erase(0, n);
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out;
  if (!pending_.empty()) out = "\xef\xbf\xbd";  // an incomplete sequence left: U+FFFD
  pending_.clear();
  return out;
}

}  // namespace kestrel
