// The op harness: builds one node on random inputs, runs it on a backend under test and on the
// reference backend, and compares. Inputs are fresh per check and outputs are poisoned (NaN)
// before each run, so a kernel that skips work cannot pass on stale data.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "common/test_backend.h"
#include "tensor/graph.h"

namespace kestrel::test {

// Owns tensor memory for harness graphs.
struct Buffers {
  std::vector<std::unique_ptr<std::vector<uint8_t>>> blocks;
  void* alloc(size_t n) {
    blocks.push_back(std::make_unique<std::vector<uint8_t>>(n + 64));
    return blocks.back()->data();
  }
  Tensor tensor(DType type, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1) {
    Tensor t = make_tensor(type, ne0, ne1, ne2, ne3);
    t.data = alloc(t.n_bytes());
    return t;
  }
};

// Random values in [-scale, scale] (never all zero).
void fill_random(Tensor& t, std::mt19937& rng, float scale = 1.0f);
// Random weights of any type: quantized from random floats where a quantizer exists, otherwise
// random bits with well-formed scale fields.
void fill_random_weights(Tensor& t, std::mt19937& rng);
void fill_nan(Tensor& t);

// Max |a - b| / (tol_abs + tol_rel * |b|) over all elements (<= 1 passes); both F32.
double compare(const Tensor& got, const Tensor& want, double tol_abs, double tol_rel, std::string* where);
// A running maximum of such errors for checks written out by hand: a NaN error is infinite, as
// in compare() (std::max would drop it).
inline double worse_error(double worst, double err) { return std::isnan(err) ? INFINITY : std::max(worst, err); }

// Runs g on a host backend in place (after poisoning every node's dst but KV_STORE's).
void run_graph(TestBackend& backend, Graph& g);
// Runs g as a device backend sees it, its memory reached only through write/read: every buffer
// the graph's tensors point into is copied to device memory, every node's dst (but KV_STORE's
// cache) poisoned there with NaN, the graph run, and the buffers read back into host memory.
void run_on_device(TestBackend& backend, Graph& g);

}  // namespace kestrel::test
