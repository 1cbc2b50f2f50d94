#include "backends/ref/repacked.h"

#include <cstring>

namespace kestrel::ref {
namespace {

// A field of a row's unit: up to two byte ranges of the plain unit, stored together.
struct Chunk {
  int off, len;
};
struct Field {
  Chunk c[2];
  int n;
  int size() const { return n == 1 ? c[0].len : c[0].len + c[1].len; }
};
struct Layout {
  int64_t unit_values, unit_bytes;  // per row
  int n_fields;
  Field f[6];
};

constexpr Layout kQ4_0R8 = {64, 36, 3, {{{{0, 2}}, 1}, {{{18, 2}}, 1}, {{{2, 16}, {20, 16}}, 2}}};
constexpr Layout kQ4_KR8 = {
    256, 144, 6, {{{{0, 2}}, 1}, {{{2, 2}}, 1}, {{{4, 4}}, 1}, {{{8, 4}}, 1}, {{{12, 4}}, 1}, {{{16, 128}}, 1}}};

const Layout* layout_of(DType grouped) {
  switch (grouped) {
    case DType::Q4_0_R8: return &kQ4_0R8;
    case DType::Q4_K_R8: return &kQ4_KR8;
    default: return nullptr;
  }
}

// Visits every (plain byte range, grouped offset) of row r's unit u inside its group.
template <class Fn>
void for_each_piece(const Layout& l, int64_t u, int64_t r, Fn fn) {
  int64_t base = u * 8 * l.unit_bytes;  // the unit's start inside the group
  for (int i = 0; i < l.n_fields; ++i) {
    const Field& f = l.f[i];
    int64_t at = base + r * f.size();
    for (int k = 0; k < f.n; ++k) {
      fn(u * l.unit_bytes + f.c[k].off, at, f.c[k].len);
      at += f.c[k].len;
    }
    base += 8 * f.size();
  }
}

}  // namespace

DType grouped_type(DType plain) {
  switch (plain) {
    case DType::Q4_0: return DType::Q4_0_R8;
    case DType::Q4_K: return DType::Q4_K_R8;
    default: return plain;
  }
}

DType plain_type(DType t) {
  switch (t) {
    case DType::Q4_0_R8: return DType::Q4_0;
    case DType::Q4_K_R8: return DType::Q4_K;
    default: return t;
  }
}

bool grouped_fits(DType plain, int64_t K, int64_t n_rows) {
  const Layout* l = layout_of(grouped_type(plain));
  return l && K > 0 && K % l->unit_values == 0 && n_rows % 8 == 0;
}

void to_grouped(DType plain, const uint8_t* src, int64_t K, int64_t n_rows, uint8_t* dst) {
  const Layout& l = *layout_of(grouped_type(plain));
  const int64_t nu = K / l.unit_values, rb = nu * l.unit_bytes;
  for (int64_t g = 0; g < n_rows / 8; ++g) {
    uint8_t* out = dst + 8 * g * rb;
    for (int64_t r = 0; r < 8; ++r) {
      const uint8_t* row = src + (8 * g + r) * rb;
      for (int64_t u = 0; u < nu; ++u)
        for_each_piece(l, u, r, [&](int64_t from, int64_t to, int len) { std::memcpy(out + to, row + from, len); });
    }
  }
}

void grouped_row(DType grouped, const uint8_t* data, int64_t K, int64_t r, uint8_t* out) {
  const Layout& l = *layout_of(grouped);
  const int64_t nu = K / l.unit_values, rb = nu * l.unit_bytes, rr = r % 8;
  const uint8_t* group = data + (r / 8) * 8 * rb;
  // The two layouts spelled out (fixed-size copies): the tiled GEMM unpacks every row this way.
  if (grouped == DType::Q4_K_R8) {
    for (int64_t u = 0; u < nu; ++u) {
      const uint8_t* in = group + u * kQ4_KR8UnitBytes;
      uint8_t* o = out + u * 144;
      std::memcpy(o, in + 2 * rr, 2);
      std::memcpy(o + 2, in + 16 + 2 * rr, 2);
      std::memcpy(o + 4, in + 32 + 4 * rr, 4);
      std::memcpy(o + 8, in + 64 + 4 * rr, 4);
      std::memcpy(o + 12, in + 96 + 4 * rr, 4);
      std::memcpy(o + 16, in + 128 + 128 * rr, 128);
    }
    return;
  }
  for (int64_t u = 0; u < nu; ++u) {  // Q4_0_R8
    const uint8_t* in = group + u * kQ4_0R8UnitBytes;
    uint8_t* o = out + u * 36;
    std::memcpy(o, in + 2 * rr, 2);
    std::memcpy(o + 18, in + 16 + 2 * rr, 2);
    std::memcpy(o + 2, in + 32 + 32 * rr, 16);
    std::memcpy(o + 20, in + 48 + 32 * rr, 16);
  }
}

}  // namespace kestrel::ref
