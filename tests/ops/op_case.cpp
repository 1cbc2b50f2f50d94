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
  for (int threads = 1; threads <= 4; ++threads) {
    CAPTURE(threads);
    auto cpu = make_cpu_backend(threads);
    restore();
    run_graph(*cpu, c.g);
    for (size_t i = 0; i < c.outputs.size(); ++i) {
      const Tensor& got = *c.outputs[i];
      std::vector<float> a = as_floats(got, static_cast<const uint8_t*>(got.data)), b = as_floats(got, want[i].data());
      const int64_t n = got.n_elements();
      Tensor ta = make_tensor(DType::F32, n, 1, 1, 1, a.data()), tb = make_tensor(DType::F32, n, 1, 1, 1, b.data());
      std::string where;
      const double err = got.type == DType::I32 ? compare(ta, tb, 1e-9, 0.0, &where) : compare(ta, tb, tol_abs, tol_rel, &where);
      CHECK_MESSAGE(err <= 1.0, c.name << " (" << threads << " threads): " << where);
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

}  // namespace kestrel::test
