// GET_ROWS from a regrouped table (a tied embedding / output matrix the CPU placed grouped by
// eight rows): each row is copied out of its group, then converted like any row of its type.
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/repacked.h"

namespace kestrel::cpu {

void get_rows_grouped(const Node& n, int64_t i0, int64_t i1) {
  const Tensor* table = n.src[0];
  const int32_t* ids = static_cast<const int32_t*>(n.src[1]->data);
  const int64_t K = table->ne[0];
  std::vector<uint8_t> row(table->row_bytes());
  const ToFloatFn to_float = dtype_info(table->type).to_float;
  for (int64_t i = i0; i < i1; ++i) {
    grouped_row(kernel_type(*table), static_cast<const uint8_t*>(table->data), K, ids[i], row.data());
    to_float(row.data(), n.dst->f32(i), K);
  }
}

}  // namespace kestrel::cpu
