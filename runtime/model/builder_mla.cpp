// Multi-head latent attention (DeepSeek V2/V3, Kimi K2) in the absorbed form, for prefill and
// decode alike. Per token the cache keeps one row: the RMS-normed latent c [kv_lora] followed by
// the roped key part shared by every head [qk_rope]; V is a view of c. Each head's query is
// absorbed into the latent space, q_c = wk_b_h^T q_nope (so q.k = q_c.c + q_pe.k_pe), and each
// head's attention output (a mix of latents) is expanded by wv_b_h. The cache costs
// (kv_lora + qk_rope) values per token and layer instead of n_head * (qk_nope + qk_rope + v_head),
// and a decode step never decompresses the cache.
#include "model/builder.h"

#include <cmath>

namespace kestrel {

Tensor* Builder::mla_attention(int layer, Tensor* x, const LayerWeights& lw, const AttentionOptions& o) {
  const HParams& h = hp();
  const int64_t T = fb_.n_tokens(), H = h.n_head, rope_d = h.rope.n_rot;
  const int64_t nope = h.head_dim_k_mla - rope_d, kvr = h.kv_lora_rank, vd = h.head_dim_v_mla;
  const size_t f = sizeof(float);

  Tensor* q = lw.wq_a ? linear(lw.wq_b, rms_norm(linear(lw.wq_a, x), lw.q_a_norm))  // [H * (nope + rope), T]
                      : linear(lw.wq, x);
  const size_t q_row = static_cast<size_t>(nope + rope_d) * f;
  Tensor* q_nope = g_.view(q, nope, H, T, q_row, q_row * H, 0);            // [nope, H, T]
  Tensor* q_pe = g_.view(q, rope_d, H, T, q_row, q_row * H, nope * f);     // [rope, H, T]
  q_pe = rope(q_pe, nullptr, o.rope);

  Tensor* kv = linear(lw.wkv_a_mqa, x);                                     // [kvr + rope, T]
  const size_t kv_row = static_cast<size_t>(kvr + rope_d) * f;
  Tensor* latent = g_.view(kv, kvr, 1, T, kv_row, kv_row, 0);              // [kvr, 1, T]
  Tensor* k_pe = g_.view(kv, rope_d, 1, T, kv_row, kv_row, kvr * f);       // [rope, 1, T]
  latent = rms_norm(latent, lw.kv_a_norm);
  k_pe = rope(k_pe, nullptr, o.rope);

  Tensor* q_abs = linear_id(lw.wk_b, q_nope, nullptr);                      // [kvr, H, T]
  Tensor* q_full = concat(q_abs, q_pe);                                     // [kvr + rope, H, T]
  Tensor* k_row = concat(latent, k_pe);                                     // [kvr + rope, 1, T]
  store_kv(kv_.k(layer), g_.reshape(k_row, kvr + rope_d, T));              // V is the latent: no store
  AttentionOptions ao = o;  // scores are q.k of the decompressed head: scale by its size
  if (ao.scale == 0.0f) ao.scale = 1.0f / std::sqrt(static_cast<float>(h.head_dim_k_mla));
  Tensor* mixed = attend(layer, q_full, kvr, ao);                           // [kvr, H, T]
  Tensor* out = linear_id(lw.wv_b, mixed, nullptr);                         // [vd, H, T]
  return linear(lw.wo, g_.reshape(out, vd * H, T), lw.bo);                  // [n_embd, T]
}

}  // namespace kestrel
