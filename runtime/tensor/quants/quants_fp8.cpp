// Reference (de)quantization of Kestrel's FP8 blocks (block_fp8: one binary32 scale, 128 E4M3
// codes), and of the FP8 KV cache's plain E4M3 bytes. The CUDA kernels repeat this arithmetic
// step by step (backends/cuda/dequant.cuh), so a block quantized on either side has the same
// bytes.
#include <cmath>
#include <cstring>

#include "core/fp16.h"
#include "tensor/quants/fp8.h"
#include "tensor/quants/quant_blocks.h"
#include "tensor/quants/quants.h"

namespace kestrel::quants {

void dequantize_fp8_e4m3(const void* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK_FP8; ++i, dst += QK_FP8) {
    block_fp8 b;
    std::memcpy(&b, static_cast<const uint8_t*>(src) + i * static_cast<int64_t>(sizeof b), sizeof b);
    for (int j = 0; j < QK_FP8; ++j) dst[j] = b.d * fp32_from_bits(e4m3_to_fp32_bits(b.qs[j]));
  }
}

void quantize_fp8_e4m3(const float* src, void* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK_FP8; ++i, src += QK_FP8) {
    float amax = 0;
    for (int j = 0; j < QK_FP8; ++j) amax = std::fmax(amax, std::fabs(src[j]));  // fmax skips NaN
    block_fp8 b;
    b.d = amax / kFp8E4M3Max;
    const float id = amax != 0.0f ? kFp8E4M3Max / amax : 0.0f;
    for (int j = 0; j < QK_FP8; ++j) b.qs[j] = e4m3_from_fp32_bits(fp32_to_bits(src[j] * id));
    std::memcpy(static_cast<uint8_t*>(dst) + i * static_cast<int64_t>(sizeof b), &b, sizeof b);
  }
}

void dequantize_f8_e4m3(const void* src, float* dst, int64_t n) {
  const uint8_t* s = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_from_bits(e4m3_to_fp32_bits(s[i]));
}

void quantize_f8_e4m3(const float* src, void* dst, int64_t n) {
  uint8_t* d = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = e4m3_from_fp32_bits(fp32_to_bits(src[i]));
}

}  // namespace kestrel::quants
