// Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B): Qwen3 attention (per-head q/k RMSNorm, NEOX rope) and a
// routed FFN in every layer: softmax over all experts, top-k, the chosen weights renormalised to
// sum 1, no shared expert.
#include "model/bind.h"
#include "model/builder.h"

namespace kestrel {
namespace {

Status bind(const Model& m, ModelWeights& w) {
  const HParams& h = m.hparams();
  KS_RETURN_IF_ERROR(bind_embeddings(m, w));
  w.layers.resize(h.n_layer);
  for (int l = 0; l < h.n_layer; ++l) {
    LayerWeights& lw = w.layers[l];
    KS_RETURN_IF_ERROR(bind_attention(m, lw, l, {.qk_norm = true}));
    KS_TRY_BIND(lw.ffn_norm, m.require("blk.%d.ffn_norm.weight", {h.n_embd}, l));
    KS_RETURN_IF_ERROR(bind_experts(m, lw, l, {.n_ff = h.n_ff_exp}));
  }
  return Status::Ok();
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
  static const kestrel::ArchDef def{"qwen3moe", {}, kestrel::ROPE_NEOX, kestrel::bind, kestrel::forward, nullptr,
                                    {{"qwen3moe", kestrel::kTiny}}};
  return def;
}
