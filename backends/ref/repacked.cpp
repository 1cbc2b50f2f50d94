#include "backends/ref/repacked.h"

#include <cstring>

namespace kestrel::ref {
namespace {

constexpr int64_t kBlock = 18, kCodes = 16;  // block_q4_0: fp16 d, then 16 code bytes

// Byte offsets, inside a group, of row r's scale and codes of block u.
int64_t scale_at(int64_t r, int64_t u) { return (u / 2) * kQ4_0R8PairBytes + (u % 2) * 16 + 2 * r; }
int64_t codes_at(int64_t r, int64_t u) { return (u / 2) * kQ4_0R8PairBytes + 32 + 32 * r + (u % 2) * kCodes; }

}  // namespace

void q4_0_to_r8(const uint8_t* src, int64_t K, int64_t n_rows, uint8_t* dst) {
  const int64_t nb = K / 32, rb = nb * kBlock;
  for (int64_t g = 0; g < n_rows / 8; ++g) {
    uint8_t* out = dst + 8 * g * rb;
    for (int64_t r = 0; r < 8; ++r) {
      const uint8_t* row = src + (8 * g + r) * rb;
      for (int64_t u = 0; u < nb; ++u) {
        std::memcpy(out + scale_at(r, u), row + u * kBlock, 2);
        std::memcpy(out + codes_at(r, u), row + u * kBlock + 2, kCodes);
      }
    }
  }
}

void q4_0_r8_row(const uint8_t* data, int64_t K, int64_t r, uint8_t* out) {
  const int64_t nb = K / 32, rb = nb * kBlock;
  const uint8_t* group = data + (r / 8) * 8 * rb;
  for (int64_t u = 0; u < nb; ++u) {
    std::memcpy(out + u * kBlock, group + scale_at(r % 8, u), 2);
    std::memcpy(out + u * kBlock + 2, group + codes_at(r % 8, u), kCodes);
  }
}

}  // namespace kestrel::ref
