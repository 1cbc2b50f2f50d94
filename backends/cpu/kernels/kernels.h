// CPU kernels that need more than the row-parallel reference loops.
#pragma once
#include "core/thread_pool.h"
#include "tensor/graph.h"

namespace kestrel::cpu {

void matmul(const Node& n, ThreadPool& pool);
// MATMUL node i, and in the same pass the MATMUL nodes right after it (before `end`) that read the
// same input with the same weight type, where they take the fused decode kernels (q, k and v;
// gate and up). Returns how many nodes it ran.
size_t matmuls(const std::vector<Node>& nodes, size_t i, size_t end, ThreadPool& pool);
// ATTENTION over an F16 or F32 cache (AVX2; check has_avx2_fma() and attention_supported()).
bool attention_supported(const Node& n);
void attention(const Node& n, ThreadPool& pool);
// SILU / SWIGLU over packed F32 rows (AVX2; check has_avx2_fma() and gated_unary_supported()).
bool gated_unary_supported(const Node& n);
void gated_unary(const Node& n, int64_t r0, int64_t r1);
// SSM_SCAN with the state rows in 8-lane vectors (AVX2; check has_avx2_fma() and
// ssm_scan_supported(): d_state a multiple of 32): rows [r0, r1) of the state.
bool ssm_scan_supported(const Node& n);
void ssm_scan(const Node& n, int64_t r0, int64_t r1);
// GET_ROWS from a table in the grouped layout (repacked.h): rows [i0, i1) of the ids.
void get_rows_grouped(const Node& n, int64_t i0, int64_t i1);

}  // namespace kestrel::cpu
