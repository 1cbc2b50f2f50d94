// Embeddings: a whole input through the model, its tokens' final states (after the output norm)
// pooled into one vector, as llama.cpp's embedding mode does. Pooling comes from the GGUF
// ({arch}.pooling_type: 1 mean, 2 CLS = the first token, 3 last token) or the caller; a model
// without the key (a decoder, e.g. Qwen3-Embedding) pools the last token. Attention is the
// model's own (causal for every architecture Kestrel runs).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "engine/context.h"

namespace kestrel {

enum class Pooling { kMean = 1, kCls = 2, kLast = 3 };

// The model's pooling: its GGUF key, else kLast. An unsupported value (none, rank) is an error.
Expected<Pooling> model_pooling(const Model& model);

// Embeds each input (token ids) into out (inputs.size() x n_embd, row-major): several inputs per
// decode, one sequence each (at most the context's n_seq_max, their tokens within its n_ctx).
// normalize: unit Euclidean length. The context's KV cache is cleared first and last. An empty
// input, or one longer than n_ctx, is an error naming it.
Status embed(Context& ctx, std::span<const std::span<const int32_t>> inputs, Pooling pooling, bool normalize,
             std::vector<float>* out);

}  // namespace kestrel
