// The arithmetic every quantized matmul kernel follows (qgemm.h), in plain scalar code: the
// oracle the SIMD kernels are tested against bit for bit, and the kernel for the few rows past
// the last multiple of 8. No -mfma here: each std::fma is written out, nothing is contracted.
#include <cmath>

#include "backends/cpu/kernels/qgemm.h"

namespace kestrel::cpu {

float qgemm_dot_canonical(DType type, const UnpackedRows& w, int64_t r, const QuantizedActs& x, int64_t c) {
  const int64_t K = w.K, nu = K / 32;
  const uint8_t* q = w.q.data() + r * K;
  const float* d = w.d.data() + r * nu;
  const int16_t* sub = w.sub.data() + r * K / 2;
  const float* mn = w.mn.data() + r * K / 16;
  const int16_t* mq = w.mq.data() + r * K / 16;
  const float* dm = w.dm.data() + r * nu;
  const int8_t* qx = x.q.data() + c * K;
  const float* dx = x.dx.data() + c * nu;
  const int32_t* bs = x.bs.data() + c * K / 16;
  // K-quants convert their integer sums once per 256-value super-block (one d, one Q8_K scale).
  const int64_t units_per_scale = dtype_info(type).block_size / 32;
  float acc = 0, accm = 0;
  int32_t T = 0, M = 0;
  for (int64_t u = 0; u < nu; ++u) {
    for (int h = 0; h < 2; ++h) {
      const int64_t g = 2 * u + h;  // the 16-value half
      const int32_t s = sub[8 * g];
      int32_t t = 0;
      for (int e = 0; e < 16; ++e) {
        const uint8_t code = q[16 * g + e];
        t += (w.is_signed ? static_cast<int8_t>(code) : code) * qx[16 * g + e];
      }
      T += s * t;
      if (w.centre_shift > 0) T -= (s * bs[g]) * (1 << w.centre_shift);
      if (w.int_mins) M += mq[g] * bs[g];
    }
    if (w.has_m) accm = std::fma(mn[2 * u] * static_cast<float>(bs[2 * u] + bs[2 * u + 1]), dx[u], accm);
    if ((u + 1) % units_per_scale == 0) {
      acc = std::fma(static_cast<float>(T), d[u] * dx[u], acc);
      if (w.int_mins) accm = std::fma(-static_cast<float>(M), dm[u] * dx[u], accm);
      T = M = 0;
    }
  }
  return acc + accm;
}

void qgemm_dot(DType type, const UnpackedRows& w, int64_t n_rows, const QuantizedActs& x, int64_t c0, int64_t c1,
               float* y, int64_t y_stride) {
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t r = 0; r < n_rows; ++r) y[c * y_stride + r] = qgemm_dot_canonical(type, w, r, x, c);
}

}  // namespace kestrel::cpu
