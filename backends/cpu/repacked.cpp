#include "backends/cpu/repacked.h"

#include <cstring>

namespace kestrel::cpu {
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
  Field f[33];
};

constexpr Layout kQ4_0R8 = {64, 36, 3, {{{{0, 2}}, 1}, {{{18, 2}}, 1}, {{{2, 16}, {20, 16}}, 2}}};
// Q8_0_R8's codes in word order: field k is word k (codes 4k..4k+3) of the first block, then of
// the second.
constexpr Field q8_word(int k) { return {{{2 + 4 * k, 4}, {36 + 4 * k, 4}}, 2}; }
constexpr Layout kQ8_0R8 = {64, 68, 10, {{{{0, 2}}, 1}, {{{34, 2}}, 1}, q8_word(0), q8_word(1), q8_word(2),
                                        q8_word(3), q8_word(4), q8_word(5), q8_word(6), q8_word(7)}};
// Q4_K_R8's codes in word order: field (m, k) is word k of the row's 32-byte code group 2m, then
// of group 2m + 1 (the codes start at byte 16 of a block_q4_K).
constexpr Field q4k_word(int m, int k) { return {{{16 + 64 * m + 4 * k, 4}, {48 + 64 * m + 4 * k, 4}}, 2}; }
constexpr Layout kQ4_KR8 = {
    256, 144, 21, {{{{0, 2}}, 1}, {{{2, 2}}, 1}, {{{4, 4}}, 1}, {{{8, 4}}, 1}, {{{12, 4}}, 1},
                   q4k_word(0, 0), q4k_word(0, 1), q4k_word(0, 2), q4k_word(0, 3), q4k_word(0, 4), q4k_word(0, 5),
                   q4k_word(0, 6), q4k_word(0, 7), q4k_word(1, 0), q4k_word(1, 1), q4k_word(1, 2), q4k_word(1, 3),
                   q4k_word(1, 4), q4k_word(1, 5), q4k_word(1, 6), q4k_word(1, 7)}};

// Q6_K_R8 (a block_q6_K: ql[128] at 0, qh[64] at 128, scales[16] at 192, d at 208): a field pairs
// half 0's bytes with half 1's (ql and qh hold each 128-value half at 64 / 32 bytes apart).
constexpr Field q6k_half_pair(int off, int len, int half_stride) { return {{{off, len}, {off + half_stride, len}}, 2}; }
constexpr Field q6k_scales(int p) { return q6k_half_pair(192 + 2 * p, 2, 8); }
constexpr Field q6k_a(int k) { return q6k_half_pair(4 * k, 4, 64); }
constexpr Field q6k_b(int k) { return q6k_half_pair(32 + 4 * k, 4, 64); }
constexpr Field q6k_h(int k) { return q6k_half_pair(128 + 4 * k, 4, 32); }
constexpr Layout kQ6_KR8 = {
    256, 210, 33, {{{{208, 2}}, 1}, q6k_scales(0), q6k_scales(1), q6k_scales(2), q6k_scales(3),
                   q6k_a(0), q6k_b(0), q6k_h(0), q6k_a(1), q6k_b(1), q6k_h(1), q6k_a(2), q6k_b(2), q6k_h(2),
                   q6k_a(3), q6k_b(3), q6k_h(3), q6k_a(4), q6k_b(4), q6k_h(4), q6k_a(5), q6k_b(5), q6k_h(5),
                   q6k_a(6), q6k_b(6), q6k_h(6), q6k_a(7), q6k_b(7), q6k_h(7)}};

const Layout* layout_of(DType grouped) {
  switch (grouped) {
    case Q4_0_R8: return &kQ4_0R8;
    case Q4_K_R8: return &kQ4_KR8;
    case Q8_0_R8: return &kQ8_0R8;
    case Q6_K_R8: return &kQ6_KR8;
    default: return nullptr;
  }
}

// Visits every (plain byte range, grouped offset) of row r's unit u inside its group. L is a
// compile-time layout, so the loops unroll into fixed-size copies (the tiled GEMM copies every
// row out this way; with run-time sizes it cost Q4_K prefill 13%).
template <const Layout& L, class Fn>
inline void for_each_piece(int64_t u, int64_t r, Fn fn) {
  int64_t base = u * 8 * L.unit_bytes;  // the unit's start inside the group
#pragma GCC unroll 33
  for (int i = 0; i < L.n_fields; ++i) {
    const Field& f = L.f[i];
    int64_t at = base + r * f.size();
#pragma GCC unroll 2
    for (int k = 0; k < f.n; ++k) {
      fn(u * L.unit_bytes + f.c[k].off, at, f.c[k].len);
      at += f.c[k].len;
    }
    base += 8 * f.size();
  }
}

template <const Layout& L>
void to_grouped_as(const uint8_t* src, int64_t K, int64_t n_rows, uint8_t* dst) {
  const int64_t nu = K / L.unit_values, rb = nu * L.unit_bytes;
  for (int64_t g = 0; g < n_rows / 8; ++g) {
    uint8_t* out = dst + 8 * g * rb;
    for (int64_t r = 0; r < 8; ++r) {
      const uint8_t* row = src + (8 * g + r) * rb;
      for (int64_t u = 0; u < nu; ++u)
        for_each_piece<L>(u, r, [&](int64_t from, int64_t to, int len) { std::memcpy(out + to, row + from, len); });
    }
  }
}

template <const Layout& L>
void grouped_row_as(const uint8_t* data, int64_t K, int64_t r, uint8_t* out) {
  const int64_t nu = K / L.unit_values, rb = nu * L.unit_bytes;
  const uint8_t* group = data + (r / 8) * 8 * rb;
  for (int64_t u = 0; u < nu; ++u)
    for_each_piece<L>(u, r % 8, [&](int64_t from, int64_t to, int len) { std::memcpy(out + from, group + to, len); });
}

}  // namespace

DType grouped_type(DType plain) {
  switch (plain) {
    case DType::Q4_0: return Q4_0_R8;
    case DType::Q4_K: return Q4_K_R8;
    case DType::Q8_0: return Q8_0_R8;
    case DType::Q6_K: return Q6_K_R8;
    default: return plain;
  }
}

DType plain_type(DType t) {
  switch (t) {
    case Q4_0_R8: return DType::Q4_0;
    case Q4_K_R8: return DType::Q4_K;
    case Q8_0_R8: return DType::Q8_0;
    case Q6_K_R8: return DType::Q6_K;
    default: return t;
  }
}

bool grouped_fits(DType plain, int64_t K, int64_t n_rows) {
  const Layout* l = layout_of(grouped_type(plain));
  return l && K > 0 && K % l->unit_values == 0 && n_rows % 8 == 0;
}

void to_grouped(DType plain, const uint8_t* src, int64_t K, int64_t n_rows, uint8_t* dst) {
  switch (grouped_type(plain)) {
    case Q4_K_R8: return to_grouped_as<kQ4_KR8>(src, K, n_rows, dst);
    case Q8_0_R8: return to_grouped_as<kQ8_0R8>(src, K, n_rows, dst);
    case Q6_K_R8: return to_grouped_as<kQ6_KR8>(src, K, n_rows, dst);
    default: return to_grouped_as<kQ4_0R8>(src, K, n_rows, dst);
  }
}

void grouped_row(DType grouped, const uint8_t* data, int64_t K, int64_t r, uint8_t* out) {
  switch (grouped) {
    case Q4_K_R8: return grouped_row_as<kQ4_KR8>(data, K, r, out);
    case Q8_0_R8: return grouped_row_as<kQ8_0R8>(data, K, r, out);
    case Q6_K_R8: return grouped_row_as<kQ6_KR8>(data, K, r, out);
    default: return grouped_row_as<kQ4_0R8>(data, K, r, out);
  }
}

}  // namespace kestrel::cpu
