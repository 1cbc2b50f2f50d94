// Mamba-2 blocks of hybrid models (Nemotron-H): the mixer over the recurrent state the KV cache
// keeps per sequence (kv/recurrent_state.h), and the ungated relu^2 FFN beside it.
#include "model/builder.h"

namespace kestrel {

Tensor* Builder::mamba2(int layer, Tensor* x, const LayerWeights& lw) {
  const HParams& h = hp();
  const int64_t T = fb_.n_tokens(), d_inner = h.ssm_d_inner, ng = h.ssm_n_group;
  const RecurrentState& rs = *kv_.recurrent();
  const SsmParams p{.d_inner = h.ssm_d_inner, .n_head = h.ssm_n_head, .n_group = h.ssm_n_group, .d_state = h.ssm_d_state};
  Tensor* zx = linear(lw.ssm_in, x);  // [z | x B C | dt, T]
  Tensor* xbc = g_.intermediate(DType::F32, h.ssm_conv_channels(), T);
  g_.add(Op::SSM_CONV, xbc, zx, weight(lw.ssm_conv1d), weight(lw.ssm_conv1d_b), g_.external(rs.conv(layer)),
         attention_batch())
      .params = p;
  Tensor* y = g_.intermediate(DType::F32, d_inner, T);  // (C.s + D x) * silu(z)
  g_.add(Op::SSM_SCAN, y, xbc, zx, weight(lw.ssm_a), weight(lw.ssm_d), weight(lw.ssm_dt_b), g_.external(rs.ssm(layer)),
         attention_batch())
      .params = p;
  // RMSNorm over each group of d_inner / n_group values, then the gain [d_inner / n_group, n_group].
  Tensor* normed = g_.reshape(rms_norm(g_.reshape(y, d_inner / ng, ng * T), nullptr), d_inner, T);
  Tensor* gained = g_.intermediate(DType::F32, d_inner, T);
  g_.add(Op::MUL, gained, normed, g_.reshape(weight(lw.ssm_norm), d_inner));
  return linear(lw.ssm_out, gained);  // [n_embd, T]
}

Tensor* Builder::relu2_ffn(Tensor* x, const Tensor* up, const Tensor* down) {
  Tensor* u = linear(up, x);
  Tensor* act = g_.intermediate(DType::F32, u->ne[0], u->ne[1]);
  g_.add(Op::RELU_SQR, act, u);
  return linear(down, act);
}

}  // namespace kestrel
