#include "op_case.h"

#include <doctest/doctest.h>

#include <cstring>

namespace kestrel::test {
namespace {

std::vector<float> as_floats(const Tensor& t, const uint8_t* data) {
  const int64_t n = t.n_elements();
  std::vector<float> v(static_cast<size_t>(n));
  if (t.type == DType::I32) {
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(reinterpret_cast<const int32_t*>(data)[i]);
  } else {
    dtype_info(t.type).to_float(data, v.data(), n);
  }
  return v;
}

}  // namespace

void check_case(Case& c, double tol_abs, double tol_rel) {
  CAPTURE(c.name);
  std::vector<std::vector<uint8_t>> initial, want;
  for (Tensor* t : c.outputs) initial.emplace_back(static_cast<uint8_t*>(t->data), static_cast<uint8_t*>(t->data) + t->n_bytes());
  auto restore = [&] {
    for (size_t i = 0; i < c.outputs.size(); ++i) std::memcpy(c.outputs[i]->data, initial[i].data(), initial[i].size());
  };
  auto ref = make_ref_backend();
  restore();
  run_graph(*ref, c.g);
  for (Tensor* t : c.outputs) want.emplace_back(static_cast<uint8_t*>(t->data), static_cast<uint8_t*>(t->data) + t->n_bytes());
  // Every compiled backend (the CPU with 1..4 threads), its data moved only by write/read.
  for (const std::string& name : compiled_backends()) {
    for (int threads = 1; threads <= (name == "cpu" ? 4 : 1); ++threads) {
      CAPTURE(name);
      CAPTURE(threads);
      auto backend = try_backend(name, threads);
      if (!backend) continue;  // compiled, but no device here (CUDA without a GPU)
      bool supported = true;  // every backend has a kernel for every op the harness builds
      for (const Node& n : c.g.nodes()) supported = supported && backend->device->supports(n);
      CHECK_MESSAGE(supported, c.name << ": backend " << name << " reports no kernel for it");
      if (!supported) continue;
      restore();
      run_on_device(*backend, c.g);
      for (size_t i = 0; i < c.outputs.size(); ++i) {
        const Tensor& got = *c.outputs[i];
        std::vector<float> a = as_floats(got, static_cast<const uint8_t*>(got.data)), b = as_floats(got, want[i].data());
        const int64_t n = got.n_elements();
        Tensor ta = make_tensor(DType::F32, n, 1, 1, 1, a.data()), tb = make_tensor(DType::F32, n, 1, 1, 1, b.data());
        std::string where;
        const double err = got.type == DType::I32 ? compare(ta, tb, 1e-9, 0.0, &where) : compare(ta, tb, tol_abs, tol_rel, &where);
        CHECK_MESSAGE(err <= 1.0, c.name << " (" << name << ", " << threads << " threads): " << where);
      }
    }
  }
}

Tensor* input(Case& c, DType type, std::mt19937& rng, int64_t ne0, int64_t ne1, int64_t ne2) {
  Tensor t = c.buf.tensor(type, ne0, ne1, ne2);
  fill_random(t, rng);
  return c.g.external(t);
}

Tensor* output(Case& c, int64_t ne0, int64_t ne1, int64_t ne2) {
  Tensor* t = c.g.external(c.buf.tensor(DType::F32, ne0, ne1, ne2));
  fill_nan(*t);
  c.outputs.push_back(t);
  return t;
}

std::vector<int32_t> pack_attention(const std::vector<int32_t>& token_pos, const std::vector<int32_t>& token_seq,
                                    const std::vector<int32_t>& cell_pos, int32_t block_size,
                                    const std::vector<int32_t>& table_begin, const std::vector<int32_t>& tables) {
  const int32_t T = static_cast<int32_t>(token_pos.size()), n_seq = static_cast<int32_t>(table_begin.size()) - 1;
  std::vector<int32_t> p = {T, n_seq, static_cast<int32_t>(cell_pos.size()), block_size, 0,
                            static_cast<int32_t>(tables.size()), 0, 0};
  for (int32_t t = 0; t < T; ++t) {  // max_cells
    const int32_t s = token_seq[static_cast<size_t>(t)];
    p[4] = std::max(p[4], (table_begin[static_cast<size_t>(s) + 1] - table_begin[static_cast<size_t>(s)]) * block_size);
  }
  for (const auto* v : {&token_pos, &token_seq, &cell_pos, &table_begin, &tables}) p.insert(p.end(), v->begin(), v->end());
  return p;
}

Tensor* input_i32(Case& c, const std::vector<int32_t>& v) {
  Tensor t = c.buf.tensor(DType::I32, static_cast<int64_t>(v.size()));
  std::memcpy(t.data, v.data(), v.size() * sizeof(int32_t));
  return c.g.external(t);
}

}  // namespace kestrel::test
