// FP8 E4M3 (tensor/quants/fp8.h) and Kestrel's FP8 blocks: every code against its value computed
// from the OCP fields, the encoder against a brute-force search over all 256 codes (nearest,
// ties to the even code, saturation at 448), and block (de)quantization on random data.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "tensor/dtype.h"
#include "tensor/quants/fp8.h"
#include "tensor/quants/quant_blocks.h"
#include "tensor/quants/quants.h"

using namespace kestrel;

namespace {

// The OCP E4M3 value of a code, from its fields (NaN for S.1111.111).
double e4m3_value(uint8_t c) {
  const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
  if (e == 15 && m == 7) return NAN;
  const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return s ? -v : v;
}

// Nearest finite code by search; ties to the code with an even mantissa; beyond 448 → ±448.
uint8_t e4m3_encode_search(float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xFF : 0x7F;
  const double a = std::fabs(static_cast<double>(x));
  int best = 0;
  double best_err = INFINITY;
  for (int c = 0; c < 0x7F; ++c) {  // the non-negative finite codes, in increasing value
    const double err = std::fabs(e4m3_value(static_cast<uint8_t>(c)) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) best = c, best_err = err;
  }
  return static_cast<uint8_t>(best | (std::signbit(x) ? 0x80 : 0));
}

uint8_t encode(float x) { return e4m3_from_fp32_bits(fp32_to_bits(x)); }
float decode(uint8_t c) { return fp32_from_bits(e4m3_to_fp32_bits(c)); }

}  // namespace

TEST_CASE("fp8 e4m3: every code decodes to its OCP value") {
  for (int c = 0; c < 256; ++c) {
    INFO("code " << c);
    const double want = e4m3_value(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      CHECK(std::isnan(decode(static_cast<uint8_t>(c))));
      continue;
    }
    CHECK(static_cast<double>(decode(static_cast<uint8_t>(c))) == want);
    CHECK(std::signbit(decode(static_cast<uint8_t>(c))) == ((c & 0x80) != 0));  // -0 too
    CHECK(encode(decode(static_cast<uint8_t>(c))) == c);
  }
  CHECK(decode(0x7E) == 448.0f);
  CHECK(decode(0x01) == std::ldexp(1.0f, -9));
  CHECK(decode(0x08) == std::ldexp(1.0f, -6));
}

TEST_CASE("fp8 e4m3: encoding rounds to nearest even and saturates, as a search over the codes") {
  std::vector<float> xs = {0.0f, -0.0f, 448.0f, 449.0f, 463.99f, 464.0f, 1e6f, -1e30f, INFINITY, -INFINITY,
                           std::ldexp(1.0f, -10), std::ldexp(1.0f, -10) * 1.0001f, std::ldexp(3.0f, -11),
                           std::ldexp(1.0f, -12), 1e-40f, -1e-44f, 1.0625f, 1.1875f, 17.0f, 19.0f, -240.0f};
  // Every midpoint between neighbouring codes, and its float neighbours.
  for (int c = 0; c < 0x7E; ++c) {
    const float mid = static_cast<float>((e4m3_value(static_cast<uint8_t>(c)) + e4m3_value(static_cast<uint8_t>(c + 1))) / 2);
    xs.insert(xs.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), -mid});
  }
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> expo(-14.0f, 10.0f), sign(-1.0f, 1.0f);
  for (int i = 0; i < 20000; ++i) xs.push_back(std::copysign(std::exp2(expo(rng)), sign(rng)));
  int wrong = 0;
  for (float x : xs) {
    const uint8_t got = encode(x), want = e4m3_encode_search(x);
    if (got != want && ++wrong < 10) FAIL_CHECK("x = " << x << ": code " << int(got) << ", search " << int(want));
  }
  CHECK(wrong == 0);
  CHECK(encode(NAN) == 0x7F);
  CHECK(encode(INFINITY) == 0x7E);
  CHECK(encode(-INFINITY) == 0xFE);
}

TEST_CASE("fp8 blocks: hand-built bytes dequantize to d * e4m3") {
  std::mt19937 rng(5);
  const int nb = 3;
  std::vector<uint8_t> bytes(nb * sizeof(block_fp8));
  std::vector<double> want(nb * QK_FP8);
  for (int b = 0; b < nb; ++b) {
    const float d = std::ldexp(static_cast<float>(rng() % 1000 + 1), -12) * (b == 1 ? -1.0f : 1.0f);
    std::memcpy(&bytes[b * sizeof(block_fp8)], &d, 4);  // the scale first, then 128 codes
    for (int j = 0; j < QK_FP8; ++j) {
      uint8_t c;
      do c = static_cast<uint8_t>(rng()); while ((c & 0x7F) == 0x7F);
      bytes[b * sizeof(block_fp8) + 4 + j] = c;
      want[b * QK_FP8 + j] = static_cast<double>(d) * e4m3_value(c);
    }
  }
  std::vector<float> got(nb * QK_FP8);
  // Unaligned source: the rows of a file need not be.
  std::vector<uint8_t> shifted(bytes.size() + 1);
  std::memcpy(shifted.data() + 1, bytes.data(), bytes.size());
  dtype_info(DType::FP8_E4M3).to_float(shifted.data() + 1, got.data(), nb * QK_FP8);
  for (size_t i = 0; i < got.size(); ++i) REQUIRE(static_cast<double>(got[i]) == doctest::Approx(want[i]).epsilon(1e-7));
  CHECK(dtype_info(DType::FP8_E4M3).block_size == QK_FP8);
  CHECK(dtype_info(DType::FP8_E4M3).type_size == sizeof(block_fp8));
  DType parsed;
  REQUIRE(dtype_from_name("FP8_E4M3", &parsed));
  CHECK(parsed == DType::FP8_E4M3);
}

TEST_CASE("fp8 blocks: d = amax / 448, codes of x * 448 / amax, error within half a step") {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float scale : {1.0f, 0.003f, 2000.0f}) {
    std::vector<float> x(4 * QK_FP8);
    for (float& v : x) v = nd(rng) * scale;
    x[5] = 0.0f;
    std::fill(x.begin() + 2 * QK_FP8, x.begin() + 3 * QK_FP8, 0.0f);  // an all-zero block: d = 0
    std::vector<block_fp8> q(4);
    quants::quantize_fp8_e4m3(x.data(), q.data(), static_cast<int64_t>(x.size()));
    std::vector<float> y(x.size());
    quants::dequantize_fp8_e4m3(q.data(), y.data(), static_cast<int64_t>(x.size()));
    double se = 0, sx = 0;
    for (int b = 0; b < 4; ++b) {
      float amax = 0;
      for (int j = 0; j < QK_FP8; ++j) amax = std::max(amax, std::fabs(x[b * QK_FP8 + j]));
      CHECK(q[b].d == amax / 448.0f);
      for (int j = 0; j < QK_FP8; ++j) {
        const float v = x[b * QK_FP8 + j];
        CHECK(q[b].qs[j] == e4m3_encode_search(amax != 0.0f ? v * (448.0f / amax) : 0.0f));
        // 3 mantissa bits: half a step is 2^-4 of the value; below 2^-6 (of 448) the step is fixed.
        const double tol = std::max(std::fabs(v) / 16.0, std::ldexp(amax / 448.0, -10)) * 1.0001;
        CHECK(std::fabs(static_cast<double>(y[b * QK_FP8 + j]) - v) <= tol);
        se += (static_cast<double>(y[b * QK_FP8 + j]) - v) * (static_cast<double>(y[b * QK_FP8 + j]) - v);
        sx += static_cast<double>(v) * v;
      }
    }
    CHECK(std::sqrt(se / sx) < 0.03);  // measured ~0.02 on normal data
  }
}

TEST_CASE("fp8 blocks survive non-finite and extreme input") {
  std::vector<float> x(QK_FP8, 1.0f);
  x[0] = NAN, x[1] = INFINITY, x[2] = 3e38f, x[3] = 1e-42f, x[4] = -INFINITY;
  block_fp8 b;
  quants::quantize_fp8_e4m3(x.data(), &b, QK_FP8);
  std::vector<float> y(QK_FP8);
  quants::dequantize_fp8_e4m3(&b, y.data(), QK_FP8);
  CHECK(std::isinf(b.d));  // amax is infinite: the block cannot be represented
  CHECK(std::isnan(y[0]));
}
