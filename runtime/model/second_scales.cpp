// Second-level scales: a per-tensor (or per-expert) F32 factor stored beside a matrix as a tensor
// of its own, "<name>.scale" beside "<name>.weight". NVFP4 files converted from ModelOpt
// checkpoints carry one per matrix (weight_scale_2: the dequantized weight is code x block scale x
// this factor); llama.cpp multiplies the matmul's output by it before any bias. The builders do
// the same (Builder::linear, Builder::linear_id) through a MUL by the factor expanded here into a
// vector each backend already broadcasts: [N] for a matrix [K, N], and an [N, n] table for n
// stacked matrices [K, N, n] (experts, or MLA's per-head products), gathered per slot.
//
// "<name>.input_scale" (the calibration of FP4 activations, for W4A4 kernels) is checked and not
// used: activations are rounded to Q8_0 here, as llama.cpp's NVFP4 dot product does.
#include <cmath>
#include <string>
#include <string_view>

#include "model/model.h"

namespace kestrel {
namespace {

constexpr std::string_view kScale = ".scale", kInputScale = ".input_scale";

}  // namespace

const Tensor* Model::second_scale(const Tensor* w) const {
  auto it = second_scales_.find(w);
  return it == second_scales_.end() ? nullptr : it->second;
}

Status Model::bind_second_scales() {
  const gguf::File& f = *file_;
  for (const gguf::TensorInfo& ti : f.tensors()) {
    const std::string_view name = ti.name;
    const bool input = name.ends_with(kInputScale);
    if (!input && !name.ends_with(kScale)) continue;
    const std::string base(name.substr(0, name.size() - (input ? kInputScale : kScale).size()));
    auto wit = tensors_.find(base + ".weight");
    if (wit == tensors_.end()) continue;  // not a matrix's scale: a tensor the architecture may bind itself
    const Tensor& w = wit->second;
    const auto refuse = [&](kestrel_status code, const std::string& why) {
      return Error(code, f.path() + ": tensor '" + ti.name + "' (second-level scale of '" + base + ".weight'): " + why);
    };
    if (w.ne[1] == 1 && w.ne[2] == 1) return refuse(KESTREL_ERR_UNSUPPORTED, "the weight is not a matrix");
    const int64_t n = w.ne[2];  // stacked matrices, each with its own factor or all with one
    if (ti.type != DType::F32) return refuse(KESTREL_ERR_FORMAT, "must be F32, is " + std::string(dtype_name(ti.type)));
    if (w.ne[3] != 1 || (ti.n_elements() != 1 && ti.n_elements() != n))
      return refuse(KESTREL_ERR_FORMAT, "must hold 1" + (n > 1 ? " or " + std::to_string(n) : std::string()) +
                                            " values, holds " + std::to_string(ti.n_elements()));
    const auto* v = reinterpret_cast<const float*>(f.tensor_data(ti));
    for (int64_t i = 0; i < ti.n_elements(); ++i)
      if (!std::isfinite(v[i])) return refuse(KESTREL_ERR_FORMAT, "value " + std::to_string(i) + " is not finite");
    if (input) continue;
    if (&w == weights_.tok_embd)
      return refuse(KESTREL_ERR_UNSUPPORTED, "the token embedding table is gathered, and gathered rows are not scaled");
    for (const LayerWeights& lw : weights_.layers)
      if (&w == lw.ssm_conv1d || &w == lw.ssm_norm)
        return refuse(KESTREL_ERR_UNSUPPORTED, "the Mamba ops read it as values, not as a matrix whose product is scaled");
    if (n > 1 && tensors_.count(base + ".bias"))
      return refuse(KESTREL_ERR_UNSUPPORTED, "stacked matrices with a bias: the bias is added inside the expert product, before the scale");
    const int64_t N = w.ne[1];
    auto& table = scale_storage_.emplace_back(static_cast<size_t>(N * n));
    for (int64_t e = 0; e < n; ++e)
      for (int64_t r = 0; r < N; ++r) table[static_cast<size_t>(e * N + r)] = v[ti.n_elements() == 1 ? 0 : e];
    std::string key = std::string(name) + "/expanded";
    Tensor t = make_tensor(DType::F32, N, n, 1, 1, table.data());
    t.name = key;
    auto [it, fresh] = tensors_.emplace(std::move(key), std::move(t));
    if (!fresh) return refuse(KESTREL_ERR_FORMAT, "the file already has a tensor named '" + it->first + "'");
    second_scales_[&w] = &it->second;
  }
  return Status::Ok();
}

}  // namespace kestrel
