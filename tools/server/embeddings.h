// POST /v1/embeddings for `kestrel serve`: the request's texts (tokenized with the vocabulary's
// BOS/EOS) or token lists embedded by kestrel_embed (the model's pooling, unit length) in a
// context of the server's own, one request at a time; 'dimensions' keeps the first d values
// and normalizes again (Matryoshka-style); base64 is the little-endian float32 bytes.
#pragma once
#include <memory>
#include <mutex>

#include "kestrel.h"
#include "server/openai_api.h"
#include "server/openai_request.h"

namespace kestrel::server {

// The model's n_embd (from kestrel_model_describe), 0 if unknown.
int32_t embedding_width(const kestrel_model* model);

class Embedder {
 public:
  explicit Embedder(const kestrel_model* model) : model_(model) {}
  ~Embedder();
  // The reply body, or an ApiError (400 for bad input, 500 when the library fails).
  std::optional<ApiError> run(const EmbeddingsRequest& req, const std::string& model_id, std::string* body);

 private:
  const kestrel_model* model_;
  std::mutex mu_;                  // one request at a time in ctx_
  kestrel_context* ctx_ = nullptr;  // made at the first request
};

}  // namespace kestrel::server
