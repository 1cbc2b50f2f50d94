#include "model/hparams.h"

#include <algorithm>
#include <cmath>

#include "core/limits.h"

namespace kestrel {
namespace {

struct Reader {
  const gguf::File& f;
  const std::string& arch;
  Status st;

  std::string key(const char* k) const { return arch + "." + k; }
  // A required (or defaulted, when dflt >= 0) positive integer. A per-layer array must be
  // uniform, unless per_layer is given: then an array that varies, or is all 0, must hold
  // n_layers values in [0, hi], which go there, and the largest is the value.
  int32_t i32(const char* k, int64_t dflt, int64_t lo = 1, int64_t hi = INT32_MAX,
              std::vector<int32_t>* per_layer = nullptr, int32_t n_layers = 0) {
    const std::string name = key(k);
    int64_t v = dflt;
    if (const gguf::Value* val = f.find(name)) {
      if (val->type == gguf::ValueType::ARRAY) {
        if (val->array.empty() || !val->array[0].as_int()) return fail(name, "is not an integer array");
        v = *val->array[0].as_int();
        bool uniform = true;
        for (const gguf::Value& e : val->array) uniform &= e.as_int() == v;
        if (!uniform && !per_layer) return fail(name, "varies per layer (not supported by this architecture)");
        if (per_layer && (!uniform || v == 0)) {  // all 0: no layer has one (a hybrid's kinds)
          if (val->array.size() != static_cast<size_t>(n_layers))
            return fail(name, "has " + std::to_string(val->array.size()) + " values for " + std::to_string(n_layers) + " layers");
          for (const gguf::Value& e : val->array) {
            const auto iv = e.as_int();
            if (!iv || *iv < 0 || *iv > hi) return fail(name, "holds a value that is not an integer in [0, " + std::to_string(hi) + "]");
            per_layer->push_back(static_cast<int32_t>(*iv));
            v = std::max<int64_t>(v, *iv);
          }
        }
      } else if (auto iv = val->as_int()) {
        v = *iv;
      } else {
        return fail(name, "is not an integer");
      }
    } else if (dflt < 0) {
      return fail(name, "is missing");
    }
    if (v < lo || v > hi)
      return fail(name, "= " + std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
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
  bool flag(const char* k, bool dflt) {
    const std::string name = key(k);
    if (!f.find(name)) return dflt;
    auto v = f.get_bool(name);
    if (!v) fail(name, "is not a boolean");
    return v.value_or(dflt);
  }
  int32_t fail(const std::string& name, const std::string& what) {
    if (st.ok()) st = Error(KESTREL_ERR_FORMAT, f.path() + ": metadata '" + name + "' " + what);
    return 0;
  }
};

// YaRN as llama.cpp sets it up: extrapolation mix 1 for "yarn" unless stored, and an attention
// factor that pre-cancels the magnitude correction the rope kernel applies (so the net gain is
// get_mscale(factor) times rope.scaling.attn_factor). Architectures with extra rules (DeepSeek's
// yarn_log_multiplier) adjust the RopeParams in their model file.
void read_yarn(Reader& r, HParams& h) {
  h.rope_yarn_log_mul = r.f32("rope.scaling.yarn_log_multiplier", 0.0f);
  h.rope.beta_fast = r.f32("rope.scaling.yarn_beta_fast", 32.0f);
  h.rope.beta_slow = r.f32("rope.scaling.yarn_beta_slow", 1.0f);
  h.rope.ext_factor = r.f32("rope.scaling.yarn_ext_factor", -1.0f);
  if (h.rope.ext_factor < 0.0f) h.rope.ext_factor = h.rope_scaling_type == "yarn" ? 1.0f : 0.0f;
  float attn = 1.0f;
  if (h.rope.ext_factor != 0.0f && h.rope.freq_scale > 0.0f) {
    const float factor = 1.0f / h.rope.freq_scale;
    attn = factor <= 1.0f ? 1.0f : 0.1f * logf(factor) + 1.0f;
    attn *= 1.0f / (1.0f + 0.1f * logf(factor));
  }
  h.rope_attn_factor = r.f32("rope.scaling.attn_factor", 1.0f);
  h.rope.attn_factor = attn * h.rope_attn_factor;
}

Status read_moe_mla(Reader& r, HParams& h) {
  constexpr int64_t kMaxExperts = 4096;
  h.n_expert = r.i32("expert_count", 0, 0, kMaxExperts);
  h.n_expert_used = r.i32("expert_used_count", 0, 0, kMaxExperts);
  h.n_ff_exp = r.i32("expert_feed_forward_length", 0, 0);
  h.n_expert_shared = r.i32("expert_shared_count", 0, 0, kMaxExperts);
  h.n_ff_shexp = r.i32("expert_shared_feed_forward_length", int64_t{h.n_ff_exp} * h.n_expert_shared, 0);
  h.n_layer_dense_lead = r.i32("leading_dense_block_count", 0, 0, h.n_layer);
  h.n_expert_groups = r.i32("expert_group_count", 0, 0, kMaxExperts);
  h.moe_latent = r.i32("moe_latent_size", 0, 0);
  h.n_group_used = r.i32("expert_group_used_count", 0, 0, kMaxExperts);
  h.expert_gating = r.i32("expert_gating_func", 0, 0, 3);
  h.expert_weights_norm = r.flag("expert_weights_norm", false);
  h.expert_weights_scale = r.f32("expert_weights_scale", 0.0f);
  h.q_lora_rank = r.i32("attention.q_lora_rank", 0, 0);
  h.kv_lora_rank = r.i32("attention.kv_lora_rank", 0, 0);
  h.head_dim_k_mla = r.i32("attention.key_length_mla", 0, 0);
  h.head_dim_v_mla = r.i32("attention.value_length_mla", 0, 0);
  if (!r.st.ok()) return r.st;
  const std::string p = r.f.path() + ": metadata '" + h.arch + ".";
  if (h.n_expert > 0 && (h.n_expert_used < 1 || h.n_expert_used > h.n_expert))
    return Error(KESTREL_ERR_FORMAT, p + "expert_used_count' = " + std::to_string(h.n_expert_used) +
                                         " must be in [1, expert_count = " + std::to_string(h.n_expert) + "]");
  if (h.n_expert_groups > 1 && (h.n_expert % h.n_expert_groups != 0 || h.n_group_used < 1 ||
                                h.n_group_used > h.n_expert_groups ||
                                h.n_expert_used > h.n_group_used * (h.n_expert / h.n_expert_groups)))
    return Error(KESTREL_ERR_FORMAT, p + "expert_group_count' = " + std::to_string(h.n_expert_groups) +
                                         " does not divide the experts or leaves fewer than expert_used_count");
  return Status::Ok();
}

}  // namespace

Expected<HParams> read_hparams(const gguf::File& f, const std::string& arch) {
  Reader r{f, arch, Status::Ok()};
  HParams h;
  h.arch = arch;
  h.n_embd = r.i32("embedding_length", -1);
  h.n_layer = r.i32("block_count", -1, 1, 4096);
  // block_count counts the multi-token-prediction blocks that follow the model's own (GLM-4.5).
  if (r.st.ok()) {
    h.n_layer_nextn = r.i32("nextn_predict_layers", 0, 0, h.n_layer - 1);
    h.n_layer -= h.n_layer_nextn;
  }
  h.n_ctx_train = r.i32("context_length", 2048, 1, limits::kMaxCtx);  // the default n_ctx: capped as one
  const int32_t n_blocks = h.n_layer + h.n_layer_nextn;
  h.n_ff = r.i32("feed_forward_length", 0, 0, INT32_MAX, &h.n_ff_layer, n_blocks);
  h.n_head = r.i32("attention.head_count", -1, 1, 4096);
  // 0 only as a per-layer array's largest value: a hybrid without attention layers (all Mamba).
  h.n_head_kv = r.i32("attention.head_count_kv", h.n_head, 0, 4096, &h.n_head_kv_layer, n_blocks);
  if (r.st.ok() && h.n_head_kv == 0 && h.n_head_kv_layer.empty())
    return Error(KESTREL_ERR_FORMAT, f.path() + ": metadata '" + arch + ".attention.head_count_kv' = 0 is out of range [1, 4096]");
  if (!r.st.ok()) return r.st;
  for (int32_t kv : h.n_head_kv_layer)
    if (kv > 0 && h.n_head % kv != 0)
      return Error(KESTREL_ERR_FORMAT, f.path() + ": head_count " + std::to_string(h.n_head) +
                                           " is not a multiple of a layer's head_count_kv " + std::to_string(kv));
  h.ssm_d_conv = r.i32("ssm.conv_kernel", 0, 0, 64);
  h.ssm_d_inner = r.i32("ssm.inner_size", 0, 0);
  h.ssm_d_state = r.i32("ssm.state_size", 0, 0, 4096);
  h.ssm_n_group = r.i32("ssm.group_count", 0, 0, 4096);
  h.ssm_n_head = r.i32("ssm.time_step_rank", 0, 0, 65536);
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
  read_yarn(r, h);
  h.sliding_window = r.i32("attention.sliding_window", 0, 0);
  h.swa_pattern = r.i32("attention.sliding_window_pattern", 0, 0, 4096);
  h.rope_freq_base_swa = r.f32("rope.freq_base_swa", 0.0f);
  KS_RETURN_IF_ERROR(read_moe_mla(r, h));
  if (!r.st.ok()) return r.st;
  if (h.n_head_kv > 0 && h.n_head % h.n_head_kv != 0)
    return Error(KESTREL_ERR_FORMAT, f.path() + ": head_count " + std::to_string(h.n_head) +
                                         " is not a multiple of head_count_kv " + std::to_string(h.n_head_kv));
  if (h.rope.n_rot % 2 != 0)
    return Error(KESTREL_ERR_FORMAT, f.path() + ": rope.dimension_count must be even");
  // The vocabulary size: explicit key, else the token list (whose length the tokenizer checks).
  if (f.find(arch + ".vocab_size")) h.n_vocab = r.i32("vocab_size", -1, 1, limits::kMaxVocab);
  else if (const auto* toks = f.get_array("tokenizer.ggml.tokens"))  // a list over the cap fails in read_vocab
    h.n_vocab = static_cast<int32_t>(std::min<size_t>(toks->size(), INT32_MAX));
  if (!r.st.ok()) return r.st;
  return h;
}

}  // namespace kestrel
