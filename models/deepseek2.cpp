// DeepSeek V2 / V3, Kimi K2 (general.architecture "deepseek2"): multi-head latent attention
// (model/builder_mla.cpp: the cache keeps the compressed latent and the shared rope part, decode
// uses the absorbed matrices) with YaRN, "normal" rope; the first leading_dense_block_count
// layers have a dense FFN, the others routed experts (softmax, or V3's sigmoid with the
// exp_probs_b selection bias and expert groups; weights renormalised and scaled as the GGUF
// says) plus shared experts. Needs the split attn_k_b / attn_v_b layout of current converters.
#include <cmath>

#include "model/bind.h"
#include "model/builder.h"

namespace kestrel {
namespace {

// Multi-head latent attention of layer l (bind() has checked the ranks).
Status bind_mla(const Model& m, LayerWeights& lw, int l) {
  const HParams& h = m.hparams();
  const int64_t E = h.n_embd, H = h.n_head, rope = h.rope.n_rot, kvr = h.kv_lora_rank;
  const int64_t nope = h.head_dim_k_mla - rope, vd = h.head_dim_v_mla;
  KS_TRY_BIND(lw.attn_norm, m.require("blk.%d.attn_norm.weight", {E}, l));
  if (h.q_lora_rank > 0) {
    KS_TRY_BIND(lw.wq_a, m.require("blk.%d.attn_q_a.weight", {E, h.q_lora_rank}, l));
    KS_TRY_BIND(lw.q_a_norm, m.require("blk.%d.attn_q_a_norm.weight", {h.q_lora_rank}, l));
    KS_TRY_BIND(lw.wq_b, m.require("blk.%d.attn_q_b.weight", {h.q_lora_rank, H * (nope + rope)}, l));
  } else {  // V2-Lite: a plain q projection
    KS_TRY_BIND(lw.wq, m.require("blk.%d.attn_q.weight", {E, H * (nope + rope)}, l));
  }
  KS_TRY_BIND(lw.wkv_a_mqa, m.require("blk.%d.attn_kv_a_mqa.weight", {E, kvr + rope}, l));
  KS_TRY_BIND(lw.kv_a_norm, m.require("blk.%d.attn_kv_a_norm.weight", {kvr}, l));
  KS_TRY_BIND(lw.wk_b, m.require("blk.%d.attn_k_b.weight", {nope, kvr, H}, l));
  KS_TRY_BIND(lw.wv_b, m.require("blk.%d.attn_v_b.weight", {kvr, vd, H}, l));
  KS_TRY_BIND(lw.wo, m.require("blk.%d.attn_output.weight", {H * vd, E}, l));
  return Status::Ok();
}

Status bind(const Model& m, ModelWeights& w) {
  const HParams& h = m.hparams();
  if (h.kv_lora_rank <= 0 || h.head_dim_k_mla <= h.rope.n_rot || h.head_dim_v_mla <= 0)
    return Error(KESTREL_ERR_UNSUPPORTED, m.file().path() + ": deepseek2 needs attention.kv_lora_rank and "
                                          "key_length_mla > rope.dimension_count, value_length_mla (the split "
                                          "attn_k_b/attn_v_b layout; reconvert older files)");
  // A dense FFN in the first leading_dense_block_count layers, and in every layer without experts.
  return bind_decoder(m, w, {.custom_attention = bind_mla, .experts = h.n_expert != 0,
                             .n_dense_lead = h.n_layer_dense_lead,
                             .expert = {.n_ff = h.n_ff_exp, .selection_bias = true, .n_ff_shared = h.n_ff_shexp}});
}

// DeepSeek's YaRN: llama.cpp's attention factor for this architecture (mscale == mscale_all_dims,
// so the rope magnitude correction is cancelled) and a score scale carrying mscale^2.
void yarn_setup(const HParams& h, RopeParams* rope, float* kq_scale) {
  const float log_mul = h.rope_yarn_log_mul / 0.1f;  // the converter stores 0.1 * mscale_all_dims
  const float fs = h.rope.freq_scale;
  if (rope->ext_factor != 0.0f && fs > 0.0f && fs < 1.0f) {
    const float factor = 1.0f / fs;
    auto mscale = [&](float m) { return 0.1f * m * logf(factor) + 1.0f; };
    float attn = log_mul != 0.0f ? mscale(log_mul != 1.0f ? log_mul : 1.0f) / mscale(log_mul) : mscale(1.0f);
    rope->attn_factor = attn * (1.0f / (1.0f + 0.1f * logf(factor))) * h.rope_attn_factor;
  }
  const float attn_org = rope->attn_factor * (1.0f + 0.1f * logf(1.0f / fs));
  const float m = attn_org * (1.0f + 0.1f * log_mul * logf(1.0f / fs));
  *kq_scale = m * m / sqrtf(static_cast<float>(h.head_dim_k_mla));
}

Tensor* forward(Builder& b) {
  const HParams& h = b.hp();
  RopeParams rope = h.rope;
  AttentionOptions ao;
  yarn_setup(h, &rope, &ao.scale);
  ao.rope = &rope;
  const MoeOptions moe = moe_options_from(h);
  Tensor* x = b.embed(b.w().tok_embd);  // [n_embd, T]
  for (int l = 0; l < h.n_layer; ++l) {
    const LayerWeights& lw = b.w().layers[l];
    Tensor* attn = b.mla_attention(l, b.rms_norm(x, lw.attn_norm), lw, ao);  // [n_embd, T]
    if (l == h.n_layer - 1) {
      attn = b.select_outputs(attn);
      x = b.select_outputs(x);
    }
    x = b.add(x, attn);
    Tensor* n = b.rms_norm(x, lw.ffn_norm);
    x = b.add(x, lw.ffn_gate_inp ? b.moe_ffn(n, lw, moe) : b.swiglu_ffn(n, lw.ffn_gate, lw.ffn_up, lw.ffn_down));
  }
  return b.output_logits(x);  // [n_vocab, n_outputs]
}

// One row per token and layer: the latent followed by the rope part; V reads the latent.
KvLayout kv_layout(const HParams& h) {
  KvLayout k;
  k.k_rows.assign(h.n_layer, int64_t{h.kv_lora_rank} + h.rope.n_rot);
  k.v_rows.assign(h.n_layer, h.kv_lora_rank);
  k.v_in_k = true;
  return k;
}

using gguf::Value;
const std::vector<std::pair<std::string, Value>> kTiny = {
    {"context_length", Value::make_u32(256)},      {"embedding_length", Value::make_u32(64)},
    {"block_count", Value::make_u32(2)},           {"feed_forward_length", Value::make_u32(128)},
    {"attention.head_count", Value::make_u32(4)},  {"attention.head_count_kv", Value::make_u32(1)},
    {"attention.q_lora_rank", Value::make_u32(64)}, {"attention.kv_lora_rank", Value::make_u32(64)},
    {"attention.key_length", Value::make_u32(80)}, {"attention.value_length", Value::make_u32(64)},
    {"attention.key_length_mla", Value::make_u32(48)}, {"attention.value_length_mla", Value::make_u32(32)},
    {"rope.dimension_count", Value::make_u32(16)}, {"leading_dense_block_count", Value::make_u32(1)},
    {"expert_count", Value::make_u32(8)},          {"expert_used_count", Value::make_u32(2)},
    {"expert_feed_forward_length", Value::make_u32(64)}, {"expert_shared_count", Value::make_u32(1)},
    {"expert_group_count", Value::make_u32(4)},    {"expert_group_used_count", Value::make_u32(2)},
    {"expert_gating_func", Value::make_u32(2)},    {"expert_weights_norm", Value::make_bool(true)},
    {"expert_weights_scale", Value::make_f32(2.5f)}, {"rope.scaling.type", Value::make_string("yarn")},
    {"rope.scaling.factor", Value::make_f32(4.0f)}, {"rope.scaling.original_context_length", Value::make_u32(64)},
    {"rope.scaling.yarn_log_multiplier", Value::make_f32(0.0707f)},
    {"attention.layer_norm_rms_epsilon", Value::make_f32(1e-6f)},
};

}  // namespace
}  // namespace kestrel

KESTREL_REGISTER_ARCH(deepseek2) {
  static const kestrel::ArchDef def{.name = "deepseek2", .rope_mode = kestrel::ROPE_NORMAL, .bind = kestrel::bind,
                                    .forward = kestrel::forward, .kv_layout = kestrel::kv_layout,
                                    .tiny = {{"deepseek2", kestrel::kTiny}}};
  return def;
}
