// Where generated text stands in a grammar (grammar.h), and which tokens may come next.
//
// The state is a set of stacks, llama.cpp's pushdown form: each stack lists the grammar
// positions still to match, its top a character class; an empty stack means the text so far is a
// complete sentence. A code point advances every stack whose top matches it and expands rule
// references until each top is a character class again. A token advances byte by byte; bytes of
// an incomplete UTF-8 sequence wait (and must still be able to become a code point some stack
// accepts), so byte-fallback tokens and byte-level BPE pieces that split a character work.
//
// Masks: the vocabulary's pieces form a byte trie (TokenTrie, built once per tokenizer); the
// allowed tokens are found by walking it from the current state, cutting every subtree the
// grammar rejects at its first byte. States are interned and each state's transition on a byte
// is computed once, so a walk is mostly table lookups (the states a 128k vocabulary's pieces
// reach from one state are few), and each state's mask is kept (text inside a JSON string or a
// run of digits returns to the same state token after token). States that differ only in a
// repetition count above what one token can use share one mask (canonical()), the few longer
// tokens checked one by one: a string of maxLength 200 is not 200 walks. End-of-generation tokens are
// allowed exactly when the text is complete; other special tokens, and tokens with no text,
// never. Not thread-safe: one matcher per sequence.
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "sampling/grammar.h"

namespace kestrel {

class Tokenizer;

// The vocabulary as the matcher reads it: every token's bytes in a trie.
class TokenTrie {
 public:
  // special: special tokens the grammar may use as their text (a chat family's markers); every
  // other special token stays out. Built once per vocabulary and set, then shared.
  static std::shared_ptr<const TokenTrie> of(const Tokenizer& tok, std::vector<int32_t> special = {});
  explicit TokenTrie(const Tokenizer& tok, std::span<const int32_t> special = {});

  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // (byte, node), sorted by byte
    std::vector<int32_t> tokens;                         // tokens whose bytes end here
  };
  const std::vector<Node>& nodes() const { return nodes_; }  // nodes()[0] is the root
  const std::vector<int32_t>& eog() const { return eog_; }
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  // Tokens of more than kShortBytes bytes (few: long runs of spaces or punctuation).
  static constexpr size_t kShortBytes = 32;
  const std::vector<int32_t>& long_tokens() const { return long_; }
  bool is_eog(int32_t id) const;
  int32_t n_vocab() const { return static_cast<int32_t>(pieces_.size()); }

 private:
  std::vector<Node> nodes_;
  std::vector<std::string> pieces_;  // "" for tokens that can never be generated under a grammar
  std::vector<int32_t> eog_;         // sorted
  std::vector<int32_t> long_;
};

class GrammarMatcher {
 public:
  // vocab may be null: a matcher of text only (accept_text, would_accept).
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> vocab);

  // 1 for each token that may come next (size n_vocab); valid until the next accept().
  Expected<const std::vector<uint8_t>*> allowed();
  // Advances by a token; a token the grammar does not allow is an error (and leaves no state).
  Status accept(int32_t token);
  // The text so far is a complete sentence of the grammar.
  bool complete() const;
  // The same for raw text (tests, and checking a reply): false when it leaves the grammar.
  bool accept_text(const std::string& bytes);
  // Whether accept_text(bytes) would succeed, the state unchanged (complete: and end there).
  bool would_accept(const std::string& bytes, bool complete = false) const;

 private:
  using Stack = std::vector<int32_t>;  // element indices, top last
  struct State {
    std::vector<Stack> stacks;  // sorted, unique
    std::string partial;        // bytes of an incomplete UTF-8 sequence
  };
  // An interned state: every state met gets an id (its transitions by byte are in next_), and
  // its mask is computed once (until masks are dropped).
  static bool is_complete(const State& st);  // no partial character, and some stack empty
  struct Node {
    State st;
    bool complete = false;
    std::unique_ptr<std::vector<uint8_t>> mask;
  };
  void expand(Stack s, std::vector<Stack>* out) const;
  void expand(Stack s, std::vector<Stack>* out, std::set<Stack>* seen) const;
  void advance_cp(const std::vector<Stack>& in, uint32_t cp, std::vector<Stack>* out) const;
  // Feeds one byte; false when no stack can take it.
  bool feed(const State& in, uint8_t b, State* out) const;
  int32_t intern(State st);
  // st with every position in a counted-repetition rule that takes more than kShortBytes items
  // moved to the same place in the rule of its chain that takes exactly kShortBytes: the same
  // tokens of at most kShortBytes bytes are allowed from both. False when nothing moved.
  bool canonical(const State& st, State* out) const;
  int32_t step(int32_t id, uint8_t b);
  void walk(int32_t node, int32_t id, std::vector<uint8_t>* mask);
  const std::vector<uint8_t>* mask_of(int32_t id);  // computed once per state
  void trim();  // bounds the memory of the interned states and masks
  static std::string key(const State& st);

  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const TokenTrie> vocab_;
  std::vector<int32_t> elem_rule_, elem_off_;  // per element: its rule, and offset in its alternative
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<int32_t> next_;  // 256 per state: the state a byte leads to (-2 not yet, -1 none)
  std::unordered_map<std::string, int32_t> ids_;
  int32_t cur_ = -1;  // the current state; -1: the text has left the grammar
  size_t n_masks_ = 0;
  static constexpr size_t kMaxStackEntries = 1 << 16;  // per state, over all its stacks
  mutable bool overflow_ = false;  // a state outgrew kMaxStackEntries (it was made empty)
  Status overflow_error() const;
};

// A matcher for GBNF text over a tokenizer's vocabulary (the grammar's errors as parse_grammar's).
Expected<std::shared_ptr<GrammarMatcher>> make_grammar_matcher(std::string_view gbnf, const Tokenizer& tok,
                                                               std::vector<int32_t> special = {});

}  // namespace kestrel
