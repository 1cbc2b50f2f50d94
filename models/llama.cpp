// Llama family: Llama 2/3 (incl. Llama-3 rope_freqs factors), Mistral, TinyStories/llama2.c
// conversions, and Mixtral (the same architecture with experts: expert_count > 0 swaps the FFN
// for a routed one). Pre-norm blocks: RMSNorm -> attention (GQA, "normal" rope) -> RMSNorm ->
// SwiGLU or experts.
#include "model/bind.h"
#include "model/builder.h"

namespace kestrel {
namespace {

Status bind(const Model& m, ModelWeights& w) {
  const HParams& h = m.hparams();
  // Mixtral: experts of feed_forward_length each (Llama 3's rope_freqs factors are optional).
  return bind_decoder(m, w, {.rope_freqs = true, .experts = h.n_expert > 0,
                             .expert = {.n_ff = h.n_ff_exp > 0 ? h.n_ff_exp : h.n_ff}});
}

Tensor* forward(Builder& b) {
  MoeOptions moe;  // Mixtral: softmax over the experts, the chosen two renormalised
  moe.norm_weights = true;
  return b.pre_norm_decoder({}, [&](Tensor* x, const LayerWeights& lw) {
    return lw.ffn_gate_inp ? b.moe_ffn(x, lw, moe) : b.dense_ffn(x, lw);
  });
}

using gguf::Value;
const std::vector<std::pair<std::string, Value>> kTinyDense = {
    {"context_length", Value::make_u32(256)},     {"embedding_length", Value::make_u32(64)},
    {"block_count", Value::make_u32(2)},          {"feed_forward_length", Value::make_u32(96)},
    {"attention.head_count", Value::make_u32(4)}, {"attention.head_count_kv", Value::make_u32(2)},
    {"rope.freq_base", Value::make_f32(10000.0f)}, {"attention.layer_norm_rms_epsilon", Value::make_f32(1e-5f)},
};

std::vector<std::pair<std::string, Value>> tiny_mixtral() {
  auto kv = kTinyDense;
  kv.emplace_back("expert_count", Value::make_u32(4));
  kv.emplace_back("expert_used_count", Value::make_u32(2));
  return kv;
}

}  // namespace
}  // namespace kestrel

KESTREL_REGISTER_ARCH(llama) {
  static const kestrel::ArchDef def{.name = "llama", .aliases = {"mistral"}, .rope_mode = kestrel::ROPE_NORMAL,
                                    .bind = kestrel::bind, .forward = kestrel::forward,
                                    .tiny = {{"llama", kestrel::kTinyDense}, {"mixtral", kestrel::tiny_mixtral()}}};
  return def;
}
