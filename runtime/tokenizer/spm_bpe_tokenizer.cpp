// SentencePiece-BPE (tokenizer.ggml.model = "llama" with tokenizer.ggml.merges, or "gemma4"):
// Hugging Face's BPE with byte fallback as in Mistral/Llama-2 and Gemma tokenizer.json files.
// Spaces become U+2581, a U+2581 is prepended when add_space_prefix, the text is optionally cut
// by tokenizer.kestrel.pre_regex, each piece's characters are merged by rank, and a character
// that is no token becomes its <0xXX> byte tokens (or the unknown token, fused when repeated).
#include <cstdio>

#include "tokenizer/bpe_merge.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/spm_space.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

class SpmBpeTokenizer final : public Tokenizer {
 public:
  SpmBpeTokenizer(Vocab v, PreTokenizer pre, std::string pre_source, MergeTable merges, bool ignore_merges)
      : Tokenizer(std::move(v)), pre_(std::move(pre)), merges_(std::move(merges)), ignore_merges_(ignore_merges) {
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      byte_token_[b] = vocab_.find(buf);
    }
    info_.algorithm = "spm-bpe";
    info_.pre_source = std::move(pre_source);
    info_.pre_regex = pre_.regexes();
    info_.n_merges = merges_.size();
    info_.ignore_merges = ignore_merges_;
  }

 protected:
  std::string decode_user_defined(const std::string& t) const override { return decode_normal(t); }
  std::string decode_normal(const std::string& t) const override { return spm::unescape_spaces(t); }

  Status encode_fragment(std::string_view frag, bool after_special, std::vector<int32_t>& out) const override {
    const std::string text = spm::escape_spaces(frag, vocab_.add_space_prefix && after_special);
    std::vector<std::string_view> pieces;
    KS_RETURN_IF_ERROR(pre_.split(text, pieces));
    std::vector<BpeSymbol> syms;
    for (std::string_view piece : pieces) {
      if (ignore_merges_) {
        const int32_t id = vocab_.find(piece);
        if (id >= 0) {
          out.push_back(id);
          continue;
        }
      }
      syms.clear();
      for (uint32_t off = 0; off < piece.size();) {
        const uint32_t len = static_cast<uint32_t>(std::min(piece.size() - off, utf8_len(static_cast<uint8_t>(piece[off]))));
        syms.push_back({vocab_.find(piece.substr(off, len)), off, off + len});
        off += len;
      }
      bpe_merge(merges_, syms);
      bool last_unk = false;
      for (const BpeSymbol& s : syms) {
        if (s.id >= 0) {
          out.push_back(s.id);
          last_unk = false;
        } else if (has_byte_tokens(piece.substr(s.begin, s.end - s.begin))) {
          for (uint32_t i = s.begin; i < s.end; ++i) out.push_back(byte_token_[static_cast<uint8_t>(piece[i])]);
          last_unk = false;
        } else if (vocab_.unk >= 0 && !last_unk) {
          out.push_back(vocab_.unk);
          last_unk = true;
        }
      }
    }
    return Status::Ok();
  }

 private:
  PreTokenizer pre_;
  MergeTable merges_;
  bool ignore_merges_;
  int32_t byte_token_[256];

  bool has_byte_tokens(std::string_view bytes) const {
    for (char c : bytes)
      if (byte_token_[static_cast<uint8_t>(c)] < 0) return false;
    return true;
  }
};

}  // namespace

Expected<std::unique_ptr<Tokenizer>> make_spm_bpe_tokenizer(Vocab v, const gguf::File& f) {
  auto merges = MergeTable::from_gguf(f, v);
  if (!merges.ok()) return merges.status();
  // Only an explicit regex list splits the text: SentencePiece-BPE has no pre-tokenizer of its own.
  PreTokenizer pre;
  std::string source;
  if (f.find("tokenizer.kestrel.pre_regex")) {
    auto c = choose_pre_tokenizer(f);
    if (!c.ok()) return c.status();
    pre = std::move(c->pre);
    source = c->source;
  }
  auto ignore = read_ignore_merges(f, false);
  if (!ignore.ok()) return ignore.status();
  return std::unique_ptr<Tokenizer>(std::make_unique<SpmBpeTokenizer>(std::move(v), std::move(pre), std::move(source),
                                                                      std::move(merges.value()), *ignore));
}

}  // namespace kestrel
