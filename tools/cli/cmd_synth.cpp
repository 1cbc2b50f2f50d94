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
#include "synth_presets.h"

namespace kestrel::cli {
namespace {

using gguf::Value;
using KV = std::vector<std::pair<std::string, Value>>;

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
    print_synth_shapes();
    return 0;
  }
  // PRESET as a word or --preset; --arch NAME alone picks that architecture's tiny shape.
  std::string name = a.str("--preset", a.str("--arch"));
  if (a.positional().size() == 1 && name.empty()) name = a.positional()[0];
  if (name.empty() || a.positional().size() > 1)
    throw UsageError("synth: give one PRESET (kestrel synth --list shows them)");

  SynthOptions o;
  const SynthShape shape = find_synth_shape(name);
  const ArchDef* arch = shape.arch;
  KV kv = shape.kv;
  o.n_vocab = shape.n_vocab;
  o.architecture = shape.architecture;
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
