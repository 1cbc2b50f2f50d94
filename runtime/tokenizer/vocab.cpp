// Reads the vocabulary from GGUF metadata and implements the shared parts of Tokenizer:
// special-token partitioning, BOS/EOS handling, detokenization.
#include <algorithm>

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

Expected<Vocab> read_vocab(const gguf::File& f, bool spm) {
  Vocab v;
  const auto* tokens = f.get_array("tokenizer.ggml.tokens");
  if (!tokens) return bad(f, "tokenizer.ggml.tokens", "is missing or not an array");
  const size_t n = tokens->size();
  if (n == 0 || n > (1u << 24)) return bad(f, "tokenizer.ggml.tokens", "has " + std::to_string(n) + " entries");
  const auto* scores = f.get_array("tokenizer.ggml.scores");
  const auto* types = f.get_array("tokenizer.ggml.token_type");
  if (scores && scores->size() != n) return bad(f, "tokenizer.ggml.scores", "length differs from the token list");
  if (types && types->size() != n) return bad(f, "tokenizer.ggml.token_type", "length differs from the token list");
  v.text.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const gguf::Value& t = (*tokens)[i];
    if (t.type != gguf::ValueType::STRING) return bad(f, "tokenizer.ggml.tokens", "entry " + std::to_string(i) + " is not a string");
    v.text.push_back(t.str);
    auto s = scores ? (*scores)[i].as_float() : std::optional<double>(0.0);
    if (!s) return bad(f, "tokenizer.ggml.scores", "entry " + std::to_string(i) + " is not a number");
    v.score.push_back(static_cast<float>(*s));
    auto ty = types ? (*types)[i].as_int() : std::optional<int64_t>(1);
    if (!ty) return bad(f, "tokenizer.ggml.token_type", "entry " + std::to_string(i) + " is not an integer");
    v.type.push_back(*ty >= 1 && *ty <= 6 ? static_cast<TokenType>(*ty) : TokenType::NORMAL);
    v.to_id.emplace(t.str, static_cast<int32_t>(i));  // the first of duplicate texts wins
  }
  const int32_t ni = static_cast<int32_t>(n);
  if (spm) {  // SentencePiece defaults (llama.cpp's)
    v.bos = ni > 1 ? 1 : -1;
    v.eos = ni > 2 ? 2 : -1;
    v.unk = 0;
    v.add_bos = true;
  }
  KS_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.bos_token_id", ni, &v.bos));
  KS_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.eos_token_id", ni, &v.eos));
  KS_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.unknown_token_id", ni, &v.unk));
  KS_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.eot_token_id", ni, &v.eot));
  KS_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.eom_token_id", ni, &v.eom));
  v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(v.add_bos);
  v.add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(v.add_eos);
  v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(spm);
  for (int32_t i = 0; i < ni; ++i) {
    const TokenType t = v.type[i];
    if ((t == TokenType::CONTROL || t == TokenType::USER_DEFINED || t == TokenType::UNKNOWN) && !v.text[i].empty())
      v.specials.push_back(i);
  }
  std::stable_sort(v.specials.begin(), v.specials.end(),
                   [&](int32_t a, int32_t b) { return v.text[a].size() > v.text[b].size(); });
  return v;
}

}  // namespace

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const gguf::File& f) {
  const auto model = f.get_string("tokenizer.ggml.model");
  if (!model) return bad(f, "tokenizer.ggml.model", "is missing");
  if (*model == "llama") {
    auto v = read_vocab(f, true);
    if (!v.ok()) return v.status();
    return make_spm_tokenizer(std::move(v.value()));
  }
  return Error(KESTREL_ERR_UNSUPPORTED, f.path() + ": tokenizer.ggml.model '" + *model + "' is not supported yet");
}

Expected<std::vector<int32_t>> Tokenizer::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  // Split the text on special tokens (longest first): fragments are (text) or (token id).
  struct Fragment {
    std::string_view text;
    int32_t id;  // -1 for text
  };
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({text, -1});  // empty text: no dummy-prefix token either
  for (int32_t sid : vocab_.specials) {
    if (!parse_special && vocab_.type[sid] != TokenType::USER_DEFINED) continue;
    const std::string& st = vocab_.text[sid];
    std::vector<Fragment> next;
    for (const Fragment& fr : frags) {
      if (fr.id >= 0) {
        next.push_back(fr);
        continue;
      }
      std::string_view rest = fr.text;
      for (size_t p; (p = rest.find(st)) != std::string_view::npos;) {
        if (p > 0) next.push_back({rest.substr(0, p), -1});
        next.push_back({{}, sid});
        rest = rest.substr(p + st.size());
      }
      if (!rest.empty()) next.push_back({rest, -1});
    }
    frags.swap(next);
  }
  std::vector<int32_t> out;
  if (add_special && vocab_.add_bos && vocab_.bos >= 0) out.push_back(vocab_.bos);
  bool after_special = true;
  for (const Fragment& fr : frags) {
    if (fr.id >= 0) {
      out.push_back(fr.id);
      after_special = true;
    } else {
      encode_fragment(fr.text, after_special, out);
      after_special = false;
    }
  }
  if (add_special && vocab_.add_eos && vocab_.eos >= 0) out.push_back(vocab_.eos);
  return out;
}

Status Tokenizer::check_ids(std::span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= n_vocab())
      return Error(KESTREL_ERR_OUT_OF_RANGE, "token id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                                                 " is outside [0, " + std::to_string(n_vocab()) + ")");
  return Status::Ok();
}

std::string Tokenizer::detokenize(std::span<const int32_t> ids, bool render_special) const {
  if (!render_special) {
    if (!ids.empty() && vocab_.add_bos && ids.front() == vocab_.bos) ids = ids.subspan(1);
    if (!ids.empty() && vocab_.add_eos && ids.back() == vocab_.eos) ids = ids.first(ids.size() - 1);
  }
  std::string out;
  bool strip = vocab_.add_space_prefix;
  for (int32_t id : ids) {
    std::string piece = token_to_piece(id, render_special);
    if (strip && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    strip = false;
    out += piece;
  }
  return out;
}

}  // namespace kestrel
