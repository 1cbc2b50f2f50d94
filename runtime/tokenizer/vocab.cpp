// Reads the vocabulary from GGUF metadata and picks the tokenizer for tokenizer.ggml.model.
#include <algorithm>

#include "core/limits.h"

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {
namespace {

Status bad(const gguf::File& f, const std::string& key, const std::string& what) {
  return Error(KESTREL_ERR_FORMAT, f.path() + ": metadata '" + key + "' " + what);
}

// Reads an optional token id; 0xFFFFFFFF / -1 mean "none".
Status read_id(const gguf::File& f, const char* key, int32_t n, int32_t* out) {
  const gguf::Value* v = f.find(key);
  if (!v) return Status::Ok();
  auto id = v->as_int();
  if (!id) return bad(f, key, "is not an integer");
  if (*id == 0xFFFFFFFFll || *id < 0) {
    *out = -1;
    return Status::Ok();
  }
  if (*id >= n) return bad(f, key, "= " + std::to_string(*id) + " is not a token id (vocabulary of " + std::to_string(n) + ")");
  *out = static_cast<int32_t>(*id);
  return Status::Ok();
}

Status read_bool(const gguf::File& f, const char* key, bool* out) {
  const gguf::Value* v = f.find(key);
  if (!v) return Status::Ok();
  auto b = f.get_bool(key);
  if (!b) return bad(f, key, std::string("is a ") + gguf::value_type_name(v->type) + ", not a bool");
  *out = *b;
  return Status::Ok();
}

// Texts that end a turn (llama.cpp's list); only control/user-defined tokens qualify.
constexpr const char* kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
};

void find_eog(Vocab& v) {
  auto add = [&](int32_t id) {
    if (id >= 0 && std::find(v.eog.begin(), v.eog.end(), id) == v.eog.end()) v.eog.push_back(id);
  };
  add(v.eos);
  add(v.eot);
  add(v.eom);
  for (const char* t : kEogTexts) {
    const int32_t id = v.find(t);
    if (id >= 0 && (v.type[id] == TokenType::CONTROL || v.type[id] == TokenType::USER_DEFINED)) add(id);
  }
  // Harmony (gpt-oss): <|end|> closes a message inside a turn; <|return|> and <|call|> end it.
  const int32_t end = v.find("<|end|>");
  if (end >= 0 && end != v.eos && v.find("<|return|>") >= 0 && v.find("<|call|>") >= 0)
    v.eog.erase(std::remove(v.eog.begin(), v.eog.end(), end), v.eog.end());
  std::sort(v.eog.begin(), v.eog.end());
}

}  // namespace

Expected<Vocab> read_vocab(const gguf::File& f, const VocabDefaults& d) {
  Vocab v;
  v.model = f.get_string("tokenizer.ggml.model").value_or("");
  v.pre = f.get_string("tokenizer.ggml.pre").value_or("");
  const auto* tokens = f.get_array("tokenizer.ggml.tokens");
  if (!tokens) return bad(f, "tokenizer.ggml.tokens", "is missing or not an array");
  const size_t n = tokens->size();
  if (n == 0 || n > static_cast<size_t>(limits::kMaxVocab))
    return bad(f, "tokenizer.ggml.tokens", "has " + std::to_string(n) + " entries (at most " +
                                               std::to_string(limits::kMaxVocab) + ")");
  const auto* scores = f.get_array("tokenizer.ggml.scores");
  const auto* types = f.get_array("tokenizer.ggml.token_type");
  const auto* flags = f.get_array("tokenizer.kestrel.added_token_flags");
  if (scores && scores->size() != n) return bad(f, "tokenizer.ggml.scores", "length differs from the token list");
  if (types && types->size() != n) return bad(f, "tokenizer.ggml.token_type", "length differs from the token list");
  if (flags && flags->size() != n) return bad(f, "tokenizer.kestrel.added_token_flags", "length differs from the token list");
  if (!flags && f.find("tokenizer.kestrel.added_token_flags")) return bad(f, "tokenizer.kestrel.added_token_flags", "is not an array");
  v.text.reserve(n);
  v.to_id.reserve(n);
  v.added_flags.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const gguf::Value& t = (*tokens)[i];
    if (t.type != gguf::ValueType::STRING) return bad(f, "tokenizer.ggml.tokens", "entry " + std::to_string(i) + " is not a string");
    v.text.push_back(t.str);
    v.max_token_len = std::max(v.max_token_len, t.str.size());
    auto s = scores ? (*scores)[i].as_float() : std::optional<double>(0.0);
    if (!s) return bad(f, "tokenizer.ggml.scores", "entry " + std::to_string(i) + " is not a number");
    v.score.push_back(static_cast<float>(*s));
    auto ty = types ? (*types)[i].as_int() : std::optional<int64_t>(1);
    if (!ty) return bad(f, "tokenizer.ggml.token_type", "entry " + std::to_string(i) + " is not an integer");
    v.type.push_back(*ty >= 1 && *ty <= 6 ? static_cast<TokenType>(*ty) : TokenType::NORMAL);
    if (flags) {
      auto fl = (*flags)[i].as_int();
      if (!fl || *fl < 0 || *fl > 15)
        return bad(f, "tokenizer.kestrel.added_token_flags", "entry " + std::to_string(i) + " is not a flag set in [0, 15]");
      v.added_flags[i] = static_cast<uint8_t>(*fl);
    }
    if (!t.str.empty()) v.to_id.emplace(t.str, static_cast<int32_t>(i));  // the first of duplicate texts wins
  }
  const int32_t ni = static_cast<int32_t>(n);
  auto in_range = [&](int32_t id) { return id >= 0 && id < ni ? id : -1; };
  v.bos = in_range(d.bos);
  v.eos = in_range(d.eos);
  v.unk = in_range(d.unk);
  v.sep = in_range(d.sep);
  v.add_bos = d.add_bos;
  v.add_sep = d.add_sep;
  v.add_space_prefix = d.add_space_prefix;
  KS_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.bos_token_id", ni, &v.bos));
  if (!f.find("tokenizer.ggml.bos_token_id")) KS_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.cls_token_id", ni, &v.bos));
  KS_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.eos_token_id", ni, &v.eos));
  KS_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.unknown_token_id", ni, &v.unk));
  KS_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.eot_token_id", ni, &v.eot));
  KS_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.eom_token_id", ni, &v.eom));
  KS_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.seperator_token_id", ni, &v.sep));  // llama.cpp's spelling
  KS_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.padding_token_id", ni, &v.pad));
  KS_RETURN_IF_ERROR(read_bool(f, "tokenizer.ggml.add_bos_token", &v.add_bos));
  KS_RETURN_IF_ERROR(read_bool(f, "tokenizer.ggml.add_eos_token", &v.add_eos));
  KS_RETURN_IF_ERROR(read_bool(f, "tokenizer.ggml.add_sep_token", &v.add_sep));
  KS_RETURN_IF_ERROR(read_bool(f, "tokenizer.ggml.add_space_prefix", &v.add_space_prefix));
  if (const gguf::Value* nv = f.find("tokenizer.kestrel.normalizer")) {
    if (nv->type != gguf::ValueType::STRING) return bad(f, "tokenizer.kestrel.normalizer", "is not a string");
    if (nv->str == "nfc" || nv->str == "NFC") v.normalizer = Normalizer::NFC;
    else if (!nv->str.empty() && nv->str != "none")
      return Error(KESTREL_ERR_UNSUPPORTED, f.path() + ": tokenizer.kestrel.normalizer '" + nv->str +
                                                "' is not supported (supported: \"\", \"nfc\")");
  }
  find_eog(v);
  return v;
}

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::File& f) {
  const auto model = f.get_string("tokenizer.ggml.model");
  if (!model) return bad(f, "tokenizer.ggml.model", "is missing");
  VocabDefaults d;
  if (*model == "llama" || *model == "gemma4") {  // SentencePiece defaults (llama.cpp's)
    d.bos = 1, d.eos = 2, d.unk = 0, d.add_bos = true, d.add_space_prefix = *model == "llama";
    auto v = read_vocab(f, d);
    if (!v.ok()) return v.status();
    if (*model == "gemma4" || f.find("tokenizer.ggml.merges")) return make_spm_bpe_tokenizer(std::move(v.value()), f);
    return make_spm_tokenizer(std::move(v.value()));
  }
  if (*model == "gpt2") {
    // Some pre-tokenizer names imply a BOS (llama.cpp: Llama 3, Tekken, Chameleon).
    const PreTokenizerPreset* p = f.find("tokenizer.kestrel.pre_regex")
                                      ? nullptr
                                      : find_pre_tokenizer_preset(f.get_string("tokenizer.ggml.pre").value_or(""));
    d.add_bos = p && p->add_bos;
    auto v = read_vocab(f, d);
    if (!v.ok()) return v.status();
    return make_bpe_tokenizer(std::move(v.value()), f);
  }
  if (*model == "bert") {  // WordPiece defaults: [CLS] 101, [SEP] 102, [UNK] 100
    d.bos = 101, d.unk = 100, d.sep = 102, d.add_bos = true, d.add_sep = true;
    auto v = read_vocab(f, d);
    if (!v.ok()) return v.status();
    return make_wpm_tokenizer(std::move(v.value()));
  }
  return Error(KESTREL_ERR_UNSUPPORTED, f.path() + ": tokenizer.ggml.model '" + *model + "' is not supported");
}

Status Tokenizer::check_ids(std::span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= n_vocab())
      return Error(KESTREL_ERR_OUT_OF_RANGE, "token id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                                                 " is outside [0, " + std::to_string(n_vocab()) + ")");
  return Status::Ok();
}

bool Tokenizer::is_eog(int32_t id) const {
  return id >= 0 && std::binary_search(vocab_.eog.begin(), vocab_.eog.end(), id);
}

bool Tokenizer::is_special(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return false;
  const TokenType t = vocab_.type[id];
  return t == TokenType::CONTROL || t == TokenType::UNKNOWN || t == TokenType::UNUSED;
}

}  // namespace kestrel
