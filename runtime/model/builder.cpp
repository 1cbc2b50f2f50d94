#include "model/builder.h"

#include <cmath>
#include <cstring>

namespace kestrel {

Builder::Builder(Graph& g, const Model& m, const KvCache& kv, const ForwardBatch& fb)
    : g_(g), m_(m), kv_(kv), fb_(fb) {
  positions_ = input_i32(fb.positions);
}

Tensor* Builder::input_i32(std::span<const int32_t> data) {
  Tensor* t = g_.input(DType::I32, static_cast<int64_t>(data.size()));
  inputs_.resize(g_.input_bytes());
  if (!data.empty()) std::memcpy(inputs_.data() + g_.input_offset(t), data.data(), data.size_bytes());
  return t;
}

Tensor* Builder::weight(const Tensor* w) {
  auto it = wrapped_.find(w);
  if (it != wrapped_.end()) return it->second;
  Tensor* t = g_.external(*w);
  wrapped_.emplace(w, t);
  return t;
}

Tensor* Builder::embed(const Tensor* table) {
  Tensor* ids = input_i32(fb_.tokens);
  Tensor* out = g_.intermediate(DType::F32, table->ne[0], fb_.n_tokens());
  g_.add(Op::GET_ROWS, out, weight(table), ids);
  return out;
}

Tensor* Builder::rms_norm(Tensor* x, const Tensor* gain) {
  Tensor* y = g_.intermediate(DType::F32, x->ne[0], x->ne[1], x->ne[2], x->ne[3]);
  g_.add(Op::RMS_NORM, y, x).param<NormParams>().eps = hp().rms_eps;
  if (!gain) return y;
  Tensor* z = g_.intermediate(DType::F32, x->ne[0], x->ne[1], x->ne[2], x->ne[3]);
  g_.add(Op::MUL, z, y, weight(gain));
  return z;
}

Tensor* Builder::linear(const Tensor* w, Tensor* x, const Tensor* bias) {
  Tensor* y = g_.intermediate(DType::F32, w->ne[1], x->ne[1]);
  g_.add(Op::MATMUL, y, weight(w), x);
  if (const Tensor* s = m_.second_scale(w)) {  // before the bias, as llama.cpp applies it
    Tensor* z = g_.intermediate(DType::F32, w->ne[1], x->ne[1]);
    g_.add(Op::MUL, z, y, weight(s));
    y = z;
  }
  if (!bias) return y;
  Tensor* z = g_.intermediate(DType::F32, w->ne[1], x->ne[1]);
  g_.add(Op::ADD, z, y, weight(bias));
  return z;
}

Tensor* Builder::add(Tensor* a, Tensor* b) {
  Tensor* y = g_.intermediate(DType::F32, a->ne[0], a->ne[1], a->ne[2], a->ne[3]);
  g_.add(Op::ADD, y, a, b);
  return y;
}

Tensor* Builder::rope(Tensor* x, const Tensor* freq_factors, const RopeParams* p) {
  Tensor* y = g_.intermediate(DType::F32, x->ne[0], x->ne[1], x->ne[2]);
  g_.add(Op::ROPE, y, x, positions_, freq_factors ? weight(freq_factors) : nullptr).params = p ? *p : hp().rope;
  return y;
}

Tensor* Builder::concat(Tensor* a, Tensor* b) {
  Tensor* y = g_.intermediate(DType::F32, a->ne[0] + b->ne[0], a->ne[1], a->ne[2], a->ne[3]);
  g_.add(Op::CONCAT, y, a, b);
  return y;
}

void Builder::store_kv(const Tensor& cache, Tensor* x) {
  Tensor* c = g_.external(cache);
  if (!slots_) slots_ = input_i32(fb_.slots);
  g_.add(Op::KV_STORE, c, c, x, slots_);
}

Tensor* Builder::attend(int layer, Tensor* q, int64_t hd_v, const AttentionOptions& o) {
  Tensor* kc = g_.external(kv_.k(layer));
  Tensor* vc = g_.external(kv_.v(layer));
  Tensor* out = g_.intermediate(DType::F32, hd_v, q->ne[1], fb_.n_tokens());  // [hd_v, n_head, T]
  g_.add(Op::ATTENTION, out, q, kc, vc, o.sinks ? weight(o.sinks) : nullptr, attention_batch()).params = AttentionParams{
      .scale = o.scale != 0.0f ? o.scale : 1.0f / std::sqrt(static_cast<float>(q->ne[0])),
      .softcap = o.softcap,
      .window = o.window};
  return out;
}

Tensor* Builder::attention_batch() {
  if (!attn_) attn_ = input_i32(fb_.attn);
  return attn_;
}

Tensor* Builder::attention(int layer, Tensor* q, Tensor* k, Tensor* v, const AttentionOptions& o) {
  const int64_t T = fb_.n_tokens();
  store_kv(kv_.k(layer), g_.reshape(k, k->ne[0] * k->ne[1], T));
  store_kv(kv_.v(layer), g_.reshape(v, v->ne[0] * v->ne[1], T));
  Tensor* out = attend(layer, q, v->ne[0], o);
  return g_.reshape(out, v->ne[0] * q->ne[1], T);
}

Tensor* Builder::self_attention(int layer, Tensor* x, const LayerWeights& lw, const AttentionOptions& o) {
  const HParams& h = hp();
  const int64_t T = fb_.n_tokens();
  Tensor* q = g_.reshape(linear(lw.wq, x, lw.bq), h.head_dim_k, h.n_head, T);
  Tensor* k = g_.reshape(linear(lw.wk, x, lw.bk), h.head_dim_k, h.n_head_kv, T);
  Tensor* v = g_.reshape(linear(lw.wv, x, lw.bv), h.head_dim_v, h.n_head_kv, T);
  if (lw.q_norm) q = rms_norm(q, lw.q_norm);
  if (lw.k_norm) k = rms_norm(k, lw.k_norm);
  if (!o.no_rope) {
    q = rope(q, w().rope_freqs, o.rope);
    k = rope(k, w().rope_freqs, o.rope);
  }
  AttentionOptions lo = o;
  if (!lo.sinks) lo.sinks = lw.attn_sinks;
  return linear(lw.wo, attention(layer, q, k, v, lo), lw.bo);
}

Tensor* Builder::swiglu_ffn(Tensor* x, const Tensor* gate, const Tensor* up, const Tensor* down, Op gate_op) {
  Tensor* g = linear(gate, x);
  Tensor* u = linear(up, x);
  Tensor* act = g_.intermediate(DType::F32, g->ne[0], g->ne[1]);
  g_.add(gate_op, act, g, u);
  return linear(down, act);
}

Tensor* Builder::scale(Tensor* x, float s) {
  Tensor* by = g_.input(DType::F32, x->ne[0]);
  inputs_.resize(g_.input_bytes());
  const std::vector<float> row(static_cast<size_t>(x->ne[0]), s);
  std::memcpy(inputs_.data() + g_.input_offset(by), row.data(), row.size() * sizeof(float));
  Tensor* y = g_.intermediate(DType::F32, x->ne[0], x->ne[1], x->ne[2], x->ne[3]);
  g_.add(Op::MUL, y, x, by);
  return y;
}

Tensor* Builder::select_outputs(Tensor* x) {
  if (fb_.n_outputs() == fb_.n_tokens()) return x;  // every row wanted (rows are in batch order)
  Tensor* ids = input_i32(fb_.output_rows);
  Tensor* y = g_.intermediate(DType::F32, x->ne[0], fb_.n_outputs());
  g_.add(Op::GET_ROWS, y, x, ids);
  return y;
}

Tensor* Builder::output_logits(Tensor* x) {
  if (fb_.capture_hidden) {
    hidden_ = x;
    g_.mark_output(x);
  }
  Tensor* normed = rms_norm(x, w().output_norm);
  if (fb_.embeddings) {
    g_.mark_output(normed);
    return normed;
  }
  Tensor* logits = linear(w().output, normed);
  g_.mark_output(logits);
  return logits;
}

Tensor* Builder::pre_norm_decoder(const LayerAttention& attention_options, const LayerFfn& ffn, float embed_scale) {
  const HParams& h = hp();
  Tensor* x = embed(w().tok_embd);  // [n_embd, T]
  if (embed_scale != 0.0f) x = scale(x, embed_scale);
  for (int l = 0; l < h.n_layer; ++l) {
    const LayerWeights& lw = w().layers[l];
    const AttentionOptions ao = attention_options ? attention_options(l) : AttentionOptions{};
    Tensor* attn = self_attention(l, rms_norm(x, lw.attn_norm), lw, ao);  // [n_embd, T]
    if (l == h.n_layer - 1) {  // only the rows whose logits are wanted go on
      attn = select_outputs(attn);
      x = select_outputs(x);
    }
    if (lw.attn_post_norm) attn = rms_norm(attn, lw.attn_post_norm);
    x = add(x, attn);
    Tensor* f = ffn(rms_norm(x, lw.ffn_norm), lw);  // [n_embd, T]
    if (lw.ffn_post_norm) f = rms_norm(f, lw.ffn_post_norm);
    x = add(x, f);
  }
  return output_logits(x);  // [n_vocab, n_outputs]
}

}  // namespace kestrel
