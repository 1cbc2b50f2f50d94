#include "tensor/dtype.h"

#include <strings.h>
#include <cstring>

#include "tensor/quants/quants.h"

namespace kestrel {
namespace {

using namespace quants;
constexpr DTypeInfo kTypes[] = {
    // type, name, block, bytes, quantized, to_float, from_float, vec_dot_type
    {DType::F32, "f32", 1, 4, false, dequantize_f32, quantize_f32, DType::F32},
    {DType::F16, "f16", 1, 2, false, dequantize_f16, quantize_f16, DType::F16},
    {DType::BF16, "bf16", 1, 2, false, dequantize_bf16, quantize_bf16, DType::BF16},
    {DType::Q4_0, "q4_0", 32, 18, true, dequantize_q4_0, quantize_q4_0, DType::Q8_0},
    {DType::Q4_1, "q4_1", 32, 20, true, dequantize_q4_1, quantize_q4_1, DType::Q8_1},
    {DType::Q5_0, "q5_0", 32, 22, true, dequantize_q5_0, quantize_q5_0, DType::Q8_0},
    {DType::Q5_1, "q5_1", 32, 24, true, dequantize_q5_1, quantize_q5_1, DType::Q8_1},
    {DType::Q8_0, "q8_0", 32, 34, true, dequantize_q8_0, quantize_q8_0, DType::Q8_0},
    {DType::Q8_1, "q8_1", 32, 36, true, dequantize_q8_1, quantize_q8_1, DType::Q8_1},
    {DType::Q2_K, "q2_K", 256, 84, true, dequantize_q2_k, quantize_q2_k, DType::Q8_K},
    {DType::Q3_K, "q3_K", 256, 110, true, dequantize_q3_k, quantize_q3_k, DType::Q8_K},
    {DType::Q4_K, "q4_K", 256, 144, true, dequantize_q4_k, quantize_q4_k, DType::Q8_K},
    {DType::Q5_K, "q5_K", 256, 176, true, dequantize_q5_k, quantize_q5_k, DType::Q8_K},
    {DType::Q6_K, "q6_K", 256, 210, true, dequantize_q6_k, quantize_q6_k, DType::Q8_K},
    {DType::Q8_K, "q8_K", 256, 292, true, dequantize_q8_k, quantize_q8_k, DType::Q8_K},
    {DType::IQ4_NL, "iq4_nl", 32, 18, true, dequantize_iq4_nl, quantize_iq4_nl, DType::Q8_0},
    {DType::MXFP4, "mxfp4", 32, 17, true, dequantize_mxfp4, quantize_mxfp4, DType::Q8_0},
    {DType::NVFP4, "nvfp4", 64, 36, true, dequantize_nvfp4, quantize_nvfp4, DType::Q8_0},
    // W8A8: activations are FP8 blocks too, so the tensor cores' FP8 products match the reference.
    {DType::FP8_E4M3, "fp8_e4m3", 128, 132, true, dequantize_fp8_e4m3, quantize_fp8_e4m3, DType::FP8_E4M3},
    // The FP8 KV cache: one E4M3 byte per value, no scale (values beyond ±448 saturate).
    {DType::F8_E4M3, "f8_e4m3", 1, 1, false, dequantize_f8_e4m3, quantize_f8_e4m3, DType::F16},
    {DType::I8, "i8", 1, 1, false, nullptr, nullptr, DType::I8},
    {DType::I16, "i16", 1, 2, false, nullptr, nullptr, DType::I16},
    {DType::I32, "i32", 1, 4, false, nullptr, nullptr, DType::I32},
    {DType::I64, "i64", 1, 8, false, nullptr, nullptr, DType::I64},
    {DType::F64, "f64", 1, 8, false, nullptr, nullptr, DType::F64},
};

}  // namespace

const DTypeInfo* dtype_info(uint32_t id) {
  for (const DTypeInfo& t : kTypes)
    if (static_cast<uint32_t>(t.type) == id) return &t;
  return nullptr;
}

const char* dtype_name(DType t) {
  const DTypeInfo* i = dtype_info(static_cast<uint32_t>(t));
  return i ? i->name : "unknown";
}

bool dtype_from_name(const char* name, DType* out) {
  for (const DTypeInfo& t : kTypes) {
    if (strcasecmp(t.name, name) == 0) {
      *out = t.type;
      return true;
    }
  }
  return false;
}

}  // namespace kestrel
