// Element types and quantized block layouts, as data. Type ids are GGML's (they are what GGUF
// files store), so the table is indexed by the id found in a file.
#pragma once
#include <cstddef>
#include <cstdint>

namespace kestrel {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,  // internal: 8-bit activations for K-quant dot products
  IQ4_NL = 20,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  BF16 = 30,
  MXFP4 = 39,
  NVFP4 = 40,
  // Kestrel's own types, for formats GGUF has no id for (docs/LOW_PRECISION.md). Ids start at
  // 'K' << 24, far from GGML's (which grow one at a time); llama.cpp refuses a tensor of such a type
  // by name.
  FP8_E4M3 = 0x4B000001,
  // Plain E4M3 bytes, no scale: a KV cache type only (ContextOptions::kv_type), refused in files.
  F8_E4M3 = 0x4B000002,
  // Ids a backend may give its private arrangements of a type's bytes inside its kernels (the CPU's
  // regrouped rows: Tensor::layout). Never in a file, not in the type table: a tensor keeps its
  // file type, and only the backend that placed it maps it to one of these.
  BACKEND_PRIVATE_0 = 1000,
  BACKEND_PRIVATE_1 = 1001,
  BACKEND_PRIVATE_2 = 1002,
  BACKEND_PRIVATE_3 = 1003,
};

// Dequantize n values (n a multiple of block_size) from src to dst.
using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
// Quantize n values (n a multiple of block_size); nullptr where no simple reference exists.
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);

struct DTypeInfo {
  DType type;
  const char* name;        // "q4_0", as GGML spells it
  int64_t block_size;      // values per block (1 for plain types)
  size_t type_size;        // bytes per block
  bool quantized;
  ToFloatFn to_float;      // nullptr for integer types
  FromFloatFn from_float;  // reference quantizer, nullptr if none
  // The type activations are converted to before a dot product with a row of this type
  // (llama.cpp's "vec_dot_type"): F16 for F16, Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4, Q8_1 for
  // Q4_1/Q5_1, Q8_K for the K-quants, F32 for F32.
  DType vec_dot_type;
};

// nullptr if the id is not a type we know.
const DTypeInfo* dtype_info(uint32_t id);
inline const DTypeInfo& dtype_info(DType t) { return *dtype_info(static_cast<uint32_t>(t)); }
const char* dtype_name(DType t);
// Parse "q4_0", "F16", ... (case-insensitive); false if unknown.
bool dtype_from_name(const char* name, DType* out);

// Bytes of a row of n values; n must be a multiple of the block size (check first).
inline size_t dtype_row_size(DType t, int64_t n) {
  const DTypeInfo& i = dtype_info(t);
  return static_cast<size_t>(n / i.block_size) * i.type_size;
}

}  // namespace kestrel
