#include "model/synth.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/model.h"
#include "quantize/quantize.h"

namespace kestrel {
namespace {

void add_metadata(gguf::Writer& w, const ArchDef& arch, const TinyConfig& config, const SynthOptions& o) {
  using gguf::Value;
  const std::string name = o.architecture ? o.architecture : arch.name;
  w.set("general.architecture", Value::make_string(name));
  w.set("general.name", Value::make_string(std::string("kestrel-synth-") + config.name));
  for (const auto& [key, value] : config.kv) w.set(name + "." + key, value);
  if (o.vocab_from) {
    for (const gguf::KeyValue& kv : o.vocab_from->metadata())
      if (kv.key.rfind("tokenizer.", 0) == 0) w.set(kv.key, kv.value);
    return;
  }
  // A SentencePiece-style vocabulary: <unk>, <s>, </s>, then plain pieces.
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int32_t i = 3; i < o.n_vocab; ++i) {
    std::string piece = "t";  // (appending, not operator+: GCC 12 warns falsely on that)
    piece += std::to_string(i);
    tokens.push_back(piece);
    types.push_back(1);
  }
  w.set("tokenizer.ggml.model", Value::make_string("llama"));
  w.set("tokenizer.ggml.tokens", Value::make_string_array(tokens));
  w.set("tokenizer.ggml.scores", Value::make_f32_array(std::vector<float>(tokens.size(), 0.0f)));
  w.set("tokenizer.ggml.token_type", Value::make_i32_array(types));
}

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// Values with the scale a trained model's tensor of that role has, so activations stay O(1):
// gains near 1, small biases, matrices scaled by 1/sqrt(row length); routers a little sharper
// so expert choices are not near-ties.
float value_scale(const std::string& name, const std::vector<int64_t>& ne, float* offset) {
  const bool around_one = contains(name, "norm") || contains(name, "rope_freqs");
  *offset = around_one ? 1.0f : 0.0f;
  if (around_one) return 0.1f;
  if (contains(name, "ssm_a")) {  // Mamba's A is negative (-exp(A_log)): the state decays
    *offset = -1.0f;
    return 0.5f;
  }
  if (contains(name, "token_embd")) return 1.0f;
  if (contains(name, "sinks")) return 1.0f;
  if (ne.size() == 1 || contains(name, ".bias")) return 0.1f;
  const float k = static_cast<float>(ne[0]);
  return (contains(name, "gate_inp") ? 4.0f : 1.7f) / std::sqrt(k);
}

DType tensor_type(const std::string& name, const std::vector<int64_t>& ne, DType want) {
  if (ne.size() == 1 || contains(name, "gate_inp") || contains(name, ".bias")) return DType::F32;
  // Mamba's small tensors stay F32, as llama-quantize leaves them (the SSM ops read them so).
  if (contains(name, "ssm_conv1d") || contains(name, "ssm_a") || contains(name, "ssm_d") || contains(name, "ssm_norm"))
    return DType::F32;
  if (!dtype_info(want).from_float) return DType::F16;
  bool replaced = false;
  return quant::fallback_for(want, ne[0], &replaced);
}

// splitmix64: fast enough for billions of values (a real model's shape), and reproducible.
struct Rng {
  uint64_t s;
  float uniform() {  // [-1, 1)
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }
};

}  // namespace

namespace {

// The metadata of a synthetic model and the tensor table it binds (hp: the hyper-parameters).
Expected<Model::TensorTable> synth_table(gguf::Writer& w, const ArchDef& arch, const TinyConfig& config,
                                         const SynthOptions& o, HParams* hp) {
  if (o.n_vocab < 4 && !o.vocab_from) return Error(KESTREL_ERR_INVALID_ARGUMENT, "synth: n_vocab must be >= 4");
  add_metadata(w, arch, config, o);
  auto meta = gguf::File::from_bytes(w.to_bytes(), std::string("<synth ") + config.name + ">");
  if (!meta.ok()) return meta.status();
  return Model::tensor_table(std::move(meta.value()), hp);
}

}  // namespace

Expected<ModelShape> synth_shape(const ArchDef& arch, const TinyConfig& config, const SynthOptions& o) {
  gguf::Writer w;
  HParams hp;
  auto table = synth_table(w, arch, config, o, &hp);
  if (!table.ok()) return table.status();
  std::vector<ShapeTensor> tensors;
  for (const auto& [name, ne] : table.value()) {
    const DType type = tensor_type(name, ne, o.weight_type);
    int64_t rows = 1;
    for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
    tensors.push_back({name, type, ne, dtype_row_size(type, ne[0]) * static_cast<uint64_t>(rows)});
  }
  return finish_shape(arch, std::move(hp), std::move(tensors));
}

Expected<gguf::Writer> synth_model(const ArchDef& arch, const TinyConfig& config, const SynthOptions& o) {
  gguf::Writer w;
  auto table = synth_table(w, arch, config, o, nullptr);
  if (!table.ok()) return table.status();
  Rng rng{o.seed * 0x2545f4914f6cdd1dull + 1};
  std::vector<float> chunk;
  std::vector<uint8_t> data;
  for (const auto& [name, ne] : table.value()) {
    float offset = 0.0f;
    const float scale = value_scale(name, ne, &offset);
    const DType type = tensor_type(name, ne, o.weight_type);
    int64_t rows = 1;
    for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
    const size_t row_bytes = dtype_row_size(type, ne[0]);
    data.resize(row_bytes * static_cast<size_t>(rows));
    // Rows in chunks of about 16 MiB of F32, converted on o.n_threads threads.
    const int64_t per_chunk = std::max<int64_t>(1, (int64_t{4} << 20) / ne[0]);
    for (int64_t r0 = 0; r0 < rows; r0 += per_chunk) {
      const int64_t n = std::min(per_chunk, rows - r0);
      chunk.resize(static_cast<size_t>(n * ne[0]));
      for (float& v : chunk) v = offset + scale * rng.uniform();
      KS_RETURN_IF_ERROR(quant::convert_rows(DType::F32, chunk.data(), type, data.data() + r0 * row_bytes, n, ne[0],
                                             o.n_threads));
    }
    KS_RETURN_IF_ERROR(w.add_tensor(name, type, ne, data.data(), data.size()));
  }
  return w;
}

}  // namespace kestrel
