// One op-harness case: a small graph on random inputs, run on the reference backend and on the
// CPU backend with 1..4 threads, every listed output compared (shared by the op test files).
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
  // Extra state some ops point at (attention batches, slots).
  std::vector<int32_t> i32a, i32b, i32c, i32d, i32e;
  std::vector<uint64_t> u64;
  AttentionBatch attn;
};

inline constexpr DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1,
                                      DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K,
                                      DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::MXFP4};

// Runs c on the reference backend, then on the CPU backend with 1..4 threads, and compares every
// output (I32 outputs exactly).
void check_case(Case& c, double tol_abs = 1e-5, double tol_rel = 1e-4);
// A random F32 (or other float type) input, and an output poisoned with NaN.
Tensor* input(Case& c, DType type, std::mt19937& rng, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1);
Tensor* output(Case& c, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1);

}  // namespace kestrel::test
