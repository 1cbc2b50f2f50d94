// kestrel synth: a random-weight GGUF with the shape of a real model (or any registered
// architecture's tiny test shape), for benchmarks and tests without downloading weights.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "args.h"
#include "core/thread_pool.h"
#include "model/arch.h"
#include "model/synth.h"

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

// "16" -> u32, "1e-6" / "0.5" -> f32, "true"/"false" -> bool, anything else -> string.
Value parse_value(const std::string& s) {
  if (s == "true" || s == "false") return Value::make_bool(s == "true");
  char* end = nullptr;
  const unsigned long long i = std::strtoull(s.c_str(), &end, 10);
  if (!s.empty() && s[0] != '-' && *end == '\0' && i <= 0xffffffffull) return Value::make_u32(static_cast<uint32_t>(i));
  const double d = std::strtod(s.c_str(), &end);
  if (!s.empty() && *end == '\0') return Value::make_f32(static_cast<float>(d));
  return Value::make_string(s);
}

void set_kv(KV& kv, const std::string& key, Value v) {
  for (auto& [k, old] : kv)
    if (k == key) {
      old = std::move(v);
      return;
    }
  kv.emplace_back(key, std::move(v));
}

}  // namespace

Opts synth_options() {
  return {{"PRESET", "", "a real model's name (see --list) or an architecture's tiny test shape"},
          {"--preset", "NAME", "the same as PRESET"},
          {"--arch", "ARCH", "an architecture: its tiny test shape, or a check on PRESET's"},
          {"-o,--output", "FILE", "where to write (default PRESET-TYPE.gguf)"},
          {"--type", "TYPE", "the matrices' type: f32, f16, q8_0, q4_0, q4_K, mxfp4, ... (default f32)"},
          {"--layers", "N", "keep the first N blocks (a cut for benches)"},
          {"--vocab", "N", "shrink the vocabulary to N tokens"},
          {"--vocab-from", "FILE", "take a real vocabulary (the tokenizer.* keys) from this GGUF"},
          {"--set", "KEY=VALUE", "override a metadata key (the architecture's prefix implied); repeatable", true},
          {"--seed", "N", "random seed of the weights (default 1)"},
          {"-t,--threads", "N", "threads (default: one per core)"},
          {"--list", "", "list the presets and tiny shapes"}};
}

int cmd_synth(const Args& a) {
  if (a.has("--list")) {
    std::printf("presets (real shapes):\n");
    for (const Preset& p : presets()) std::printf("  %-24s %s\n", p.name, p.arch);
    std::printf("architectures (tiny test shapes):\n");
    for (const ArchDef* d : all_archs())
      for (const TinyConfig& t : d->tiny) std::printf("  %-24s %s\n", t.name, d->name);
    return 0;
  }
  // PRESET as a word or --preset; --arch NAME alone picks that architecture's tiny shape.
  std::string name = a.str("--preset", a.str("--arch"));
  if (a.positional().size() == 1 && name.empty()) name = a.positional()[0];
  if (name.empty() || a.positional().size() > 1)
    throw UsageError("synth: give one PRESET (kestrel synth --list shows them)");

  const ArchDef* arch = nullptr;
  KV kv;
  SynthOptions o;
  for (const Preset& p : presets())
    if (name == p.name) arch = find_arch(p.arch), kv = p.kv, o.n_vocab = p.n_vocab, o.architecture = p.arch;
  if (!arch)
    for (const ArchDef* d : all_archs())
      for (const TinyConfig& t : d->tiny)
        if (!arch && name == t.name) arch = d, kv = t.kv;
  if (!arch) throw UsageError("synth: unknown preset '" + name + "' (kestrel synth --list shows them)");
  if (a.has("--arch") && a.has("--preset") && std::string(arch->name) != a.str("--arch") &&
      find_arch(a.str("--arch")) != arch)
    throw UsageError("synth: preset '" + name + "' is a " + arch->name + " model, not " + a.str("--arch"));

  if (a.has("--type") && !dtype_from_name(a.str("--type").c_str(), &o.weight_type))
    throw UsageError("synth: unknown type '" + a.str("--type") + "'");
  if (a.has("--layers")) {
    const long long n = a.integer("--layers", 0);
    if (n < 1) throw UsageError("synth: --layers must be >= 1");
    int64_t old_n = 0;
    for (const auto& [k, v] : kv)
      if (k == "block_count") old_n = v.as_int().value_or(0);
    // Per-layer arrays (a hybrid model's layer kinds) follow: the pattern's first n layers, repeated.
    for (auto& [k, v] : kv)
      if (v.type == gguf::ValueType::ARRAY && old_n > 0 && static_cast<int64_t>(v.array.size()) == old_n) {
        std::vector<Value> a;
        for (long long i = 0; i < n; ++i) a.push_back(v.array[static_cast<size_t>(i % old_n)]);
        v.array = std::move(a);
      }
    set_kv(kv, "block_count", Value::make_u32(static_cast<uint32_t>(n)));
  }
  o.n_vocab = static_cast<int32_t>(a.integer("--vocab", o.n_vocab));
  std::unique_ptr<gguf::File> vocab_file;
  if (a.has("--vocab-from")) {
    if (a.has("--vocab")) throw UsageError("synth: --vocab and --vocab-from cannot both be given");
    auto f = gguf::File::open(a.str("--vocab-from"));
    if (!f.ok()) throw UsageError("synth: --vocab-from: " + f.status().message());
    vocab_file = std::move(f.value());
    o.vocab_from = vocab_file.get();
    for (const gguf::KeyValue& kv : vocab_file->metadata())
      if (kv.key == "tokenizer.ggml.tokens") o.n_vocab = static_cast<int32_t>(kv.value.array.size());
  }
  o.seed = static_cast<uint32_t>(a.integer("--seed", 1));
  o.n_threads = static_cast<int>(a.integer("--threads", default_thread_count()));
  for (const std::string& s : a.all("--set")) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0) throw UsageError("synth: --set wants KEY=VALUE, got '" + s + "'");
    std::string key = s.substr(0, eq);
    const std::string prefix = std::string(arch->name) + ".";
    if (key.rfind(prefix, 0) == 0) key = key.substr(prefix.size());
    set_kv(kv, key, parse_value(s.substr(eq + 1)));
  }
  const std::string out = a.str("--output", name + "-" + dtype_name(o.weight_type) + ".gguf");

  const auto t0 = std::chrono::steady_clock::now();
  const TinyConfig config{name.c_str(), kv};
  auto w = synth_model(*arch, config, o);
  if (!w.ok()) {
    std::fprintf(stderr, "kestrel synth: %s\n", w.status().message().c_str());
    return 1;
  }
  if (Status st = w.value().write(out); !st.ok()) {
    std::fprintf(stderr, "kestrel synth: %s\n", st.message().c_str());
    return 1;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "kestrel synth: wrote %s (%s, %s, vocab %d) in %.1f s\n", out.c_str(), arch->name,
               dtype_name(o.weight_type), o.n_vocab, s);
  return 0;
}

}  // namespace kestrel::cli
