// Requantizing a GGUF model (what `kestrel quantize` runs), compatible with llama-quantize:
//  - the TYPE names and the file type numbers written to general.file_type are llama.cpp's
//    (LLAMA_FTYPE_*); "Q4_K", "Q5_K" and "Q3_K" are aliases of the _M mixes, as there;
//  - each tensor's type follows llama.cpp's llama_tensor_get_type (no importance matrix): which
//    tensors are quantized at all (2-D and 3-D "*weight" tensors except norms, the MoE router, …),
//    the per-tensor choices of each mix (output.weight / tied token_embd to Q6_K, attn_v and
//    ffn_down of the use_more_bits layers to Q6_K in Q4_K_M/Q5_K_M, 8-expert models' attn_k/attn_v
//    to Q8_0, …), and the fallback when a row length fits no block of the chosen type
//    (Q2_K/Q3_K → Q4_0, Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0, then F16 when nothing fits —
//    where llama-quantize refuses, we keep going with F16);
//  - the quantizers are GGML's reference ones, so Q8_0/Q4_0/…/K-quant tensors are byte-identical
//    to llama-quantize's;
//  - metadata: every input key is copied, then general.quantization_version = 2 and
//    general.file_type are (re)set at the end, as llama-quantize leaves them; general.alignment is
//    kept. Tensors keep the input file's order.
// Usage: find_file_type("q4_k_m") → QuantizeOptions → quantize_file(in, out, options).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"
#include "tensor/dtype.h"

namespace kestrel::quant {

// llama.cpp's llama_ftype values (written to general.file_type).
enum class FileType : uint32_t {
  ALL_F32 = 0,
  MOSTLY_F16 = 1,
  MOSTLY_Q4_0 = 2,
  MOSTLY_Q4_1 = 3,
  MOSTLY_Q8_0 = 7,
  MOSTLY_Q5_0 = 8,
  MOSTLY_Q5_1 = 9,
  MOSTLY_Q2_K = 10,
  MOSTLY_Q3_K_S = 11,
  MOSTLY_Q3_K_M = 12,
  MOSTLY_Q3_K_L = 13,
  MOSTLY_Q4_K_S = 14,
  MOSTLY_Q4_K_M = 15,
  MOSTLY_Q5_K_S = 16,
  MOSTLY_Q5_K_M = 17,
  MOSTLY_Q6_K = 18,
  MOSTLY_IQ4_NL = 25,
  MOSTLY_BF16 = 32,
  MOSTLY_MXFP4_MOE = 38,
  // Kestrel's own (docs/LOW_PRECISION.md), numbered like its type ids, apart from llama.cpp's.
  MOSTLY_FP8 = 0x4B000001,
};

// One accepted TYPE name.
struct FileTypeName {
  const char* name;       // as the user types it (matched case-insensitively)
  FileType ftype;
  DType default_type;     // the type most tensors get
  const char* note;       // one line for the usage list ("alias for Q4_K_M", …)
};

// Every accepted TYPE name, in the order the usage lists them.
std::span<const FileTypeName> file_type_names();
// The entry for a TYPE name (case-insensitive), nullptr if unknown.
const FileTypeName* find_file_type(std::string_view name);
// The canonical name of a file type ("Q4_K_M").
const char* file_type_name(FileType ftype);

struct QuantizeOptions {
  FileType ftype = FileType::MOSTLY_Q8_0;
  int n_threads = 0;              // 0: every core this process may use
  bool pure = false;              // no mix rules: every quantized tensor gets the default type
  bool allow_requantize = false;  // accept already-quantized input tensors (dequantized first)
  // Called after each tensor with the fraction of input bytes done; return false to cancel.
  std::function<bool(float)> progress;
};

// What happens to one tensor.
struct TensorPlan {
  std::string name;
  DType from = DType::F32;
  DType to = DType::F32;
  bool fallback = false;  // `to` replaces a type whose block does not fit the row length
  size_t out_bytes = 0;
};

struct QuantizeReport {
  std::vector<TensorPlan> tensors;  // input order
  uint64_t in_file_bytes = 0, out_file_bytes = 0;
  double seconds = 0;
};

// The per-tensor types llama-quantize would choose for `in` (no data is touched). Fails on
// tensors it cannot handle (a type that cannot be converted, a quantized input without
// allow_requantize, an expert tensor whose layer cannot be read from its name).
Expected<std::vector<TensorPlan>> plan_quantization(const gguf::File& in, const QuantizeOptions& opt);

// The type that replaces t when its block does not divide a row of ncols values (llama.cpp's
// tensor_type_fallback: Q4_K -> Q5_0, Q6_K -> Q8_0, ..., else F16); t itself when it fits.
DType fallback_for(DType t, int64_t ncols, bool* replaced);

// Quantizes `n_rows` rows of `n_per_row` values from src (type `from`: F32/F16/BF16, or any type
// with a dequantizer) into dst (type `to`), rows spread over n_threads threads. n_per_row must be
// a multiple of both block sizes.
Status convert_rows(DType from, const void* src, DType to, void* dst, int64_t n_rows,
                    int64_t n_per_row, int n_threads);

// Reads in_path, writes out_path (through a temporary "<out_path>.part", renamed at the end, so a
// failure leaves no half-written file). out_path must not be the input file.
Expected<QuantizeReport> quantize_file(const std::string& in_path, const std::string& out_path,
                                       const QuantizeOptions& opt);

}  // namespace kestrel::quant
