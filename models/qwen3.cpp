// Qwen3 (dense): per-head RMSNorm on q and k before NEOX rope, no projection biases, and a head
// size of its own (attention.key_length; q width may differ from n_embd).
#include "model/bind.h"
#include "model/builder.h"

namespace kestrel {
namespace {

Status bind(const Model& m, ModelWeights& w) { return bind_decoder(m, w, {.attention = {.qk_norm = true}}); }

Tensor* forward(Builder& b) {
  // q/k norms come from the layer weights.
  return b.pre_norm_decoder({}, [&](Tensor* x, const LayerWeights& lw) { return b.dense_ffn(x, lw); });
}

using gguf::Value;
const std::vector<std::pair<std::string, Value>> kTiny = {
    {"context_length", Value::make_u32(256)},     {"embedding_length", Value::make_u32(64)},
    {"block_count", Value::make_u32(2)},          {"feed_forward_length", Value::make_u32(96)},
    {"attention.head_count", Value::make_u32(4)}, {"attention.head_count_kv", Value::make_u32(2)},
    {"attention.key_length", Value::make_u32(32)}, {"attention.value_length", Value::make_u32(32)},
    {"rope.freq_base", Value::make_f32(1000000.0f)}, {"attention.layer_norm_rms_epsilon", Value::make_f32(1e-6f)},
};

}  // namespace
}  // namespace kestrel

KESTREL_REGISTER_ARCH(qwen3) {
  static const kestrel::ArchDef def{.name = "qwen3", .rope_mode = kestrel::ROPE_NEOX, .bind = kestrel::bind,
                                    .forward = kestrel::forward, .tiny = {{"qwen3", kestrel::kTiny}}};
  return def;
}
