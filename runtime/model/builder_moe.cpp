// The mixture-of-experts block: a ROUTER node picks each token's experts and weights, three
// MATMUL_ID nodes run the chosen experts (grouped by expert inside the backend), MOE_SUM
// combines them; a shared expert, when the layer has one, is added unweighted.
#include "model/builder.h"

#include <vector>

namespace kestrel {

MoeOptions moe_options_from(const HParams& h) {
  MoeOptions o;
  o.gating = h.expert_gating == 2 ? ExpertGating::SIGMOID : ExpertGating::SOFTMAX;
  o.norm_weights = h.expert_weights_norm;
  o.weights_scale = h.expert_weights_scale;
  o.n_groups = h.n_expert_groups;
  o.n_groups_used = h.n_group_used;
  return o;
}

Tensor* Builder::linear_id(const Tensor* w, Tensor* x, Tensor* ids, const Tensor* bias) {
  const int64_t slots = ids ? ids->ne[0] : x->ne[1];
  Tensor* y = g_.intermediate(DType::F32, w->ne[1], slots, x->ne[2]);  // [N, slots, T]
  g_.add(Op::MATMUL_ID, y, weight(w), x, ids, bias ? weight(bias) : nullptr);
  const Tensor* s = m_.second_scale(w);  // [N, n_matrices]: each slot's row, by its matrix
  if (!s) return y;
  const int64_t T = x->ne[2], n = slots * T;
  Tensor* which = nullptr;
  if (ids) {
    which = g_.reshape(ids, n);
  } else {
    std::vector<int32_t> per_slot(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) per_slot[static_cast<size_t>(i)] = static_cast<int32_t>(i % slots);
    which = input_i32(per_slot);
  }
  Tensor* rows = g_.intermediate(DType::F32, w->ne[1], n);
  g_.add(Op::GET_ROWS, rows, weight(s), which);
  Tensor* z = g_.intermediate(DType::F32, w->ne[1], n);
  g_.add(Op::MUL, z, g_.reshape(y, w->ne[1], n), rows);
  return g_.reshape(z, w->ne[1], slots, T);
}

Tensor* Builder::moe_ffn(Tensor* x, const LayerWeights& lw, const MoeOptions& o) {
  const int64_t T = x->ne[1];
  const int32_t k = hp().n_expert_used;
  Tensor* logits = linear(lw.ffn_gate_inp, x, lw.ffn_gate_inp_b);  // [n_expert, T]
  Tensor* weights = g_.intermediate(DType::F32, k, T);             // [n_used, T]
  Tensor* ids = g_.intermediate(DType::I32, k, T);                 // [n_used, T]
  g_.add(Op::ROUTER, weights, logits, lw.exp_probs_b ? weight(lw.exp_probs_b) : nullptr, ids).params =
      RouterParams{.gating = static_cast<int32_t>(o.gating),
                   .n_used = k,
                   .n_groups = o.n_groups,
                   .n_groups_used = o.n_groups_used,
                   .normalize = o.norm_weights,
                   .weights_scale = o.weights_scale};

  Tensor* xe = lw.ffn_latent_down ? linear(lw.ffn_latent_down, x) : x;  // [E, T]: n_embd or the latent
  const int64_t E = xe->ne[0];
  Tensor* x1 = g_.reshape(xe, E, 1, T);                                    // [E, 1, T]
  Tensor* up = linear_id(lw.ffn_up_exps, x1, ids, lw.ffn_up_exps_b);       // [n_ff_exp, n_used, T]
  Tensor* act = g_.intermediate(DType::F32, up->ne[0], k, T);
  Tensor* gate = o.activation == ExpertActivation::RELU_SQR ? nullptr
                                                            : linear_id(lw.ffn_gate_exps, x1, ids, lw.ffn_gate_exps_b);
  if (o.activation == ExpertActivation::RELU_SQR) {
    g_.add(Op::RELU_SQR, act, up);
  } else if (o.activation == ExpertActivation::SWIGLU_OAI) {
    g_.add(Op::SWIGLU_OAI, act, gate, up).params = SwigluOaiParams{.alpha = o.oai_alpha, .limit = o.oai_limit};
  } else {
    g_.add(Op::SWIGLU, act, gate, up);
  }
  Tensor* down = linear_id(lw.ffn_down_exps, act, ids, lw.ffn_down_exps_b);  // [E, n_used, T]
  Tensor* out = g_.intermediate(DType::F32, E, T);                          // [E, T]
  g_.add(Op::MOE_SUM, out, down, weights);
  if (lw.ffn_latent_up) out = linear(lw.ffn_latent_up, out);                // [n_embd, T]
  if (lw.ffn_up_shexp)
    out = add(out, lw.ffn_gate_shexp ? swiglu_ffn(x, lw.ffn_gate_shexp, lw.ffn_up_shexp, lw.ffn_down_shexp)
                                     : relu2_ffn(x, lw.ffn_up_shexp, lw.ffn_down_shexp));
  return out;
}

}  // namespace kestrel
