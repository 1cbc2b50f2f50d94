// Qwen2 / Qwen2.5: the Llama block with q/k/v projection biases and NEOX rope (large base).
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
    KS_RETURN_IF_ERROR(bind_attention(m, lw, l, {.qkv_bias = true}));
    KS_TRY_BIND(lw.ffn_norm, m.require("blk.%d.ffn_norm.weight", {h.n_embd}, l));
    KS_RETURN_IF_ERROR(bind_dense_ffn(m, lw, l, h.n_ff));
  }
  return Status::Ok();
}

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
  static const kestrel::ArchDef def{"qwen2", {}, kestrel::ROPE_NEOX, kestrel::bind, kestrel::forward, nullptr,
                                    {{"qwen2", kestrel::kTiny}}};
  return def;
}
