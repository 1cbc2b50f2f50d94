// Grammars for constrained decoding, written in GBNF as llama.cpp writes them (docs/GRAMMAR.md):
//
//   root   ::= "{" ws pair ("," ws pair)* "}"     # a rule: alternatives of sequences
//   pair   ::= [a-z]+ ws ":" ws ( "true" | "false" )
//   ws     ::= [ \t\n]{0,8}
//
// Literals "..." and character classes [...] / [^...] (escapes \n \r \t \\ \" \] \- \xHH \uHHHH
// \UHHHHHHHH), "." for any character, rule names of letters, digits and '-', grouping ( ),
// repetition * + ? {m} {m,} {m,n}, and # comments. The start rule is "root". Grammars act on
// Unicode code points.
//
// Parsing compiles the text into Grammar: every group and repetition becomes a rule of its own,
// so a rule is a list of alternatives and an alternative a sequence of character classes and rule
// references. Undefined rules, a missing root, left recursion (a rule that can reach itself
// before matching a character, which a top-down matcher cannot run), repetition bounds over
// kMaxRepeat, and grammars that would grow past kMaxGrammarSize elements or nest groups deeper
// than kMaxGrammarDepth (hostile input) are errors naming the rule and the place.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kestrel {

struct GrammarElement {
  enum Kind : uint8_t { kChars, kRule, kEnd } kind = kEnd;
  bool negated = false;                               // kChars: [^...] (any code point outside)
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // kChars: inclusive code point ranges
  int32_t rule = -1;                                  // kRule
  bool matches(uint32_t cp) const;
  // Whether some code point in [lo, hi] matches (an incomplete UTF-8 sequence's possible values).
  bool matches_any(uint32_t lo, uint32_t hi) const;
};

struct Grammar {
  // elements: every alternative of every rule, each ended by a kEnd element.
  std::vector<GrammarElement> elements;
  // Per rule, the index in `elements` where each of its alternatives starts.
  std::vector<std::vector<int32_t>> alternatives;
  std::vector<std::string> names;  // per rule (generated ones are "name-N")
  int32_t root = -1;
  // Counted repetitions: chains[c][j] is the rule of chain c that still takes j items (j >= 1);
  // chain_of[rule] = (c, j), or (-1, 0). Rules of one chain have the same first alternative but
  // for the rule it refers to (grammar.cpp, repeat()).
  std::vector<std::vector<int32_t>> chains;
  std::vector<std::pair<int32_t, int32_t>> chain_of;
};

inline constexpr int kMaxRepeat = 1000;           // the largest m or n of {m,n}
inline constexpr size_t kMaxGrammarSize = 1 << 20;  // elements repetitions may add in all
inline constexpr int kMaxGrammarDepth = 64;         // nested groups

// KESTREL_ERR_INVALID_ARGUMENT with the line and column of a syntax error, or naming the rule.
Expected<Grammar> parse_grammar(std::string_view gbnf);

}  // namespace kestrel
