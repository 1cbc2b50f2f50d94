// libFuzzer target: constrained decoding's inputs, as a request brings them. The first byte picks
// the kind: even, the rest is GBNF; odd, a JSON Schema (converted, and the GBNF it gives must then
// parse). Either way the text after the first NUL (or nothing) is fed to a matcher of the
// grammar, byte by byte, then checked whole (would_accept).
//
// A bug is: a crash or sanitizer report, a leak, a timeout (a grammar whose matching does not
// end), an error without a message, or a converter output that does not parse.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

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
  kestrel::GrammarMatcher m(std::make_shared<const kestrel::Grammar>(std::move(g.value())), nullptr);
  const std::string bytes(text.substr(0, 256));
  const bool whole = m.would_accept(bytes, true);
  for (const char c : bytes)
    if (!m.accept_text(std::string(1, c))) break;
  if (whole && !m.complete()) __builtin_trap();  // the two ways of feeding must agree
  return 0;
}
