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
// run of digits returns to the same state token after token). A state inside counted
// repetitions takes the mask of the state with each count at its chain's top (capped at
// kShortBytes; lifted()) for the tokens too short to use the difference, and walks only the trie's
// paths to longer tokens: a string of maxLength 200 is one full walk, not 200. End-of-generation tokens are
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

  // The trie in preorder, flat (a walk reads it front to back, skipping subtrees): node 0 is the
  // root; node i > 0 is reached by byte(i) from the last node before it at depth(i) - 1.
  int32_t n_nodes() const { return static_cast<int32_t>(byte_.size()); }
  uint8_t byte(int32_t i) const { return byte_[static_cast<size_t>(i)]; }
  uint16_t depth(int32_t i) const { return depth_[static_cast<size_t>(i)]; }
  // Bytes of the longest token in node i's subtree (its own included), at most 65535.
  uint16_t longest(int32_t i) const { return longest_[static_cast<size_t>(i)]; }
  int32_t subtree_end(int32_t i) const { return end_[static_cast<size_t>(i)]; }  // one past the subtree
  // The tokens whose bytes end at node i.
  std::span<const int32_t> tokens(int32_t i) const {
    return {toks_.data() + tok_begin_[static_cast<size_t>(i)],
            static_cast<size_t>(tok_begin_[static_cast<size_t>(i) + 1] - tok_begin_[static_cast<size_t>(i)])};
  }
  uint16_t max_depth() const { return max_depth_; }
  const std::vector<int32_t>& eog() const { return eog_; }
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  // Per token: its bytes, at most 255 (what masks filter by, one byte each for speed).
  const std::vector<uint8_t>& lengths() const { return lengths_; }
  // The count a state's mask is shared up to (few tokens are longer: runs of spaces, punctuation).
  static constexpr size_t kShortBytes = 32;
  bool is_eog(int32_t id) const;
  int32_t n_vocab() const { return static_cast<int32_t>(pieces_.size()); }

 private:
  std::vector<uint8_t> byte_;
  std::vector<uint16_t> depth_, longest_;
  std::vector<int32_t> end_, tok_begin_, toks_;
  uint16_t max_depth_ = 0;
  std::vector<std::string> pieces_;  // "" for tokens that can never be generated under a grammar
  std::vector<uint8_t> lengths_;
  std::vector<int32_t> eog_;         // sorted
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
    bool base = false;  // its mask is a lifted state's, which counted states start from
    std::unique_ptr<std::vector<uint8_t>> mask;
  };
  void expand(Stack s, std::vector<Stack>* out) const;
  void expand(Stack s, std::vector<Stack>* out, std::set<Stack>* seen) const;
  void advance_cp(const std::vector<Stack>& in, uint32_t cp, std::vector<Stack>* out) const;
  // Feeds one byte; false when no stack can take it.
  bool feed(const State& in, uint8_t b, State* out) const;
  int32_t intern(State st);
  // st with every position in a counted-repetition rule moved to the same place in its chain's
  // rule that takes min(chain length, kShortBytes) items; *same: tokens of at most that many
  // bytes are allowed from both alike (a token of b bytes consumes at most b items, so counts of
  // at least b are indistinguishable to it). False when nothing moved.
  bool lifted(const State& st, State* out, size_t* same) const;
  int32_t step(int32_t id, uint8_t b);
  // Marks the tokens of more than `skip` bytes that state id allows, visiting only subtrees that
  // hold such tokens.
  void walk(int32_t id, size_t skip, std::vector<uint8_t>* mask);
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
  size_t n_masks_ = 0;  // masks kept, of states that are not bases
  size_t n_bases_ = 0;  // masks kept of bases (few, and a full walk each: kept longer)
  std::vector<std::unique_ptr<std::vector<uint8_t>>> spare_;  // dropped masks, reused
  std::vector<int32_t> walk_at_;  // walk(): the state at each depth of the current path
  static constexpr size_t kMaxStackEntries = 1 << 16;  // per state, over all its stacks
  mutable bool overflow_ = false;  // a state outgrew kMaxStackEntries (it was made empty)
  Status overflow_error() const;
};

// A matcher for GBNF text over a tokenizer's vocabulary (the grammar's errors as parse_grammar's).
Expected<std::shared_ptr<GrammarMatcher>> make_grammar_matcher(std::string_view gbnf, const Tokenizer& tok,
                                                               std::vector<int32_t> special = {});

}  // namespace kestrel
