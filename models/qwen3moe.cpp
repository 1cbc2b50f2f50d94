// Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B): Qwen3 attention (per-head q/k RMSNorm, NEOX rope) and a
// routed FFN in every layer: softmax over all experts, top-k, the chosen weights renormalised to
// sum 1, no shared expert.
#include "model/bind.h"
#include "model/builder.h"

namespace kestrel {
namespace {

Status bind(const Model& m, ModelWeights& w) {
  return bind_decoder(m, w, {.attention = {.qk_norm = true}, .experts = true, .expert = {.n_ff = m.hparams().n_ff_exp}});
}

Tensor* forward(Builder& b) {
  MoeOptions moe;
  moe.gating = ExpertGating::SOFTMAX;
  moe.norm_weights = true;
  return b.pre_norm_decoder({}, [&](Tensor* x, const LayerWeights& lw) { return b.moe_ffn(x, lw, moe); });
}

using gguf::Value;
const std::vector<std::pair<std::string, Value>> kTiny = {
    {"context_length", Value::make_u32(256)},       {"embedding_length", Value::make_u32(64)},
    {"block_count", Value::make_u32(2)},            {"feed_forward_length", Value::make_u32(128)},
    {"attention.head_count", Value::make_u32(4)},   {"attention.head_count_kv", Value::make_u32(2)},
    {"attention.key_length", Value::make_u32(32)},  {"attention.value_length", Value::make_u32(32)},
    {"expert_count", Value::make_u32(8)},           {"expert_used_count", Value::make_u32(2)},
    {"expert_feed_forward_length", Value::make_u32(64)}, {"rope.freq_base", Value::make_f32(1000000.0f)},
    {"attention.layer_norm_rms_epsilon", Value::make_f32(1e-6f)},
};

}  // namespace
}  // namespace kestrel

KESTREL_REGISTER_ARCH(qwen3moe) {
  static const kestrel::ArchDef def{.name = "qwen3moe", .rope_mode = kestrel::ROPE_NEOX, .bind = kestrel::bind,
                                    .forward = kestrel::forward, .tiny = {{"qwen3moe", kestrel::kTiny}}};
  return def;
}
