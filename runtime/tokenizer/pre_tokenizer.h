// Pre-tokenization: the text is cut into pieces by a list of regexes applied in sequence, each
// one splitting every piece the previous one produced ("Isolated": a match is a piece and so is
// the text between matches). The regexes come from tokenizer.kestrel.pre_regex, or from the
// built-in table keyed by tokenizer.ggml.pre (pre_tokenizer_table.cpp: the lists llama.cpp uses,
// with Hugging Face's original spelling where llama.cpp rewrote a regex for std::regex).
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace kestrel {

// One entry of the built-in table.
struct PreTokenizerPreset {
  const char* names;                  // comma-separated tokenizer.ggml.pre values
  std::vector<const char*> regexes;   // applied in order
  bool ignore_merges = false;         // HF BPE ignore_merges (tiktoken-style vocabularies)
  bool add_bos = false;               // llama.cpp's default add_bos for this name
};
// The preset for a tokenizer.ggml.pre value, or nullptr. "" (key missing) finds "default".
const PreTokenizerPreset* find_pre_tokenizer_preset(std::string_view name);
// Every name in the table (for tests and documentation).
std::vector<std::string> pre_tokenizer_preset_names();

class PreTokenizer {
 public:
  PreTokenizer();
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  // Compiles the regexes (PCRE2, UTF + UCP, JIT when available). A bad regex is a FORMAT error
  // naming `what`, the index, PCRE2's message and the offset.
  static Expected<PreTokenizer> compile(const std::vector<std::string>& regexes, const std::string& what);

  // Appends the pieces of `text` (views into it, in order, never empty) to out. Bytes that are not
  // valid UTF-8 never match a regex, so they end up in the pieces between matches.
  Status split(std::string_view text, std::vector<std::string_view>& out) const;

  bool empty() const { return regexes_.empty(); }
  const std::vector<std::string>& regexes() const { return sources_; }

 private:
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> regexes_;
  std::vector<std::string> sources_;
};

// The pre-tokenizer a GGUF asks for: tokenizer.kestrel.pre_regex when present, else the preset
// for tokenizer.ggml.pre, else (unknown name) one warning line and the gpt-2 regex.
struct PreTokenizerChoice {
  PreTokenizer pre;
  const PreTokenizerPreset* preset = nullptr;  // null for kestrel.pre_regex and the fallback
  std::string source;                          // "tokenizer.kestrel.pre_regex", "builtin:<name>", "fallback:gpt-2"
};
Expected<PreTokenizerChoice> choose_pre_tokenizer(const gguf::File& f);

}  // namespace kestrel
