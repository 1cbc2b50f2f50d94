#include "model/hparams.h"

namespace kestrel {
namespace {

struct Reader {
  const gguf::File& f;
  const std::string& arch;
  Status st;

  std::string key(const char* k) const { return arch + "." + k; }
  // A required (or defaulted, when dflt >= 0) positive integer; per-layer arrays must be uniform.
  int32_t i32(const char* k, int64_t dflt, int64_t lo = 1, int64_t hi = INT32_MAX) {
    const std::string name = key(k);
    int64_t v = dflt;
    if (const gguf::Value* val = f.find(name)) {
      if (val->type == gguf::ValueType::ARRAY) {
        if (val->array.empty() || !val->array[0].as_int()) return fail(name, "is not an integer array");
        v = *val->array[0].as_int();
        for (const gguf::Value& e : val->array)
          if (e.as_int() != v) return fail(name, "varies per layer (not supported yet)");
      } else if (auto iv = val->as_int()) {
        v = *iv;
      } else {
        return fail(name, "is not an integer");
      }
    } else if (dflt < 0) {
      return fail(name, "is missing");
    }
    if (v < lo || v > hi) return fail(name, "= " + std::to_string(v) + " is out of range");
    return static_cast<int32_t>(v);
  }
  float f32(const char* k, float dflt) {
    const std::string name = key(k);
    const gguf::Value* val = f.find(name);
    if (!val) return dflt;
    auto v = val->as_float();
    if (!v) {
      fail(name, "is not a number");
      return dflt;
    }
    return static_cast<float>(*v);
  }
  int32_t fail(const std::string& name, const std::string& what) {
    if (st.ok()) st = Error(KESTREL_ERR_FORMAT, f.path() + ": metadata '" + name + "' " + what);
    return 0;
  }
};

}  // namespace

Expected<HParams> read_hparams(const gguf::File& f, const std::string& arch) {
  Reader r{f, arch, Status::Ok()};
  HParams h;
  h.arch = arch;
  h.n_embd = r.i32("embedding_length", -1);
  h.n_layer = r.i32("block_count", -1, 1, 4096);
  h.n_ctx_train = r.i32("context_length", 2048);
  h.n_ff = r.i32("feed_forward_length", 0, 0);
  h.n_head = r.i32("attention.head_count", -1, 1, 4096);
  h.n_head_kv = r.i32("attention.head_count_kv", h.n_head, 1, 4096);
  if (!r.st.ok()) return r.st;
  h.head_dim_k = r.i32("attention.key_length", h.n_embd / h.n_head);
  h.head_dim_v = r.i32("attention.value_length", h.head_dim_k);
  h.rms_eps = r.f32("attention.layer_norm_rms_epsilon", 1e-5f);
  h.rope.n_rot = r.i32("rope.dimension_count", h.head_dim_k, 0, h.head_dim_k);
  h.rope.freq_base = r.f32("rope.freq_base", 10000.0f);
  h.rope.n_ctx_orig = r.i32("rope.scaling.original_context_length", h.n_ctx_train);
  h.rope_scaling_type = f.get_string(arch + ".rope.scaling.type").value_or("none");
  h.rope_scaling_factor = r.f32("rope.scaling.factor", 0.0f);
  if (h.rope_scaling_factor == 0.0f) {
    const float linear = r.f32("rope.scale_linear", 0.0f);  // older key
    if (linear > 0) {
      h.rope_scaling_factor = linear;
      h.rope_scaling_type = "linear";
    }
  }
  if (h.rope_scaling_type != "none" && h.rope_scaling_factor > 0)
    h.rope.freq_scale = 1.0f / h.rope_scaling_factor;
  if (!r.st.ok()) return r.st;
  if (h.n_head % h.n_head_kv != 0)
    return Error(KESTREL_ERR_FORMAT, f.path() + ": head_count " + std::to_string(h.n_head) +
                                         " is not a multiple of head_count_kv " + std::to_string(h.n_head_kv));
  if (h.rope.n_rot % 2 != 0)
    return Error(KESTREL_ERR_FORMAT, f.path() + ": rope.dimension_count must be even");
  // The vocabulary size: explicit key, else the token list.
  if (auto v = f.get_int(arch + ".vocab_size")) h.n_vocab = static_cast<int32_t>(*v);
  else if (const auto* toks = f.get_array("tokenizer.ggml.tokens")) h.n_vocab = static_cast<int32_t>(toks->size());
  return h;
}

}  // namespace kestrel
