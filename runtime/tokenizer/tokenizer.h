// Tokenizers over GGUF vocabularies. A Tokenizer is built from the GGUF's tokenizer.ggml.* keys;
// the vocabulary type (tokenizer.ggml.model) picks the algorithm behind one interface.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace kestrel {

// GGUF token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t { NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5, BYTE = 6 };

struct Vocab {
  std::vector<std::string> text;
  std::vector<float> score;
  std::vector<TokenType> type;
  std::unordered_map<std::string, int32_t> to_id;
  int32_t bos = -1, eos = -1, unk = -1, eot = -1, eom = -1;
  bool add_bos = false, add_eos = false, add_space_prefix = true;
  std::vector<int32_t> specials;  // control/user-defined/unknown ids, longest text first

  int32_t n() const { return static_cast<int32_t>(text.size()); }
  int32_t find(std::string_view s) const {
    auto it = to_id.find(std::string(s));
    return it == to_id.end() ? -1 : it->second;
  }
};

class Tokenizer {
 public:
  // Unknown tokenizer.ggml.model -> UNSUPPORTED naming it; missing/ill-typed keys -> FORMAT.
  static Expected<std::unique_ptr<Tokenizer>> from_gguf(const gguf::File& f);
  virtual ~Tokenizer() = default;

  // add_special: BOS/EOS as the vocabulary asks. parse_special: control-token text in `text`
  // becomes those tokens (user-defined tokens always match, as in llama.cpp).
  Expected<std::vector<int32_t>> tokenize(std::string_view text, bool add_special, bool parse_special) const;
  // Bytes of one token (byte tokens give their byte); control tokens give "" unless
  // render_special. Out-of-range ids give "".
  virtual std::string token_to_piece(int32_t id, bool render_special) const = 0;
  // Joins pieces; without render_special a leading BOS (and trailing EOS) is dropped, and the one
  // space the tokenizer's dummy prefix introduced is removed from the first piece.
  std::string detokenize(std::span<const int32_t> ids, bool render_special) const;
  Status check_ids(std::span<const int32_t> ids) const;

  int32_t n_vocab() const { return vocab_.n(); }
  int32_t bos() const { return vocab_.bos; }
  int32_t eos() const { return vocab_.eos; }
  bool add_bos() const { return vocab_.add_bos; }
  bool add_eos() const { return vocab_.add_eos; }
  bool is_eog(int32_t id) const { return id >= 0 && (id == vocab_.eos || id == vocab_.eot || id == vocab_.eom); }
  bool is_control(int32_t id) const {
    return id >= 0 && id < n_vocab() && vocab_.type[id] == TokenType::CONTROL;
  }
  const std::string& token_text(int32_t id) const { return vocab_.text[id]; }
  const Vocab& vocab() const { return vocab_; }

 protected:
  explicit Tokenizer(Vocab v) : vocab_(std::move(v)) {}
  // Tokenizes plain text (no special-token matching); `starts_text` is true for the first
  // fragment or one right after a special token.
  virtual void encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const = 0;
  Vocab vocab_;
};

// Turns tokens into text one at a time, emitting only complete UTF-8 sequences.
class StreamingDetokenizer {
 public:
  StreamingDetokenizer(const Tokenizer& tok, bool render_special) : tok_(tok), render_special_(render_special) {}
  std::string push(int32_t id);  // the text that became complete
  std::string flush();           // what is left; invalid or incomplete bytes become U+FFFD
  void reset() { pending_.clear(); }

 private:
  const Tokenizer& tok_;
  bool render_special_;
  std::string pending_;
};

// Factories of the vocabulary types (one file each).
std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab v);

// Length of the UTF-8 sequence a lead byte starts (1 for invalid lead bytes).
inline size_t utf8_len(uint8_t c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

}  // namespace kestrel
