// libFuzzer target: constrained decoding's inputs, as a request brings them. The first byte picks
// the kind: even, the rest is GBNF; odd, a JSON Schema (converted, and the GBNF it gives must then
// parse). Either way the text after the first NUL (or nothing) is fed to a matcher of the
// grammar, byte by byte, then checked whole (would_accept); and along its first bytes, the token
// masks over a small byte-level vocabulary (fuzz_vocabs.h) are checked token by token against
// would_accept (the trie walk, shared masks of counted repetitions, end-of-generation).
//
// A bug is: a crash or sanitizer report, a leak, a timeout (a grammar whose matching does not
// end), an error without a message, a converter output that does not parse, or a wrong mask.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "fuzz_vocabs.h"
#include "sampling/grammar.h"
#include "sampling/grammar_matcher.h"
#include "sampling/json_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view all(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t nul = all.find('\0');
  const std::string_view spec = all.substr(0, nul), text = nul == std::string_view::npos ? "" : all.substr(nul + 1);
  std::string gbnf(spec);
  if (data[0] % 2) {
    auto g = kestrel::json_schema_to_gbnf(spec);
    if (!g.ok()) {
      if (g.status().message().empty()) __builtin_trap();
      return 0;
    }
    gbnf = std::move(g.value());
  }
  auto g = kestrel::parse_grammar(gbnf);
  if (!g.ok()) {
    if (g.status().message().empty() || data[0] % 2) __builtin_trap();  // a schema's GBNF must parse
    return 0;
  }
  const auto grammar = std::make_shared<const kestrel::Grammar>(std::move(g.value()));
  kestrel::GrammarMatcher m(grammar, nullptr);
  const std::string bytes(text.substr(0, 256));
  const bool whole = m.would_accept(bytes, true);
  for (const char c : bytes)
    if (!m.accept_text(std::string(1, c))) break;
  if (whole && !m.complete()) __builtin_trap();  // the two ways of feeding must agree

  // Masks: the byte-level vocabulary's token b is byte b, so the text is a path of tokens.
  static const std::unique_ptr<kestrel::Tokenizer> tok = kestrel::fuzz::build_vocab(0);
  if (!tok) __builtin_trap();
  static const auto trie = kestrel::TokenTrie::of(*tok);
  kestrel::GrammarMatcher t(grammar, trie);
  for (size_t i = 0; i <= std::min<size_t>(bytes.size(), 24); ++i) {
    auto mask = t.allowed();
    if (!mask.ok()) {
      if (mask.status().message().empty()) __builtin_trap();
      break;
    }
    for (int32_t id = 0; id < tok->n_vocab(); ++id) {
      bool want = false;
      if (trie->is_eog(id)) want = t.would_accept("", true);
      else if (!tok->is_special(id) && !trie->piece(id).empty()) want = t.would_accept(trie->piece(id));
      if ((*mask.value())[static_cast<size_t>(id)] != (want ? 1 : 0)) __builtin_trap();
    }
    if (i == bytes.size() || !(*mask.value())[static_cast<uint8_t>(bytes[i])]) break;
    if (!t.accept(static_cast<uint8_t>(bytes[i])).ok()) __builtin_trap();  // the mask allowed it
  }
  return 0;
}
