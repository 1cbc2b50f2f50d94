// Llama family: Llama 2/3 (incl. Llama-3 rope_freqs factors), Mistral, TinyStories/llama2.c
// conversions. Pre-norm blocks: RMSNorm -> attention (GQA, "normal" rope) -> RMSNorm -> SwiGLU.
#include "model/builder.h"

namespace kestrel {
namespace {

Status bind(const Model& m, ModelWeights& w) {
  const HParams& h = m.hparams();
  const int64_t E = h.n_embd, Q = int64_t{h.head_dim_k} * h.n_head;
  KS_TRY_BIND(w.tok_embd, m.require("token_embd.weight", {E, h.n_vocab}));
  KS_TRY_BIND(w.output_norm, m.require("output_norm.weight", {E}));
  KS_TRY_BIND(w.output, m.optional("output.weight", {E, h.n_vocab}));
  if (!w.output) w.output = w.tok_embd;  // tied embeddings (Llama 3.2)
  KS_TRY_BIND(w.rope_freqs, m.optional("rope_freqs.weight", {h.rope.n_rot / 2}));
  w.layers.resize(h.n_layer);
  for (int l = 0; l < h.n_layer; ++l) {
    LayerWeights& lw = w.layers[l];
    KS_TRY_BIND(lw.attn_norm, m.require("blk.%d.attn_norm.weight", {E}, l));
    KS_TRY_BIND(lw.wq, m.require("blk.%d.attn_q.weight", {E, Q}, l));
    KS_TRY_BIND(lw.wk, m.require("blk.%d.attn_k.weight", {E, h.k_row()}, l));
    KS_TRY_BIND(lw.wv, m.require("blk.%d.attn_v.weight", {E, h.v_row()}, l));
    KS_TRY_BIND(lw.wo, m.require("blk.%d.attn_output.weight", {int64_t{h.head_dim_v} * h.n_head, E}, l));
    KS_TRY_BIND(lw.ffn_norm, m.require("blk.%d.ffn_norm.weight", {E}, l));
    KS_TRY_BIND(lw.ffn_gate, m.require("blk.%d.ffn_gate.weight", {E, h.n_ff}, l));
    KS_TRY_BIND(lw.ffn_up, m.require("blk.%d.ffn_up.weight", {E, h.n_ff}, l));
    KS_TRY_BIND(lw.ffn_down, m.require("blk.%d.ffn_down.weight", {h.n_ff, E}, l));
  }
  return Status::Ok();
}

Tensor* forward(Builder& b) {
  const HParams& h = b.hp();
  Tensor* x = b.embed(b.w().tok_embd);  // [n_embd, T]
  for (int l = 0; l < h.n_layer; ++l) {
    const LayerWeights& lw = b.w().layers[l];
    Tensor* attn = b.self_attention(l, b.rms_norm(x, lw.attn_norm), lw, {});  // [n_embd, T]
    if (l == h.n_layer - 1) {  // only the rows whose logits are wanted go on
      attn = b.select_outputs(attn);
      x = b.select_outputs(x);
    }
    x = b.add(x, attn);
    x = b.add(x, b.swiglu_ffn(b.rms_norm(x, lw.ffn_norm), lw.ffn_gate, lw.ffn_up, lw.ffn_down));
  }
  return b.output_logits(x);  // [n_vocab, n_outputs]
}

}  // namespace
}  // namespace kestrel

KESTREL_REGISTER_ARCH(llama) {
  static const kestrel::ArchDef def{"llama", {"mistral"}, kestrel::ROPE_NORMAL, kestrel::bind, kestrel::forward};
  return def;
}
