// NVFP4 (GGML type 40): hand-built blocks against values computed from the format's fields (E2M1
// elements, UE4M3 scales per 16), GGML's quantizer rounding on hand-computed cases, and the
// quantize -> dequantize error on random data.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/quants/quant_blocks.h"
#include "tensor/quants/quants.h"

using namespace kestrel;

namespace {

// True E2M1 values: sign bit 3, then {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
double e2m1(int q) {
  static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return q & 8 ? -mag[q & 7] : mag[q & 7];
}
// A UE4M3 scale byte as GGML reads it: bits 6..0 as an E4M3 magnitude (bias 7, subnormal m * 2^-9),
// bit 7 ignored, 0x7F as 0 (and 0xFF, which passes that check, as exponent 15, mantissa 7).
double ue4m3(uint8_t x) {
  if (x == 0x7F) return 0;
  const int e = (x >> 3) & 15, m = x & 7;
  return e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
}

std::vector<float> dequant(const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> out(n);
  dtype_info(DType::NVFP4).to_float(bytes.data(), out.data(), n);
  return out;
}

}  // namespace

TEST_CASE("nvfp4: the type table and hand-built blocks, every scale byte and code") {
  const DTypeInfo& info = dtype_info(DType::NVFP4);
  CHECK(info.block_size == QK_NVFP4);
  CHECK(info.type_size == sizeof(block_nvfp4));
  CHECK(info.vec_dot_type == DType::Q8_0);
  DType parsed;
  REQUIRE(dtype_from_name("nvfp4", &parsed));
  CHECK(parsed == DType::NVFP4);
  // 64 blocks x 4 scales: every byte 0..255 once as a scale; codes at random.
  const int nb = 64;
  std::mt19937 rng(17);
  std::vector<uint8_t> bytes(nb * 36);
  std::vector<double> want(nb * 64);
  for (int b = 0; b < nb; ++b) {
    for (int s = 0; s < 4; ++s) {
      const auto d = static_cast<uint8_t>(4 * b + s);
      bytes[36 * b + s] = d;  // the four scales first
      for (int j = 0; j < 8; ++j) {
        const int lo = static_cast<int>(rng() % 16), hi = static_cast<int>(rng() % 16);
        bytes[36 * b + 4 + 8 * s + j] = static_cast<uint8_t>(lo | (hi << 4));
        want[64 * b + 16 * s + j] = e2m1(lo) * ue4m3(d);      // low nibble: element j of sub-block s
        want[64 * b + 16 * s + j + 8] = e2m1(hi) * ue4m3(d);  // high nibble: element j + 8
      }
    }
  }
  const auto got = dequant(bytes, nb * 64);
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += static_cast<double>(got[i]) != want[i];
  CHECK(bad == 0);
}

TEST_CASE("nvfp4: GGML's scale rounding (amax / 6, half up) and nearest levels, first on ties") {
  // Sub-block 0: amax 6 -> scale 1.0 (0x38), read back as 0.5 against doubled levels.
  // Sub-block 1: amax / 6 = 1.0625 -> the fourth mantissa bit rounds up: 1.125 (0x39).
  // Sub-block 2: amax / 6 = 3 / 512 -> subnormal, 3.5 truncated to 3 (0x03).
  // Sub-block 3: all zero -> scale 0, every code 0.
  std::vector<float> x(64, 0.0f);
  x[0] = 6.0f, x[1] = -3.0f, x[2] = 0.25f, x[3] = 2.5f, x[9] = -0.75f;
  x[16] = 6.375f, x[17] = 1.6875f;
  x[32] = 18.0f / 512, x[33] = -3.0f / 512;
  block_nvfp4 b;
  quants::quantize_nvfp4(x.data(), &b, 64);
  CHECK(b.d[0] == 0x38);
  CHECK(b.d[1] == 0x39);
  CHECK(b.d[2] == 0x03);
  CHECK(b.d[3] == 0x00);
  // Scale 1: 6 -> level 6 (code 7); -3 -> code 13; 0.25 ties 0 and 0.5 -> 0 (first); 2.5 ties 2
  // and 3 -> 2 (code 4); element 9 (-0.75) ties -0.5 and -1 -> -0.5 (code 9, before 10).
  CHECK((b.qs[0] & 15) == 7);
  CHECK((b.qs[1] & 15) == 13);
  CHECK((b.qs[2] & 15) == 0);
  CHECK((b.qs[3] & 15) == 4);
  CHECK((b.qs[1] >> 4) == 9);
  // Scale 1.125: 6.375 / 1.125 = 5.67 -> 6 (code 7); 1.6875 / 1.125 = 1.5 exactly (code 3).
  CHECK((b.qs[8] & 15) == 7);
  CHECK((b.qs[9] & 15) == 3);
  // Scale 3/512: 18/512 -> 6 (code 7); -3/512 -> -1 (code 10).
  CHECK((b.qs[16] & 15) == 7);
  CHECK((b.qs[17] & 15) == 10);
  for (int j = 24; j < 32; ++j) CHECK(b.qs[j] == 0);
  // Large amax saturates at 0x7E (448).
  std::vector<float> big(64, 1.0f);
  big[0] = 1e6f;
  quants::quantize_nvfp4(big.data(), &b, 64);
  CHECK(b.d[0] == 0x7E);
}

TEST_CASE("nvfp4: quantize -> dequantize error on random data") {
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  // Scales whose amax / 6 stays in UE4M3's normal range (a file keeps them there with its
  // per-tensor second scale); below 2^-6 the scale's own steps are 2^-9 and the bound is looser.
  for (float scale : {1.0f, 3.0f, 40.0f}) {
    std::vector<float> x(64 * 32);
    for (float& v : x) v = nd(rng) * scale;
    std::vector<uint8_t> q(32 * 36);
    quants::quantize_nvfp4(x.data(), q.data(), static_cast<int64_t>(x.size()));
    std::vector<float> y(x.size());
    quants::dequantize_nvfp4(q.data(), y.data(), static_cast<int64_t>(x.size()));
    double se = 0, sx = 0;
    for (size_t s = 0; s < x.size() / 16; ++s) {
      double amax = 0;
      for (int j = 0; j < 16; ++j) amax = std::max(amax, std::fabs(static_cast<double>(x[16 * s + j])));
      for (int j = 0; j < 16; ++j) {
        const double e = std::fabs(static_cast<double>(y[16 * s + j]) - x[16 * s + j]);
        // Half the widest level gap (4 -> 6) at a scale within 1/16 of amax / 6.
        CHECK(e <= amax / 6 * 1.0625 + 1e-30);
        se += e * e, sx += static_cast<double>(x[16 * s + j]) * x[16 * s + j];
      }
    }
    INFO("scale " << scale << " relative RMS " << std::sqrt(se / sx));
    CHECK(std::sqrt(se / sx) < 0.12);
  }
}
