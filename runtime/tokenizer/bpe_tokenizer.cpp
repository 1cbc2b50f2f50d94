// Byte-level BPE (tokenizer.ggml.model = "gpt2"): the text is cut by the pre-tokenizer regexes,
// each piece's bytes are mapped to GPT-2's printable stand-in characters (every byte is a token
// of its own), and the pieces are merged by rank. With ignore_merges (Llama 3, o200k, Tekken) a
// piece that is itself a token is emitted whole, as tiktoken does.
#include <algorithm>
#include <iterator>

#include "tokenizer/bpe_merge.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kestrel {
namespace {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes
// map to U+0100.. in byte order.
struct ByteMap {
  uint32_t to_cp[256];
  int16_t from_cp[0x200];  // inverse for code points < 0x200, -1 when none
  ByteMap() {
    std::fill(std::begin(from_cp), std::end(from_cp), int16_t{-1});
    uint32_t extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : 256 + extra++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

class BpeTokenizer final : public Tokenizer {
 public:
  BpeTokenizer(Vocab v, PreTokenizerChoice pre, MergeTable merges, bool ignore_merges)
      : Tokenizer(std::move(v)), pre_(std::move(pre)), merges_(std::move(merges)), ignore_merges_(ignore_merges) {
    const ByteMap& m = byte_map();
    for (int b = 0; b < 256; ++b) {
      byte_utf8_[b].clear();
      unicode::append_utf8(byte_utf8_[b], m.to_cp[b]);
      byte_token_[b] = vocab_.find(byte_utf8_[b]);
    }
    info_.algorithm = "bpe";
    info_.pre_source = pre_.source;
    info_.pre_regex = pre_.pre.regexes();
    info_.n_merges = merges_.size();
    info_.ignore_merges = ignore_merges_;
  }

 protected:
  bool strips_leading_space() const override { return false; }

  std::string decode_normal(const std::string& t) const override {
    const ByteMap& m = byte_map();
    std::string out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      const size_t start = i;
      const uint32_t cp = unicode::next_cp(t, i);
      if (cp < 0x200 && m.from_cp[cp] >= 0) out += static_cast<char>(m.from_cp[cp]);
      else out.append(t, start, i - start);  // not a byte stand-in: keep the text
    }
    return out;
  }

  Status encode_fragment(std::string_view text, bool, std::vector<int32_t>& out) const override {
    std::vector<std::string_view> pieces;
    KS_RETURN_IF_ERROR(pre_.pre.split(text, pieces));
    std::vector<BpeSymbol> syms;
    std::string encoded;
    for (std::string_view piece : pieces) {
      if (ignore_merges_) {
        encoded.clear();
        for (char c : piece) encoded += byte_utf8_[static_cast<uint8_t>(c)];
        const int32_t id = vocab_.find(encoded);
        if (id >= 0) {
          out.push_back(id);
          continue;
        }
      }
      syms.clear();
      for (uint32_t i = 0; i < piece.size(); ++i)
        syms.push_back({byte_token_[static_cast<uint8_t>(piece[i])], i, i + 1});
      bpe_merge(merges_, syms);
      for (const BpeSymbol& s : syms) {
        if (s.id >= 0) out.push_back(s.id);
        else if (vocab_.unk >= 0) out.push_back(vocab_.unk);  // a byte missing from the vocabulary
      }
    }
    return Status::Ok();
  }

 private:
  PreTokenizerChoice pre_;
  MergeTable merges_;
  bool ignore_merges_;
  std::string byte_utf8_[256];
  int32_t byte_token_[256];
};

}  // namespace

Expected<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(Vocab v, const gguf::File& f) {
  auto pre = choose_pre_tokenizer(f);
  if (!pre.ok()) return pre.status();
  auto merges = MergeTable::from_gguf(f, v);
  if (!merges.ok()) return merges.status();
  auto ignore = read_ignore_merges(f, pre->preset && pre->preset->ignore_merges);
  if (!ignore.ok()) return ignore.status();
  return std::unique_ptr<Tokenizer>(
      std::make_unique<BpeTokenizer>(std::move(v), std::move(pre.value()), std::move(merges.value()), *ignore));
}

}  // namespace kestrel
