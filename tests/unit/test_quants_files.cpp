// The reference (de)quantizers against files written by llama.cpp (testdata/models): each
// quantized file holds the same weights as its unquantized sibling, so
//  - dequantizing a tensor must come close to the original (relative RMS error within the
//    type's range): this proves the block layouts, K-quants included;
//  - for the types llama-quantize produces with GGML's deterministic reference quantizers (no
//    importance matrix: F16, Q8_0, Q4_0, Q5_0, MXFP4), quantizing the original tensor ourselves
//    must reproduce the file's bytes exactly: this proves the rounding.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "common/testdata.h"
#include "gguf/gguf.h"
#include "tensor/dtype.h"

using namespace kestrel;

namespace {

// Relative RMS error limits by type: the worst values measured over these files times ~1.3
// (f16 2.0e-4, q8_0 0.0062, q6_K 0.0178, q5_K 0.036, q5_0 0.042, q4_K 0.072, q4_0 0.096,
// mxfp4 0.118).
double rms_limit(DType t) {
  switch (t) {
    case DType::F16: return 3e-4;
    case DType::Q8_0: return 0.008;
    case DType::Q6_K: return 0.023;
    case DType::Q5_K: return 0.047;
    case DType::Q5_0: return 0.055;
    case DType::Q4_K: return 0.093;
    case DType::Q4_0: return 0.125;
    case DType::MXFP4: return 0.15;
    default: return 0;  // a type we did not expect in these files
  }
}

// Types whose llama-quantize output comes from GGML's reference quantizer (no imatrix).
bool byte_exact_type(DType t) {
  return t == DType::F16 || t == DType::Q8_0 || t == DType::Q4_0 || t == DType::Q5_0 ||
         t == DType::MXFP4;
}

std::unique_ptr<gguf::File> open_model(const std::string& rel) {
  const std::string path = test::testdata_file("models/" + rel);
  if (path.empty()) return nullptr;
  auto f = gguf::File::open(path);
  if (!f.ok()) {
    FAIL_CHECK("cannot open " << path << ": " << f.status().to_string());
    return nullptr;
  }
  return std::move(f.value());
}

std::vector<float> to_f32(const gguf::File& f, const gguf::TensorInfo& t) {
  const DTypeInfo& info = dtype_info(t.type);
  std::vector<float> out(static_cast<size_t>(t.n_elements()));
  REQUIRE((info.to_float != nullptr));
  REQUIRE(t.n_elements() % info.block_size == 0);
  REQUIRE(t.nbytes == dtype_row_size(t.type, t.n_elements()));
  info.to_float(f.tensor_data(t), out.data(), t.n_elements());
  return out;
}

struct PairResult {
  std::set<DType> compared;  // quantized types whose tensors were compared
  int byte_exact = 0;        // tensors reproduced byte for byte
};

// Compares every tensor of `quant_name` with the same-named tensor of `ref_name`.
PairResult compare_files(const std::string& quant_name, const std::string& ref_name) {
  PairResult res;
  auto q = open_model(quant_name);
  auto r = open_model(ref_name);
  if (!q || !r) return res;
  for (const gguf::TensorInfo& tq : q->tensors()) {
    const gguf::TensorInfo* tr = r->find_tensor(tq.name);
    INFO(quant_name << " tensor " << tq.name << " (" << std::string(dtype_name(tq.type)) << ")");
    REQUIRE(tr != nullptr);
    REQUIRE(tr->n_dims == tq.n_dims);
    for (int d = 0; d < 4; ++d) REQUIRE(tr->ne[d] == tq.ne[d]);
    const std::vector<float> ref = to_f32(*r, *tr);
    if (tq.type == tr->type) {  // kept as is: must be the same bytes
      CHECK(std::memcmp(q->tensor_data(tq), r->tensor_data(*tr), tq.nbytes) == 0);
      continue;
    }
    const std::vector<float> got = to_f32(*q, tq);
    double se = 0, sr = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double e = static_cast<double>(got[i]) - ref[i];
      se += e * e;
      sr += static_cast<double>(ref[i]) * ref[i];
    }
    const double rel = sr > 0 ? std::sqrt(se / sr) : std::sqrt(se);
    CHECK(rel < rms_limit(tq.type));
    res.compared.insert(tq.type);
    if (byte_exact_type(tq.type)) {
      std::vector<uint8_t> mine(tq.nbytes);
      dtype_info(tq.type).from_float(ref.data(), mine.data(), tq.n_elements());
      const bool same = std::memcmp(mine.data(), q->tensor_data(tq), tq.nbytes) == 0;
      CHECK(same);
      res.byte_exact += same;
    }
  }
  return res;
}

void check_types(const PairResult& r, std::initializer_list<DType> want) {
  for (DType t : want) {
    INFO("expected a " << std::string(dtype_name(t)) << " tensor");
    CHECK(r.compared.count(t) == 1);
  }
}

}  // namespace

TEST_CASE("files: llama-gqa q8_0 and q4_k_m against f32") {
  auto a = compare_files("llama-gqa-q8_0.gguf", "llama-gqa-f32.gguf");
  if (a.compared.empty()) return;  // test data missing (reported by testdata_file)
  check_types(a, {DType::Q8_0});
  CHECK(a.byte_exact > 0);
  check_types(compare_files("llama-gqa-q4_k_m.gguf", "llama-gqa-f32.gguf"), {DType::Q4_K, DType::Q6_K});
}

TEST_CASE("files: qwen2 / qwen3 q8_0 and q4_k_m against f32") {
  for (const char* fam : {"qwen2", "qwen3"}) {
    const std::string f = fam;
    auto a = compare_files(f + "-q8_0.gguf", f + "-f32.gguf");
    if (a.compared.empty()) return;
    check_types(a, {DType::Q8_0});
    check_types(compare_files(f + "-q4_k_m.gguf", f + "-f32.gguf"), {DType::Q4_K, DType::Q6_K});
  }
}

TEST_CASE("files: qwen3moe q4_k_m (Q4_K, Q5_K, Q6_K, Q8_0) against f16") {
  auto a = compare_files("qwen3moe-q4_k_m.gguf", "qwen3moe-f16.gguf");
  if (a.compared.empty()) return;
  check_types(a, {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0});
}

TEST_CASE("files: gpt-oss mxfp4_moe (MXFP4, Q8_0) and q4_k_m against f16") {
  auto a = compare_files("gpt-oss-mxfp4_moe.gguf", "gpt-oss-f16.gguf");
  if (a.compared.empty()) return;
  check_types(a, {DType::MXFP4, DType::Q8_0});
  check_types(compare_files("gpt-oss-q4_k_m.gguf", "gpt-oss-f16.gguf"), {DType::Q4_K, DType::Q6_K});
}

TEST_CASE("files: deepseek2 q4_k_m (Q4_K, Q6_K, Q5_0) against f16") {
  auto a = compare_files("deepseek2-q4_k_m.gguf", "deepseek2-f16.gguf");
  if (a.compared.empty()) return;
  check_types(a, {DType::Q4_K, DType::Q6_K, DType::Q5_0});
}

TEST_CASE("files: stories260K q8_0 and q4_0 (Q4_0, Q8_0, F16) against f32") {
  auto a = compare_files("stories260K-q8_0.gguf", "stories260K-f32.gguf");
  if (a.compared.empty()) return;
  check_types(a, {DType::Q8_0, DType::F16});
  check_types(compare_files("stories260K-q4_0.gguf", "stories260K-f32.gguf"),
              {DType::Q4_0, DType::Q8_0, DType::F16});
}
