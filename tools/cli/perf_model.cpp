#include "perf_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace kestrel::cli {
namespace {

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The number format a weight type's products run in: a CPU widens floats to f32 and multiplies
// quantized integers as int8 (VNNI, with the activations quantized to q8); a GPU has tensor cores
// for f16/bf16/fp8 (fp4 where the profile lists it) and integer MMA for the block quants.
std::string compute_format(DType t, const std::string& hw_kind) {
  const bool cpu = hw_kind == "cpu";
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return cpu ? "f32" : "f16";
    case DType::BF16: return cpu ? "f32" : "bf16";
    case DType::FP8_E4M3: return cpu ? "f32" : "fp8";
    case DType::MXFP4:
    case DType::NVFP4: return cpu ? "int8" : "fp4";
    default: return "int8";
  }
}

int block_index(const std::string& name) {
  int blk = -1;
  return std::sscanf(name.c_str(), "blk.%d.", &blk) == 1 ? blk : -1;
}

bool ends_with(const std::string& s, const char* tail) {
  const size_t n = std::char_traits<char>::length(tail);
  return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
}

// The bytes of activations the ops between the products read and write per token, layer by layer
// (4 bytes a value; the reads and writes of each op, not what stays in registers):
// - each norm weight of n values (an RMS_NORM and its MUL, n in and out each): 16 n; a q/k norm
//   of one head's width runs over every head of q (k);
// - each bias of n values (an ADD): 12 n;
// - two residual ADDs of n_embd (two in, one out): 24 n_embd;
// - an attention layer: ROPE over q and k (in and out) and the KV store of its K and V rows
//   (F32 in, F16 out);
// - the FFN's activation per ffn_up row it multiplies (a token's experts: n_expert_used of them):
//   gate and up in, one out (12 bytes), or one in, one out without a gate (8); an MoE layer's
//   sum of its experts' outputs, (k + 1) n_embd.
double elementwise_bytes_per_token(const ModelShape& shape) {
  const HParams& h = shape.hp;
  const double q = static_cast<double>(h.n_head) * h.head_dim_k, k = static_cast<double>(h.n_head_kv) * h.head_dim_k;
  std::vector<double> layer(static_cast<size_t>(std::max(0, h.n_layer)), 24.0 * h.n_embd);
  std::vector<char> gated(layer.size(), 0), moe(layer.size(), 0);
  for (const ShapeTensor& t : shape.tensors)
    if (const int l = block_index(t.name); l >= 0 && l < h.n_layer && contains(t.name, "ffn_gate") &&
        !contains(t.name, "ffn_gate_inp"))
      gated[static_cast<size_t>(l)] = 1;
  for (const ShapeTensor& t : shape.tensors) {
    const int l = block_index(t.name);
    if (l < 0 || l >= h.n_layer) continue;
    double& b = layer[static_cast<size_t>(l)];
    const bool vector = t.ne.size() == 1 || (t.ne.size() >= 2 && t.ne[1] == 1);
    const double n = t.ne.empty() ? 0 : static_cast<double>(t.ne[0]);
    if (vector && ends_with(t.name, "norm.weight")) {
      const bool per_head = n == h.head_dim_k;
      b += 16.0 * (per_head && contains(t.name, "attn_q_norm") ? q : per_head && contains(t.name, "attn_k_norm") ? k : n);
    } else if (vector && ends_with(t.name, ".bias") && !contains(t.name, "_exps")) {
      b += 12.0 * n;
    } else if (contains(t.name, "ffn_up") && t.ne.size() >= 2 && t.ne[1] > 1) {
      const bool experts = contains(t.name, "_exps");
      if (experts) moe[static_cast<size_t>(l)] = 1;
      b += (gated[static_cast<size_t>(l)] ? 12.0 : 8.0) * static_cast<double>(t.ne[1]) * (experts ? h.n_expert_used : 1);
    }
  }
  double total = 16.0 * h.n_embd;  // the output norm
  for (size_t l = 0; l < layer.size(); ++l) {
    if (l < shape.kv.k_rows.size() && shape.kv.k_rows[l] > 0) {
      const double v = shape.kv.v_in_k ? 0.0 : static_cast<double>(shape.kv.v_rows[l]);
      layer[l] += 8.0 * (q + k) + 6.0 * (static_cast<double>(shape.kv.k_rows[l]) + v);
    }
    if (moe[l]) layer[l] += 4.0 * (h.n_expert_used + 1) * h.n_embd;
    total += layer[l];
  }
  return total;
}

}  // namespace

double expected_distinct_experts(int E, int k, double n_tokens) {
  if (E <= 0 || k <= 0) return 0;
  if (k >= E) return E;
  return E * (1.0 - std::pow(1.0 - static_cast<double>(k) / E, n_tokens));
}

ModelCosts model_costs(const ModelShape& shape, const std::string& hw_kind, DType kv_k, DType kv_v) {
  const HParams& h = shape.hp;
  ModelCosts c;
  c.n_expert = h.n_expert;
  c.n_expert_used = h.n_expert_used;
  c.n_embd = h.n_embd, c.n_layer = h.n_layer, c.n_vocab = h.n_vocab;
  std::map<std::string, MatmulCost> by_op;  // ordered: the output is stable
  auto add = [&](const std::string& op, DType type, double bytes, double flops, bool experts, bool gather, int n_ops) {
    MatmulCost& m = by_op[op];
    m.op = op, m.type = dtype_name(type), m.format = compute_format(type, hw_kind), m.experts = experts, m.gather = gather;
    m.bytes += bytes, m.flops_per_token += flops, m.n_ops += n_ops;
  };
  bool has_output = false;
  const ShapeTensor* embd = nullptr;
  double unused = 0;  // bytes a token does not read: other experts, NextN blocks
  for (const ShapeTensor& t : shape.tensors) {
    c.weights_bytes += static_cast<double>(t.bytes);
    if (block_index(t.name) >= h.n_layer) {  // NextN (MTP) blocks: bound, not run
      unused += static_cast<double>(t.bytes);
      continue;
    }
    double elems = 1;
    for (int64_t d : t.ne) elems *= static_cast<double>(d);
    const std::string type = dtype_name(t.type);
    const bool matrix = t.ne.size() >= 2 && t.ne[1] > 1 && !contains(t.name, "ssm_conv1d") && !contains(t.name, ".bias");
    if (t.name == "token_embd.weight") {
      embd = &t;
      add("embedding", t.type, t.ne.size() >= 2 ? static_cast<double>(t.bytes) / t.ne[1] : 0, 0, false, true, 1);
    } else if (t.name == "output.weight") {
      has_output = true;
      add("output " + type, t.type, t.bytes, 2 * elems, false, false, 1);
    } else if (contains(t.name, "_exps") && h.n_expert > 0) {
      // [K, N, E] matrices (or [N, E] biases): a token uses k of the E slices.
      const double share = static_cast<double>(h.n_expert_used) / h.n_expert;
      unused += static_cast<double>(t.bytes) * (1 - share);
      add("experts " + type, t.type, t.bytes, t.ne.size() >= 3 ? 2 * elems * share : 0, true,
          false, t.ne.size() >= 3 ? 1 : 0);
    } else if (matrix) {
      add("matmul " + type, t.type, t.bytes, 2 * elems, false, false, 1);
    } else {  // norms, biases, convolution taps, rope factors: read every step, no matmul
      add("vectors", DType::F32, t.bytes, 0, false, false, 0);
    }
  }
  if (!has_output && embd && embd->ne.size() >= 2) {  // tied: the head reads the whole embedding
    double elems = static_cast<double>(embd->ne[0]) * embd->ne[1];
    add(std::string("output ") + dtype_name(embd->type) + " (tied)", embd->type, embd->bytes,
        2 * elems, false, false, 1);
  }
  for (auto& [op, m] : by_op) c.matmuls.push_back(m);
  if (has_output && embd && embd->ne.size() >= 2)  // an untied embedding: a token reads its own row
    unused += static_cast<double>(embd->bytes) * (1 - 1.0 / static_cast<double>(embd->ne[1]));
  c.weights_bytes_active = c.weights_bytes - unused;

  const KvLayout& kv = shape.kv;
  c.kv_bytes_per_token = static_cast<double>(kv.bytes_per_token(kv_k, kv_v));
  for (size_t l = 0; l < kv.k_rows.size() && static_cast<int>(l) < h.n_layer; ++l) {
    if (kv.k_rows[l] <= 0) continue;
    AttentionLayerCost a;
    a.window = l < shape.window.size() ? shape.window[l] : 0;
    a.kv_bytes_per_pos = static_cast<double>(dtype_row_size(kv_k, kv.k_rows[l])) +
                         (kv.v_in_k ? 0.0 : static_cast<double>(dtype_row_size(kv_v, kv.v_rows[l])));
    // q.k and p.v per head: MLA attends over the latent (kv_lora_rank + rope) and sums the latent.
    const double dk = h.kv_lora_rank > 0 ? static_cast<double>(kv.k_rows[l]) : h.head_dim_k;
    const double dv = h.kv_lora_rank > 0 ? static_cast<double>(h.kv_lora_rank) : h.head_dim_v;
    a.flops_per_pos = 2.0 * h.n_head * (dk + dv);
    a.head_dim = dk;
    c.attention.push_back(a);
  }
  for (size_t l = 0; l < kv.ssm_rows.size(); ++l)
    if (kv.ssm_rows[l] > 0 || (l < kv.conv_rows.size() && kv.conv_rows[l] > 0)) {
      c.state_bytes_per_seq += 4.0 * (kv.ssm_rows[l] + (l < kv.conv_rows.size() ? kv.conv_rows[l] : 0));
      // The scan: decay, B x, C h over d_state x d_inner per token; the conv: d_conv taps per channel.
      c.ssm_flops_per_token += 6.0 * h.ssm_d_state * h.ssm_d_inner + 2.0 * h.ssm_d_conv * h.ssm_conv_channels();
    }
  // Norms, rope, activations, residual adds, the attention or scan itself: about ten per layer.
  c.n_other_ops = 10 * h.n_layer + 3;
  c.elementwise_bytes_per_token = elementwise_bytes_per_token(shape);
  return c;
}

namespace {

struct Rates {
  double bw = 0;         // bytes/s, effective
  const HwProfile* hw = nullptr;
  const PerfOptions* o = nullptr;
  // A weight type's stream at `batch` columns where the profile measured it (bytes/s, effective).
  double weight_bw(const MatmulCost& m, double batch) const {
    return (m.experts ? hw->expert_bandwidth(m.type, o->threads, batch) : hw->weight_bandwidth(m.type, o->threads, batch)) *
           1e9 * hw->eff_memory;
  }
  // Attention's FLOP/s, effective: measured by head width where calibrated, else a format's.
  double att_flops(bool decode, double head_dim) const {
    const double g = hw->attention_rate(decode, head_dim, o->threads);
    return g > 0 ? g * 1e9 : hw->compute_gflops(hw->is_cpu() ? "f32" : "f16", o->threads) * 1e9 * hw->eff_attention;
  }
  // A chunk's attention to its own tokens (the causal triangle, whose tiles the mask cuts):
  // measured where calibrated, else the rate against earlier positions.
  double att_diag_flops(double head_dim) const {
    const double g = hw->attention_diag_rate(head_dim, o->threads);
    return g > 0 ? g * 1e9 : att_flops(false, head_dim);
  }
  // A decode step's attention reading its cache (bytes/s, effective): measured where calibrated.
  double att_bw(double head_dim) const { return hw->attention_bandwidth(head_dim, o->threads) * 1e9 * hw->eff_memory; }
  // The ops between the products, through their activations (bytes/s, effective).
  double elementwise_bw() const { return hw->elementwise_bandwidth(o->threads) * 1e9 * hw->eff_memory; }
  double flops(const std::string& format, double n_tokens) const {
    return hw->compute_gflops(format, o->threads, n_tokens) * 1e9 * hw->eff_compute;
  }
  // A weight type's own rate where the profile measured it, else its format's.
  double flops(const MatmulCost& m, double n_tokens) const {
    return flops(hw->gflops.count(m.type) ? m.type : m.format, n_tokens);
  }
  // Routed experts over n_tokens tokens, per_expert of them each: the measured expert product's
  // rate where calibrated (it was measured over a prefill's tokens), else the dense product's at
  // an expert's share of the batch.
  double expert_flops(const MatmulCost& m, double n_tokens, double per_expert) const {
    if (!hw->expert_gflops.count(m.type)) return flops(m, per_expert);
    return hw->expert_compute_gflops(m.type, m.format, o->threads, n_tokens) * 1e9 * hw->eff_compute;
  }
};

Rates rates(const HwProfile& hw, const PerfOptions& o) {
  Rates r;
  r.hw = &hw, r.o = &o;
  r.bw = hw.bandwidth(o.threads) * 1e9 * hw.eff_memory;
  return r;
}

void add_op(StepTime& s, const std::string& op, double bytes, double flops, double bw, double flops_rate, int tp,
            bool reads_weights = true) {
  const double mem = bytes / tp / bw, comp = flops_rate > 0 ? flops / tp / flops_rate : 0;
  s.memory_seconds += mem, s.compute_seconds += comp;
  s.bytes += bytes, s.flops += flops;
  s.ops.push_back({op, bytes, flops, std::max(mem, comp), mem, comp, comp > mem, reads_weights});
  s.seconds += std::max(mem, comp);
}

// Two all-reduces per layer (after attention, after the FFN) of tokens x n_embd bf16 values over a
// ring of tp GPUs: 2 (N-1)/N of the bytes through each link, 2 (N-1) latencies.
double link_seconds(const ModelCosts& c, const HwProfile& hw, int tp, double tokens) {
  if (tp <= 1) return 0;
  const double bytes = tokens * c.n_embd * 2;
  const double bw = (hw.link_gbs > 0 ? hw.link_gbs : 1) * 1e9;
  const double one = 2.0 * (tp - 1) / tp * bytes / bw + 2.0 * (tp - 1) * hw.link_latency_us * 1e-6;
  return 2.0 * c.n_layer * one;
}

// The norms, rope, KV stores, activations and residual adds of n_tokens tokens.
void add_elementwise(StepTime& s, const ModelCosts& c, const Rates& r, double n_tokens) {
  if (c.elementwise_bytes_per_token > 0)
    add_op(s, "elementwise", n_tokens * c.elementwise_bytes_per_token, 0, r.elementwise_bw(), 0, r.o->tp, false);
}

// A step's fixed costs: each op's, the step's, and the sampler's over each row it samples (a
// token of each sequence in decode, a prompt's last token), which scans the whole vocabulary.
void finish(StepTime& s, const ModelCosts& c, const HwProfile& hw, const PerfOptions& o, double tokens, double samples) {
  int n_ops = c.n_other_ops;
  for (const MatmulCost& m : c.matmuls) n_ops += m.n_ops;
  s.overhead_seconds = (n_ops * hw.op_us(o.threads) + hw.step_overhead_us) * 1e-6 +
                       samples * static_cast<double>(c.n_vocab) * hw.sample_ns_per_logit * 1e-9;
  s.link_seconds = link_seconds(c, hw, o.tp, tokens);
  s.seconds += s.overhead_seconds + s.link_seconds;
}

// The weight-reading ops of a step over n_tokens tokens of which n_outputs reach the head.
void add_matmuls(StepTime& s, const ModelCosts& c, const Rates& r, double n_tokens, double n_outputs) {
  for (const MatmulCost& m : c.matmuls) {
    double bytes = m.bytes, flops = m.flops_per_token * n_tokens;
    double batch = n_tokens;  // the columns each weight matrix is multiplied by
    if (m.gather) bytes *= n_tokens;
    if (m.experts) {
      const double distinct = expected_distinct_experts(c.n_expert, c.n_expert_used, n_tokens);
      bytes *= distinct / c.n_expert;
      batch = n_tokens * c.n_expert_used / std::max(1.0, distinct);  // an expert's share of the tokens
    }
    if (m.op.rfind("output", 0) == 0) {
      if (n_outputs <= 0) continue;
      flops = m.flops_per_token * n_outputs;
    }
    // A gathered row is a scattered read: the probe's bandwidth, not a streamed product's.
    const double rate = m.experts ? r.expert_flops(m, n_tokens, batch) : r.flops(m, n_tokens);
    add_op(s, m.op, bytes, flops, m.gather ? r.bw : r.weight_bw(m, batch), rate, r.o->tp);
  }
}

}  // namespace

StepTime decode_step(const ModelCosts& c, const HwProfile& hw, const PerfOptions& o, int batch, int64_t ctx) {
  const Rates r = rates(hw, o);
  StepTime s;
  add_matmuls(s, c, r, batch, batch);
  // seconds: the FLOPs over each layer's rate; reading: the bytes over each layer's stream
  double kv = 0, seconds = 0, fl = 0, reading = 0;
  for (const AttentionLayerCost& a : c.attention) {
    const double n = static_cast<double>(a.window > 0 ? std::min<int64_t>(ctx + 1, a.window) : ctx + 1);
    kv += n * a.kv_bytes_per_pos, fl += n * a.flops_per_pos;
    seconds += n * a.flops_per_pos / r.att_flops(true, a.head_dim);
    reading += n * a.kv_bytes_per_pos / r.att_bw(a.head_dim);
  }
  if (!c.attention.empty())
    add_op(s, "attention", batch * kv, batch * fl, reading > 0 ? kv / reading : r.bw, fl / seconds, o.tp, false);
  if (c.state_bytes_per_seq > 0)
    add_op(s, "ssm", 2 * batch * c.state_bytes_per_seq, batch * c.ssm_flops_per_token, r.bw, r.flops("f32", 1e9), o.tp, false);
  add_elementwise(s, c, r, batch);
  finish(s, c, hw, o, batch, batch);
  return s;
}

StepTime chunk_step(const ModelCosts& c, const HwProfile& hw, const PerfOptions& o, int n_tokens, int64_t pos,
                    int n_outputs) {
  const Rates r = rates(hw, o);
  StepTime s;
  add_matmuls(s, c, r, n_tokens, n_outputs);
  // seconds: the FLOPs over each layer's rate; reading: the bytes over each layer's stream (a
  // decode step's as decode_step's, a chunk's at the bandwidth)
  double kv = 0, fl = 0, seconds = 0, reading = 0;
  for (const AttentionLayerCost& a : c.attention) {
    // Causal: token i attends to min(pos + i + 1, window) positions, up to i + 1 of them the
    // chunk's own (the diagonal's tiles, at their own rate in a prefill); the cache is read once
    // per chunk (flash attention's tiles) and the chunk's own rows written.
    double own = 0, earlier = 0;
    for (int i = 0; i < n_tokens; ++i) {
      const int64_t n = a.window > 0 ? std::min<int64_t>(pos + i + 1, a.window) : pos + i + 1;
      const int64_t mine = std::min<int64_t>(n, i + 1);
      own += static_cast<double>(mine) * a.flops_per_pos, earlier += static_cast<double>(n - mine) * a.flops_per_pos;
    }
    fl += own + earlier;
    seconds += n_tokens == 1 ? (own + earlier) / r.att_flops(true, a.head_dim)
                             : own / r.att_diag_flops(a.head_dim) + earlier / r.att_flops(false, a.head_dim);
    const int64_t read = a.window > 0 ? std::min<int64_t>(pos + n_tokens, a.window + n_tokens) : pos + n_tokens;
    const double bytes = static_cast<double>(read + n_tokens) * a.kv_bytes_per_pos;
    kv += bytes;
    reading += bytes / (n_tokens == 1 ? r.att_bw(a.head_dim) : r.bw);
  }
  if (!c.attention.empty())
    add_op(s, "attention", kv, fl, reading > 0 ? kv / reading : r.bw, fl / seconds, o.tp, false);
  if (c.state_bytes_per_seq > 0)
    add_op(s, "ssm", 2 * c.state_bytes_per_seq, n_tokens * c.ssm_flops_per_token, r.bw, r.flops("f32", 1e9), o.tp, false);
  add_elementwise(s, c, r, n_tokens);
  finish(s, c, hw, o, n_tokens, n_outputs);
  return s;
}

double prefill_seconds(const ModelCosts& c, const HwProfile& hw, const PerfOptions& o, int64_t n) {
  double t = 0;
  const int64_t chunk = std::max(1, o.n_batch);
  for (int64_t pos = 0; pos < n; pos += chunk) {
    const int len = static_cast<int>(std::min(chunk, n - pos));
    t += chunk_step(c, hw, o, len, pos, pos + len >= n ? 1 : 0).seconds;
  }
  return t;
}

int compute_bound_batch(const ModelCosts& c, const HwProfile& hw, const PerfOptions& o, int64_t ctx) {
  for (int b = 1; b <= 4096; ++b) {
    double mem = 0, comp = 0;
    for (const OpTime& op : decode_step(c, hw, o, b, ctx).ops)
      if (op.reads_weights && op.flops > 0) mem += op.memory_seconds, comp += op.compute_seconds;
    if (comp >= mem) return b;
  }
  return 0;
}

int64_t max_batch_at_ctx(const ModelCosts& c, const HwProfile& hw, const PerfOptions& o, int64_t ctx) {
  // A tenth of memory stays for activations, the runtime and (CPU) everything else.
  const double free = 0.9 * hw.memory_bytes * std::max(1, o.tp) - c.weights_bytes;
  const double per_seq = c.kv_bytes_per_token * std::max<int64_t>(ctx, 1) + c.state_bytes_per_seq;
  if (free <= 0 || per_seq <= 0) return 0;
  return static_cast<int64_t>(free / per_seq);
}

SpecPrediction speculative(const ModelCosts& c, const HwProfile& hw, const PerfOptions& o, int64_t ctx, double alpha,
                           int gamma, double draft_cost) {
  SpecPrediction p;
  const double t1 = decode_step(c, hw, o, 1, ctx).seconds;
  const double verify = chunk_step(c, hw, o, gamma + 1, ctx, gamma + 1).seconds;
  p.tokens_per_step = alpha >= 1 ? gamma + 1.0 : (1 - std::pow(alpha, gamma + 1)) / (1 - alpha);
  const double step = gamma * draft_cost * t1 + verify;
  p.speedup = p.tokens_per_step * t1 / step;
  p.tok_s = p.tokens_per_step / step;
  return p;
}

}  // namespace kestrel::cli
