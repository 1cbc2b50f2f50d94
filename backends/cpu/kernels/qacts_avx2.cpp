// The activation quantizer of qgemm.h: one column rounded to Q8_0/Q8_1/Q8_K codes, with their
// scales and the integer sums of each 16 values. Plain loops (the compiler vectorizes them).
#if defined(__x86_64__)
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels/qgemm.h"
#include "backends/ref/quant_blocks.h"
#include "backends/ref/quants.h"
#include "core/fp16.h"

namespace kestrel::cpu {

void QuantizedActs::resize(int64_t k, int64_t cols) {
  K = k;
  q.resize(static_cast<size_t>(k * cols));
  dx.resize(static_cast<size_t>(k / 32 * cols));
  bs.resize(static_cast<size_t>(k / 16 * cols));
}

void qgemm_quantize_acts(DType vdt, const float* xc, int64_t K, QuantizedActs& out, int64_t c) {
  int8_t* q = out.q.data() + c * K;
  float* dx = out.dx.data() + c * K / 32;
  int32_t* bs = out.bs.data() + c * K / 16;
  if (vdt == DType::Q8_K) {
    for (int64_t s = 0; s < K / QK_K; ++s) {
      block_q8_K b;
      ref::quantize_q8_k(xc + s * QK_K, &b, QK_K);
      std::memcpy(q + s * QK_K, b.qs, QK_K);
      for (int j = 0; j < 8; ++j) dx[8 * s + j] = b.d;
      for (int g = 0; g < 16; ++g) bs[16 * s + g] = b.bsums[g];
    }
    return;
  }
  // Q8_0 / Q8_1: llama.cpp's x86 activation quantizer, exactly as ref::round_activations.
  for (int64_t u = 0; u < K / 32; ++u) {
    const float* xb = xc + 32 * u;
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum[2] = {0, 0};
    for (int j = 0; j < 32; ++j) {
      const int v = static_cast<int>(std::nearbyint(xb[j] * id));
      q[32 * u + j] = static_cast<int8_t>(v);
      sum[j / 16] += v;
    }
    dx[u] = round_fp16(amax / 127.0f);
    bs[2 * u] = sum[0];
    bs[2 * u + 1] = sum[1];
  }
}

}  // namespace kestrel::cpu
#endif
