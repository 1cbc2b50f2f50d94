// Scalar reference kernels, one per op: slow, obvious, the oracle for every backend's tests.
// Row-parallel ops process the work items [i0, i1) of parallel_items(node), so the CPU backend
// can split them over threads; the reference backend runs them over the whole range.
#pragma once
#include <atomic>
#include <mutex>
#include <vector>
#include <cstdint>

#include "tensor/graph.h"

namespace kestrel::ref {

// Independent work items of a node (rows, or (token, head) pairs for ATTENTION).
int64_t parallel_items(const Node& n);
// Runs items [i0, i1) of node n (any op except MATMUL and MATMUL_ID).
void run_items(const Node& n, int64_t i0, int64_t i1);
// MATMUL: dst = W . X with X rounded to W's vec_dot type, double accumulation.
void matmul(const Node& n);

// Rounds K activations through `vec_dot_type` (quantize + dequantize; F16/BF16 rounding; F32 as
// is): what llama.cpp's matmul sees. K must be a multiple of the type's block size.
void round_activations(DType vec_dot_type, const float* x, float* out, int64_t K);

// Mixture-of-experts and MLA ops (ops_moe_ref.cpp). Items are tokens for ROUTER and MOE_SUM,
// rows for SWIGLU_OAI and CONCAT.
void router(const Node& n, int64_t t0, int64_t t1);
// Diagnostics: while `enabled`, ROUTER records the batch rows (tokens) whose k-th and (k+1)-th
// selection scores differ by less than `gap`. Such a choice is a near-tie that another engine's
// rounding may settle the other way; reference comparisons use this to know where one may.
struct RouterTieLog {
  std::atomic<bool> enabled{false};
  float gap = 2e-3f;
  std::mutex mu;
  std::vector<int64_t> rows;
};
RouterTieLog& router_tie_log();
void moe_sum(const Node& n, int64_t t0, int64_t t1);
void swiglu_oai(const Node& n, int64_t r0, int64_t r1);
void concat(const Node& n, int64_t r0, int64_t r1);
// MATMUL_ID: every (slot, token) through its expert's matrix, like matmul().
void matmul_id(const Node& n);
// The expert of (slot, token) of a MATMUL_ID node (the slot itself when it has no ids).
int32_t expert_of(const Node& n, int64_t slot, int64_t t);

// Mamba-2 ops (ops_ssm_ref.cpp). Items: channels for SSM_CONV, (head, dim) state rows for
// SSM_SCAN, rows for RELU_SQR.
void ssm_conv(const Node& n, int64_t c0, int64_t c1);
void ssm_scan(const Node& n, int64_t r0, int64_t r1);
void relu_sqr(const Node& n, int64_t r0, int64_t r1);

// ROPE's two halves: a position's angles (once per token), then a row rotated by them (each head).
// cs[2 i], cs[2 i + 1]: the cosine and sine (times the attention factor) of pair i < n_rot / 2.
void rope_angles(int32_t pos, const float* freq_factors, const RopeParams& p, float* cs);
void rope_apply(const float* src, float* dst, int64_t head_dim, const float* cs, const RopeParams& p);

}  // namespace kestrel::ref
