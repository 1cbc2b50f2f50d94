// The split-rows layout of Q4_0 and Q8_0 matrices (kernels.h, kLayoutSplitRows): made on the
// host, once, while the weights are uploaded (backend_cuda.cu).
#include <cstring>

#include "backends/backend.h"

#include "backends/cuda/kernels.h"
#include "tensor/quants/quant_blocks.h"

namespace kestrel::cuda {
namespace {

template <class Block>
void split_row(int64_t nb, const uint8_t* src, uint8_t* dst) {
  constexpr size_t kCode = sizeof(Block{}.qs);
  uint8_t* scales = dst + nb * static_cast<int64_t>(kCode);
  for (int64_t b = 0; b < nb; ++b) {
    Block blk;
    std::memcpy(&blk, src + b * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
    std::memcpy(dst + b * static_cast<int64_t>(kCode), blk.qs, kCode);
    std::memcpy(scales + 2 * b, &blk.d, 2);
  }
}

}  // namespace

bool splits_rows(DType t, const int64_t ne[4]) {
  static_assert(sizeof(block_q4_0) == 2 + kSplitCodeBytes<DType::Q4_0> && sizeof(block_q8_0) == 2 + kSplitCodeBytes<DType::Q8_0>);
  return (t == DType::Q4_0 || t == DType::Q8_0) && ne[0] % 256 == 0 && ne[1] > 1;
}

bool split_layout_enabled() {
  return !repack_disabled_by_env() && !reference_kernels_only();
}

RowLayout row_layout(const Tensor* w) {
  RowLayout rl;
  rl.split_nb = w->layout == kLayoutSplitRows ? w->ne[0] / 32 : 0;
  rl.aligned16 = reinterpret_cast<uintptr_t>(w->data) % 16 == 0 && w->nb[1] % 16 == 0 && w->nb[2] % 16 == 0 && w->nb[3] % 16 == 0;
  return rl;
}

void split_rows(DType t, int64_t K, int64_t rows, const uint8_t* src, uint8_t* dst) {
  const int64_t nb = K / 32, row_bytes = static_cast<int64_t>(dtype_row_size(t, K));
  for (int64_t r = 0; r < rows; ++r) {
    if (t == DType::Q4_0) split_row<block_q4_0>(nb, src + r * row_bytes, dst + r * row_bytes);
    else split_row<block_q8_0>(nb, src + r * row_bytes, dst + r * row_bytes);
  }
}

}  // namespace kestrel::cuda
