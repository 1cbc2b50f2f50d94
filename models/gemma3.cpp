// Gemma 3: token embeddings scaled by sqrt(n_embd); per-head q/k RMSNorm; sandwich norms (the
// attention's and the FFN's outputs normed before each residual add); a GELU-gated FFN; local
// layers with a sliding window and their own NEOX rope (base rope.freq_base_swa, else 10000,
// unscaled), one global layer in every sliding_window_pattern (default 6: 5 local, 1 global)
// with the model's rope (and its linear scaling). The norm gains in the GGUF already carry
// Gemma's +1. Tied output, no logit soft-capping.
#include <cmath>

#include "model/bind.h"
#include "model/builder.h"

namespace kestrel {
namespace {

Status bind(const Model& m, ModelWeights& w) {
  return bind_decoder(m, w, {.attention = {.qk_norm = true}, .post_norms = true});
}

int32_t layer_window(const HParams& h, int l) {
  const int pattern = h.swa_pattern > 0 ? h.swa_pattern : 6;
  return l % pattern < pattern - 1 ? h.sliding_window : 0;  // local layers; every pattern-th is global
}

Tensor* forward(Builder& b) {
  const HParams& h = b.hp();
  RopeParams local = h.rope;
  local.freq_base = h.rope_freq_base_swa > 0 ? h.rope_freq_base_swa : 10000.0f;
  local.freq_scale = 1.0f;
  // llama.cpp's query scale: 1/sqrt(n_embd / n_head) for the 27B (62 layers), else 1/sqrt(head_dim).
  const float scale = h.n_layer == 62 ? 1.0f / std::sqrt(static_cast<float>(h.n_embd / h.n_head))
                                      : 1.0f / std::sqrt(static_cast<float>(h.head_dim_k));
  auto attention = [&](int l) {
    AttentionOptions ao;
    ao.scale = scale;
    if (layer_window(h, l) > 0) {  // local
      ao.window = layer_window(h, l);
      ao.rope = &local;
    }
    return ao;
  };
  auto ffn = [&](Tensor* x, const LayerWeights& lw) { return b.swiglu_ffn(x, lw.ffn_gate, lw.ffn_up, lw.ffn_down, Op::GEGLU); };
  return b.pre_norm_decoder(attention, ffn, std::sqrt(static_cast<float>(h.n_embd)));
}

using gguf::Value;
const std::vector<std::pair<std::string, Value>> kTiny = {
    {"context_length", Value::make_u32(256)},      {"embedding_length", Value::make_u32(64)},
    {"block_count", Value::make_u32(4)},           {"feed_forward_length", Value::make_u32(96)},
    {"attention.head_count", Value::make_u32(4)},  {"attention.head_count_kv", Value::make_u32(1)},
    {"attention.key_length", Value::make_u32(32)}, {"attention.value_length", Value::make_u32(32)},
    {"attention.sliding_window", Value::make_u32(8)}, {"attention.sliding_window_pattern", Value::make_u32(3)},
    {"rope.freq_base", Value::make_f32(1000000.0f)}, {"rope.freq_base_swa", Value::make_f32(10000.0f)},
    {"rope.scaling.type", Value::make_string("linear")}, {"rope.scaling.factor", Value::make_f32(8.0f)},
    {"attention.layer_norm_rms_epsilon", Value::make_f32(1e-6f)},
};

}  // namespace
}  // namespace kestrel

KESTREL_REGISTER_ARCH(gemma3) {
  static const kestrel::ArchDef def{.name = "gemma3", .rope_mode = kestrel::ROPE_NEOX, .bind = kestrel::bind,
                                    .forward = kestrel::forward, .layer_window = kestrel::layer_window, .tiny = {{"gemma3", kestrel::kTiny}}};
  return def;
}
