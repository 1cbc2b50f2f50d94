// Tokenizers over GGUF vocabularies. A Tokenizer is built from the GGUF's tokenizer.* keys
// (llama.cpp's tokenizer.ggml.* keys plus the tokenizer.kestrel.* extensions our converter
// writes: pre_regex, normalizer, ignore_merges, added_token_flags); the vocabulary type
// (tokenizer.ggml.model) picks the algorithm behind one interface:
//   "llama"            SentencePiece: score-ordered merges, byte fallback (spm_tokenizer.cpp);
//                      with tokenizer.ggml.merges: rank-ordered merges (spm_bpe_tokenizer.cpp)
//   "gemma4"           as "llama" with merges (llama.cpp's name for Gemma's SentencePiece-BPE)
//   "gpt2"             byte-level BPE with a regex pre-tokenizer (bpe_tokenizer.cpp)
//   "bert"             WordPiece (wpm_tokenizer.cpp)
// tokenize(): special tokens are cut out first (special_tokens.cpp), each plain fragment is
// normalized (tokenizer.kestrel.normalizer) and encoded by the algorithm. Thread-safe: a
// Tokenizer is immutable after construction.
#pragma once
#include <cstdint>
#include <functional>
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

// Hugging Face AddedToken flags, one byte per token (tokenizer.kestrel.added_token_flags).
// kNormalized is kept but not acted on: added tokens are always matched in the raw text.
enum AddedTokenFlag : uint8_t { kLStrip = 1, kRStrip = 2, kSingleWord = 4, kNormalized = 8 };

enum class Normalizer : uint8_t { None, NFC };

// std::string keys looked up by string_view without a temporary std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct Vocab {
  std::vector<std::string> text;
  std::vector<float> score;
  std::vector<TokenType> type;
  std::vector<uint8_t> added_flags;  // AddedTokenFlag bits per id (all 0 when the key is absent)
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> to_id;
  int32_t bos = -1, eos = -1, unk = -1, eot = -1, eom = -1, sep = -1, pad = -1;
  bool add_bos = false, add_eos = false, add_sep = false, add_space_prefix = true;
  std::string model, pre;                  // tokenizer.ggml.model / tokenizer.ggml.pre
  Normalizer normalizer = Normalizer::None;
  std::vector<int32_t> eog;                // end-of-generation ids, sorted
  size_t max_token_len = 0;                // bytes

  int32_t n() const { return static_cast<int32_t>(text.size()); }
  int32_t find(std::string_view s) const {
    auto it = to_id.find(s);
    return it == to_id.end() ? -1 : it->second;
  }
};

// What a tokenizer is, for describe/CLI output.
struct TokenizerInfo {
  std::string model;                   // tokenizer.ggml.model
  std::string algorithm;               // "spm", "spm-bpe", "bpe", "wpm"
  std::string pre;                     // tokenizer.ggml.pre ("" when absent)
  std::string pre_source;              // "tokenizer.kestrel.pre_regex", "builtin:<name>", "fallback:gpt-2", ""
  std::vector<std::string> pre_regex;  // the regexes in use
  std::string normalizer;              // "" or "nfc"
  size_t n_merges = 0;
  bool ignore_merges = false;
};

class SpecialTokenMatcher;

class Tokenizer {
 public:
  // Unknown tokenizer.ggml.model or normalizer -> UNSUPPORTED naming it; missing/ill-typed keys
  // or a bad tokenizer.kestrel.pre_regex -> FORMAT.
  static Expected<std::unique_ptr<Tokenizer>> from_gguf(const gguf::File& f);
  virtual ~Tokenizer();

  // add_special: BOS/EOS (and SEP for WordPiece) as the vocabulary asks. parse_special: control
  // and unknown-type token text in `text` becomes those tokens; user-defined tokens always match
  // (Hugging Face semantics: leftmost-longest, lstrip/rstrip/single_word flags honoured).
  Expected<std::vector<int32_t>> tokenize(std::string_view text, bool add_special, bool parse_special) const;
  // Bytes of one token (byte tokens give their byte, byte-level BPE tokens their raw bytes).
  // Control, unknown-type and unused tokens give "" unless render_special. Out-of-range ids: "".
  std::string token_to_piece(int32_t id, bool render_special) const;
  // Joins pieces; without render_special a leading BOS (and trailing EOS) is dropped, and the one
  // space the tokenizer's dummy prefix introduced is removed from the first non-empty piece.
  std::string detokenize(std::span<const int32_t> ids, bool render_special) const;
  Status check_ids(std::span<const int32_t> ids) const;

  int32_t n_vocab() const { return vocab_.n(); }
  int32_t bos() const { return vocab_.bos; }
  int32_t eos() const { return vocab_.eos; }
  int32_t eot() const { return vocab_.eot; }
  bool add_bos() const { return vocab_.add_bos; }
  bool add_eos() const { return vocab_.add_eos; }
  // eos, eot, eom, and control tokens whose text marks an end of turn (<|im_end|>, <|eot_id|>, ...).
  bool is_eog(int32_t id) const;
  std::span<const int32_t> eog_ids() const { return vocab_.eog; }
  bool is_control(int32_t id) const {
    return id >= 0 && id < n_vocab() && vocab_.type[id] == TokenType::CONTROL;
  }
  // Tokens hidden unless render_special: control, unknown-type and unused.
  bool is_special(int32_t id) const;
  TokenType token_type(int32_t id) const { return vocab_.type[id]; }
  const std::string& token_text(int32_t id) const { return vocab_.text[id]; }
  const Vocab& vocab() const { return vocab_; }
  const TokenizerInfo& info() const { return info_; }

 protected:
  explicit Tokenizer(Vocab v);
  // Encodes plain, already normalized text (no special-token matching). `after_special` is true
  // for a fragment at the start of the text or right after a special token.
  virtual Status encode_fragment(std::string_view text, bool after_special, std::vector<int32_t>& out) const = 0;
  // The bytes a NORMAL token stands for: its text with the vocabulary's space marker or byte
  // mapping undone.
  virtual std::string decode_normal(const std::string& text) const = 0;
  // The bytes of a USER_DEFINED token: its text, with the space marker undone for SentencePiece
  // vocabularies (Hugging Face runs added tokens through the decoder too).
  virtual std::string decode_user_defined(const std::string& text) const { return text; }
  // Whether detokenize() drops the leading space of the first piece (a dummy-prefix space).
  virtual bool strips_leading_space() const { return vocab_.add_space_prefix; }

  Vocab vocab_;
  TokenizerInfo info_;

 private:
  std::unique_ptr<SpecialTokenMatcher> specials_;
};

// The rule for text leaving the library: it is valid UTF-8. Valid sequences pass through; each
// maximal invalid subpart (a byte that can start no sequence, or the longest start of one that a
// byte then breaks: overlongs, surrogates, above U+10FFFF) becomes one U+FFFD, as WHATWG and
// Unicode (chapter 3, "U+FFFD substitution of maximal subparts") recommend. utf8_repair appends
// the repaired bytes to out and returns how many bytes it consumed: all of them when `final`,
// else all but a trailing start of a sequence that can still complete (at most 3 bytes).
size_t utf8_repair(std::string_view bytes, bool final, std::string& out);
std::string utf8_repaired(std::string_view bytes);  // final: an incomplete tail is one U+FFFD

// Turns tokens into text one at a time by the rule above: a character split over several tokens
// is held until it completes; a byte that makes it invalid is replaced at once.
class StreamingDetokenizer {
 public:
  StreamingDetokenizer(const Tokenizer& tok, bool render_special) : tok_(tok), render_special_(render_special) {}
  std::string push(int32_t id);  // the text that became final
  // Special tokens shown as their text even without render_special (a chat family's markers).
  void render_also(std::vector<int32_t> ids);
  std::string flush();           // what is left (an incomplete sequence: U+FFFD), then reset
  void reset() { pending_.clear(); }
  const Tokenizer& tokenizer() const { return tok_; }

 private:
  const Tokenizer& tok_;
  bool render_special_;
  std::vector<int32_t> render_also_;  // sorted
  std::string pending_;
};

// Vocabulary reading and the factories of the vocabulary types (one file each).
// Values used when the GGUF lacks the key (llama.cpp's defaults per vocabulary type); ids outside
// the vocabulary are dropped.
struct VocabDefaults {
  int32_t bos = -1, eos = -1, unk = -1, sep = -1;
  bool add_bos = false, add_sep = false, add_space_prefix = false;
};
Expected<Vocab> read_vocab(const gguf::File& f, const VocabDefaults& d);
Expected<std::unique_ptr<Tokenizer>> make_spm_tokenizer(Vocab v);
Expected<std::unique_ptr<Tokenizer>> make_spm_bpe_tokenizer(Vocab v, const gguf::File& f);
Expected<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(Vocab v, const gguf::File& f);
Expected<std::unique_ptr<Tokenizer>> make_wpm_tokenizer(Vocab v);

// Length of the UTF-8 sequence a lead byte starts (1 for invalid lead bytes).
inline size_t utf8_len(uint8_t c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

}  // namespace kestrel
