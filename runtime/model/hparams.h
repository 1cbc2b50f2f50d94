// Hyper-parameters read once from the standard GGUF keys ("<arch>.embedding_length", ...).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"
#include "tensor/graph.h"

namespace kestrel {

struct HParams {
  std::string arch;
  int32_t n_vocab = 0;
  int32_t n_ctx_train = 0;
  int32_t n_embd = 0;
  int32_t n_layer = 0;        // blocks run: block_count less the trailing NextN blocks
  int32_t n_layer_nextn = 0;  // nextn_predict_layers (GLM-4.5's MTP blocks): bound, not run
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim_k = 0;  // attention.key_length, default n_embd / n_head
  int32_t head_dim_v = 0;  // attention.value_length, default head_dim_k
  int32_t n_ff = 0;
  float rms_eps = 1e-5f;
  RopeParams rope;         // n_rot, base, linear/YaRN scaling (mode is set by the architecture)
  std::string rope_scaling_type;  // "none", "linear", "yarn", ...
  float rope_scaling_factor = 0;  // as stored (0 = absent)
  float rope_yarn_log_mul = 0;    // rope.scaling.yarn_log_multiplier as stored (0 = absent)
  float rope_attn_factor = 1;     // rope.scaling.attn_factor as stored (folded into rope.attn_factor)
  int32_t sliding_window = 0;     // attention.sliding_window (which layers use it: the model file)
  int32_t swa_pattern = 0;        // attention.sliding_window_pattern as stored (0 = absent)
  float rope_freq_base_swa = 0;   // rope.freq_base_swa as stored (0 = absent)

  // Mixture of experts (n_expert == 0: dense).
  int32_t n_expert = 0;
  int32_t n_expert_used = 0;
  int32_t n_ff_exp = 0;            // expert_feed_forward_length
  int32_t n_expert_shared = 0;     // expert_shared_count
  int32_t n_ff_shexp = 0;          // expert_shared_feed_forward_length, default n_ff_exp * shared
  int32_t n_layer_dense_lead = 0;  // leading_dense_block_count
  int32_t n_expert_groups = 0;     // expert_group_count (DeepSeek V3), 0/1 = none
  int32_t moe_latent = 0;          // moe_latent_size: the experts' width (LatentMoE), 0 = n_embd
  int32_t n_group_used = 0;        // expert_group_used_count
  int32_t expert_gating = 0;       // expert_gating_func: 0 absent, 1 softmax, 2 sigmoid
  bool expert_weights_norm = false;
  float expert_weights_scale = 0;  // 0 = absent

  // Multi-head latent attention (kv_lora_rank == 0: none).
  int32_t q_lora_rank = 0;     // 0: a plain q projection
  int32_t kv_lora_rank = 0;
  int32_t head_dim_k_mla = 0;  // attention.key_length_mla (qk_nope + qk_rope)
  int32_t head_dim_v_mla = 0;  // attention.value_length_mla

  // Per-layer values where the GGUF stores them as arrays of block_count values (hybrid models:
  // 0 KV heads on a layer without attention, 0 FFN width on a layer without FFN); empty when
  // uniform, and then n_head_kv / n_ff hold for every layer. Otherwise those hold the largest.
  std::vector<int32_t> n_head_kv_layer, n_ff_layer;
  int32_t n_head_kv_of(int l) const { return n_head_kv_layer.empty() ? n_head_kv : n_head_kv_layer[static_cast<size_t>(l)]; }
  int32_t n_ff_of(int l) const { return n_ff_layer.empty() ? n_ff : n_ff_layer[static_cast<size_t>(l)]; }

  // Mamba-2 (ssm_d_inner == 0: none): conv kernel width, inner size (= n_head * head_dim), state
  // size, B/C groups, heads (ssm.time_step_rank).
  int32_t ssm_d_conv = 0, ssm_d_inner = 0, ssm_d_state = 0, ssm_n_group = 0, ssm_n_head = 0;
  int64_t ssm_conv_channels() const { return ssm_d_inner + 2 * int64_t{ssm_n_group} * ssm_d_state; }
  // Per sequence and SSM layer: the conv window's values and the scan's state.
  int64_t ssm_conv_rows() const { return (ssm_d_conv - 1) * ssm_conv_channels(); }
  int64_t ssm_state_rows() const { return int64_t{ssm_d_state} * ssm_d_inner; }

  int64_t k_row() const { return int64_t{head_dim_k} * n_head_kv; }
  int64_t v_row() const { return int64_t{head_dim_v} * n_head_kv; }
};

// Reads and validates the hyper-parameters of architecture `arch` (KESTREL_ERR_FORMAT naming the
// key when one is missing, of the wrong type or out of range).
Expected<HParams> read_hparams(const gguf::File& f, const std::string& arch);

}  // namespace kestrel
