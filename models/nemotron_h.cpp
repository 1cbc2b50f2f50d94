// Nemotron-H (NVIDIA's hybrid) and Nemotron-H MoE ("nemotron_h_moe": Nemotron 3 Nano, and with
// LatentMoE projections Nemotron 3 Super): every layer is x + mixer(RMSNorm(x)), the mixer one of
// a Mamba-2 block, attention without rope, or an ungated relu^2 FFN. Which one, llama.cpp reads
// from the per-layer arrays: feed_forward_length > 0 is an FFN, else attention.head_count_kv > 0
// is attention, else Mamba-2. In the MoE variant the FFN layers are routed experts (sigmoid
// router with the selection bias, renormalised and scaled; relu^2 experts, in moe_latent_size
// between ffn_latent_down and _up when the file has it) plus a relu^2 shared expert. The Mamba-2
// layers keep a recurrent state per sequence instead of KV cells (kv/recurrent_state.h). Untied
// output.
#include <cmath>

#include "model/bind.h"
#include "model/builder.h"

namespace kestrel {
namespace {

enum class Kind { MAMBA, ATTENTION, FFN };

Kind kind_of(const HParams& h, int l) {
  if (h.n_ff_of(l) > 0) return Kind::FFN;
  return h.n_head_kv_of(l) > 0 ? Kind::ATTENTION : Kind::MAMBA;
}

// The SSM ops read these as F32 (llama-quantize keeps them so).
Expected<const Tensor*> require_f32(const Model& m, const char* name, std::vector<int64_t> ne, int l) {
  auto t = m.require(name, std::move(ne), l);
  if (t.ok() && t.value()->type != DType::F32)
    return Error(KESTREL_ERR_UNSUPPORTED, m.file().path() + ": layer " + std::to_string(l) + "'s " + name +
                                              " must be F32, not " + dtype_name(t.value()->type));
  return t;
}

Status bind_mamba(const Model& m, LayerWeights& lw, int l) {
  const HParams& h = m.hparams();
  const int64_t E = h.n_embd, di = h.ssm_d_inner, nh = h.ssm_n_head, ng = h.ssm_n_group, C = h.ssm_conv_channels();
  KS_TRY_BIND(lw.ssm_in, m.require("blk.%d.ssm_in.weight", {E, di + C + nh}, l));
  KS_TRY_BIND(lw.ssm_conv1d, require_f32(m, "blk.%d.ssm_conv1d.weight", {h.ssm_d_conv, C}, l));
  KS_TRY_BIND(lw.ssm_conv1d_b, require_f32(m, "blk.%d.ssm_conv1d.bias", {C}, l));
  KS_TRY_BIND(lw.ssm_dt_b, require_f32(m, "blk.%d.ssm_dt.bias", {nh}, l));
  KS_TRY_BIND(lw.ssm_a, require_f32(m, "blk.%d.ssm_a", {1, nh}, l));
  KS_TRY_BIND(lw.ssm_d, require_f32(m, "blk.%d.ssm_d", {1, nh}, l));
  KS_TRY_BIND(lw.ssm_norm, require_f32(m, "blk.%d.ssm_norm.weight", {di / ng, ng}, l));
  KS_TRY_BIND(lw.ssm_out, m.require("blk.%d.ssm_out.weight", {di, E}, l));
  return Status::Ok();
}

Status bind(const Model& m, ModelWeights& w) {
  const HParams& h = m.hparams();
  const std::string& path = m.file().path();
  if (h.ssm_d_inner <= 0 || h.ssm_d_conv <= 0 || h.ssm_d_state <= 0 || h.ssm_n_group <= 0 || h.ssm_n_head <= 0 ||
      h.ssm_d_inner % h.ssm_n_head != 0 || h.ssm_n_head % h.ssm_n_group != 0 || h.ssm_d_inner % h.ssm_n_group != 0)
    return Error(KESTREL_ERR_FORMAT, path + ": nemotron_h needs ssm.inner_size, conv_kernel, state_size, group_count and "
                                            "time_step_rank, with heads and groups dividing the inner size");
  KS_RETURN_IF_ERROR(bind_embeddings(m, w));
  w.layers.resize(h.n_layer);
  for (int l = 0; l < h.n_layer; ++l) {
    LayerWeights& lw = w.layers[l];
    KS_TRY_BIND(lw.attn_norm, m.require("blk.%d.attn_norm.weight", {h.n_embd}, l));
    switch (kind_of(h, l)) {
      case Kind::MAMBA: KS_RETURN_IF_ERROR(bind_mamba(m, lw, l)); break;
      case Kind::ATTENTION:
        if (h.n_head_kv_of(l) != h.n_head_kv)  // the attention block reads one KV head count
          return Error(KESTREL_ERR_UNSUPPORTED, path + ": attention layers with different head_count_kv");
        KS_RETURN_IF_ERROR(bind_attention(m, lw, l, {}));
        break;
      case Kind::FFN:
        if (h.n_expert > 0) {
          KS_RETURN_IF_ERROR(bind_experts(m, lw, l, {.n_ff = h.n_ff_exp > 0 ? h.n_ff_exp : h.n_ff_of(l),
                                                     .selection_bias = true, .n_ff_shared = h.n_ff_shexp,
                                                     .gated = false, .n_latent = h.moe_latent}));
          break;
        }
        KS_TRY_BIND(lw.ffn_up, m.require("blk.%d.ffn_up.weight", {h.n_embd, h.n_ff_of(l)}, l));
        KS_TRY_BIND(lw.ffn_down, m.require("blk.%d.ffn_down.weight", {h.n_ff_of(l), h.n_embd}, l));
        break;
    }
  }
  return Status::Ok();
}

Tensor* forward(Builder& b) {
  const HParams& h = b.hp();
  AttentionOptions ao;
  ao.no_rope = true;
  MoeOptions moe = moe_options_from(h);
  moe.gating = ExpertGating::SIGMOID;  // llama.cpp's, whatever expert_gating_func says
  moe.activation = ExpertActivation::RELU_SQR;
  Tensor* x = b.embed(b.w().tok_embd);  // [n_embd, T]
  for (int l = 0; l < h.n_layer; ++l) {
    const LayerWeights& lw = b.w().layers[l];
    Tensor* n = b.rms_norm(x, lw.attn_norm);
    const Kind kind = kind_of(h, l);
    Tensor* out = kind == Kind::MAMBA       ? b.mamba2(l, n, lw)
                  : kind == Kind::ATTENTION ? b.self_attention(l, n, lw, ao)
                  : lw.ffn_gate_inp         ? b.moe_ffn(n, lw, moe)
                                            : b.relu2_ffn(n, lw.ffn_up, lw.ffn_down);  // [n_embd, T]
    if (l == h.n_layer - 1) {
      out = b.select_outputs(out);
      x = b.select_outputs(x);
    }
    x = b.add(out, x);
  }
  return b.output_logits(x);  // [n_vocab, n_outputs]
}

// K/V rows on attention layers only; the Mamba-2 layers' conv window and scan state instead.
KvLayout kv_layout(const HParams& h) {
  KvLayout k;
  for (int l = 0; l < h.n_layer; ++l) {
    const Kind kind = kind_of(h, l);
    const bool attn = kind == Kind::ATTENTION, ssm = kind == Kind::MAMBA;
    k.k_rows.push_back(attn ? int64_t{h.head_dim_k} * h.n_head_kv_of(l) : 0);
    k.v_rows.push_back(attn ? int64_t{h.head_dim_v} * h.n_head_kv_of(l) : 0);
    k.conv_rows.push_back(ssm ? h.ssm_conv_rows() : 0);
    k.ssm_rows.push_back(ssm ? h.ssm_state_rows() : 0);
  }
  return k;
}

using gguf::Value;
const std::vector<std::pair<std::string, Value>> kTiny = {
    {"context_length", Value::make_u32(256)},      {"embedding_length", Value::make_u32(64)},
    {"block_count", Value::make_u32(5)},           {"feed_forward_length", Value::make_i32_array({0, 96, 0, 0, 0})},
    {"attention.head_count", Value::make_u32(4)},  {"attention.head_count_kv", Value::make_i32_array({0, 0, 2, 0, 0})},
    {"attention.key_length", Value::make_u32(16)}, {"attention.value_length", Value::make_u32(16)},
    {"ssm.conv_kernel", Value::make_u32(4)},       {"ssm.state_size", Value::make_u32(32)},
    {"ssm.group_count", Value::make_u32(2)},       {"ssm.inner_size", Value::make_u32(128)},
    {"ssm.time_step_rank", Value::make_u32(8)},    {"attention.layer_norm_rms_epsilon", Value::make_f32(1e-5f)},
};
// M E * M E: routed experts in a latent width, and a shared expert.
const std::vector<std::pair<std::string, Value>> kTinyMoe = {
    {"context_length", Value::make_u32(256)},      {"embedding_length", Value::make_u32(64)},
    {"block_count", Value::make_u32(5)},           {"feed_forward_length", Value::make_i32_array({0, 64, 0, 0, 64})},
    {"attention.head_count", Value::make_u32(4)},  {"attention.head_count_kv", Value::make_i32_array({0, 0, 2, 0, 0})},
    {"attention.key_length", Value::make_u32(16)}, {"attention.value_length", Value::make_u32(16)},
    {"ssm.conv_kernel", Value::make_u32(4)},       {"ssm.state_size", Value::make_u32(32)},
    {"ssm.group_count", Value::make_u32(2)},       {"ssm.inner_size", Value::make_u32(128)},
    {"ssm.time_step_rank", Value::make_u32(8)},    {"expert_count", Value::make_u32(8)},
    {"expert_used_count", Value::make_u32(3)},     {"expert_feed_forward_length", Value::make_u32(64)},
    {"expert_shared_count", Value::make_u32(1)},   {"expert_shared_feed_forward_length", Value::make_u32(96)},
    {"moe_latent_size", Value::make_u32(32)},      {"expert_weights_norm", Value::make_bool(true)},
    {"expert_weights_scale", Value::make_f32(2.5f)}, {"attention.layer_norm_rms_epsilon", Value::make_f32(1e-5f)},
};

}  // namespace
}  // namespace kestrel

KESTREL_REGISTER_ARCH(nemotron_h) {
  static const kestrel::ArchDef def{.name = "nemotron_h", .aliases = {"nemotron_h_moe"}, .bind = kestrel::bind,
                                    .forward = kestrel::forward, .kv_layout = kestrel::kv_layout,
                                    .tiny = {{"nemotron_h", kestrel::kTiny}, {"nemotron_h_moe", kestrel::kTinyMoe}}};
  return def;
}
