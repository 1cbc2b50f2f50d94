// Scalar reference (de)quantization for every block type, bit-compatible with GGML's layouts.
// Slow and obvious on purpose: these are the oracle the fast kernels are tested against.
// n is always a multiple of the type's block size.
#pragma once
#include <cstdint>

namespace kestrel::quants {

void dequantize_f32(const void* src, float* dst, int64_t n);
void dequantize_f16(const void* src, float* dst, int64_t n);
void dequantize_bf16(const void* src, float* dst, int64_t n);
void dequantize_q4_0(const void* src, float* dst, int64_t n);
void dequantize_q4_1(const void* src, float* dst, int64_t n);
void dequantize_q5_0(const void* src, float* dst, int64_t n);
void dequantize_q5_1(const void* src, float* dst, int64_t n);
void dequantize_q8_0(const void* src, float* dst, int64_t n);
void dequantize_q8_1(const void* src, float* dst, int64_t n);
void dequantize_q2_k(const void* src, float* dst, int64_t n);
void dequantize_q3_k(const void* src, float* dst, int64_t n);
void dequantize_q4_k(const void* src, float* dst, int64_t n);
void dequantize_q5_k(const void* src, float* dst, int64_t n);
void dequantize_q6_k(const void* src, float* dst, int64_t n);
void dequantize_q8_k(const void* src, float* dst, int64_t n);
void dequantize_iq4_nl(const void* src, float* dst, int64_t n);
void dequantize_mxfp4(const void* src, float* dst, int64_t n);
void dequantize_fp8_e4m3(const void* src, float* dst, int64_t n);
void dequantize_nvfp4(const void* src, float* dst, int64_t n);
void dequantize_f8_e4m3(const void* src, float* dst, int64_t n);

// Reference quantizers, rounding exactly as GGML's *_ref functions do (so a Q8_0 file we write is
// byte-identical to llama.cpp's).
void quantize_f32(const float* src, void* dst, int64_t n);
void quantize_f16(const float* src, void* dst, int64_t n);
void quantize_bf16(const float* src, void* dst, int64_t n);
void quantize_q4_0(const float* src, void* dst, int64_t n);
void quantize_q4_1(const float* src, void* dst, int64_t n);
void quantize_q5_0(const float* src, void* dst, int64_t n);
void quantize_q5_1(const float* src, void* dst, int64_t n);
void quantize_q8_0(const float* src, void* dst, int64_t n);
void quantize_q8_1(const float* src, void* dst, int64_t n);
void quantize_q8_k(const float* src, void* dst, int64_t n);
// K-quant weight quantizers: GGML's quantize_row_q{2..6}_K_ref, i.e. what llama-quantize writes
// when no importance matrix is given (quants_k_quantize.cpp).
void quantize_q2_k(const float* src, void* dst, int64_t n);
void quantize_q3_k(const float* src, void* dst, int64_t n);
void quantize_q4_k(const float* src, void* dst, int64_t n);
void quantize_q5_k(const float* src, void* dst, int64_t n);
void quantize_q6_k(const float* src, void* dst, int64_t n);
void quantize_iq4_nl(const float* src, void* dst, int64_t n);
void quantize_mxfp4(const float* src, void* dst, int64_t n);
// GGML's quantize_row_nvfp4_ref: per 16 values, scale = ue4m3(amax / 6) (GGML's rounding, half up),
// then the nearest doubled E2M1 level times the decoded scale, the first on ties.
void quantize_nvfp4(const float* src, void* dst, int64_t n);
// Kestrel's FP8 blocks: d = amax / 448, codes = e4m3(x * (448 / amax)), nearest-even, saturating.
void quantize_fp8_e4m3(const float* src, void* dst, int64_t n);
// The FP8 KV cache's plain bytes: e4m3(x), nearest-even, saturating at ±448.
void quantize_f8_e4m3(const float* src, void* dst, int64_t n);

}  // namespace kestrel::quants
