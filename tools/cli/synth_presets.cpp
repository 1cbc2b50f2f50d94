#include "synth_presets.h"

#include <cstdio>

#include "args.h"

namespace kestrel::cli {
namespace {

using gguf::Value;
using KV = std::vector<std::pair<std::string, Value>>;

struct Preset {
  const char* name;
  const char* arch;
  int32_t n_vocab;
  KV kv;
};

// A hybrid model's metadata: block_count and the per-layer arrays llama.cpp reads the layer kinds
// from, given a hybrid_override_pattern (M Mamba-2, * attention with kv heads, - FFN or E experts
// of width ff).
KV hybrid(const std::string& pattern, int32_t kv_heads, int32_t ff, KV rest) {
  std::vector<int32_t> kv(pattern.size(), 0), ffn(pattern.size(), 0);
  for (size_t l = 0; l < pattern.size(); ++l) {
    if (pattern[l] == '*') kv[l] = kv_heads;
    if (pattern[l] == '-' || pattern[l] == 'E') ffn[l] = ff;
  }
  rest.emplace_back("block_count", Value::make_u32(static_cast<uint32_t>(pattern.size())));
  rest.emplace_back("attention.head_count_kv", Value::make_i32_array(kv));
  rest.emplace_back("feed_forward_length", Value::make_i32_array(ffn));
  return rest;
}

// Shapes from each model's published config.json (metadata keys without the arch prefix).
const std::vector<Preset>& presets() {
  auto u = Value::make_u32;
  auto f = Value::make_f32;
  static const std::vector<Preset> p = {
      {"llama-3.2-1b", "llama", 128256,
       {{"context_length", u(131072)}, {"embedding_length", u(2048)}, {"block_count", u(16)},
        {"feed_forward_length", u(8192)}, {"attention.head_count", u(32)}, {"attention.head_count_kv", u(8)},
        {"rope.freq_base", f(500000.0f)}, {"attention.layer_norm_rms_epsilon", f(1e-5f)}}},
      {"llama-3.1-8b", "llama", 128256,
       {{"context_length", u(131072)}, {"embedding_length", u(4096)}, {"block_count", u(32)},
        {"feed_forward_length", u(14336)}, {"attention.head_count", u(32)}, {"attention.head_count_kv", u(8)},
        {"rope.freq_base", f(500000.0f)}, {"attention.layer_norm_rms_epsilon", f(1e-5f)}}},
      {"qwen3-0.6b", "qwen3", 151936,
       {{"context_length", u(40960)}, {"embedding_length", u(1024)}, {"block_count", u(28)},
        {"feed_forward_length", u(3072)}, {"attention.head_count", u(16)}, {"attention.head_count_kv", u(8)},
        {"attention.key_length", u(128)}, {"attention.value_length", u(128)}, {"rope.freq_base", f(1000000.0f)},
        {"attention.layer_norm_rms_epsilon", f(1e-6f)}}},
      {"qwen3-8b", "qwen3", 151936,
       {{"context_length", u(40960)}, {"embedding_length", u(4096)}, {"block_count", u(36)},
        {"feed_forward_length", u(12288)}, {"attention.head_count", u(32)}, {"attention.head_count_kv", u(8)},
        {"attention.key_length", u(128)}, {"attention.value_length", u(128)}, {"rope.freq_base", f(1000000.0f)},
        {"attention.layer_norm_rms_epsilon", f(1e-6f)}}},
      {"qwen3-30b-a3b", "qwen3moe", 151936,
       {{"context_length", u(40960)}, {"embedding_length", u(2048)}, {"block_count", u(48)},
        {"feed_forward_length", u(6144)}, {"attention.head_count", u(32)}, {"attention.head_count_kv", u(4)},
        {"attention.key_length", u(128)}, {"attention.value_length", u(128)}, {"expert_count", u(128)},
        {"expert_used_count", u(8)}, {"expert_feed_forward_length", u(768)}, {"rope.freq_base", f(1000000.0f)},
        {"attention.layer_norm_rms_epsilon", f(1e-6f)}}},
      {"gpt-oss-20b", "gpt-oss", 201088,
       {{"context_length", u(131072)}, {"embedding_length", u(2880)}, {"block_count", u(24)},
        {"feed_forward_length", u(2880)}, {"attention.head_count", u(64)}, {"attention.head_count_kv", u(8)},
        {"attention.key_length", u(64)}, {"attention.value_length", u(64)}, {"expert_count", u(32)},
        {"expert_used_count", u(4)}, {"expert_feed_forward_length", u(2880)}, {"attention.sliding_window", u(128)},
        {"rope.freq_base", f(150000.0f)}, {"rope.scaling.type", Value::make_string("yarn")},
        {"rope.scaling.factor", f(32.0f)}, {"rope.scaling.original_context_length", u(4096)},
        {"attention.layer_norm_rms_epsilon", f(1e-5f)}}},
      {"gemma-3-4b", "gemma3", 262208,
       {{"context_length", u(131072)}, {"embedding_length", u(2560)}, {"block_count", u(34)},
        {"feed_forward_length", u(10240)}, {"attention.head_count", u(8)}, {"attention.head_count_kv", u(4)},
        {"attention.key_length", u(256)}, {"attention.value_length", u(256)}, {"attention.sliding_window", u(1024)},
        {"rope.freq_base", f(1000000.0f)}, {"rope.scaling.type", Value::make_string("linear")},
        {"rope.scaling.factor", f(8.0f)}, {"attention.layer_norm_rms_epsilon", f(1e-6f)}}},
      {"gemma-3-12b", "gemma3", 262208,
       {{"context_length", u(131072)}, {"embedding_length", u(3840)}, {"block_count", u(48)},
        {"feed_forward_length", u(15360)}, {"attention.head_count", u(16)}, {"attention.head_count_kv", u(8)},
        {"attention.key_length", u(256)}, {"attention.value_length", u(256)}, {"attention.sliding_window", u(1024)},
        {"rope.freq_base", f(1000000.0f)}, {"rope.scaling.type", Value::make_string("linear")},
        {"rope.scaling.factor", f(8.0f)}, {"attention.layer_norm_rms_epsilon", f(1e-6f)}}},
      // hybrid_override_pattern M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-: 24 Mamba-2,
      // 4 attention (no rope), 24 relu^2 FFN layers.
      {"nemotron-h-8b", "nemotron_h", 131072,
       hybrid("M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-", 8, 21504,
              {{"context_length", u(8192)}, {"embedding_length", u(4096)}, {"attention.head_count", u(32)},
               {"attention.key_length", u(128)}, {"attention.value_length", u(128)}, {"ssm.conv_kernel", u(4)},
               {"ssm.state_size", u(128)}, {"ssm.group_count", u(8)}, {"ssm.inner_size", u(8192)},
               {"ssm.time_step_rank", u(128)}, {"attention.layer_norm_rms_epsilon", f(1e-5f)}})},
      // Nemotron 3 Nano 30B-A3B-class: 23 Mamba-2, 23 MoE (128 experts top-6 + a shared one), 6
      // attention layers (counts as NVIDIA publishes them; the widths approximate).
      {"nemotron-3-nano-30b-a3b", "nemotron_h_moe", 131072,
       hybrid("MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEMEME", 2, 1856,
              {{"context_length", u(262144)}, {"embedding_length", u(2688)}, {"attention.head_count", u(32)},
               {"attention.key_length", u(128)}, {"attention.value_length", u(128)}, {"ssm.conv_kernel", u(4)},
               {"ssm.state_size", u(128)}, {"ssm.group_count", u(8)}, {"ssm.inner_size", u(4096)},
               {"ssm.time_step_rank", u(64)}, {"expert_count", u(128)}, {"expert_used_count", u(6)},
               {"expert_feed_forward_length", u(1856)}, {"expert_shared_count", u(1)},
               {"expert_shared_feed_forward_length", u(3712)}, {"expert_weights_norm", Value::make_bool(true)},
               {"expert_weights_scale", f(2.5f)}, {"attention.layer_norm_rms_epsilon", f(1e-5f)}})},
      // 46 layers (1 dense, 45 MoE) + 1 NextN block; 106B parameters, 12B active.
      {"glm-4.5-air", "glm4moe", 151552,
       {{"context_length", u(131072)}, {"embedding_length", u(4096)}, {"block_count", u(47)},
        {"feed_forward_length", u(10944)}, {"attention.head_count", u(96)}, {"attention.head_count_kv", u(8)},
        {"attention.key_length", u(128)}, {"attention.value_length", u(128)}, {"rope.dimension_count", u(64)},
        {"expert_count", u(128)}, {"expert_used_count", u(8)}, {"expert_feed_forward_length", u(1408)},
        {"expert_shared_count", u(1)}, {"leading_dense_block_count", u(1)}, {"nextn_predict_layers", u(1)},
        {"expert_gating_func", u(2)}, {"expert_weights_norm", Value::make_bool(true)},
        {"expert_weights_scale", f(1.0f)}, {"rope.freq_base", f(1000000.0f)},
        {"attention.layer_norm_rms_epsilon", f(1e-5f)}}},
  };
  return p;
}

}  // namespace

SynthShape find_synth_shape(const std::string& name) {
  SynthShape s;
  for (const Preset& p : presets())
    if (name == p.name) {
      s.arch = find_arch(p.arch), s.kv = p.kv, s.n_vocab = p.n_vocab, s.architecture = p.arch;
      return s;
    }
  for (const ArchDef* d : all_archs())
    for (const TinyConfig& t : d->tiny)
      if (name == t.name) {
        s.arch = d, s.kv = t.kv;
        return s;
      }
  throw UsageError("unknown preset '" + name + "' (kestrel synth --list shows them)");
}

void print_synth_shapes() {
  std::printf("presets (real shapes):\n");
  for (const Preset& p : presets()) std::printf("  %-24s %s\n", p.name, p.arch);
  std::printf("architectures (tiny test shapes):\n");
  for (const ArchDef* d : all_archs())
    for (const TinyConfig& t : d->tiny) std::printf("  %-24s %s\n", t.name, d->name);
}

}  // namespace kestrel::cli
