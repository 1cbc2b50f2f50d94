// The analytical performance model behind `kestrel perf`: what a model's step costs in bytes
// moved and FLOPs, op class by op class (from its shape alone), and how long a hardware profile
// takes for it. Each op class is bound by memory or by compute on its own (its time is the larger
// of bytes / effective bandwidth and FLOPs / effective compute), plus a fixed cost per op (a
// kernel launch, a thread-pool barrier) and per step. See docs/PERF.md "The performance model".
#pragma once
#include <string>
#include <vector>

#include "hw_profile.h"
#include "model/shape.h"

namespace kestrel::cli {

// One weight-reading op class, e.g. the q4_0 matrices, the routed experts, the output head.
struct MatmulCost {
  std::string op;            // "matmul q4_0", "experts q4_0", "output f16", "embedding"
  std::string type;          // the weight type ("q4_0"), which a calibrated profile may rate by name
  std::string format;        // the compute format it runs in on this kind of hardware
  double bytes = 0;          // weight bytes a step reads (experts: all of them; see expert_share)
  double flops_per_token = 0;
  bool experts = false;      // routed experts: a step reads the share its tokens were sent to
  bool gather = false;       // an embedding: a row per token, no FLOPs
  int n_ops = 0;             // ops per step
};

// One attention layer's cost per cached position of one sequence.
struct AttentionLayerCost {
  int32_t window = 0;        // 0: the whole context
  double kv_bytes_per_pos = 0;
  double flops_per_pos = 0;  // per query token
  double head_dim = 0;       // q.k's width (MLA: the latent + rope row)
};

struct ModelCosts {
  std::vector<MatmulCost> matmuls;
  std::vector<AttentionLayerCost> attention;
  double state_bytes_per_seq = 0;   // recurrent (SSM) layers: read and written every step
  double ssm_flops_per_token = 0;
  int n_expert = 0, n_expert_used = 0;
  int n_other_ops = 0;              // norms, rope, activations, residual adds per step
  // The activations those ops read and write per token (F32 in and out; the KV stores' F16 out),
  // counted per layer from its tensors (elementwise_bytes_per_token in perf_model.cpp). A chunk of
  // 512 tokens streams them through the caches: the calibrated elementwise rate prices them.
  double elementwise_bytes_per_token = 0;
  double weights_bytes = 0;         // every tensor of the file
  double weights_bytes_active = 0;  // what one token reads
  double kv_bytes_per_token = 0;    // Kestrel's cache: every attention layer, every position
  int64_t n_embd = 0, n_layer = 0, n_vocab = 0;
};

struct PerfOptions {
  int threads = 1;          // CPU threads
  DType kv_k = DType::F16, kv_v = DType::F16;
  int n_batch = 512;        // prefill chunk
  int tp = 1;               // tensor-parallel GPUs
};

// Bytes and FLOPs of one token (or per cached position) of every op class. hw_kind "cpu" or "gpu"
// picks the compute format of each weight type.
ModelCosts model_costs(const ModelShape& shape, const std::string& hw_kind, DType kv_k, DType kv_v);

// Expected number of distinct experts n tokens route to (each picking k of E uniformly):
// E * (1 - (1 - k/E)^n). What batched MoE decode really reads.
double expected_distinct_experts(int E, int k, double n_tokens);

struct OpTime {
  std::string op;
  double bytes = 0, flops = 0, seconds = 0;
  double memory_seconds = 0, compute_seconds = 0;  // seconds = the larger
  bool compute_bound = false;
  bool reads_weights = true;  // false: attention, the recurrent state (they grow with the batch)
};
struct StepTime {
  double seconds = 0;
  double memory_seconds = 0, compute_seconds = 0;  // sums of the op classes' two sides
  double overhead_seconds = 0, link_seconds = 0;
  double bytes = 0, flops = 0;
  std::vector<OpTime> ops;
};

// One decode step of `batch` sequences, each with `ctx` cached positions.
StepTime decode_step(const ModelCosts& c, const HwProfile& hw, const PerfOptions& o, int batch, int64_t ctx);
// One step of n_tokens of a single sequence whose first token sits at position pos (a prefill
// chunk, or a speculative verification); the output head runs for the last n_outputs tokens (a
// prefill's last chunk: 1; a verification: all).
StepTime chunk_step(const ModelCosts& c, const HwProfile& hw, const PerfOptions& o, int n_tokens, int64_t pos,
                    int n_outputs);
// A prompt of n tokens, in chunks of o.n_batch: seconds to the first token.
double prefill_seconds(const ModelCosts& c, const HwProfile& hw, const PerfOptions& o, int64_t n);
// The smallest batch at which a decode step's weight products take longer for their FLOPs than for
// their bytes (0: none up to 4096). Attention is left out (its reads grow with the batch too), and
// so are the norms and the embedding rows (no products).
int compute_bound_batch(const ModelCosts& c, const HwProfile& hw, const PerfOptions& o, int64_t ctx);
// Sequences of ctx tokens that fit in the memory left after the weights (over o.tp devices).
int64_t max_batch_at_ctx(const ModelCosts& c, const HwProfile& hw, const PerfOptions& o, int64_t ctx);

// Speculative decoding (Leviathan et al. 2023): with per-token acceptance rate alpha and gamma
// drafted tokens, a step yields (1 - alpha^(gamma+1)) / (1 - alpha) tokens; it costs gamma draft
// steps (draft_cost: one draft step's time over one target decode step) and one verification of
// gamma + 1 tokens.
struct SpecPrediction {
  double tokens_per_step = 0, speedup = 0, tok_s = 0;
};
SpecPrediction speculative(const ModelCosts& c, const HwProfile& hw, const PerfOptions& o, int64_t ctx, double alpha,
                           int gamma, double draft_cost);

}  // namespace kestrel::cli
