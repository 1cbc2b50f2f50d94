// libFuzzer target: bytes -> tokens -> bytes on the vocabularies of fuzz_vocabs.h (byte-level BPE,
// SentencePiece with byte fallback, SentencePiece-BPE). The first input byte picks the vocabulary
// (bits 0-1) and whether special tokens are parsed (bit 2); the rest is the text.
//
// What must hold, for every input:
//   - tokenize() succeeds, or fails with a message (never a crash);
//   - every id is in the vocabulary;
//   - without special tokens, the round trip gives the text back: exactly for valid UTF-8; for
//     invalid UTF-8 either the same bytes (byte-level vocabularies are lossless) or the text with
//     U+FFFD substituted as utf8_repaired() does; SentencePiece's documented normalization is
//     that a literal "▁" (U+2581, its space marker) in the text comes back as a space (next to an
//     invalid byte it may be kept as bytes instead);
//   - the streaming detokenizer, fed the ids one by one, gives the joined pieces repaired to
//     valid UTF-8, whatever the input.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "fuzz_vocabs.h"

using kestrel::Tokenizer;

namespace {

const Tokenizer* vocab(int k) {
  static const std::unique_ptr<Tokenizer> toks[3] = {kestrel::fuzz::build_vocab(0), kestrel::fuzz::build_vocab(1),
                                                     kestrel::fuzz::build_vocab(2)};
  if (!toks[k]) __builtin_trap();  // the vocabulary itself must build
  return toks[k].get();
}

bool valid_utf8(std::string_view s) { return kestrel::utf8_repaired(s) == s; }

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size()) s.replace(pos, from.size(), to);
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int k = data[0] & 3;
  if (k == 3) return 0;
  const bool parse_special = (data[0] & 4) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const Tokenizer& tok = *vocab(k);

  auto ids = tok.tokenize(text, /*add_special=*/false, parse_special);
  if (!ids.ok()) {
    if (ids.status().message().empty()) __builtin_trap();
    return 0;
  }
  for (int32_t id : *ids)
    if (id < 0 || id >= tok.n_vocab()) __builtin_trap();
  if (!tok.check_ids(*ids).ok()) __builtin_trap();

  const std::string back = tok.detokenize(*ids, /*render_special=*/parse_special);
  if (!parse_special) {
    std::string expected(text);
    if (k != 0) expected = replace_all(expected, "\xe2\x96\x81", " ");  // SentencePiece's space marker
    bool same = back == expected;
    if (!same && !valid_utf8(text)) {
      // Invalid UTF-8: the bytes come back, with U+FFFD for the invalid ones or unchanged; a "▁"
      // next to an invalid byte may be read as bytes rather than a space marker.
      same = back == kestrel::utf8_repaired(expected) || (k != 0 && replace_all(back, "\xe2\x96\x81", " ") == expected);
    }
    if (!same) __builtin_trap();
  }

  // Streaming gives the pieces joined, repaired to valid UTF-8 (no partial characters; unlike
  // detokenize() it keeps a dummy-prefix space: it continues text rather than starting it).
  kestrel::StreamingDetokenizer stream(tok, parse_special);
  std::string streamed, pieces;
  for (int32_t id : *ids) {
    streamed += stream.push(id);
    pieces += tok.token_to_piece(id, parse_special);
  }
  streamed += stream.flush();
  if (!valid_utf8(streamed)) __builtin_trap();
  if (streamed != kestrel::utf8_repaired(pieces)) __builtin_trap();
  return 0;
}
