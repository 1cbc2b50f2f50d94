// One op-harness case: a small graph on random inputs, run on the reference backend and on every
// compiled backend (the CPU with 1..4 threads) through write/read, every listed output compared
// (shared by the op test files).
#pragma once
#include <random>
#include <string>
#include <vector>

#include "op_harness.h"

namespace kestrel::test {

struct Case {
  std::string name;
  Buffers buf;
  Graph g;
  std::vector<Tensor*> outputs;
  // Scratch for building I32 inputs (slots, attention batches).
  std::vector<int32_t> i32a, i32b, i32c, i32d, i32e;
  std::vector<uint64_t> u64;
};

inline constexpr DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1,
                                      DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K,
                                      DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::MXFP4,
                                      DType::NVFP4, DType::FP8_E4M3};

// Runs c on the reference backend, then on every compiled backend as above, and compares every
// output (I32 outputs exactly).
void check_case(Case& c, double tol_abs = 1e-5, double tol_rel = 1e-4);
// A random F32 (or other float type) input, and an output poisoned with NaN.
Tensor* input(Case& c, DType type, std::mt19937& rng, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1);
Tensor* output(Case& c, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1);
// An I32 input holding v (ids, slots, a packed attention batch).
Tensor* input_i32(Case& c, const std::vector<int32_t>& v);
// The packed AttentionBatch (tensor/attention_batch.h) of these arrays: table_begin has n_seq + 1
// entries, tables the physical block ids.
std::vector<int32_t> pack_attention(const std::vector<int32_t>& token_pos, const std::vector<int32_t>& token_seq,
                                    const std::vector<int32_t>& cell_pos, int32_t block_size,
                                    const std::vector<int32_t>& table_begin, const std::vector<int32_t>& tables);

}  // namespace kestrel::test
