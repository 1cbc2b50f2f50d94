// Q4_K/Q5_K's twelve scale bytes unpacked a 32-bit word at a time (sub-blocks 0-3 keep 6 bits in
// bytes 0-3 / 4-7; 4-7 keep 4 bits in bytes 8-11 and their top 2 in the top bits of bytes 0-7).
// Scalar on purpose: the file-layout kernels unpack one row at a time, on the integer ALUs that
// the vector kernels leave idle (the Q4_K_R8 word kernels unpack a unit's eight rows at once in
// vector registers, where the layout puts them in planes). Also the mins' activation pairs of the
// word order. Plain code, no intrinsics: shared by kernel files compiled for different targets.
#pragma once
#include <cstdint>
#include <cstring>

namespace kestrel::cpu::qdirect {
// Internal linkage: each kernel file keeps its own copy, compiled for its own target (an inline
// function shared across targets could be merged into the wrong one by the linker).
namespace {

struct Q4kScales {
  uint32_t sc[2], mn[2];  // eight 6-bit scales, eight 6-bit mins, one per byte
  explicit Q4kScales(const uint8_t* q) : Q4kScales(word(q), word(q + 4), word(q + 8)) {}
  static uint32_t word(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  Q4kScales(uint32_t w0, uint32_t w1, uint32_t w2) {
    constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
    sc[0] = w0 & k6;
    sc[1] = (w2 & k4) | (((w0 >> 6) & k2) << 4);
    mn[0] = w1 & k6;
    mn[1] = ((w2 >> 4) & k4) | (((w1 >> 6) & k2) << 4);
  }
  uint64_t scales() const { return sc[0] | uint64_t{sc[1]} << 32; }
  uint64_t mins() const { return mn[0] | uint64_t{mn[1]} << 32; }
};

// One activation column's sums over a super-block's eight 32-value sub-blocks (bs: its sixteen
// sums of 16 codes), paired as the Q4_K_R8 kernels weight them by the mins (vpdpwssd): sub-blocks
// (0, 2), (1, 3), (4, 6), (5, 7) as [low | high] int16 in the low 32 bits of p[0..3] (a sum of 32
// codes of magnitude <= 127 fits an int16).
inline void q4k_min_pairs(const int32_t* bs, int64_t* p) {
  int32_t ps[8];
  for (int j = 0; j < 8; ++j) ps[j] = bs[2 * j] + bs[2 * j + 1];
  constexpr int kPairs[4][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
  for (int i = 0; i < 4; ++i)
    p[i] = static_cast<int64_t>((static_cast<uint32_t>(ps[kPairs[i][0]]) & 0xFFFF) |
                                (static_cast<uint32_t>(ps[kPairs[i][1]]) << 16));
}

}  // namespace
}  // namespace kestrel::cpu::qdirect
