// Streaming detokenization: pieces are buffered until they end on a UTF-8 boundary, so a
// character split over several byte tokens is never emitted half-way.
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

}  // namespace

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
