#include "backends/ref/ops_ref.h"
#include "backends/cpu/repacked.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/fp16.h"
#include "tensor/quants/fp8.h"
#include "tensor/quants/quant_blocks.h"
#include "tensor/quants/quants.h"

namespace kestrel::ref {
namespace {

// Broadcast: row r of dst reads row (r mod rows(src1)) of src1.
const float* bcast_row(const Tensor* s, int64_t r) {
  const int64_t rows = s->n_rows();
  const int64_t rr = r % rows;
  return s->f32(rr % s->ne[1], (rr / s->ne[1]) % s->ne[2], rr / (s->ne[1] * s->ne[2]));
}
float* row_of(const Tensor* t, int64_t r) {
  return t->f32(r % t->ne[1], (r / t->ne[1]) % t->ne[2], r / (t->ne[1] * t->ne[2]));
}

void get_rows(const Node& n, int64_t i0, int64_t i1) {
  const Tensor* table = n.src[0];
  const int32_t* ids = static_cast<const int32_t*>(n.src[1]->data);
  const int64_t K = table->ne[0];
  const ToFloatFn to_float = dtype_info(table->type).to_float;
  for (int64_t i = i0; i < i1; ++i) to_float(table->row(ids[i]), n.dst->f32(i), K);
}

void rms_norm(const Node& n, int64_t i0, int64_t i1) {
  const int64_t K = n.src[0]->ne[0];
  for (int64_t r = i0; r < i1; ++r) {
    const float* x = row_of(n.src[0], r);
    double ss = 0;
    for (int64_t k = 0; k < K; ++k) ss += static_cast<double>(x[k]) * x[k];
    const float scale = 1.0f / std::sqrt(static_cast<float>(ss / K) + n.param<NormParams>().eps);
    float* y = row_of(n.dst, r);
    for (int64_t k = 0; k < K; ++k) y[k] = x[k] * scale;
  }
}

template <class F>
void binary(const Node& n, int64_t i0, int64_t i1, F f) {
  const int64_t K = n.src[0]->ne[0], K1 = n.src[1]->ne[0];
  for (int64_t r = i0; r < i1; ++r) {
    const float* a = row_of(n.src[0], r);
    const float* b = bcast_row(n.src[1], r);
    float* y = row_of(n.dst, r);
    // b repeats every K1 values; in runs of K1 the loop has no modulo and vectorises.
    for (int64_t k0 = 0; k0 < K; k0 += K1) {
      const int64_t len = std::min(K1, K - k0);
      for (int64_t k = 0; k < len; ++k) y[k0 + k] = f(a[k0 + k], b[k]);
    }
  }
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }
// GELU, tanh form, through F16 as llama.cpp's CPU GEGLU does: a table of every F16 value's GELU
// (built once), indexed by x's F16 bits.
float gelu_f16(float x) {
  static const std::vector<uint16_t> table = [] {
    constexpr float kSqrt2OverPi = 0.79788456080286535588f, kCoef = 0.044715f;
    std::vector<uint16_t> t(65536);
    for (uint32_t i = 0; i < t.size(); ++i) {
      const float h = fp16_to_fp32(static_cast<uint16_t>(i));
      t[i] = fp32_to_fp16(0.5f * h * (1.0f + std::tanh(kSqrt2OverPi * h * (1.0f + kCoef * h * h))));
    }
    return t;
  }();
  if (x <= -10.0f) return 0.0f;
  if (x >= 10.0f) return x;
  return fp16_to_fp32(table[fp32_to_fp16(x)]);
}

void softmax(const Node& n, int64_t i0, int64_t i1) {
  const int64_t K = n.src[0]->ne[0];
  for (int64_t r = i0; r < i1; ++r) {
    const float* x = row_of(n.src[0], r);
    float* y = row_of(n.dst, r);
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < K; ++k) mx = std::max(mx, x[k] * n.param<SoftmaxParams>().scale);
    double sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += (y[k] = std::exp(x[k] * n.param<SoftmaxParams>().scale - mx));
    for (int64_t k = 0; k < K; ++k) y[k] = static_cast<float>(y[k] / sum);
  }
}

void rope(const Node& n, int64_t i0, int64_t i1) {
  const RopeParams& p = n.param<RopeParams>();
  const int32_t* pos = static_cast<const int32_t*>(n.src[1]->data);
  const float* ff = n.src[2] ? static_cast<const float*>(n.src[2]->data) : nullptr;
  const int64_t n_head = n.src[0]->ne[1];
  // A token's angles serve all its heads (sin and cos per head and pair were a quarter of an F16
  // model's prefill).
  thread_local std::vector<float> cs;
  cs.resize(static_cast<size_t>(p.n_rot) + 1);
  int64_t token = -1;
  for (int64_t r = i0; r < i1; ++r) {
    if (r / n_head != token) token = r / n_head, rope_angles(pos[token], ff, p, cs.data());
    rope_apply(row_of(n.src[0], r), row_of(n.dst, r), n.src[0]->ne[0], cs.data(), p);
  }
}

void kv_store(const Node& n, int64_t i0, int64_t i1) {
  const int32_t* slots = static_cast<const int32_t*>(n.src[2]->data);
  const Tensor* cache = n.src[0];
  const int64_t R = n.src[1]->ne[0];
  for (int64_t t = i0; t < i1; ++t) {
    const float* x = n.src[1]->f32(t);
    uint8_t* dst = cache->row(slots[t]);
    if (cache->type == DType::F16) {
      uint16_t* d = reinterpret_cast<uint16_t*>(dst);
      for (int64_t k = 0; k < R; ++k) d[k] = fp32_to_fp16(x[k]);
    } else if (cache->type == DType::F8_E4M3) {
      for (int64_t k = 0; k < R; ++k) dst[k] = e4m3_from_fp32_bits(fp32_to_bits(x[k]));
    } else if (cache->type == DType::Q8_0) {  // the row in blocks of 32 across its heads
      quants::quantize_q8_0(x, dst, R);
    } else if (cache->type == DType::Q4_0) {
      quants::quantize_q4_0(x, dst, R);
    } else {
      std::memcpy(dst, x, R * sizeof(float));
    }
  }
}

float cache_value(const Tensor* c, int64_t cell, int64_t k) {
  const uint8_t* row = c->row(cell);
  if (c->type == DType::F16) return fp16_to_fp32(reinterpret_cast<const uint16_t*>(row)[k]);
  if (c->type == DType::F8_E4M3) return fp32_from_bits(e4m3_to_fp32_bits(row[k]));
  if (c->type == DType::Q8_0) {  // element k of the row: value k % 32 of block k / 32
    const block_q8_0* b = reinterpret_cast<const block_q8_0*>(row) + k / QK8_0;
    return fp16_to_fp32(b->d) * static_cast<float>(b->qs[k % QK8_0]);
  }
  if (c->type == DType::Q4_0) {  // byte j holds values j (low nibble) and j + 16 (high)
    const block_q4_0* b = reinterpret_cast<const block_q4_0*>(row) + k / QK4_0;
    const int j = static_cast<int>(k % QK4_0);
    const int q = j < QK4_0 / 2 ? b->qs[j] & 0xF : b->qs[j - QK4_0 / 2] >> 4;
    return fp16_to_fp32(b->d) * static_cast<float>(q - 8);
  }
  return reinterpret_cast<const float*>(row)[k];
}

// One (token, head) item: scores over visible cells, softmax (with optional sink), weighted V.
void attention(const Node& n, int64_t i0, int64_t i1) {
  const Tensor *q = n.src[0], *kc = n.src[1], *vc = n.src[2], *sinks = n.src[3];
  const AttentionBatch b = AttentionBatch::view(static_cast<const int32_t*>(n.src[4]->data));
  const int64_t hd_k = q->ne[0], n_head = q->ne[1], hd_v = n.dst->ne[0];
  const int64_t n_kv_head = kc->ne[0] / hd_k;
  const int64_t group = n_head / n_kv_head;
  const AttentionParams& ap = n.param<AttentionParams>();
  const float scale = ap.scale, softcap = ap.softcap;
  const int32_t window = ap.window;
  // An FP8 cache is read as the F16 values its bytes are (every E4M3 value is one): queries and
  // probabilities are rounded to f16 for it too, and for the Q8_0/Q4_0 caches (as llama.cpp's
  // flash attention, which multiplies F16 or quantized K with F16-or-coarser queries).
  const bool f16_kv = kc->type != DType::F32;
  std::vector<float> qr(hd_k), scores(static_cast<size_t>(b.max_cells));
  std::vector<double> acc(hd_v);
  for (int64_t item = i0; item < i1; ++item) {
    const int64_t t = item / n_head, h = item % n_head, kvh = h / group;
    const int32_t tt = static_cast<int32_t>(t), nc = b.n_cells_of(tt);
    const float* qp = q->f32(h, t);
    // llama.cpp multiplies an F16 cache with F16-rounded queries.
    for (int64_t d = 0; d < hd_k; ++d) qr[d] = f16_kv ? round_fp16(qp[d]) : qp[d];
    float mx = -std::numeric_limits<float>::infinity();
    for (int32_t i = 0; i < nc; ++i) {  // the cells of t's block table, in order
      const int32_t c = b.cell(tt, i);
      if (!b.visible(tt, c, window)) {
        scores[i] = -std::numeric_limits<float>::infinity();
        continue;
      }
      double dot = 0;
      for (int64_t d = 0; d < hd_k; ++d) dot += static_cast<double>(qr[d]) * cache_value(kc, c, kvh * hd_k + d);
      float s = static_cast<float>(dot);
      s = softcap > 0 ? softcap * std::tanh(s * scale / softcap) : s * scale;
      scores[i] = s;
      mx = std::max(mx, s);
    }
    const float sink = sinks ? static_cast<const float*>(sinks->data)[h] : -INFINITY;
    mx = std::max(mx, sink);
    double sum = sinks ? std::exp(static_cast<double>(sink - mx)) : 0.0;
    for (int32_t i = 0; i < nc; ++i) {
      scores[i] = std::isinf(scores[i]) ? 0.0f : std::exp(scores[i] - mx);
      sum += scores[i];
    }
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int32_t i = 0; i < nc; ++i) {
      if (scores[i] == 0.0f) continue;
      const int32_t c = b.cell(tt, i);
      float p = static_cast<float>(scores[i] / sum);
      if (vc->type != DType::F32) p = round_fp16(p);
      for (int64_t d = 0; d < hd_v; ++d) acc[d] += static_cast<double>(p) * cache_value(vc, c, kvh * hd_v + d);
    }
    float* out = n.dst->f32(h, t);
    for (int64_t d = 0; d < hd_v; ++d) out[d] = static_cast<float>(acc[d]);
  }
}

// TOP_K: sort the row's indices by (NaN first, value descending, index ascending), keep k.
void top_k(const Node& n, int64_t r0, int64_t r1) {
  const int64_t V = n.src[0]->ne[0], k = n.dst->ne[0];
  std::vector<int32_t> idx(static_cast<size_t>(V));
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = row_of(n.src[0], r);
    for (int64_t i = 0; i < V; ++i) idx[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [x](int32_t a, int32_t b) {
      const bool na = std::isnan(x[a]), nb = std::isnan(x[b]);
      if (na != nb) return na;
      if (!na && x[a] != x[b]) return x[a] > x[b];
      return a < b;
    });
    float* vals = row_of(n.dst, r);
    int32_t* ids = reinterpret_cast<int32_t*>(n.src[1]->row(r));
    for (int64_t j = 0; j < k; ++j) {
      ids[j] = idx[static_cast<size_t>(j)];
      vals[j] = x[idx[static_cast<size_t>(j)]];
    }
  }
}

}  // namespace

int64_t parallel_items(const Node& n) {
  switch (n.op) {
    case Op::KV_STORE: return n.src[1]->ne[1];
    case Op::ATTENTION: return n.src[0]->ne[1] * n.src[0]->ne[2];
    case Op::MATMUL: return n.dst->ne[1];
    case Op::SSM_CONV:
    case Op::SSM_SCAN: return n.dst->ne[0];
    default: return n.dst->n_rows();
  }
}

void run_items(const Node& n, int64_t i0, int64_t i1) {
  switch (n.op) {
    case Op::GET_ROWS: return get_rows(n, i0, i1);
    case Op::RMS_NORM: return rms_norm(n, i0, i1);
    case Op::MUL: return binary(n, i0, i1, [](float a, float b) { return a * b; });
    case Op::ADD: return binary(n, i0, i1, [](float a, float b) { return a + b; });
    case Op::SILU:
      for (int64_t r = i0; r < i1; ++r) {
        const float* a = row_of(n.src[0], r);
        float* y = row_of(n.dst, r);
        for (int64_t k = 0; k < n.src[0]->ne[0]; ++k) y[k] = silu(a[k]);
      }
      return;
    case Op::SWIGLU: return binary(n, i0, i1, [](float a, float b) { return silu(a) * b; });
    case Op::GEGLU: return binary(n, i0, i1, [](float a, float b) { return gelu_f16(a) * b; });
    case Op::SOFTMAX: return softmax(n, i0, i1);
    case Op::ROPE: return rope(n, i0, i1);
    case Op::KV_STORE: return kv_store(n, i0, i1);
    case Op::ATTENTION: return attention(n, i0, i1);
    case Op::ROUTER: return router(n, i0, i1);
    case Op::MOE_SUM: return moe_sum(n, i0, i1);
    case Op::SWIGLU_OAI: return swiglu_oai(n, i0, i1);
    case Op::CONCAT: return concat(n, i0, i1);
    case Op::TOP_K: return top_k(n, i0, i1);
    case Op::RELU_SQR: return relu_sqr(n, i0, i1);
    case Op::SSM_CONV: return ssm_conv(n, i0, i1);
    case Op::SSM_SCAN: return ssm_scan(n, i0, i1);
    case Op::MATMUL_ID:
    case Op::MATMUL:
    case Op::COUNT: return;
  }
}

void round_activations(DType vdt, const float* x, float* out, int64_t K) {
  const DTypeInfo& ti = dtype_info(vdt);
  if (vdt == DType::F32) {
    std::memcpy(out, x, K * sizeof(float));
    return;
  }
  if (vdt == DType::Q8_0 || vdt == DType::Q8_1) {
    // llama.cpp's x86 activation quantizer (not the file quantizer): id = 127 / amax and
    // round-half-to-even, scale stored as fp16.
    for (int64_t b = 0; b < K; b += 32) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
      const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
      const float dh = round_fp16(d);
      for (int j = 0; j < 32; ++j) out[b + j] = dh * std::nearbyint(x[b + j] * id);
    }
    return;
  }
  std::vector<uint8_t> tmp(dtype_row_size(vdt, K));
  ti.from_float(x, tmp.data(), K);
  ti.to_float(tmp.data(), out, K);
}

void matmul(const Node& n) {
  const Tensor *w = n.src[0], *x = n.src[1];
  const int64_t K = w->ne[0], N = w->ne[1], M = x->ne[1];
  const DTypeInfo& ti = dtype_info(w->type);
  std::vector<float> wr(K), xr(K);
  for (int64_t m = 0; m < M; ++m) {
    round_activations(ti.vec_dot_type, x->f32(m), xr.data(), K);
    float* y = n.dst->f32(m);
    for (int64_t r = 0; r < N; ++r) {
      ti.to_float(w->row(r), wr.data(), K);
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += static_cast<double>(wr[k]) * xr[k];
      y[r] = static_cast<float>(s);
    }
  }
}

void rope_angles(int32_t pos, const float* ff, const RopeParams& p, float* cs) {
  const int64_t n_dims = p.n_rot;
  const float theta_scale = std::pow(p.freq_base, -2.0f / static_cast<float>(n_dims));
  float corr[2] = {0, 0};
  if (p.ext_factor != 0.0f) {
    auto corr_dim = [&](float n_rot) {
      return n_dims * std::log(p.n_ctx_orig / (n_rot * 2 * static_cast<float>(M_PI))) /
             (2 * std::log(p.freq_base));
    };
    corr[0] = std::max(0.0f, std::floor(corr_dim(p.beta_fast)));
    corr[1] = std::min(static_cast<float>(n_dims - 1), std::ceil(corr_dim(p.beta_slow)));
  }
  // theta is advanced by repeated multiplication, exactly as GGML's rope cache does.
  float theta_base = static_cast<float>(pos);
  for (int64_t i0 = 0; i0 < n_dims; i0 += 2) {
    const float f = ff ? ff[i0 / 2] : 1.0f;
    const float theta_extrap = theta_base / f;
    const float theta_interp = p.freq_scale * theta_extrap;
    float theta = theta_interp, mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
      const float y = (i0 / 2 - corr[0]) / std::max(0.001f, corr[1] - corr[0]);
      const float ramp = (1 - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
      theta = theta_interp * (1 - ramp) + theta_extrap * ramp;
      mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
    }
    cs[i0] = std::cos(theta) * mscale, cs[i0 + 1] = std::sin(theta) * mscale;
    theta_base *= theta_scale;
  }
}

void rope_apply(const float* src, float* dst, int64_t head_dim, const float* cs, const RopeParams& p) {
  const int64_t n_dims = p.n_rot;
  for (int64_t i0 = 0; i0 < n_dims; i0 += 2) {
    const float c = cs[i0], s = cs[i0 + 1];
    const int64_t a = p.mode == ROPE_NEOX ? i0 / 2 : i0;
    const int64_t b = p.mode == ROPE_NEOX ? i0 / 2 + n_dims / 2 : i0 + 1;
    const float x0 = src[a], x1 = src[b];
    dst[a] = x0 * c - x1 * s;
    dst[b] = x0 * s + x1 * c;
  }
  for (int64_t i = n_dims; i < head_dim; ++i) dst[i] = src[i];
}

}  // namespace kestrel::ref
