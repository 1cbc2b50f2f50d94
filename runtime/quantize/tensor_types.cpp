// llama.cpp's per-tensor type rules (src/llama-quant.cpp, llama_tensor_get_type and
// tensor_type_fallback), for the file types we write and without an importance matrix. The
// rules are llama.cpp's facts; keeping them in one place keeps our files interchangeable.
#include "quantize/tensor_types.h"

#include <cstdint>
#include <cstdlib>
#include <optional>

namespace kestrel::quant {
namespace {

enum class Category {
  TOKEN_EMBD, ATTENTION_Q, ATTENTION_V, ATTENTION_K, ATTENTION_QKV, ATTENTION_KV_B,
  ATTENTION_OUTPUT, FFN_UP, FFN_GATE, FFN_DOWN, OUTPUT, OTHER,
};

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }
bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

Category category_of(const std::string& name) {
  if (name == "output.weight") return Category::OUTPUT;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Category::TOKEN_EMBD;
  if (contains(name, "attn_qkv.weight")) return Category::ATTENTION_QKV;
  if (contains(name, "attn_kv_b.weight")) return Category::ATTENTION_KV_B;
  if (contains(name, "attn_v.weight")) return Category::ATTENTION_V;
  if (contains(name, "attn_k.weight")) return Category::ATTENTION_K;
  if (contains(name, "attn_q.weight")) return Category::ATTENTION_Q;
  if (contains(name, "attn_output.weight")) return Category::ATTENTION_OUTPUT;
  if (contains(name, "ffn_up")) return Category::FFN_UP;
  if (contains(name, "ffn_gate")) return Category::FFN_GATE;
  if (contains(name, "ffn_down")) return Category::FFN_DOWN;
  return Category::OTHER;
}

bool is_attn_v_like(Category c) {
  return c == Category::ATTENTION_V || c == Category::ATTENTION_QKV || c == Category::ATTENTION_KV_B;
}

// Layers that get more bits in the _M mixes: the first and last eighth, and every third between.
bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// The block number in "blk.N....", -1 if the name has none.
int block_number(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  const char* p = name.c_str() + 4;
  char* end = nullptr;
  const long v = std::strtol(p, &end, 10);
  if (end == p || v < INT32_MIN || v > INT32_MAX) return -1;
  return static_cast<int>(v);
}

std::optional<int64_t> arch_int(const gguf::File& f, const std::string& arch, const char* key) {
  const std::string k = arch + "." + key;
  if (auto v = f.get_int(k)) return v;
  // Per-layer arrays (e.g. head_count on some models): the first layer's value.
  if (const auto* a = f.get_array(k); a && !a->empty()) return (*a)[0].as_int();
  return std::nullopt;
}

int clamp_to_int(int64_t v) { return v < 0 ? 0 : (v > INT32_MAX ? INT32_MAX : static_cast<int>(v)); }


}  // namespace

// llama.cpp's tensor_type_fallback.
DType fallback_for(DType t, int64_t ncols, bool* replaced) {
  if (ncols % dtype_info(t).block_size == 0) return t;
  *replaced = true;
  DType alt = DType::F16;
  switch (t) {
    case DType::Q2_K: case DType::Q3_K: alt = DType::Q4_0; break;
    case DType::Q4_K: alt = DType::Q5_0; break;
    case DType::Q5_K: alt = DType::Q5_1; break;
    case DType::Q6_K: case DType::FP8_E4M3: alt = DType::Q8_0; break;
    default: break;  // llama-quantize gives up here; F16 always fits
  }
  return ncols % dtype_info(alt).block_size == 0 ? alt : DType::F16;
}

ModelFacts read_model_facts(const gguf::File& f) {
  ModelFacts m;
  m.arch = f.get_string("general.architecture").value_or("");
  m.n_layer = clamp_to_int(arch_int(f, m.arch, "block_count").value_or(0));
  m.n_expert = clamp_to_int(arch_int(f, m.arch, "expert_count").value_or(0));
  const int n_head = clamp_to_int(arch_int(f, m.arch, "attention.head_count").value_or(0));
  const int n_head_kv = clamp_to_int(arch_int(f, m.arch, "attention.head_count_kv").value_or(n_head));
  m.n_gqa = n_head_kv > 0 ? n_head / n_head_kv : 0;
  m.is_70b = m.arch == "llama" && m.n_layer == 80 && n_head != n_head_kv;
  for (const gguf::TensorInfo& t : f.tensors()) {
    const Category c = category_of(t.name);
    if (c == Category::OUTPUT) m.tied_embeddings = false;
    if (is_attn_v_like(c)) ++m.n_attention_wv;
  }
  return m;
}

bool tensor_is_quantizable(const gguf::TensorInfo& t) {
  // ggml_n_dims: trailing dimensions of 1 do not count.
  int n_dims = 1;
  for (int d = 3; d >= 1; --d) {
    if (t.ne[d] > 1) {
      n_dims = d + 1;
      break;
    }
  }
  if (n_dims < 2) return false;
  const std::string& n = t.name;
  if (!ends_with(n, "weight")) return false;
  static const char* const kKeep[] = {
      "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
      "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
      "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
      "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
      "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
      "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
      "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd",
      "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook",
      "mm.a.code_embd"};
  for (const char* k : kKeep)
    if (contains(n, k)) return false;
  return n != "position_embd.weight" && n != "token_types.weight";
}

bool tensor_order_less(const std::string& a, const std::string& b) {
  const int la = block_number(a), lb = block_number(b);
  if (la != lb) return la < lb;
  return a < b;
}

Expected<DType> TypeChooser::choose(const gguf::TensorInfo& t, bool* fallback) {
  *fallback = false;
  if (!tensor_is_quantizable(t)) return t.type;
  DType type = default_type_;
  if (!dtype_info(type).quantized) return type;  // F16 / BF16 / F32 files: no mixes, no fallback
  if (!pure_) {
    auto mixed = mix_rule(t, type);
    if (!mixed.ok()) return mixed.status();
    type = mixed.value();
  }
  return fallback_for(type, t.ne[0], fallback);
}

// llama_tensor_get_type_impl for our file types (the IQ1/IQ2/IQ3 mixes are not written here).
Expected<DType> TypeChooser::mix_rule(const gguf::TensorInfo& t, DType type) {
  using F = FileType;
  const F ft = ftype_;
  const Category cat = category_of(t.name);
  const bool falcon = m_.arch == "falcon";

  // The expert layer of a tensor is read from its name: experts need not come in layer order.
  auto layer_of = [&](int counter) -> Expected<int> {
    if (m_.n_expert <= 1) return counter;
    const int l = block_number(t.name);
    if (l < 0 || l >= m_.n_layer)
      return Error(KESTREL_ERR_FORMAT, "tensor '" + t.name + "': cannot tell its layer (block_count " +
                                           std::to_string(m_.n_layer) + ")");
    return l;
  };

  if (ft == F::MOSTLY_FP8) {
    // As FP8 checkpoints do (ModelOpt, vLLM): the logits' matrix stays 16-bit, the rest FP8.
    const bool output = cat == Category::OUTPUT || (m_.tied_embeddings && cat == Category::TOKEN_EMBD);
    return output ? DType::BF16 : type;
  }
  if (cat == Category::OUTPUT || (m_.tied_embeddings && cat == Category::TOKEN_EMBD)) {
    if (ft == F::MOSTLY_MXFP4_MOE || falcon || t.ne[0] % dtype_info(type).block_size != 0)
      return DType::Q8_0;
    return type != DType::Q8_0 ? DType::Q6_K : type;
  }
  if (ft == F::MOSTLY_MXFP4_MOE) {
    // Experts (3-D) to MXFP4, everything else Q8_0 (bailingmoe3's 3-D MLA tensors are not experts).
    const bool ffn = cat == Category::FFN_UP || cat == Category::FFN_GATE || cat == Category::FFN_DOWN;
    return t.ne[2] > 1 && (m_.arch != "bailingmoe3" || ffn) ? DType::MXFP4 : DType::Q8_0;
  }
  if (cat == Category::TOKEN_EMBD) return type;
  if (is_attn_v_like(cat)) {
    const int i = i_attention_wv_, n = m_.n_attention_wv;
    if (ft == F::MOSTLY_Q2_K) type = m_.n_gqa >= 4 ? DType::Q4_K : DType::Q3_K;
    else if (ft == F::MOSTLY_Q3_K_M) type = i < 2 ? DType::Q5_K : DType::Q4_K;
    else if (ft == F::MOSTLY_Q3_K_L) type = DType::Q5_K;
    else if (ft == F::MOSTLY_IQ4_NL && m_.n_gqa >= 4) type = DType::Q5_K;
    else if ((ft == F::MOSTLY_Q4_K_M || ft == F::MOSTLY_Q5_K_M) && use_more_bits(i, n)) type = DType::Q6_K;
    else if (ft == F::MOSTLY_Q4_K_S && i < 4) type = DType::Q5_K;
    // 70B: 8 heads share each attn_v row, so it is small; more bits cost little.
    if (m_.is_70b && (type == DType::Q3_K || type == DType::Q4_K)) type = DType::Q5_K;
    if (m_.n_expert == 8) type = DType::Q8_0;
    ++i_attention_wv_;
    return type;
  }
  if (cat == Category::ATTENTION_K) return m_.n_expert == 8 ? DType::Q8_0 : type;
  if (cat == Category::FFN_DOWN) {
    auto layer = layer_of(i_ffn_down_);
    if (!layer.ok()) return layer.status();
    const int i = layer.value(), n = m_.n_layer;
    if (ft == F::MOSTLY_Q2_K) type = DType::Q3_K;
    else if (ft == F::MOSTLY_Q3_K_M)
      type = i < n / 16 ? DType::Q5_K : (!falcon || use_more_bits(i, n)) ? DType::Q4_K : DType::Q3_K;
    else if (ft == F::MOSTLY_Q3_K_L) type = falcon ? DType::Q4_K : DType::Q5_K;
    else if (ft == F::MOSTLY_Q4_K_M) {
      if (falcon)
        type = i < n / 16 ? DType::Q6_K : use_more_bits(i, n) ? DType::Q5_K : DType::Q4_K;
      else if (use_more_bits(i, n))
        type = DType::Q6_K;
    } else if (i < n / 8 && ft == F::MOSTLY_IQ4_NL) type = DType::Q5_K;
    else if (ft == F::MOSTLY_Q5_K_M && use_more_bits(i, n)) type = DType::Q6_K;
    else if (ft == F::MOSTLY_Q4_K_S && !falcon && i < n / 8) type = DType::Q5_K;
    ++i_ffn_down_;
    return type;
  }
  if (cat == Category::ATTENTION_OUTPUT) {
    if (falcon) return ft == F::MOSTLY_Q3_K_L ? DType::Q4_K : type;
    if (m_.n_expert == 8) {
      const bool bump = ft == F::MOSTLY_Q2_K || ft == F::MOSTLY_Q3_K_S || ft == F::MOSTLY_Q3_K_M ||
                        ft == F::MOSTLY_IQ4_NL || ft == F::MOSTLY_Q4_K_S || ft == F::MOSTLY_Q4_K_M;
      return bump ? DType::Q5_K : type;
    }
    if (ft == F::MOSTLY_Q2_K) return DType::Q3_K;
    if (ft == F::MOSTLY_Q3_K_M) return DType::Q4_K;
    if (ft == F::MOSTLY_Q3_K_L) return DType::Q5_K;
    return type;
  }
  // (llama.cpp's own attn_qkv branch is unreachable: attn_qkv is attn_v-like above.)
  return type;
}

}  // namespace kestrel::quant
