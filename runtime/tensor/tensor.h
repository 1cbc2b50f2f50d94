// Tensors: GGUF dimension order everywhere. ne[0] is the contiguous (fastest) dimension, so a
// weight matrix of N rows with K values each is [K, N]; activations are [n_embd, n_tokens].
// nb[i] is the stride in bytes of dimension i (nb[0] = element/block size).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/dtype.h"

namespace kestrel {

struct Tensor {
  DType type = DType::F32;
  int64_t ne[4] = {1, 1, 1, 1};
  size_t nb[4] = {0, 0, 0, 0};
  void* data = nullptr;
  // 0: the type's own block layout. Other values name a backend's private arrangement of the same
  // bytes (the CPU's rows regrouped by eight): only that backend's kernels read such a tensor.
  uint32_t layout = 0;
  std::string name;

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  size_t row_bytes() const { return dtype_row_size(type, ne[0]); }
  size_t n_bytes() const { return row_bytes() * static_cast<size_t>(n_rows()); }
  bool is_contiguous() const;
  // Pointer to row (i1, i2, i3).
  uint8_t* row(int64_t i1, int64_t i2 = 0, int64_t i3 = 0) const {
    return static_cast<uint8_t*>(data) + i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
  }
  float* f32(int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) const {
    return reinterpret_cast<float*>(row(i1, i2, i3));
  }
  // Sets contiguous strides for the current type and ne.
  void set_contiguous_strides();
  std::string shape_string() const;  // "[64, 512] q8_0"
};

Tensor make_tensor(DType type, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, int64_t ne3 = 1,
                   void* data = nullptr);

}  // namespace kestrel
