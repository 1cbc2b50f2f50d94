// The TYPE names `kestrel quantize` accepts: llama-quantize's names for the file types we can
// write, with the same aliases.
#include <strings.h>

#include <string>

#include "quantize/quantize.h"

namespace kestrel::quant {
namespace {

constexpr FileTypeName kNames[] = {
    {"Q8_0", FileType::MOSTLY_Q8_0, DType::Q8_0, "8-bit, 32-value blocks"},
    {"Q4_0", FileType::MOSTLY_Q4_0, DType::Q4_0, "4-bit, 32-value blocks"},
    {"Q4_1", FileType::MOSTLY_Q4_1, DType::Q4_1, "4-bit with offset, 32-value blocks"},
    {"Q5_0", FileType::MOSTLY_Q5_0, DType::Q5_0, "5-bit, 32-value blocks"},
    {"Q5_1", FileType::MOSTLY_Q5_1, DType::Q5_1, "5-bit with offset, 32-value blocks"},
    {"Q2_K", FileType::MOSTLY_Q2_K, DType::Q2_K, "2-bit K-quant mix"},
    {"Q3_K", FileType::MOSTLY_Q3_K_M, DType::Q3_K, "alias for Q3_K_M"},
    {"Q3_K_S", FileType::MOSTLY_Q3_K_S, DType::Q3_K, "3-bit K-quant"},
    {"Q3_K_M", FileType::MOSTLY_Q3_K_M, DType::Q3_K, "3-bit K-quant mix"},
    {"Q3_K_L", FileType::MOSTLY_Q3_K_L, DType::Q3_K, "3-bit K-quant mix, larger"},
    {"Q4_K", FileType::MOSTLY_Q4_K_M, DType::Q4_K, "alias for Q4_K_M"},
    {"Q4_K_S", FileType::MOSTLY_Q4_K_S, DType::Q4_K, "4-bit K-quant"},
    {"Q4_K_M", FileType::MOSTLY_Q4_K_M, DType::Q4_K, "4-bit K-quant mix (Q6_K for some attn_v/ffn_down)"},
    {"Q5_K", FileType::MOSTLY_Q5_K_M, DType::Q5_K, "alias for Q5_K_M"},
    {"Q5_K_S", FileType::MOSTLY_Q5_K_S, DType::Q5_K, "5-bit K-quant"},
    {"Q5_K_M", FileType::MOSTLY_Q5_K_M, DType::Q5_K, "5-bit K-quant mix (Q6_K for some attn_v/ffn_down)"},
    {"Q6_K", FileType::MOSTLY_Q6_K, DType::Q6_K, "6-bit K-quant"},
    {"IQ4_NL", FileType::MOSTLY_IQ4_NL, DType::IQ4_NL, "4-bit non-linear, 32-value blocks"},
    {"MXFP4", FileType::MOSTLY_MXFP4_MOE, DType::MXFP4, "alias for MXFP4_MOE"},
    {"MXFP4_MOE", FileType::MOSTLY_MXFP4_MOE, DType::MXFP4, "MXFP4 experts, Q8_0 elsewhere"},
    {"FP8", FileType::MOSTLY_FP8, DType::FP8_E4M3, "E4M3, 128-value blocks, BF16 output (Kestrel only)"},
    {"F16", FileType::MOSTLY_F16, DType::F16, "half precision"},
    {"BF16", FileType::MOSTLY_BF16, DType::BF16, "bfloat16"},
    {"F32", FileType::ALL_F32, DType::F32, "single precision"},
};

}  // namespace

std::span<const FileTypeName> file_type_names() { return kNames; }

const FileTypeName* find_file_type(std::string_view name) {
  const std::string n(name);
  for (const FileTypeName& f : kNames)
    if (strcasecmp(f.name, n.c_str()) == 0) return &f;
  return nullptr;
}

const char* file_type_name(FileType ftype) {
  // The first entry that is not an alias names the type.
  for (const FileTypeName& f : kNames)
    if (f.ftype == ftype && std::string_view(f.note).rfind("alias", 0) != 0) return f.name;
  return "unknown";
}

}  // namespace kestrel::quant
