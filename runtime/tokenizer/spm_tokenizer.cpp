// SentencePiece vocabularies (tokenizer.ggml.model = "llama"): spaces become U+2581, a dummy
// space prefixes the text, then adjacent symbols are merged greedily by the score of the token
// they would form (highest first, leftmost on ties); symbols that form no token fall back to
// <0xXX> byte tokens. This reproduces llama.cpp's (and SentencePiece's BPE) segmentation.
#include <cstdio>
#include <queue>

#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

constexpr std::string_view kSpace = "\xe2\x96\x81";  // U+2581

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(Vocab v) : Tokenizer(std::move(v)) {
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      int32_t id = vocab_.find(buf);
      if (id < 0) id = vocab_.find(std::string(1, static_cast<char>(b)));
      byte_token_[b] = id >= 0 ? id : vocab_.unk;
    }
  }

  std::string token_to_piece(int32_t id, bool render_special) const override {
    if (id < 0 || id >= n_vocab()) return "";
    const std::string& t = vocab_.text[id];
    switch (vocab_.type[id]) {
      case TokenType::NORMAL: {
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
      case TokenType::USER_DEFINED: return t;
      case TokenType::BYTE:
        if (t.size() == 6 && t.compare(0, 3, "<0x") == 0) return std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
        return t;
      case TokenType::UNKNOWN: return "\xe2\x96\x85";  // U+2585, as llama.cpp shows it
      case TokenType::CONTROL: return render_special ? t : "";
      case TokenType::UNUSED: return render_special ? t : "";
    }
    return "";
  }

 protected:
  void encode_fragment(std::string_view frag, bool after_special, std::vector<int32_t>& out) const override {
    std::string text;
    if (vocab_.add_space_prefix && after_special) text = kSpace;
    for (char c : frag) {
      if (c == ' ') text += kSpace;
      else text += c;
    }
    if (text.empty()) return;
    // Symbols: one per UTF-8 character, in a doubly linked list.
    struct Symbol {
      int32_t prev, next;
      size_t start, n;
    };
    std::vector<Symbol> sym;
    for (size_t off = 0; off < text.size();) {
      const size_t len = std::min(text.size() - off, utf8_len(static_cast<uint8_t>(text[off])));
      const int32_t i = static_cast<int32_t>(sym.size());
      sym.push_back({i - 1, off + len == text.size() ? -1 : i + 1, off, len});
      off += len;
    }
    struct Bigram {
      int32_t left, right;
      float score;
      size_t size;
    };
    auto worse = [](const Bigram& a, const Bigram& b) {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
    std::unordered_map<std::string, std::pair<int32_t, int32_t>> rev_merge;
    auto try_add = [&](int32_t l, int32_t r) {
      if (l < 0 || r < 0) return;
      std::string s = text.substr(sym[l].start, sym[l].n + sym[r].n);
      const int32_t id = vocab_.find(s);
      if (id < 0) return;
      queue.push({l, r, vocab_.score[id], s.size()});
      rev_merge[s] = {l, r};
    };
    for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int32_t>(i - 1), static_cast<int32_t>(i));
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Symbol &l = sym[b.left], &r = sym[b.right];
      if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
    // Emit: a merged symbol that is no token is split back along its merge history.
    std::vector<int32_t> stack;
    for (int32_t i = 0; i != -1; i = sym[i].next) {
      stack.push_back(i);
      while (!stack.empty()) {
        const int32_t s = stack.back();
        stack.pop_back();
        const std::string piece = text.substr(sym[s].start, sym[s].n);
        const int32_t id = vocab_.find(piece);
        if (id >= 0) {
          out.push_back(id);
          continue;
        }
        auto it = rev_merge.find(piece);
        if (it == rev_merge.end()) {
          for (char c : piece) out.push_back(byte_token_[static_cast<uint8_t>(c)]);
          continue;
        }
        stack.push_back(it->second.second);  // right after left
        stack.push_back(it->second.first);
      }
    }
  }

 private:
  int32_t byte_token_[256];
};

}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab v) { return std::make_unique<SpmTokenizer>(std::move(v)); }

}  // namespace kestrel
