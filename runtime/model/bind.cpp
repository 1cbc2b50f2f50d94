#include "model/bind.h"

namespace kestrel {

Status bind_embeddings(const Model& m, ModelWeights& w) {
  const HParams& h = m.hparams();
  KS_TRY_BIND(w.tok_embd, m.require("token_embd.weight", {h.n_embd, h.n_vocab}));
  KS_TRY_BIND(w.output_norm, m.require("output_norm.weight", {h.n_embd}));
  KS_TRY_BIND(w.output, m.optional("output.weight", {h.n_embd, h.n_vocab}));
  if (!w.output) w.output = w.tok_embd;  // tied embeddings
  return Status::Ok();
}

Status bind_attention(const Model& m, LayerWeights& lw, int l, const AttentionTable& t) {
  const HParams& h = m.hparams();
  const int64_t E = h.n_embd, Q = int64_t{h.head_dim_k} * h.n_head, O = int64_t{h.head_dim_v} * h.n_head;
  KS_TRY_BIND(lw.attn_norm, m.require("blk.%d.attn_norm.weight", {E}, l));
  KS_TRY_BIND(lw.wq, m.require("blk.%d.attn_q.weight", {E, Q}, l));
  KS_TRY_BIND(lw.wk, m.require("blk.%d.attn_k.weight", {E, h.k_row()}, l));
  KS_TRY_BIND(lw.wv, m.require("blk.%d.attn_v.weight", {E, h.v_row()}, l));
  KS_TRY_BIND(lw.wo, m.require("blk.%d.attn_output.weight", {O, E}, l));
  if (t.qkv_bias) {
    KS_TRY_BIND(lw.bq, m.require("blk.%d.attn_q.bias", {Q}, l));
    KS_TRY_BIND(lw.bk, m.require("blk.%d.attn_k.bias", {h.k_row()}, l));
    KS_TRY_BIND(lw.bv, m.require("blk.%d.attn_v.bias", {h.v_row()}, l));
  }
  if (t.out_bias) KS_TRY_BIND(lw.bo, m.require("blk.%d.attn_output.bias", {E}, l));
  if (t.qk_norm) {
    KS_TRY_BIND(lw.q_norm, m.require("blk.%d.attn_q_norm.weight", {h.head_dim_k}, l));
    KS_TRY_BIND(lw.k_norm, m.require("blk.%d.attn_k_norm.weight", {h.head_dim_k}, l));
  }
  if (t.sinks) KS_TRY_BIND(lw.attn_sinks, m.require("blk.%d.attn_sinks.weight", {h.n_head}, l));
  return Status::Ok();
}

Status bind_dense_ffn(const Model& m, LayerWeights& lw, int l, int64_t n_ff) {
  const int64_t E = m.hparams().n_embd;
  if (n_ff <= 0) return Error(KESTREL_ERR_FORMAT, m.file().path() + ": layer " + std::to_string(l) + " has no feed-forward length");
  KS_TRY_BIND(lw.ffn_gate, m.require("blk.%d.ffn_gate.weight", {E, n_ff}, l));
  KS_TRY_BIND(lw.ffn_up, m.require("blk.%d.ffn_up.weight", {E, n_ff}, l));
  KS_TRY_BIND(lw.ffn_down, m.require("blk.%d.ffn_down.weight", {n_ff, E}, l));
  return Status::Ok();
}

Status bind_experts(const Model& m, LayerWeights& lw, int l, const ExpertTable& t) {
  const HParams& h = m.hparams();
  const int64_t X = h.n_expert, F = t.n_ff, E = t.n_latent > 0 ? t.n_latent : h.n_embd;
  if (X <= 0 || F <= 0)
    return Error(KESTREL_ERR_FORMAT, m.file().path() + ": layer " + std::to_string(l) +
                                         " has experts but expert_count or the expert feed-forward length is missing");
  KS_TRY_BIND(lw.ffn_gate_inp, m.require("blk.%d.ffn_gate_inp.weight", {h.n_embd, X}, l));  // routes on the full width
  if (t.n_latent > 0) {
    KS_TRY_BIND(lw.ffn_latent_down, m.require("blk.%d.ffn_latent_down.weight", {h.n_embd, E}, l));
    KS_TRY_BIND(lw.ffn_latent_up, m.require("blk.%d.ffn_latent_up.weight", {E, h.n_embd}, l));
  }
  if (t.gated) KS_TRY_BIND(lw.ffn_gate_exps, m.require("blk.%d.ffn_gate_exps.weight", {E, F, X}, l));
  KS_TRY_BIND(lw.ffn_up_exps, m.require("blk.%d.ffn_up_exps.weight", {E, F, X}, l));
  KS_TRY_BIND(lw.ffn_down_exps, m.require("blk.%d.ffn_down_exps.weight", {F, E, X}, l));
  if (t.router_bias) KS_TRY_BIND(lw.ffn_gate_inp_b, m.require("blk.%d.ffn_gate_inp.bias", {X}, l));
  if (t.selection_bias) KS_TRY_BIND(lw.exp_probs_b, m.optional("blk.%d.exp_probs_b.bias", {X}, l));
  if (t.biases) {
    if (!t.gated) return Error(KESTREL_ERR_INTERNAL, "bind_experts: biases need gated experts");
    KS_TRY_BIND(lw.ffn_gate_exps_b, m.require("blk.%d.ffn_gate_exps.bias", {F, X}, l));
    KS_TRY_BIND(lw.ffn_up_exps_b, m.require("blk.%d.ffn_up_exps.bias", {F, X}, l));
    KS_TRY_BIND(lw.ffn_down_exps_b, m.require("blk.%d.ffn_down_exps.bias", {E, X}, l));
  }
  if (t.n_ff_shared > 0) {  // on the full width
    const int64_t W = h.n_embd;
    if (t.gated) KS_TRY_BIND(lw.ffn_gate_shexp, m.require("blk.%d.ffn_gate_shexp.weight", {W, t.n_ff_shared}, l));
    KS_TRY_BIND(lw.ffn_up_shexp, m.require("blk.%d.ffn_up_shexp.weight", {W, t.n_ff_shared}, l));
    KS_TRY_BIND(lw.ffn_down_shexp, m.require("blk.%d.ffn_down_shexp.weight", {t.n_ff_shared, W}, l));
  }
  return Status::Ok();
}

Status bind_decoder(const Model& m, ModelWeights& w, const DecoderTable& t) {
  const HParams& h = m.hparams();
  if (!h.n_ff_layer.empty() || !h.n_head_kv_layer.empty())
    return Error(KESTREL_ERR_UNSUPPORTED, m.file().path() + ": feed_forward_length or attention.head_count_kv varies "
                                          "per layer, which architecture '" + h.arch + "' does not support");
  KS_RETURN_IF_ERROR(bind_embeddings(m, w));
  if (t.rope_freqs) KS_TRY_BIND(w.rope_freqs, m.optional("rope_freqs.weight", {h.rope.n_rot / 2}));
  w.layers.resize(h.n_layer);
  for (int l = 0; l < h.n_layer; ++l) {
    LayerWeights& lw = w.layers[l];
    KS_RETURN_IF_ERROR(t.custom_attention ? t.custom_attention(m, lw, l) : bind_attention(m, lw, l, t.attention));
    KS_TRY_BIND(lw.ffn_norm, m.require(t.ffn_norm, {h.n_embd}, l));
    if (t.post_norms) {
      KS_TRY_BIND(lw.attn_post_norm, m.require("blk.%d.post_attention_norm.weight", {h.n_embd}, l));
      KS_TRY_BIND(lw.ffn_post_norm, m.require("blk.%d.post_ffw_norm.weight", {h.n_embd}, l));
    }
    if (t.experts && l >= t.n_dense_lead)
      KS_RETURN_IF_ERROR(bind_experts(m, lw, l, t.expert));
    else
      KS_RETURN_IF_ERROR(bind_dense_ffn(m, lw, l, h.n_ff));
  }
  return Status::Ok();
}

}  // namespace kestrel
