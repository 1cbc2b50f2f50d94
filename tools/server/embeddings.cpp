#include "server/embeddings.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "kestrel.hpp"

namespace kestrel::server {
namespace {

constexpr int32_t kEmbedCtx = 8192;  // tokens of one input at most (and of a decode)
constexpr int32_t kEmbedSeqs = 16;   // inputs per decode

std::string base64(const std::vector<float>& v) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); ++i) {  // little-endian float32, as OpenAI's clients decode it
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + static_cast<size_t>(b)] = static_cast<char>((u >> (8 * b)) & 0xFF);
  }
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t n = (static_cast<uint8_t>(bytes[i]) << 16) |
                       (i + 1 < bytes.size() ? static_cast<uint8_t>(bytes[i + 1]) << 8 : 0) |
                       (i + 2 < bytes.size() ? static_cast<uint8_t>(bytes[i + 2]) : 0);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

}  // namespace

int32_t embedding_width(const kestrel_model* model) {
  size_t len = 0;
  if (kestrel_model_describe(model, nullptr, 0, &len) != KESTREL_ERR_BUFFER_TOO_SMALL && len == 0) return 0;
  std::string text(len + 1, '\0');
  if (kestrel_model_describe(model, text.data(), text.size(), &len) != KESTREL_OK) return 0;
  text.resize(len);
  const json j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("hparams") || !j["hparams"].contains("n_embd")) return 0;
  return j["hparams"]["n_embd"].get<int32_t>();
}

Embedder::~Embedder() { kestrel_context_free(ctx_); }

std::optional<ApiError> Embedder::run(const EmbeddingsRequest& req, const std::string& model_id, std::string* body) {
  const int32_t n_ctx = std::min(kEmbedCtx, std::max(kestrel_model_n_ctx_train(model_), 1));
  std::vector<std::vector<kestrel_token>> inputs = req.ids;
  for (const std::string& t : req.texts) {
    try {
      inputs.push_back(tokenize(model_, t, /*add_special=*/true, /*parse_special=*/false));
    } catch (const Error& e) {
      ApiError a = status_error(400, e.what());
      a.param = "input";
      return a;
    }
  }
  std::vector<kestrel_token> tokens;
  std::vector<int32_t> lengths;
  size_t n_tokens = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].size() > static_cast<size_t>(n_ctx)) {
      ApiError a = status_error(400, "input " + std::to_string(i) + " has " + std::to_string(inputs[i].size()) +
                                         " tokens, more than the " + std::to_string(n_ctx) + " an input may have");
      a.param = "input";
      a.code = "context_length_exceeded";
      return a;
    }
    tokens.insert(tokens.end(), inputs[i].begin(), inputs[i].end());
    lengths.push_back(static_cast<int32_t>(inputs[i].size()));
    n_tokens += inputs[i].size();
  }
  std::vector<float> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!ctx_) {
      kestrel_context_options co;
      kestrel_context_options_init(&co);
      co.n_ctx = static_cast<uint32_t>(n_ctx);
      co.n_seq_max = kEmbedSeqs;
      if (kestrel_context_new(model_, &co, &ctx_) != KESTREL_OK) {
        std::fprintf(stderr, "kestrel serve: embeddings context: %s\n", kestrel_last_error());
        return status_error(500, "internal error");
      }
    }
    size_t n = 0;
    kestrel_status st = kestrel_embed(ctx_, tokens.data(), lengths.data(), static_cast<int32_t>(lengths.size()),
                                      KESTREL_POOLING_MODEL, true, nullptr, 0, &n);
    if (st == KESTREL_ERR_BUFFER_TOO_SMALL) {
      out.resize(n);
      st = kestrel_embed(ctx_, tokens.data(), lengths.data(), static_cast<int32_t>(lengths.size()), KESTREL_POOLING_MODEL,
                         true, out.data(), out.size(), &n);
    }
    if (st != KESTREL_OK) {
      ApiError a = status_error(st == KESTREL_ERR_UNSUPPORTED || st == KESTREL_ERR_INVALID_ARGUMENT ? 400 : 500,
                                kestrel_last_error());
      a.param = "input";
      return a;
    }
  }
  const size_t E = out.size() / inputs.size();
  const size_t d = req.dimensions > 0 ? std::min<size_t>(E, static_cast<size_t>(req.dimensions)) : E;
  json data = json::array();
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<float> v(out.begin() + static_cast<std::ptrdiff_t>(i * E), out.begin() + static_cast<std::ptrdiff_t>(i * E + d));
    if (d < E) {  // fewer dimensions: the first d, of unit length again
      double len = 0;
      for (float x : v) len += static_cast<double>(x) * x;
      if (len > 0)
        for (float& x : v) x = static_cast<float>(x / std::sqrt(len));
    }
    json item = {{"object", "embedding"}, {"index", i}};
    if (req.base64) item["embedding"] = base64(v);
    else item["embedding"] = v;
    data.push_back(std::move(item));
  }
  *body = json_text({{"object", "list"},
                     {"data", std::move(data)},
                     {"model", model_id},
                     {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}});
  return std::nullopt;
}

}  // namespace kestrel::server
