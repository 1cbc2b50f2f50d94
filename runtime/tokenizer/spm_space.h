// SentencePiece's space handling, shared by the SPM and SPM-BPE tokenizers: spaces become
// U+2581 ("▁") before tokenization and turn back into spaces when pieces are decoded.
#pragma once
#include <string>
#include <string_view>

namespace kestrel::spm {

inline constexpr std::string_view kSpace = "\xe2\x96\x81";  // U+2581

// frag with every ' ' replaced by U+2581, and one U+2581 in front when `prefix`.
inline std::string escape_spaces(std::string_view frag, bool prefix) {
  std::string text;
  text.reserve(frag.size() + 8);
  if (prefix) text = kSpace;
  for (char c : frag) {
    if (c == ' ') text += kSpace;
    else text += c;
  }
  return text;
}

// A piece's text with every U+2581 turned back into ' '.
inline std::string unescape_spaces(const std::string& t) {
  std::string out;
  for (size_t i = 0; i < t.size();) {
    if (t.compare(i, kSpace.size(), kSpace) == 0) {
      out += ' ';
      i += kSpace.size();
    } else {
      out += t[i++];
    }
  }
  return out;
}

}  // namespace kestrel::spm
