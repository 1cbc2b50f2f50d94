#include "op_harness.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "tensor/quants/quant_blocks.h"
#include "core/fp16.h"

namespace kestrel::test {

void fill_random(Tensor& t, std::mt19937& rng, float scale) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  for (float& x : v) x = u(rng);
  v[0] = scale * 0.5f;  // never all zero
  const DTypeInfo& ti = dtype_info(t.type);
  const int64_t K = t.ne[0];
  for (int64_t r = 0; r < t.n_rows(); ++r) ti.from_float(v.data() + r * K, t.row(r), K);
}

namespace {

template <class Block, class F>
void patch_blocks(Tensor& t, F f) {
  const int64_t n = static_cast<int64_t>(t.n_bytes() / sizeof(Block));
  Block* b = static_cast<Block*>(t.data);
  for (int64_t i = 0; i < n; ++i) f(b[i]);
}

}  // namespace

void fill_random_weights(Tensor& t, std::mt19937& rng) {
  if (dtype_info(t.type).from_float) return fill_random(t, rng, 1.0f);
  uint8_t* p = static_cast<uint8_t*>(t.data);
  for (size_t i = 0; i < t.n_bytes(); ++i) p[i] = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> u(0.001f, 0.02f);
  auto h = [&] { return fp32_to_fp16(u(rng)); };
  switch (t.type) {
    case DType::Q2_K: patch_blocks<block_q2_K>(t, [&](block_q2_K& b) { b.d = h(); b.dmin = h(); }); break;
    case DType::Q3_K: patch_blocks<block_q3_K>(t, [&](block_q3_K& b) { b.d = h(); }); break;
    case DType::Q4_K: patch_blocks<block_q4_K>(t, [&](block_q4_K& b) { b.d = h(); b.dmin = h(); }); break;
    case DType::Q5_K: patch_blocks<block_q5_K>(t, [&](block_q5_K& b) { b.d = h(); b.dmin = h(); }); break;
    case DType::Q6_K: patch_blocks<block_q6_K>(t, [&](block_q6_K& b) { b.d = h(); }); break;
    default: break;
  }
}

void fill_nan(Tensor& t) {
  float* p = static_cast<float*>(t.data);
  for (int64_t i = 0; i < t.n_elements(); ++i) p[i] = std::numeric_limits<float>::quiet_NaN();
}

double compare(const Tensor& got, const Tensor& want, double tol_abs, double tol_rel, std::string* where) {
  double worst = 0;
  const float* g = static_cast<const float*>(got.data);
  const float* w = static_cast<const float*>(want.data);
  for (int64_t i = 0; i < want.n_elements(); ++i) {
    double err = std::fabs(static_cast<double>(g[i]) - w[i]) / (tol_abs + tol_rel * std::fabs(w[i]));
    if (std::isnan(g[i]) != std::isnan(w[i])) err = std::numeric_limits<double>::infinity();
    if (err > worst) {
      worst = err;
      if (where) *where = "element " + std::to_string(i) + ": got " + std::to_string(g[i]) + ", want " + std::to_string(w[i]);
    }
  }
  return worst;
}

void run_graph(TestBackend& backend, Graph& g) {
  for (Node& n : g.nodes())
    if (n.op != Op::KV_STORE) fill_nan(*n.dst);
  Status st = backend.run(g, 0, g.nodes().size());
  if (!st.ok()) throw std::runtime_error(st.to_string());
}

namespace {

// The bytes a tensor (or strided view) spans from its data pointer.
size_t extent(const Tensor& t) {
  size_t e = t.row_bytes();
  for (int i = 1; i < 4; ++i) e += static_cast<size_t>(t.ne[i] - 1) * t.nb[i];
  return e;
}

void check(const Status& st) {
  if (!st.ok()) throw std::runtime_error(st.to_string());
}

}  // namespace

void run_on_device(TestBackend& backend, Graph& g) {
  Device& dev = *backend.device;
  // The host ranges the graph reads and writes, merged where they overlap.
  std::vector<std::pair<uint8_t*, uint8_t*>> ranges;
  for (const Tensor& t : g.tensors())
    if (t.data) ranges.emplace_back(static_cast<uint8_t*>(t.data), static_cast<uint8_t*>(t.data) + extent(t));
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint8_t*, uint8_t*>> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second) merged.back().second = std::max(merged.back().second, r.second);
    else merged.push_back(r);
  }
  std::vector<void*> device_mem;
  for (const auto& [b, e] : merged) {
    auto m = dev.alloc(static_cast<size_t>(e - b));
    check(m.status());
    device_mem.push_back(m.value());
    check(dev.write(m.value(), b, static_cast<size_t>(e - b)));
  }
  // Every tensor repointed into device memory (host addresses kept to restore).
  std::vector<void*> host_ptr;
  for (Tensor& t : g.tensors()) {
    host_ptr.push_back(t.data);
    if (!t.data) continue;
    auto* p = static_cast<uint8_t*>(t.data);
    auto after = std::upper_bound(merged.begin(), merged.end(), p, [](uint8_t* v, const auto& r) { return v < r.first; });
    const size_t k = static_cast<size_t>(after - merged.begin()) - 1;
    t.data = static_cast<uint8_t*>(device_mem[k]) + (p - merged[k].first);
  }
  for (const Node& n : g.nodes()) {
    if (n.op == Op::KV_STORE) continue;
    std::vector<float> nan(extent(*n.dst) / sizeof(float) + 1, std::numeric_limits<float>::quiet_NaN());
    check(dev.write(n.dst->data, nan.data(), extent(*n.dst)));
  }
  check(backend.run(g, 0, g.nodes().size()));
  check(backend.executor->sync());
  for (size_t k = 0; k < merged.size(); ++k) {
    check(dev.read(merged[k].first, device_mem[k], static_cast<size_t>(merged[k].second - merged[k].first)));
    dev.release(device_mem[k]);
  }
  size_t i = 0;
  for (Tensor& t : g.tensors()) t.data = host_ptr[i++];
}

}  // namespace kestrel::test
