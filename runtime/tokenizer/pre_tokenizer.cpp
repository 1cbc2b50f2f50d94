// PCRE2-backed pre-tokenizer: compiled once per tokenizer (UTF | UCP | MATCH_INVALID_UTF, JIT
// when the library has it), matched with per-call match data so one PreTokenizer serves many
// threads. Also picks the regex list a GGUF asks for.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pre_tokenizer.h"

#include <pcre2.h>

#include "core/log.h"

namespace kestrel {

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

Expected<PreTokenizer> PreTokenizer::compile(const std::vector<std::string>& regexes, const std::string& what) {
  PreTokenizer p;
  for (size_t i = 0; i < regexes.size(); ++i) {
    int err = 0;
    PCRE2_SIZE off = 0;
    auto c = std::make_unique<Compiled>();
    c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regexes[i].data()), regexes[i].size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
    if (!c->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      return Error(KESTREL_ERR_FORMAT, what + "[" + std::to_string(i) + "] '" + regexes[i] +
                                           "' is not a valid regex: " + reinterpret_cast<const char*>(msg) +
                                           " at offset " + std::to_string(off));
    }
    pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);  // no JIT: the interpreter is used
    p.regexes_.push_back(std::move(c));
    p.sources_.push_back(regexes[i]);
  }
  return p;
}

namespace {

// Owns PCRE2 match state for one split() call.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* ctx = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ~MatchState() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
  }
  // A larger JIT stack, for patterns that recurse deeply on long inputs.
  bool grow() {
    if (stack) return false;
    ctx = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    if (!ctx || !stack) return false;
    pcre2_jit_stack_assign(ctx, nullptr, stack);
    return true;
  }
};

// Length of the (possibly invalid) UTF-8 character at s[i]: 1 for a stray byte.
size_t char_len(std::string_view s, size_t i) {
  const uint8_t c = static_cast<uint8_t>(s[i]);
  size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<uint8_t>(s[i + k]) & 0xC0) != 0x80) return 1;
  return n;
}

// Splits one piece with one regex ("Isolated"), appending non-empty views to out.
Status split_one(pcre2_code* code, MatchState& ms, std::string_view text, std::vector<std::string_view>& out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0, emitted = 0;
  uint32_t options = 0;
  while (pos <= text.size()) {
    int rc = pcre2_match(code, subject, text.size(), pos, options, ms.data, ms.ctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && ms.grow())
      rc = pcre2_match(code, subject, text.size(), pos, options, ms.data, ms.ctx);
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (options == 0) break;
      // No non-empty match at pos after an empty one: step over one character.
      options = 0;
      pos += char_len(text, pos);
      continue;
    }
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      return Error(KESTREL_ERR_INTERNAL, std::string("pre-tokenizer regex failed: ") +
                                             reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(ms.data);
    const size_t start = ov[0], end = ov[1];
    if (start > emitted) out.push_back(text.substr(emitted, start - emitted));
    if (end > start) out.push_back(text.substr(start, end - start));
    emitted = end;
    // After an empty match retry at the same place for a non-empty one (PCRE2's idiom).
    options = end == start ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0;
    pos = end;
    if (pos == text.size() && end == start) break;
  }
  if (emitted < text.size()) out.push_back(text.substr(emitted));
  return Status::Ok();
}

}  // namespace

Status PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return Status::Ok();
  if (regexes_.empty()) {
    out.push_back(text);
    return Status::Ok();
  }
  std::vector<std::string_view> cur{text}, next;
  for (size_t r = 0; r < regexes_.size(); ++r) {
    MatchState ms;
    ms.data = pcre2_match_data_create_from_pattern(regexes_[r]->code, nullptr);
    if (!ms.data) return Error(KESTREL_ERR_OUT_OF_MEMORY, "pre-tokenizer: no memory for match data");
    std::vector<std::string_view>& dst = r + 1 == regexes_.size() ? out : next;
    for (std::string_view piece : cur) KS_RETURN_IF_ERROR(split_one(regexes_[r]->code, ms, piece, dst));
    if (r + 1 < regexes_.size()) {
      cur.swap(next);
      next.clear();
    }
  }
  return Status::Ok();
}

Expected<PreTokenizerChoice> choose_pre_tokenizer(const gguf::File& f) {
  PreTokenizerChoice c;
  const char* key = "tokenizer.kestrel.pre_regex";
  if (const gguf::Value* v = f.find(key)) {
    if (v->type != gguf::ValueType::ARRAY || v->elem_type != gguf::ValueType::STRING)
      return Error(KESTREL_ERR_FORMAT, f.path() + ": metadata '" + key + "' is not an array of strings");
    std::vector<std::string> rx;
    for (const gguf::Value& e : v->array) rx.push_back(e.str);
    auto p = PreTokenizer::compile(rx, f.path() + ": metadata '" + key + "'");
    if (!p.ok()) return p.status();
    c.pre = std::move(p.value());
    c.source = key;
    return c;
  }
  const std::string name = f.get_string("tokenizer.ggml.pre").value_or("");
  const PreTokenizerPreset* preset = find_pre_tokenizer_preset(name);
  if (preset) {
    c.preset = preset;
    c.source = "builtin:" + (name.empty() ? std::string("default") : name);
  } else {
    // An explicit, logged fallback: the vocabulary may still tokenize well enough to be usable.
    KS_LOG_WARN("%s: unknown tokenizer.ggml.pre '%s' and no tokenizer.kestrel.pre_regex: using the gpt-2 regex",
                f.path().c_str(), name.c_str());
    preset = find_pre_tokenizer_preset("gpt-2");
    c.source = "fallback:gpt-2";
  }
  std::vector<std::string> rx(preset->regexes.begin(), preset->regexes.end());
  auto p = PreTokenizer::compile(rx, "built-in pre-tokenizer '" + name + "'");
  if (!p.ok()) return p.status();
  c.pre = std::move(p.value());
  return c;
}

}  // namespace kestrel
