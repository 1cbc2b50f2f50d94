// GBNF parsing (grammar.h): text -> rules of alternatives of sequences, groups and repetitions
// rewritten as rules of their own, then checked (defined rules, a root, no left recursion).
#include "sampling/grammar.h"

#include <algorithm>
#include <functional>
#include <unordered_map>

#include "tokenizer/unicode.h"

namespace kestrel {

bool GrammarElement::matches(uint32_t cp) const {
  bool in = false;
  for (const auto& [lo, hi] : ranges) in = in || (cp >= lo && cp <= hi);
  return in != negated;
}

bool GrammarElement::matches_any(uint32_t lo, uint32_t hi) const {
  if (!negated) {
    for (const auto& [a, b] : ranges)
      if (a <= hi && b >= lo) return true;
    return false;
  }
  // Some value of [lo, hi] outside every range: walk the ranges in order from lo.
  std::vector<std::pair<uint32_t, uint32_t>> r = ranges;
  std::sort(r.begin(), r.end());
  uint32_t next = lo;
  for (const auto& [a, b] : r) {
    if (a > next) break;
    if (b >= next) {
      if (b >= hi) return false;
      next = b + 1;
    }
  }
  return next <= hi;
}

namespace {

using Sequence = std::vector<GrammarElement>;
using Rule = std::vector<Sequence>;

GrammarElement chars(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated = false) {
  GrammarElement e;
  e.kind = GrammarElement::kChars;
  e.ranges = std::move(ranges);
  e.negated = negated;
  return e;
}
GrammarElement ref(int32_t rule) {
  GrammarElement e;
  e.kind = GrammarElement::kRule;
  e.rule = rule;
  return e;
}

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Expected<Grammar> run() {
    skip(true);
    while (i_ < s_.size()) {
      KS_RETURN_IF_ERROR(parse_rule());
      skip(true);
    }
    if (!error_.ok()) return error_;
    return finish();
  }

 private:
  Status fail(const std::string& what) {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < i_ && k < s_.size(); ++k) {
      if (s_[k] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return Error(KESTREL_ERR_INVALID_ARGUMENT,
                 "grammar: " + what + " at line " + std::to_string(line) + ", column " + std::to_string(col));
  }
  bool at_end() const { return i_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[i_]; }

  // Spaces, tabs, comments; newlines too when `newlines`.
  void skip(bool newlines) {
    while (!at_end()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++i_;
      } else if (c == '#') {
        while (!at_end() && s_[i_] != '\n') ++i_;
      } else {
        break;
      }
    }
  }
  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  }
  std::string parse_name() {
    const size_t b = i_;
    while (!at_end() && name_char(s_[i_])) ++i_;
    return std::string(s_.substr(b, i_ - b));
  }
  int32_t rule_id(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const auto id = static_cast<int32_t>(rules_.size());
    ids_.emplace(name, id);
    rules_.emplace_back();
    names_.push_back(name);
    defined_.push_back(false);
    return id;
  }
  int32_t new_rule(const std::string& parent) {
    const std::string name = parent + "-" + std::to_string(++generated_);
    const int32_t id = rule_id(name);
    defined_[static_cast<size_t>(id)] = true;
    return id;
  }

  Status parse_rule() {
    const std::string name = parse_name();
    if (name.empty()) return fail("expected a rule name");
    skip(false);
    if (s_.substr(i_, 3) != "::=") return fail("expected '::=' after rule name '" + name + "'");
    i_ += 3;
    const int32_t id = rule_id(name);
    if (defined_[static_cast<size_t>(id)]) return fail("rule '" + name + "' is defined twice");
    defined_[static_cast<size_t>(id)] = true;
    current_ = name;
    Rule alts;
    KS_RETURN_IF_ERROR(parse_alternatives(false, &alts));
    rules_[static_cast<size_t>(id)] = std::move(alts);
    if (!at_end() && peek() != '\n') return fail("unexpected '" + std::string(1, peek()) + "'");
    return Status::Ok();
  }

  Status parse_alternatives(bool nested, Rule* out) {
    for (;;) {
      Sequence seq;
      KS_RETURN_IF_ERROR(parse_sequence(nested, &seq));
      out->push_back(std::move(seq));
      if (peek() != '|') return Status::Ok();
      ++i_;
      skip(true);
    }
  }

  // One code point of a literal or class, with escapes.
  Expected<uint32_t> parse_char() {
    if (at_end()) return fail("unexpected end of grammar");
    if (s_[i_] != '\\') {
      const uint32_t cp = unicode::next_cp(s_, i_);
      if (cp == unicode::kInvalid) return fail("invalid UTF-8");
      return cp;
    }
    ++i_;
    if (at_end()) return fail("unexpected end after '\\'");
    const char e = s_[i_++];
    switch (e) {
      case 'n': return uint32_t{'\n'};
      case 'r': return uint32_t{'\r'};
      case 't': return uint32_t{'\t'};
      case '\\': case '"': case '[': case ']': case '-': case '/': case '\'': case '^': return uint32_t(static_cast<unsigned char>(e));
      case 'x': case 'u': case 'U': {
        const int digits = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
        uint32_t v = 0;
        for (int k = 0; k < digits; ++k) {
          const char h = peek();
          const int d = h >= '0' && h <= '9' ? h - '0' : (h >= 'a' && h <= 'f' ? h - 'a' + 10 : (h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1));
          if (d < 0) return fail(std::string("expected ") + std::to_string(digits) + " hex digits after \\" + e);
          v = v * 16 + static_cast<uint32_t>(d);
          ++i_;
        }
        if (v > 0x10FFFF) return fail("code point past U+10FFFF");
        return v;
      }
      default: return fail(std::string("unknown escape \\") + e);
    }
  }

  Status parse_sequence(bool nested, Sequence* seq) {
    skip(nested);
    size_t last = seq->size();  // where the last item (what a repetition repeats) starts
    bool have_item = false;
    while (!at_end()) {
      const char c = peek();
      if (c == '"') {
        ++i_;
        last = seq->size();
        while (peek() != '"') {
          if (at_end() || peek() == '\n') return fail("unterminated string literal");
          auto cp = parse_char();
          KS_RETURN_IF_ERROR(cp.status());
          seq->push_back(chars({{cp.value(), cp.value()}}));
        }
        ++i_;
        have_item = true;
      } else if (c == '[') {
        ++i_;
        last = seq->size();
        bool neg = false;
        if (peek() == '^') {
          neg = true;
          ++i_;
        }
        std::vector<std::pair<uint32_t, uint32_t>> ranges;
        while (peek() != ']') {
          if (at_end()) return fail("unterminated character class");
          auto lo = parse_char();
          KS_RETURN_IF_ERROR(lo.status());
          uint32_t hi = lo.value();
          if (peek() == '-' && i_ + 1 < s_.size() && s_[i_ + 1] != ']') {
            ++i_;
            auto h = parse_char();
            KS_RETURN_IF_ERROR(h.status());
            hi = h.value();
            if (hi < lo.value()) return fail("character range out of order");
          }
          ranges.emplace_back(lo.value(), hi);
        }
        ++i_;
        seq->push_back(chars(std::move(ranges), neg));
        have_item = true;
      } else if (c == '.') {
        ++i_;
        last = seq->size();
        seq->push_back(chars({}, true));
        have_item = true;
      } else if (name_char(c)) {
        last = seq->size();
        const size_t at = i_;
        const std::string name = parse_name();
        skip(false);
        if (s_.substr(i_, 3) == "::=") {  // the next rule: this sequence ended at a newline
          i_ = at;
          return fail("expected a newline before rule '" + name + "'");
        }
        refs_.emplace_back(name, at);
        seq->push_back(ref(rule_id(name)));
        have_item = true;
      } else if (c == '(') {
        ++i_;
        skip(true);
        last = seq->size();
        if (++depth_ > kMaxGrammarDepth) return fail("groups nested deeper than " + std::to_string(kMaxGrammarDepth));
        const int32_t id = new_rule(current_);
        Rule alts;
        KS_RETURN_IF_ERROR(parse_alternatives(true, &alts));
        --depth_;
        if (peek() != ')') return fail("expected ')'");
        ++i_;
        rules_[static_cast<size_t>(id)] = std::move(alts);
        seq->push_back(ref(id));
        have_item = true;
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_item) return fail(std::string("'") + c + "' with nothing before it to repeat");
        int min = 0, max = -1;
        ++i_;
        if (c == '+') min = 1;
        if (c == '?') max = 1;
        if (c == '{') {
          auto num = [&]() -> int {
            skip(false);
            int v = -1;
            while (peek() >= '0' && peek() <= '9') {
              v = (v < 0 ? 0 : v) * 10 + (peek() - '0');
              if (v > kMaxRepeat) v = kMaxRepeat + 1;
              ++i_;
            }
            skip(false);
            return v;
          };
          min = num();
          if (min < 0) return fail("expected a number after '{'");
          max = min;
          if (peek() == ',') {
            ++i_;
            max = num();  // -1: unbounded
          }
          if (peek() != '}') return fail("expected '}'");
          ++i_;
          if (min > kMaxRepeat || max > kMaxRepeat) return fail("a repetition bound over " + std::to_string(kMaxRepeat));
          if (max >= 0 && max < min) return fail("repetition {m,n} with n < m");
        }
        Sequence item(seq->begin() + static_cast<std::ptrdiff_t>(last), seq->end());
        seq->resize(last);
        // A repeated group's rule is repeated by reference; its own size counted once.
        KS_RETURN_IF_ERROR(repeat(item, min, max, seq));
        have_item = false;  // x** is an error, as in llama.cpp
      } else if (c == '|' || c == ')' || c == '\n') {
        return Status::Ok();
      } else {
        return fail("unexpected '" + std::string(1, c) + "'");
      }
      skip(nested);
    }
    return Status::Ok();
  }

  // item{min,max} (max -1: unbounded) appended to seq, through new rules. Short mandatory parts
  // are inlined; longer ones, and every optional part, become chains of rules, each allowing one
  // item fewer than the one before (recorded, so that the matcher can tell counts apart).
  //   mandatory: M_j ::= item M_{j-1}    M_1 ::= item TAIL
  //   optional:  R_j ::= item R_{j-1} |  R_1 ::= item |
  //   unbounded: TAIL ::= item TAIL |
  Status repeat(const Sequence& item, int min, int max, Sequence* seq) {
    // What the repetition adds, before adding it (nested bounds multiply).
    size_t cost = item.size() + 1;
    for (const GrammarElement& e : item) cost += e.ranges.size();
    size_ += cost * static_cast<size_t>(std::max(min, max) + 1);
    if (size_ > kMaxGrammarSize)
      return fail("the grammar grows past " + std::to_string(kMaxGrammarSize) + " elements (repetition bounds multiply)");
    int32_t tail = -1;
    if (max < 0) {
      tail = new_rule(current_);
      Sequence more = item;
      more.push_back(ref(tail));
      rules_[static_cast<size_t>(tail)] = {more, {}};
    } else if (max > min) {
      tail = chain(item, max - min, -1, true);
    }
    constexpr int kInline = 4;
    if (min <= kInline) {
      for (int k = 0; k < min; ++k) seq->insert(seq->end(), item.begin(), item.end());
      if (tail >= 0) seq->push_back(ref(tail));
    } else {
      seq->push_back(ref(chain(item, min, tail, false)));
    }
    return Status::Ok();
  }

  // A chain of n rules (n >= 1); returns its first (n items). The last one's item is followed by
  // a reference to `after` (none: -1); optional chains also match nothing.
  int32_t chain(const Sequence& item, int n, int32_t after, bool optional) {
    std::vector<int32_t> by_count(static_cast<size_t>(n) + 1, -1);
    int32_t inner = after;
    for (int j = 1; j <= n; ++j) {
      const int32_t r = new_rule(current_);
      Sequence more = item;
      if (j > 1 || (!optional && after >= 0)) more.push_back(ref(inner));
      rules_[static_cast<size_t>(r)] = optional ? Rule{more, {}} : Rule{more};
      by_count[static_cast<size_t>(j)] = r;
      inner = r;
    }
    chains_.push_back(std::move(by_count));
    return inner;
  }

  Expected<Grammar> finish() {
    for (const auto& [name, at] : refs_) {
      if (!defined_[static_cast<size_t>(ids_.at(name))]) {
        i_ = at;
        return fail("undefined rule '" + name + "'");
      }
    }
    auto root = ids_.find("root");
    if (root == ids_.end() || !defined_[static_cast<size_t>(root->second)])
      return Error(KESTREL_ERR_INVALID_ARGUMENT, "grammar: no 'root' rule");
    KS_RETURN_IF_ERROR(check_left_recursion());
    Grammar g;
    g.root = root->second;
    g.names = names_;
    g.chain_of.assign(rules_.size(), {-1, 0});
    for (size_t c = 0; c < chains_.size(); ++c)
      for (size_t j = 1; j < chains_[c].size(); ++j)
        g.chain_of[static_cast<size_t>(chains_[c][j])] = {static_cast<int32_t>(c), static_cast<int32_t>(j)};
    g.chains = std::move(chains_);
    g.alternatives.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r)
      for (const Sequence& alt : rules_[r]) {
        g.alternatives[r].push_back(static_cast<int32_t>(g.elements.size()));
        g.elements.insert(g.elements.end(), alt.begin(), alt.end());
        g.elements.emplace_back();  // kEnd
      }
    return g;
  }

  // A rule that can reach itself without matching a character would expand forever.
  Status check_left_recursion() {
    const size_t n = rules_.size();
    std::vector<char> nullable(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Sequence& alt : rules_[r]) {
          bool all = true;
          for (const GrammarElement& e : alt) all = all && e.kind == GrammarElement::kRule && nullable[static_cast<size_t>(e.rule)];
          if (all) {
            nullable[r] = 1;
            changed = true;
            break;
          }
        }
      }
    }
    std::vector<char> state(n, 0);  // 0 unseen, 1 on the path, 2 done
    std::vector<std::string> path;
    std::function<bool(size_t)> dfs = [&](size_t r) {
      state[r] = 1;
      path.push_back(names_[r]);
      for (const Sequence& alt : rules_[r])
        for (const GrammarElement& e : alt) {
          if (e.kind != GrammarElement::kRule) break;
          const auto next = static_cast<size_t>(e.rule);
          if (state[next] == 1) {
            path.push_back(names_[next]);
            return true;
          }
          if (state[next] == 0 && dfs(next)) return true;
          if (!nullable[next]) break;
        }
      path.pop_back();
      state[r] = 2;
      return false;
    };
    for (size_t r = 0; r < n; ++r) {
      if (state[r] == 0 && dfs(r)) {
        std::string chain;
        for (const std::string& p : path) chain += (chain.empty() ? "" : " -> ") + p;
        return Error(KESTREL_ERR_INVALID_ARGUMENT,
                     "grammar: left recursion (a rule reaches itself before matching a character, e.g. a repetition of "
                     "something that can be empty): " + chain);
      }
    }
    return Status::Ok();
  }

  std::string_view s_;
  size_t i_ = 0;
  Status error_;
  std::vector<Rule> rules_;
  std::vector<std::string> names_;
  std::vector<bool> defined_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::pair<std::string, size_t>> refs_;
  std::string current_;
  int generated_ = 0;
  std::vector<std::vector<int32_t>> chains_;
  size_t size_ = 0;  // elements added by repetitions so far
  int depth_ = 0;    // groups open
};

}  // namespace

Expected<Grammar> parse_grammar(std::string_view gbnf) { return Parser(gbnf).run(); }

}  // namespace kestrel
