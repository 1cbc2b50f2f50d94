// SentencePiece vocabularies without merges (tokenizer.ggml.model = "llama"): spaces become
// U+2581, a dummy space prefixes the text, then adjacent symbols are merged greedily by the score
// of the token they would form (highest first, leftmost on ties); characters that form no token
// fall back to <0xXX> byte tokens. This reproduces llama.cpp's (and SentencePiece's BPE)
// segmentation. A bigram is queued only when its text is a token, so every merged symbol is a
// token and only single characters can need the byte fallback.
#include <cstdio>
#include <queue>

#include "tokenizer/spm_space.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

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
    info_.algorithm = "spm";
  }

 protected:
  std::string decode_user_defined(const std::string& t) const override { return decode_normal(t); }
  std::string decode_normal(const std::string& t) const override { return spm::unescape_spaces(t); }

  Status encode_fragment(std::string_view frag, bool after_special, std::vector<int32_t>& out) const override {
    const std::string text = spm::escape_spaces(frag, vocab_.add_space_prefix && after_special);
    if (text.empty()) return Status::Ok();
    // Symbols: one per UTF-8 character, in a doubly linked list.
    struct Symbol {
      int32_t prev, next;
      size_t start, n;
    };
    std::vector<Symbol> sym;
    sym.reserve(text.size());
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
    const std::string_view tv = text;
    auto try_add = [&](int32_t l, int32_t r) {
      if (l < 0 || r < 0) return;
      const size_t size = sym[l].n + sym[r].n;
      const int32_t id = vocab_.find(tv.substr(sym[l].start, size));
      if (id >= 0) queue.push({l, r, vocab_.score[id], size});
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
    for (int32_t i = 0; i != -1; i = sym[i].next) {
      const std::string_view piece = tv.substr(sym[i].start, sym[i].n);
      const int32_t id = vocab_.find(piece);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      for (char c : piece) {
        const int32_t b = byte_token_[static_cast<uint8_t>(c)];
        if (b >= 0) out.push_back(b);
      }
    }
    return Status::Ok();
  }

 private:
  int32_t byte_token_[256];
};

}  // namespace

Expected<std::unique_ptr<Tokenizer>> make_spm_tokenizer(Vocab v) {
  return std::unique_ptr<Tokenizer>(std::make_unique<SpmTokenizer>(std::move(v)));
}

}  // namespace kestrel
