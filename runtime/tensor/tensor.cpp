#include "tensor/tensor.h"

namespace kestrel {

bool Tensor::is_contiguous() const {
  const DTypeInfo& ti = dtype_info(type);
  if (nb[0] != ti.type_size) return false;
  if (nb[1] != row_bytes()) return false;
  if (nb[2] != nb[1] * static_cast<size_t>(ne[1])) return false;
  return nb[3] == nb[2] * static_cast<size_t>(ne[2]);
}

void Tensor::set_contiguous_strides() {
  nb[0] = dtype_info(type).type_size;
  nb[1] = row_bytes();
  nb[2] = nb[1] * static_cast<size_t>(ne[1]);
  nb[3] = nb[2] * static_cast<size_t>(ne[2]);
}

std::string Tensor::shape_string() const {
  std::string s = "[" + std::to_string(ne[0]);
  int last = 3;
  while (last > 1 && ne[last] == 1) --last;
  for (int i = 1; i <= last; ++i) s += ", " + std::to_string(ne[i]);
  return s + "] " + dtype_name(type);
}

Tensor make_tensor(DType type, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, void* data) {
  Tensor t;
  t.type = type;
  t.ne[0] = ne0;
  t.ne[1] = ne1;
  t.ne[2] = ne2;
  t.ne[3] = ne3;
  t.data = data;
  t.set_contiguous_strides();
  return t;
}

}  // namespace kestrel
