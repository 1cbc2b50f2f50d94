// Scalar reference kernels, one per op: slow, obvious, the oracle for every backend's tests.
// Row-parallel ops process the work items [i0, i1) of parallel_items(node), so the CPU backend
// can split them over threads; the reference backend runs them over the whole range.
#pragma once
#include <cstdint>

#include "tensor/graph.h"

namespace kestrel::ref {

// Independent work items of a node (rows, or (token, head) pairs for ATTENTION).
int64_t parallel_items(const Node& n);
// Runs items [i0, i1) of node n (any op except MATMUL).
void run_items(const Node& n, int64_t i0, int64_t i1);
// MATMUL: dst = W . X with X rounded to W's vec_dot type, double accumulation.
void matmul(const Node& n);

// Rounds K activations through `vec_dot_type` (quantize + dequantize; F16/BF16 rounding; F32 as
// is): what llama.cpp's matmul sees. K must be a multiple of the type's block size.
void round_activations(DType vec_dot_type, const float* x, float* out, int64_t K);

// Per-row helpers shared with the CPU backend.
void rope_row(const float* src, float* dst, int64_t head_dim, int32_t pos, const float* freq_factors,
              const RopeParams& p);

}  // namespace kestrel::ref
