// MATMUL on the CPU: activations are rounded to the weight type's vec_dot type once per call,
// then each thread dequantizes its weight rows one at a time (never the whole matrix) and takes
// SIMD dot products with every activation column.
#include "backends/cpu/kernels/kernels.h"

#include <vector>

#include "backends/cpu/simd.h"
#include "backends/ref/ops_ref.h"

namespace kestrel::cpu {

void matmul(const Node& n, ThreadPool& pool) {
  const Tensor *w = n.src[0], *x = n.src[1];
  const int64_t K = w->ne[0], N = w->ne[1], M = x->ne[1];
  const DTypeInfo& ti = dtype_info(w->type);
  static thread_local std::vector<float> xr;  // owned by the calling thread, read by all
  xr.resize(static_cast<size_t>(K * M));
  float* xr_data = xr.data();
  const DotF32Fn dot = dot_f32_kernel();
  pool.run([&](int ith, int nth) {
    int64_t m0, m1;
    ThreadPool::split(M, ith, nth, &m0, &m1);
    for (int64_t m = m0; m < m1; ++m) ref::round_activations(ti.vec_dot_type, x->f32(m), xr_data + m * K, K);
  });
  pool.run([&](int ith, int nth) {
    thread_local std::vector<float> wrow;
    wrow.resize(static_cast<size_t>(K));
    int64_t r0, r1;
    ThreadPool::split(N, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; ++r) {
      const float* wr = w->type == DType::F32 ? reinterpret_cast<const float*>(w->row(r)) : wrow.data();
      if (w->type != DType::F32) ti.to_float(w->row(r), wrow.data(), K);
      for (int64_t m = 0; m < M; ++m) n.dst->f32(m)[r] = dot(wr, xr_data + m * K, K);
    }
  });
}

}  // namespace kestrel::cpu
