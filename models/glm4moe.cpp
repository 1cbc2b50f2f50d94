// GLM-4.5 / GLM-4.5-Air / GLM-4.6 (general.architecture "glm4moe"): attention with q/k/v biases,
// per-head q/k RMSNorm where the file has it (the 355B; Air has none), NEOX rope on the first
// rope.dimension_count dims of each head (partial rotary); `post_attention_norm` is the norm
// before the FFN; dense FFNs in the first leading_dense_block_count layers, then routed experts
// (sigmoid, the exp_probs_b selection bias, renormalised and scaled) plus a shared expert.
// block_count counts the NextN (MTP) blocks after the model's own: bound, never run (as
// llama.cpp), so the output norm follows the last real layer and they get no KV cache.
#include "model/bind.h"
#include "model/builder.h"

namespace kestrel {
namespace {

constexpr const char* kFfnNorm = "blk.%d.post_attention_norm.weight";

Status bind_layer_extras(const Model& m, LayerWeights& lw, int l) {
  const int64_t D = m.hparams().head_dim_k;
  KS_TRY_BIND(lw.q_norm, m.optional("blk.%d.attn_q_norm.weight", {D}, l));
  KS_TRY_BIND(lw.k_norm, m.optional("blk.%d.attn_k_norm.weight", {D}, l));
  if (!lw.q_norm != !lw.k_norm)
    return Error(KESTREL_ERR_FORMAT, m.file().path() + ": layer " + std::to_string(l) + " has only one of attn_q_norm, attn_k_norm");
  return Status::Ok();
}

// A NextN block: a full MoE layer plus its projection and norms.
Status bind_nextn(const Model& m, NextNWeights& n, int l, const ExpertTable& experts) {
  const int64_t E = m.hparams().n_embd;
  KS_RETURN_IF_ERROR(bind_attention(m, n.block, l, {.qkv_bias = true}));
  KS_RETURN_IF_ERROR(bind_layer_extras(m, n.block, l));
  KS_TRY_BIND(n.block.ffn_norm, m.require(kFfnNorm, {E}, l));
  KS_RETURN_IF_ERROR(bind_experts(m, n.block, l, experts));
  KS_TRY_BIND(n.eh_proj, m.require("blk.%d.nextn.eh_proj.weight", {2 * E, E}, l));
  KS_TRY_BIND(n.enorm, m.require("blk.%d.nextn.enorm.weight", {E}, l));
  KS_TRY_BIND(n.hnorm, m.require("blk.%d.nextn.hnorm.weight", {E}, l));
  KS_TRY_BIND(n.shared_head_norm, m.require("blk.%d.nextn.shared_head_norm.weight", {E}, l));
  return Status::Ok();
}

Status bind(const Model& m, ModelWeights& w) {
  const HParams& h = m.hparams();
  const ExpertTable experts{.n_ff = h.n_ff_exp, .selection_bias = true, .n_ff_shared = h.n_ff_shexp};
  KS_RETURN_IF_ERROR(bind_decoder(m, w, {.attention = {.qkv_bias = true}, .ffn_norm = kFfnNorm, .experts = true,
                                         .n_dense_lead = h.n_layer_dense_lead, .expert = experts}));
  for (int l = 0; l < h.n_layer; ++l) KS_RETURN_IF_ERROR(bind_layer_extras(m, w.layers[l], l));
  w.nextn.resize(h.n_layer_nextn);
  for (int i = 0; i < h.n_layer_nextn; ++i) KS_RETURN_IF_ERROR(bind_nextn(m, w.nextn[i], h.n_layer + i, experts));
  return Status::Ok();
}

Tensor* forward(Builder& b) {
  const MoeOptions moe = moe_options_from(b.hp());
  auto ffn = [&](Tensor* x, const LayerWeights& lw) {
    return lw.ffn_gate_inp ? b.moe_ffn(x, lw, moe) : b.swiglu_ffn(x, lw.ffn_gate, lw.ffn_up, lw.ffn_down);
  };
  return b.pre_norm_decoder({}, ffn);
}

using gguf::Value;
const std::vector<std::pair<std::string, Value>> kTiny = {
    {"context_length", Value::make_u32(256)},       {"embedding_length", Value::make_u32(64)},
    {"block_count", Value::make_u32(3)},            {"feed_forward_length", Value::make_u32(128)},
    {"attention.head_count", Value::make_u32(4)},   {"attention.head_count_kv", Value::make_u32(2)},
    {"attention.key_length", Value::make_u32(32)},  {"attention.value_length", Value::make_u32(32)},
    {"rope.dimension_count", Value::make_u32(16)},  {"rope.freq_base", Value::make_f32(1000000.0f)},
    {"expert_count", Value::make_u32(8)},           {"expert_used_count", Value::make_u32(2)},
    {"expert_feed_forward_length", Value::make_u32(64)}, {"expert_shared_count", Value::make_u32(1)},
    {"leading_dense_block_count", Value::make_u32(1)}, {"nextn_predict_layers", Value::make_u32(1)},
    {"expert_gating_func", Value::make_u32(2)},     {"expert_weights_norm", Value::make_bool(true)},
    {"expert_weights_scale", Value::make_f32(2.5f)}, {"attention.layer_norm_rms_epsilon", Value::make_f32(1e-5f)},
};

}  // namespace
}  // namespace kestrel

KESTREL_REGISTER_ARCH(glm4moe) {
  static const kestrel::ArchDef def{.name = "glm4moe", .rope_mode = kestrel::ROPE_NEOX, .bind = kestrel::bind,
                                    .forward = kestrel::forward, .tiny = {{"glm4moe", kestrel::kTiny}}};
  return def;
}
