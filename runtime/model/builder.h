// Shared blocks for model files: each call adds nodes to the graph and returns the new tensor.
// Model files describe *what* to compute; nothing here knows a backend or a quantization type.
#pragma once
#include <unordered_map>

#include "kv/kv_cache.h"
#include "model/model.h"
#include "tensor/graph.h"

namespace kestrel {

// The per-step inputs a forward pass reads (owned by the caller, alive while the graph runs).
struct ForwardBatch {
  int32_t n_tokens = 0;
  const int32_t* tokens = nullptr;     // [n_tokens]
  const int32_t* positions = nullptr;  // [n_tokens]
  const int32_t* slots = nullptr;      // [n_tokens] KV cells claimed for the tokens
  AttentionBatch attn;
  int32_t n_outputs = 0;
  const int32_t* output_rows = nullptr;  // [n_outputs] batch rows whose logits are wanted
};

struct AttentionOptions {
  float scale = 0.0f;   // 0: 1 / sqrt(head_dim_k)
  int32_t window = 0;   // sliding window in positions (0: full causal)
  float softcap = 0.0f; // attention logit soft-capping (0: off)
  const Tensor* sinks = nullptr;  // per-head sink logits [n_head]
};

class Builder {
 public:
  Builder(Graph& g, const Model& m, const KvCache& kv, const ForwardBatch& fb);

  Graph& graph() { return g_; }
  const HParams& hp() const { return m_.hparams(); }
  const ModelWeights& w() const { return m_.weights(); }
  int32_t n_tokens() const { return fb_.n_tokens; }

  Tensor* weight(const Tensor* w);  // wraps a model tensor for use in the graph (once)
  Tensor* embed(const Tensor* table);                      // [n_embd, T]
  Tensor* rms_norm(Tensor* x, const Tensor* gain);         // gain may be nullptr
  Tensor* linear(const Tensor* w, Tensor* x, const Tensor* bias = nullptr);  // W.x + b
  Tensor* add(Tensor* a, Tensor* b);
  Tensor* rope(Tensor* x, const Tensor* freq_factors);    // x [head_dim, n_heads, T]
  // Stores k, v in layer's cache cells and attends q over the cache: [head_dim_v * n_head, T].
  Tensor* attention(int layer, Tensor* q, Tensor* k, Tensor* v, const AttentionOptions& o);
  // The standard block: q/k/v projections (+ biases, per-head q/k norm), rope, attention, output
  // projection. x is the normed input [n_embd, T].
  Tensor* self_attention(int layer, Tensor* x, const LayerWeights& lw, const AttentionOptions& o);
  Tensor* swiglu_ffn(Tensor* x, const Tensor* gate, const Tensor* up, const Tensor* down);
  // Keeps only the batch rows whose logits are wanted (call once, in the last layer).
  Tensor* select_outputs(Tensor* x);
  // Final norm and output matrix: [n_vocab, n_outputs].
  Tensor* output_logits(Tensor* x);

 private:
  Tensor* input_i32(const int32_t* data, int64_t n);
  Graph& g_;
  const Model& m_;
  const KvCache& kv_;
  const ForwardBatch& fb_;
  Tensor* positions_ = nullptr;
  const AttentionBatch* attn_ = nullptr;
  std::unordered_map<const Tensor*, Tensor*> wrapped_;
};

}  // namespace kestrel
