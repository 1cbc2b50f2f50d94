// The grammar's pushdown state and the token masks it allows (grammar_matcher.h).
#include "sampling/grammar_matcher.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <tuple>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kestrel {

// ---- the vocabulary's trie ----------------------------------------------------------------------

TokenTrie::TokenTrie(const Tokenizer& tok, std::span<const int32_t> special) {
  // A pointer trie first, then flattened in preorder.
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // (byte, node), sorted by byte
    std::vector<int32_t> tokens;
  };
  std::vector<Node> nodes(1);
  const int32_t n = tok.n_vocab();
  pieces_.resize(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    if (tok.is_eog(id)) {
      eog_.push_back(id);
      continue;
    }
    // Control, unknown and unused tokens: never under a grammar, but for the markers named.
    const bool named = std::find(special.begin(), special.end(), id) != special.end();
    if (tok.is_special(id) && !named) continue;
    std::string piece = tok.token_to_piece(id, named);
    if (piece.empty()) continue;
    int32_t node = 0;
    for (const char ch : piece) {
      const auto b = static_cast<uint8_t>(ch);
      auto& kids = nodes[static_cast<size_t>(node)].children;
      auto it = std::lower_bound(kids.begin(), kids.end(), std::make_pair(b, int32_t{-1}));
      if (it != kids.end() && it->first == b) {
        node = it->second;
      } else {
        const auto next = static_cast<int32_t>(nodes.size());
        kids.insert(it, {b, next});
        nodes.emplace_back();  // (kids may dangle now; not used again)
        node = next;
      }
    }
    nodes[static_cast<size_t>(node)].tokens.push_back(id);
    pieces_[static_cast<size_t>(id)] = std::move(piece);
  }
  std::sort(eog_.begin(), eog_.end());
  lengths_.resize(pieces_.size());
  for (size_t t = 0; t < pieces_.size(); ++t) lengths_[t] = static_cast<uint8_t>(std::min<size_t>(pieces_[t].size(), 255));

  const size_t m = nodes.size();
  byte_.resize(m);
  depth_.resize(m);
  longest_.assign(m, 0);
  end_.resize(m);
  tok_begin_.reserve(m + 1);
  // Preorder without recursion (tokens can be hundreds of bytes long): (node, its depth, byte).
  std::vector<std::tuple<int32_t, uint16_t, uint8_t>> todo = {{0, 0, 0}};
  std::vector<int32_t> path;  // preorder indices of the nodes on the current path
  int32_t at = 0;
  while (!todo.empty()) {
    const auto [node, d, b] = todo.back();
    todo.pop_back();
    while (path.size() > d) {  // the path's deeper nodes are done: their subtrees end here
      end_[static_cast<size_t>(path.back())] = at;
      path.pop_back();
    }
    byte_[static_cast<size_t>(at)] = b;
    depth_[static_cast<size_t>(at)] = d;
    max_depth_ = std::max(max_depth_, d);
    tok_begin_.push_back(static_cast<int32_t>(toks_.size()));
    const Node& nd = nodes[static_cast<size_t>(node)];
    toks_.insert(toks_.end(), nd.tokens.begin(), nd.tokens.end());
    if (!nd.tokens.empty()) {
      const uint16_t len = static_cast<uint16_t>(std::min<size_t>(d, 65535));
      longest_[static_cast<size_t>(at)] = len;
      for (const int32_t p : path) longest_[static_cast<size_t>(p)] = std::max(longest_[static_cast<size_t>(p)], len);
    }
    path.push_back(at++);
    for (auto it = nd.children.rbegin(); it != nd.children.rend(); ++it)
      todo.emplace_back(it->second, static_cast<uint16_t>(std::min<size_t>(d + 1u, 65535)), it->first);
  }
  for (const int32_t p : path) end_[static_cast<size_t>(p)] = at;
  tok_begin_.push_back(static_cast<int32_t>(toks_.size()));
}

bool TokenTrie::is_eog(int32_t id) const { return std::binary_search(eog_.begin(), eog_.end(), id); }

std::shared_ptr<const TokenTrie> TokenTrie::of(const Tokenizer& tok, std::vector<int32_t> special) {
  std::sort(special.begin(), special.end());
  // A few recent vocabularies, keyed by the tokenizer and a fingerprint of its tokens (so a new
  // tokenizer at a freed one's address is not mistaken for it).
  struct Entry {
    const Tokenizer* tok;
    size_t fingerprint;
    std::vector<int32_t> special;
    std::shared_ptr<const TokenTrie> trie;
  };
  static std::mutex mu;
  static std::vector<Entry> recent;
  size_t fp = std::hash<int32_t>{}(tok.n_vocab());
  for (int32_t id = 0; id < tok.n_vocab(); id += 97) fp = fp * 1000003u ^ std::hash<std::string>{}(tok.token_text(id));
  std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : recent)
    if (e.tok == &tok && e.fingerprint == fp && e.special == special) return e.trie;
  auto trie = std::make_shared<const TokenTrie>(tok, special);
  if (recent.size() >= 4) recent.erase(recent.begin());
  recent.push_back({&tok, fp, special, trie});
  return trie;
}

// ---- the pushdown state -------------------------------------------------------------------------

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> vocab)
    : g_(std::move(grammar)), vocab_(std::move(vocab)) {
  elem_rule_.assign(g_->elements.size(), -1);
  elem_off_.assign(g_->elements.size(), 0);
  for (size_t r = 0; r < g_->alternatives.size(); ++r)
    for (const int32_t a : g_->alternatives[r])
      for (int32_t e = a;; ++e) {
        elem_rule_[static_cast<size_t>(e)] = static_cast<int32_t>(r);
        elem_off_[static_cast<size_t>(e)] = e - a;
        if (g_->elements[static_cast<size_t>(e)].kind == GrammarElement::kEnd) break;
      }
  State start;
  for (const int32_t alt : g_->alternatives[static_cast<size_t>(g_->root)]) expand({alt}, &start.stacks);
  std::sort(start.stacks.begin(), start.stacks.end());
  start.stacks.erase(std::unique(start.stacks.begin(), start.stacks.end()), start.stacks.end());
  cur_ = intern(std::move(start));
}

// Until the top is a character class (or the stack is empty): a finished alternative returns to
// what follows its reference, a reference becomes each of its rule's alternatives. A stack met
// twice at a reference is expanded once: rules that can match nothing (x ::= "" | "") would
// otherwise double the stacks at every level of x{0,40}.
void GrammarMatcher::expand(Stack s, std::vector<Stack>* out) const {
  std::set<Stack> seen;
  expand(std::move(s), out, &seen);
}

void GrammarMatcher::expand(Stack s, std::vector<Stack>* out, std::set<Stack>* seen) const {
  while (!s.empty()) {
    const int32_t top = s.back();
    const GrammarElement& e = g_->elements[static_cast<size_t>(top)];
    if (e.kind == GrammarElement::kChars) break;
    if (e.kind == GrammarElement::kRule && !seen->insert(s).second) return;
    s.pop_back();
    if (e.kind == GrammarElement::kEnd) continue;
    // A reference: what follows it (none when it ends the alternative), then the rule.
    if (g_->elements[static_cast<size_t>(top) + 1].kind != GrammarElement::kEnd) s.push_back(top + 1);
    const auto& alts = g_->alternatives[static_cast<size_t>(e.rule)];
    for (size_t a = 1; a < alts.size(); ++a) {
      Stack other = s;
      other.push_back(alts[a]);
      expand(std::move(other), out, seen);
    }
    s.push_back(alts[0]);
  }
  out->push_back(std::move(s));
}

void GrammarMatcher::advance_cp(const std::vector<Stack>& in, uint32_t cp, std::vector<Stack>* out) const {
  out->clear();
  std::set<Stack> seen;
  for (const Stack& s : in) {
    if (s.empty() || !g_->elements[static_cast<size_t>(s.back())].matches(cp)) continue;
    Stack next = s;
    ++next.back();
    expand(std::move(next), out, &seen);
  }
  if (out->size() > 1) {
    std::sort(out->begin(), out->end());
    out->erase(std::unique(out->begin(), out->end()), out->end());
  }
  // A grammar ambiguous or recursive enough that the parse outgrows kMaxStackEntries (hostile
  // input: root ::= .{1,40} root .) ends the text instead of the process's time and memory.
  size_t entries = 0;
  for (const Stack& st : *out) entries += st.size() + 1;
  if (entries > kMaxStackEntries) {
    out->clear();
    overflow_ = true;
  }
}

namespace {
size_t utf8_need(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;  // a continuation byte or an invalid lead
}
}  // namespace

bool GrammarMatcher::feed(const State& in, uint8_t b, State* out) const {
  const size_t have = in.partial.size();
  const uint8_t lead = have ? static_cast<uint8_t>(in.partial[0]) : b;
  const size_t need = utf8_need(lead);
  if (need == 0 || (have > 0 && (b & 0xC0) != 0x80)) return false;
  std::string p = in.partial;
  p.push_back(static_cast<char>(b));
  if (p.size() < need) {  // still incomplete: some completion must be acceptable
    uint32_t lo = lead & (0xFF >> (need + 1)), hi = lo;
    for (size_t k = 1; k < need; ++k) {
      const uint32_t c = k < p.size() ? static_cast<uint8_t>(p[k]) & 0x3F : 0;
      lo = lo << 6 | c;
      hi = hi << 6 | (k < p.size() ? c : 0x3F);
    }
    // The shortest form of each length is not overlong, and nothing is past U+10FFFF.
    constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    lo = std::max(lo, kMin[need]);
    hi = std::min<uint32_t>(hi, 0x10FFFF);
    if (lo > hi) return false;
    bool any = false;
    for (const Stack& s : in.stacks)
      any = any || (!s.empty() && g_->elements[static_cast<size_t>(s.back())].matches_any(lo, hi));
    if (!any) return false;
    out->stacks = in.stacks;
    out->partial = std::move(p);
    return true;
  }
  size_t i = 0;
  const uint32_t cp = unicode::next_cp(p, i);
  if (cp == unicode::kInvalid || i != p.size()) return false;  // overlong, a surrogate, past U+10FFFF
  advance_cp(in.stacks, cp, &out->stacks);
  out->partial.clear();
  return !out->stacks.empty();
}

std::string GrammarMatcher::key(const State& st) {
  std::string k;
  for (const Stack& s : st.stacks) {
    const auto n = static_cast<uint32_t>(s.size());
    k.append(reinterpret_cast<const char*>(&n), sizeof n);
    k.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(int32_t));
  }
  k += '|';
  k += st.partial;
  return k;
}

int32_t GrammarMatcher::intern(State st) {
  std::string k = key(st);
  auto it = ids_.find(k);
  if (it != ids_.end()) return it->second;
  auto n = std::make_unique<Node>();
  n->complete = is_complete(st);
  n->st = std::move(st);
  next_.resize(next_.size() + 256, -2);
  const auto id = static_cast<int32_t>(nodes_.size());
  nodes_.push_back(std::move(n));
  ids_.emplace(std::move(k), id);
  return id;
}

int32_t GrammarMatcher::step(int32_t id, uint8_t b) {
  const size_t at = static_cast<size_t>(id) * 256 + b;
  int32_t r = next_[at];
  if (r != -2) return r;
  State out;
  r = feed(nodes_[static_cast<size_t>(id)]->st, b, &out) ? intern(std::move(out)) : -1;
  next_[at] = r;  // (intern may have grown next_)
  return r;
}

// Interned states and masks grow with the text (a counted repetition gives a state per count):
// past a bound they are dropped, and the current state is interned again.
void GrammarMatcher::trim() {
  constexpr size_t kMaxStates = 1 << 14, kMaxMasks = 64, kMaxBases = 16;
  auto drop = [&](bool bases) {
    for (auto& n : nodes_) {
      if (!n->mask || (n->base && !bases)) continue;
      if (spare_.size() < 4) spare_.push_back(std::move(n->mask));
      n->mask.reset();
    }
  };
  if (n_masks_ > kMaxMasks) {
    drop(false);
    n_masks_ = 0;
  }
  if (n_bases_ > kMaxBases) {
    drop(true);
    n_masks_ = n_bases_ = 0;
  }
  if (nodes_.size() <= kMaxStates || cur_ < 0) return;
  State keep = std::move(nodes_[static_cast<size_t>(cur_)]->st);
  nodes_.clear();
  next_.clear();
  ids_.clear();
  n_masks_ = n_bases_ = 0;
  cur_ = intern(std::move(keep));
}

bool GrammarMatcher::complete() const { return cur_ >= 0 && nodes_[static_cast<size_t>(cur_)]->complete; }

bool GrammarMatcher::lifted(const State& st, State* out, size_t* same) const {
  constexpr auto kShort = static_cast<int32_t>(TokenTrie::kShortBytes);
  bool moved = false;
  *out = st;
  *same = TokenTrie::kShortBytes;
  for (Stack& s : out->stacks) {
    // Each stack's innermost count moves either way (inside a string of maxLength 200: that
    // string's); outer ones (the array around it) only down to kShortBytes, which keeps `same`.
    bool inner = true;
    for (size_t k = s.size(); k-- > 0;) {
      int32_t& p = s[k];
      const int32_t r = elem_rule_[static_cast<size_t>(p)];
      const auto [c, j] = g_->chain_of[static_cast<size_t>(r)];
      if (c < 0) continue;
      const auto& chain = g_->chains[static_cast<size_t>(c)];
      const int32_t top = std::min(kShort, static_cast<int32_t>(chain.size()) - 1);
      const bool lift = inner ? j != top : j > top;
      inner = false;
      if (!lift) continue;
      // Both rules' first alternatives: the item, then a reference to the next rule of the chain.
      const int32_t to = chain[static_cast<size_t>(top)];
      p = g_->alternatives[static_cast<size_t>(to)][0] + elem_off_[static_cast<size_t>(p)];
      *same = std::min(*same, static_cast<size_t>(std::min(j, top)));
      moved = true;
    }
  }
  if (moved) {
    std::sort(out->stacks.begin(), out->stacks.end());
    out->stacks.erase(std::unique(out->stacks.begin(), out->stacks.end()), out->stacks.end());
  }
  return moved;
}


void GrammarMatcher::walk(int32_t id, size_t skip, std::vector<uint8_t>* mask) {
  const TokenTrie& t = *vocab_;
  walk_at_.resize(static_cast<size_t>(t.max_depth()) + 1);
  walk_at_[0] = id;
  uint8_t* m = mask->data();
  for (int32_t i = 1, n = t.n_nodes(); i < n;) {
    const size_t d = t.depth(i);
    if (t.longest(i) <= skip) {  // no token here is long enough to need this walk
      i = t.subtree_end(i);
      continue;
    }
    const int32_t next = step(walk_at_[d - 1], t.byte(i));
    if (next < 0) {
      i = t.subtree_end(i);
      continue;
    }
    if (d > skip)
      for (const int32_t tk : t.tokens(i)) m[tk] = 1;
    walk_at_[d] = next;
    ++i;
  }
}

Status GrammarMatcher::overflow_error() const {
  return Error(KESTREL_ERR_UNSUPPORTED, "grammar: the parse of the text grew past " + std::to_string(kMaxStackEntries) +
                                            " stack entries (a grammar too ambiguous or too deeply recursive)");
}

Expected<const std::vector<uint8_t>*> GrammarMatcher::allowed() {
  if (overflow_) return overflow_error();
  if (cur_ < 0) return Error(KESTREL_ERR_INTERNAL, "grammar: the text has already left the grammar");
  if (!vocab_) return Error(KESTREL_ERR_INTERNAL, "grammar: a matcher of text only has no token masks");
  if (!nodes_[static_cast<size_t>(cur_)]->mask) trim();
  return mask_of(cur_);
}

const std::vector<uint8_t>* GrammarMatcher::mask_of(int32_t id) {
  if (nodes_[static_cast<size_t>(id)]->mask) return nodes_[static_cast<size_t>(id)]->mask.get();
  const auto n_vocab = static_cast<size_t>(vocab_->n_vocab());
  std::unique_ptr<std::vector<uint8_t>> mask;
  if (!spare_.empty()) {
    mask = std::move(spare_.back());
    spare_.pop_back();
  }
  State top;
  size_t same = 0;
  if (lifted(nodes_[static_cast<size_t>(id)]->st, &top, &same)) {
    // The lifted state's mask (it walks once) for tokens of at most `same` bytes; longer ones
    // walked from this state.
    const int32_t base = intern(std::move(top));
    nodes_[static_cast<size_t>(base)]->base = true;
    const std::vector<uint8_t>& from = *mask_of(base);
    if (mask) *mask = from;
    else mask = std::make_unique<std::vector<uint8_t>>(from);
    const uint8_t* len = vocab_->lengths().data();
    uint8_t* m = mask->data();
    for (size_t t = 0; t < n_vocab; ++t) m[t] = len[t] <= same ? m[t] : 0;  // (vectorizes)
    walk(id, same, mask.get());
  } else {
    if (mask) std::fill(mask->begin(), mask->end(), 0);
    else mask = std::make_unique<std::vector<uint8_t>>(n_vocab, 0);
    walk(id, 0, mask.get());
  }
  for (const int32_t t : vocab_->eog()) (*mask)[static_cast<size_t>(t)] = nodes_[static_cast<size_t>(id)]->complete ? 1 : 0;
  nodes_[static_cast<size_t>(id)]->mask = std::move(mask);
  ++(nodes_[static_cast<size_t>(id)]->base ? n_bases_ : n_masks_);
  return nodes_[static_cast<size_t>(id)]->mask.get();
}

Status GrammarMatcher::accept(int32_t token) {
  if (cur_ < 0) return Error(KESTREL_ERR_INTERNAL, "grammar: the text has already left the grammar");
  if (!vocab_ || token < 0 || token >= vocab_->n_vocab())
    return Error(KESTREL_ERR_OUT_OF_RANGE, "grammar: token " + std::to_string(token) + " is outside the vocabulary");
  if (vocab_->is_eog(token)) {
    if (complete()) return Status::Ok();
  } else if (!vocab_->piece(token).empty() && accept_text(vocab_->piece(token))) {
    return Status::Ok();
  }
  cur_ = -1;
  if (overflow_) return overflow_error();
  return Error(KESTREL_ERR_INVALID_ARGUMENT, "grammar: token " + std::to_string(token) + " is not allowed here");
}

bool GrammarMatcher::accept_text(const std::string& bytes) {
  if (cur_ < 0) return false;
  trim();
  for (const char ch : bytes) {
    cur_ = step(cur_, static_cast<uint8_t>(ch));
    if (cur_ < 0) return false;
  }
  return true;
}

bool GrammarMatcher::would_accept(const std::string& bytes, bool complete) const {
  if (cur_ < 0) return false;
  State st = nodes_[static_cast<size_t>(cur_)]->st, next;
  for (const char ch : bytes) {
    if (!feed(st, static_cast<uint8_t>(ch), &next)) return false;
    std::swap(st, next);
  }
  return !complete || is_complete(st);
}

bool GrammarMatcher::is_complete(const State& st) {
  return st.partial.empty() && std::any_of(st.stacks.begin(), st.stacks.end(), [](const Stack& s) { return s.empty(); });
}

Expected<std::shared_ptr<GrammarMatcher>> make_grammar_matcher(std::string_view gbnf, const Tokenizer& tok,
                                                               std::vector<int32_t> special) {
  auto g = parse_grammar(gbnf);
  KS_RETURN_IF_ERROR(g.status());
  return std::make_shared<GrammarMatcher>(std::make_shared<const Grammar>(std::move(g.value())),
                                          TokenTrie::of(tok, std::move(special)));
}

}  // namespace kestrel
