// gpt-oss (OpenAI): attention with q/k/v/o biases, per-head sinks and a sliding window on every
// other layer (even layers), NEOX rope with YaRN scaling; an expert FFN in every layer whose
// router has a bias, picks the top-k logits and softmaxes over those only, and whose experts
// (with biases) use the clamped SwiGLU variant. `post_attention_norm` is the norm before the FFN.
#include "model/bind.h"
#include "model/builder.h"

namespace kestrel {
namespace {

Status bind(const Model& m, ModelWeights& w) {
  return bind_decoder(m, w, {.attention = {.qkv_bias = true, .out_bias = true, .sinks = true},
                             .ffn_norm = "blk.%d.post_attention_norm.weight",
                             .experts = true,
                             .expert = {.n_ff = m.hparams().n_ff_exp, .biases = true, .router_bias = true}});
}

int32_t layer_window(const HParams& h, int l) { return l % 2 == 0 ? h.sliding_window : 0; }

Tensor* forward(Builder& b) {
  const HParams& h = b.hp();
  MoeOptions moe;
  moe.gating = ExpertGating::SOFTMAX_CHOSEN;
  moe.activation = ExpertActivation::SWIGLU_OAI;  // alpha 1.702, limit 7
  auto attention = [&](int l) {
    AttentionOptions ao;  // scale 1/sqrt(head_dim); sinks from lw
    ao.window = layer_window(h, l);
    return ao;
  };
  return b.pre_norm_decoder(attention, [&](Tensor* x, const LayerWeights& lw) { return b.moe_ffn(x, lw, moe); });
}

using gguf::Value;
const std::vector<std::pair<std::string, Value>> kTiny = {
    {"context_length", Value::make_u32(256)},       {"embedding_length", Value::make_u32(64)},
    {"block_count", Value::make_u32(2)},            {"feed_forward_length", Value::make_u32(64)},
    {"attention.head_count", Value::make_u32(4)},   {"attention.head_count_kv", Value::make_u32(2)},
    {"attention.key_length", Value::make_u32(32)},  {"attention.value_length", Value::make_u32(32)},
    {"expert_count", Value::make_u32(4)},           {"expert_used_count", Value::make_u32(2)},
    {"expert_feed_forward_length", Value::make_u32(64)}, {"attention.sliding_window", Value::make_u32(4)},
    {"rope.freq_base", Value::make_f32(150000.0f)}, {"rope.scaling.type", Value::make_string("yarn")},
    {"rope.scaling.factor", Value::make_f32(8.0f)}, {"rope.scaling.original_context_length", Value::make_u32(64)},
    {"attention.layer_norm_rms_epsilon", Value::make_f32(1e-5f)},
};

}  // namespace
}  // namespace kestrel

KESTREL_REGISTER_ARCH(gpt_oss) {
  static const kestrel::ArchDef def{.name = "gpt-oss", .rope_mode = kestrel::ROPE_NEOX, .bind = kestrel::bind,
                                    .forward = kestrel::forward, .layer_window = kestrel::layer_window, .tiny = {{"gpt-oss", kestrel::kTiny}}};
  return def;
}
