// Tensor-table helpers for bind(): the standard GGUF tensor names of the blocks most
// architectures share, with the options a model file chooses. Every shape is checked (a missing
// or mis-shaped tensor is a FORMAT error naming it), and every shape is concrete, so the same
// bind() also yields the table a synthetic model is built from (Model::tensor_table).
#pragma once
#include "model/model.h"

namespace kestrel {

// token_embd, output_norm and output (tied to token_embd when the file has none).
Status bind_embeddings(const Model& m, ModelWeights& w);

struct AttentionTable {
  bool qkv_bias = false;  // attn_q/k/v.bias
  bool out_bias = false;  // attn_output.bias
  bool qk_norm = false;   // attn_q_norm / attn_k_norm [head_dim_k]
  bool sinks = false;     // attn_sinks [n_head]
};
// attn_norm, attn_q/k/v/output and the chosen extras of layer l.
Status bind_attention(const Model& m, LayerWeights& lw, int l, const AttentionTable& t);

// ffn_gate/up/down [n_embd <-> n_ff] of layer l (the norm in front is the model file's).
Status bind_dense_ffn(const Model& m, LayerWeights& lw, int l, int64_t n_ff);

struct ExpertTable {
  int64_t n_ff = 0;             // per expert
  bool biases = false;          // ffn_{gate,up,down}_exps.bias [N, n_expert]
  bool router_bias = false;     // ffn_gate_inp.bias [n_expert]
  bool selection_bias = false;  // exp_probs_b.bias [n_expert], optional (DeepSeek V3 has it)
  int64_t n_ff_shared = 0;      // ffn_{gate,up,down}_shexp when > 0
  bool gated = true;            // ffn_gate_exps / ffn_gate_shexp; false: up -> relu^2 -> down (Nemotron)
  int64_t n_latent = 0;         // > 0: experts work in this width, between ffn_latent_down / _up (LatentMoE)
};
// ffn_gate_inp and the stacked experts ffn_{gate,up,down}_exps of layer l.
Status bind_experts(const Model& m, LayerWeights& lw, int l, const ExpertTable& t);

// The tensor table of a pre-norm decoder, in this order: the embeddings (bind_embeddings), then
// rope_freqs if asked for, then per layer the attention, the norm in front of the FFN, and a
// dense FFN (feed_forward_length) or experts.
struct DecoderTable {
  AttentionTable attention;
  // Binds layer l's attention (attn_norm included) instead of bind_attention: DeepSeek's MLA.
  Status (*custom_attention)(const Model& m, LayerWeights& lw, int l) = nullptr;
  bool rope_freqs = false;                          // rope_freqs [n_rot / 2], optional (Llama 3)
  const char* ffn_norm = "blk.%d.ffn_norm.weight";  // [n_embd]
  bool post_norms = false;  // post_attention_norm and post_ffw_norm [n_embd] (Gemma's sandwich)
  bool experts = false;   // routed experts (below) instead of the dense FFN
  int n_dense_lead = 0;   // with experts: the first layers keep the dense FFN (DeepSeek)
  ExpertTable expert;
};
Status bind_decoder(const Model& m, ModelWeights& w, const DecoderTable& t);

}  // namespace kestrel
