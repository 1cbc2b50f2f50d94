// Qwen2 / Qwen2.5: the Llama block with q/k/v projection biases and NEOX rope (large base).
#include "model/bind.h"
#include "model/builder.h"

namespace kestrel {
namespace {

Status bind(const Model& m, ModelWeights& w) { return bind_decoder(m, w, {.attention = {.qkv_bias = true}}); }

Tensor* forward(Builder& b) {
  // q/k/v biases come from the layer weights.
  return b.pre_norm_decoder({}, [&](Tensor* x, const LayerWeights& lw) { return b.dense_ffn(x, lw); });
}

using gguf::Value;
const std::vector<std::pair<std::string, Value>> kTiny = {
    {"context_length", Value::make_u32(256)},     {"embedding_length", Value::make_u32(64)},
    {"block_count", Value::make_u32(2)},          {"feed_forward_length", Value::make_u32(96)},
    {"attention.head_count", Value::make_u32(4)}, {"attention.head_count_kv", Value::make_u32(2)},
    {"rope.freq_base", Value::make_f32(1000000.0f)}, {"attention.layer_norm_rms_epsilon", Value::make_f32(1e-6f)},
};

}  // namespace
}  // namespace kestrel

KESTREL_REGISTER_ARCH(qwen2) {
  static const kestrel::ArchDef def{.name = "qwen2", .rope_mode = kestrel::ROPE_NEOX, .bind = kestrel::bind,
                                    .forward = kestrel::forward, .tiny = {{"qwen2", kestrel::kTiny}}};
  return def;
}
