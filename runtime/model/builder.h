// Shared blocks for model files: each call adds nodes to the graph and returns the new tensor.
// Model files describe *what* to compute; nothing here knows a backend or a quantization type.
#pragma once
#include <functional>
#include <span>
#include <unordered_map>

#include "kv/kv_cache.h"
#include "model/model.h"
#include "tensor/graph.h"

namespace kestrel {

// The per-step inputs of a forward pass, in host memory while the graph is built. The builder
// copies each into an input tensor of the graph (Graph::input) and its image of the input region
// (input_image()), which the step uploads with one write: the graph itself points at none of them.
struct ForwardBatch {
  std::span<const int32_t> tokens;       // [n_tokens]
  std::span<const int32_t> positions;    // [n_tokens]
  std::span<const int32_t> slots;        // [n_tokens] KV cells claimed for the tokens
  std::span<const int32_t> attn;         // the packed AttentionBatch (KvCache::pack_attention_batch)
  std::span<const int32_t> output_rows;  // [n_outputs] batch rows whose logits are wanted
  bool capture_hidden = false;           // keep the output rows' final hidden states (hidden())
  bool embeddings = false;               // the output rows' normed final states instead of logits
  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t n_outputs() const { return static_cast<int32_t>(output_rows.size()); }
};

// Attention options a model file sets per layer. Biases and per-head q/k norms come with the
// layer's weights (LayerWeights), so a file that has them gets them.
struct AttentionOptions {
  float scale = 0.0f;   // 0: 1 / sqrt(head_dim_k)
  int32_t window = 0;   // sliding window in positions (0: full causal)
  float softcap = 0.0f; // attention logit soft-capping (0: off)
  const Tensor* sinks = nullptr;  // per-head sink logits [n_head]; default: the layer's attn_sinks
  const RopeParams* rope = nullptr;  // nullptr: the model's rope parameters
  bool no_rope = false;              // positions enter only through the cache order (Nemotron-H)
};

// How a mixture-of-experts block routes and combines (the GGUF's expert_* keys, or the file's).
enum class ExpertGating : int32_t {
  SOFTMAX = 1,         // softmax over every expert's logit, then top-k
  SIGMOID = 2,         // sigmoid per expert (DeepSeek V3), then top-k
  SOFTMAX_CHOSEN = 3,  // top-k of the logits, softmax over the chosen ones only (gpt-oss)
};
// RELU_SQR: ungated experts, down . relu(up . x)^2 (Nemotron-H MoE; no ffn_gate_exps).
enum class ExpertActivation { SWIGLU, SWIGLU_OAI, RELU_SQR };
struct MoeOptions {
  ExpertGating gating = ExpertGating::SOFTMAX;
  bool norm_weights = false;   // chosen weights divided by their sum
  float weights_scale = 0.0f;  // routed scaling factor (0: none)
  int32_t n_groups = 0;        // expert groups (0/1: none) and how many are kept
  int32_t n_groups_used = 0;
  ExpertActivation activation = ExpertActivation::SWIGLU;
  float oai_alpha = 1.702f, oai_limit = 7.0f;  // SWIGLU_OAI constants
};
// The options the standard keys describe (expert_gating_func, expert_weights_norm/scale, groups).
MoeOptions moe_options_from(const HParams& h);

class Builder {
 public:
  Builder(Graph& g, const Model& m, const KvCache& kv, const ForwardBatch& fb);

  Graph& graph() { return g_; }
  const HParams& hp() const { return m_.hparams(); }
  const ModelWeights& w() const { return m_.weights(); }
  int32_t n_tokens() const { return fb_.n_tokens(); }

  Tensor* weight(const Tensor* w);  // wraps a model tensor for use in the graph (once)
  Tensor* embed(const Tensor* table);                      // [n_embd, T]
  Tensor* rms_norm(Tensor* x, const Tensor* gain);         // gain may be nullptr
  Tensor* linear(const Tensor* w, Tensor* x, const Tensor* bias = nullptr);  // W.x + b
  Tensor* add(Tensor* a, Tensor* b);
  Tensor* rope(Tensor* x, const Tensor* freq_factors, const RopeParams* p = nullptr);  // x [head_dim, n_heads, T]
  Tensor* concat(Tensor* a, Tensor* b);  // along ne0: [a0 + b0, ...]
  // Stores k, v in layer's cache cells and attends q over the cache: [head_dim_v * n_head, T].
  Tensor* attention(int layer, Tensor* q, Tensor* k, Tensor* v, const AttentionOptions& o);
  // The standard block: q/k/v projections (+ biases, per-head q/k norm), rope, attention, output
  // projection. x is the normed input [n_embd, T].
  Tensor* self_attention(int layer, Tensor* x, const LayerWeights& lw, const AttentionOptions& o);
  // down . (act(gate . x) * (up . x)); gate_op SWIGLU (SiLU) or GEGLU (GELU).
  Tensor* swiglu_ffn(Tensor* x, const Tensor* gate, const Tensor* up, const Tensor* down, Op gate_op = Op::SWIGLU);
  Tensor* scale(Tensor* x, float s);  // x * s (a MUL by a per-step input row)
  // Routed experts (+ the shared expert when the layer has one, gated as the experts are):
  // [n_embd, T]. The router reads x; with ffn_latent_down/up the experts read and write the
  // latent width in between.
  Tensor* moe_ffn(Tensor* x, const LayerWeights& lw, const MoeOptions& o);
  // Expert-indexed product: [N, n_used, T] for x [K, 1 or n_used, T]; ids nullptr = slot i uses
  // matrix i (a per-head product).
  Tensor* linear_id(const Tensor* w, Tensor* x, Tensor* ids, const Tensor* bias = nullptr);
  // Multi-head latent attention in the absorbed form (builder_mla.cpp): the cache holds the
  // normed latent and the roped shared key part per token; queries are absorbed through wk_b,
  // outputs expanded through wv_b. x is the normed input [n_embd, T]; returns [n_embd, T].
  Tensor* mla_attention(int layer, Tensor* x, const LayerWeights& lw, const AttentionOptions& o);
  // A Mamba-2 mixer over layer's recurrent state (builder_ssm.cpp): in-projection, causal conv,
  // selective scan with the SiLU(z) gate, RMSNorm in n_group groups, out-projection. x is the
  // normed input [n_embd, T]; returns [n_embd, T].
  Tensor* mamba2(int layer, Tensor* x, const LayerWeights& lw);
  // down . relu(up . x)^2: the ungated FFN of Nemotron-H.
  Tensor* relu2_ffn(Tensor* x, const Tensor* up, const Tensor* down);
  // Keeps only the batch rows whose logits are wanted (call once, in the last layer).
  Tensor* select_outputs(Tensor* x);
  // Final norm and output matrix: [n_vocab, n_outputs]; for a batch of embeddings, the final
  // norm only: [n_embd, n_outputs] (no output matrix).
  Tensor* output_logits(Tensor* x);
  // The input of output_logits, [n_embd, n_outputs], when the batch asked to capture it (the hook
  // EAGLE/MTP-style drafters read); nullptr otherwise.
  Tensor* hidden() const { return hidden_; }
  // The bytes of the graph's input region (Graph::input_bytes()), as the step must upload them.
  const std::vector<uint8_t>& input_image() const { return inputs_; }

  // The pre-norm residual decoder most models are, from embeddings to logits: per layer
  //   x += self_attention(rms_norm(x, attn_norm)); x += ffn(rms_norm(x, ffn_norm), layer)
  // with the rows pruned to the wanted outputs before the last layer's residuals. A layer with
  // sandwich norms (attn_post_norm, ffn_post_norm) norms each output before its add; embed_scale
  // (0: none) multiplies the token embeddings (Gemma's sqrt(n_embd)).
  using LayerAttention = std::function<AttentionOptions(int layer)>;  // empty: default options
  using LayerFfn = std::function<Tensor*(Tensor* normed, const LayerWeights& lw)>;
  Tensor* pre_norm_decoder(const LayerAttention& attention_options, const LayerFfn& ffn, float embed_scale = 0.0f);
  // The dense SwiGLU FFN of a layer (ffn_gate, ffn_up, ffn_down), as a LayerFfn.
  Tensor* dense_ffn(Tensor* x, const LayerWeights& lw) { return swiglu_ffn(x, lw.ffn_gate, lw.ffn_up, lw.ffn_down); }

 private:
  Tensor* input_i32(std::span<const int32_t> data);  // a graph input holding data
  void store_kv(const Tensor& cache, Tensor* x);  // x [R, T] into the cache cells of the batch
  Tensor* attend(int layer, Tensor* q, int64_t hd_v, const AttentionOptions& o);  // [hd_v, n_head, T]
  Tensor* attention_batch();  // the packed AttentionBatch input, made on first use
  Graph& g_;
  const Model& m_;
  const KvCache& kv_;
  const ForwardBatch& fb_;
  Tensor* positions_ = nullptr;
  Tensor* slots_ = nullptr;  // inputs made on first use
  Tensor* attn_ = nullptr;
  Tensor* hidden_ = nullptr;
  std::vector<uint8_t> inputs_;
  std::unordered_map<const Tensor*, Tensor*> wrapped_;
};

}  // namespace kestrel
