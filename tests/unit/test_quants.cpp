// Reference (de)quantization: fp16/bf16 exactness, dequantization of hand-built blocks (bytes laid
// out here from the documented GGML layouts, expected values computed independently), GGML's
// exact rounding on hand-computed cases, and quantize -> dequantize error bounds on random data.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tensor/quants/quant_blocks.h"
#include "tensor/quants/quants.h"
#include "core/fp16.h"
#include "tensor/dtype.h"

using namespace kestrel;

namespace {

// ---- independent fp16 / bf16 references (double arithmetic, no bit tricks) ----------------------

double half_value(uint16_t h) {  // finite or inf; caller handles NaN
  const int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  double v = exp == 0 ? std::ldexp(man, -24) : exp == 31 ? INFINITY : std::ldexp(1024 + man, exp - 25);
  return sign ? -v : v;
}

// Round-to-nearest-even float -> half, by scaling to the half quantum of the value's binade.
uint16_t half_from_float_ref(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (a >= 65520.0) return sign | 0x7C00;  // 65504 + half an ulp and above round to inf
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int qexp = a < std::ldexp(1.0, -14) ? -24 : (e - 1) - 10;
  const double r = std::nearbyint(std::ldexp(a, -qexp));  // ties to even (default mode)
  if (qexp == -24) return sign | static_cast<uint16_t>(r);  // r == 1024 is the smallest normal
  return sign | static_cast<uint16_t>(((qexp + 10 + 15) << 10) + (static_cast<int>(r) - 1024));
}

double bf16_value_unbounded(uint16_t p) {  // exponent 255 read as 2^128 (the value past max)
  const int exp = (p >> 7) & 0xFF, man = p & 0x7F;
  const double v = exp == 0 ? std::ldexp(man, -133) : std::ldexp(128 + man, exp - 134);
  return (p & 0x8000) ? -v : v;
}

uint16_t bf16_from_float_ref(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t lo = static_cast<uint16_t>(u >> 16), hi = static_cast<uint16_t>(lo + 1);
  const double el = std::fabs(f - bf16_value_unbounded(lo)), eh = std::fabs(f - bf16_value_unbounded(hi));
  if (el < eh) return lo;
  if (eh < el) return hi;
  return (lo & 1) ? hi : lo;
}

bool is_half_nan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF); }

// ---- helpers --------------------------------------------------------------------------------------

std::vector<float> random_normal(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) {
    do x = nd(rng); while (x == 0.0f);
  }
  return v;
}

void put_u16(std::vector<uint8_t>& b, size_t off, uint16_t v) {
  b[off] = v & 0xFF;
  b[off + 1] = v >> 8;
}
// A random fp16 scale that is exactly representable: k / 2^p.
uint16_t random_half_scale(std::mt19937& rng, float* value) {
  const float v = std::ldexp(static_cast<float>(1 + rng() % 2000), -12 - static_cast<int>(rng() % 4));
  *value = v;
  const uint16_t h = fp32_to_fp16(v);
  REQUIRE(fp16_to_fp32(h) == v);
  return h;
}

std::vector<float> dequant(DType t, const std::vector<uint8_t>& bytes, int64_t n) {
  std::vector<float> out(n);
  dtype_info(t).to_float(bytes.data(), out.data(), n);
  return out;
}

void check_close(const std::vector<float>& got, const std::vector<double>& want, double rel) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    CHECK(std::fabs(got[i] - want[i]) <= rel * std::fabs(want[i]) + 1e-30);
  }
}

}  // namespace

// ---- fp16 / bf16 ---------------------------------------------------------------------------------

TEST_CASE("fp16: every half value decodes exactly and re-encodes to itself") {
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> dec(65536);
  quants::dequantize_f16(all.data(), dec.data(), 65536);
  int bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t hh = static_cast<uint16_t>(h);
    if (is_half_nan(hh)) {
      bad += !std::isnan(dec[h]);
      bad += !is_half_nan(fp32_to_fp16(dec[h]));
      continue;
    }
    bad += static_cast<double>(dec[h]) != half_value(hh);
    bad += std::signbit(dec[h]) != static_cast<bool>(h & 0x8000);  // -0 stays -0
    bad += fp32_to_fp16(dec[h]) != hh;
  }
  CHECK(bad == 0);
  CHECK(fp16_to_fp32(0x0001) == std::ldexp(1.0f, -24));  // smallest subnormal
  CHECK(fp16_to_fp32(0x03FF) == std::ldexp(1023.0f, -24));
  CHECK(fp16_to_fp32(0x7BFF) == 65504.0f);
  CHECK(std::isinf(fp16_to_fp32(0xFC00)));
}

TEST_CASE("fp16: float -> half rounds to nearest even, subnormals, overflow, inf, nan") {
  std::mt19937 rng(1234);
  std::vector<float> xs;
  for (int i = 0; i < 200000; ++i) {
    // Random floats spread over the half range and beyond (exponents 2^-30 .. 2^17).
    const float m = std::uniform_real_distribution<float>(1.0f, 2.0f)(rng);
    float x = std::ldexp(m, static_cast<int>(rng() % 48) - 30);
    if (rng() & 1) x = -x;
    xs.push_back(x);
  }
  // Exact ties and boundaries.
  for (float x : {65504.0f, 65519.99f, 65520.0f, 1e9f, std::ldexp(1.0f, -25), std::ldexp(3.0f, -26),
                  std::ldexp(1.0f, -24) * 1.5f, std::ldexp(1.0f, -24) * 2.5f, 1.0f + std::ldexp(1.0f, -11),
                  1.0f + 3 * std::ldexp(1.0f, -11), std::ldexp(1.0f, -14) * (1.0f - std::ldexp(1.0f, -11)),
                  0.0f, -0.0f, 1e-30f, -1e-30f})
    xs.push_back(x);
  std::vector<uint16_t> got(xs.size());
  quants::quantize_f16(xs.data(), got.data(), static_cast<int64_t>(xs.size()));
  int bad = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (got[i] != half_from_float_ref(xs[i]) && ++bad < 5)
      MESSAGE("x=" << xs[i] << " got " << got[i] << " want " << half_from_float_ref(xs[i]));
  }
  CHECK(bad == 0);
  CHECK(fp32_to_fp16(INFINITY) == 0x7C00);
  CHECK(fp32_to_fp16(-INFINITY) == 0xFC00);
  CHECK(is_half_nan(fp32_to_fp16(NAN)));
  CHECK(fp32_to_fp16(65520.0f) == 0x7C00);
  CHECK(fp32_to_fp16(65519.0f) == 0x7BFF);
  CHECK(fp32_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);              // tie to even: 0
  CHECK(fp32_to_fp16(std::ldexp(3.0f, -25)) == 0x0002);              // 1.5 quanta -> 2
  CHECK(fp32_to_fp16(-std::ldexp(1.0f, -24)) == 0x8001);
}

TEST_CASE("bf16: exact decode, round-to-nearest-even encode over all exponents, nan stays nan") {
  std::mt19937 rng(99);
  std::vector<float> xs;
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    xs.push_back(f);  // every exponent, subnormals included; NaNs possible
  }
  for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::denorm_min(), 1.0f + std::ldexp(1.0f, -8),
                  1.0f + 3 * std::ldexp(1.0f, -8)})
    xs.push_back(x);
  std::vector<uint16_t> got(xs.size());
  quants::quantize_bf16(xs.data(), got.data(), static_cast<int64_t>(xs.size()));
  std::vector<float> back(xs.size());
  quants::dequantize_bf16(got.data(), back.data(), static_cast<int64_t>(xs.size()));
  int bad = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (std::isnan(xs[i])) {
      bad += !std::isnan(back[i]);
      continue;
    }
    bad += got[i] != bf16_from_float_ref(xs[i]);
    uint32_t u = static_cast<uint32_t>(got[i]) << 16;
    float exact;
    std::memcpy(&exact, &u, 4);
    bad += std::memcmp(&exact, &back[i], 4) != 0;
  }
  CHECK(bad == 0);
  CHECK(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);      // tie -> even (down)
  CHECK(fp32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);  // tie -> even (up)
  CHECK(fp32_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);
}

TEST_CASE("f32 copies through unchanged") {
  const auto x = random_normal(64, 5);
  std::vector<uint8_t> q(64 * 4);
  quants::quantize_f32(x.data(), q.data(), 64);
  std::vector<float> y(64);
  quants::dequantize_f32(q.data(), y.data(), 64);
  CHECK(std::memcmp(x.data(), y.data(), 64 * 4) == 0);
}

// ---- the type table -------------------------------------------------------------------------------

TEST_CASE("type table block sizes match the block structs") {
  struct Row { DType t; int64_t block; size_t bytes; };
  const Row rows[] = {
      {DType::Q4_0, QK4_0, sizeof(block_q4_0)},   {DType::Q4_1, QK4_1, sizeof(block_q4_1)},
      {DType::Q5_0, QK5_0, sizeof(block_q5_0)},   {DType::Q5_1, QK5_1, sizeof(block_q5_1)},
      {DType::Q8_0, QK8_0, sizeof(block_q8_0)},   {DType::Q8_1, QK8_1, sizeof(block_q8_1)},
      {DType::Q2_K, QK_K, sizeof(block_q2_K)},    {DType::Q3_K, QK_K, sizeof(block_q3_K)},
      {DType::Q4_K, QK_K, sizeof(block_q4_K)},    {DType::Q5_K, QK_K, sizeof(block_q5_K)},
      {DType::Q6_K, QK_K, sizeof(block_q6_K)},    {DType::Q8_K, QK_K, sizeof(block_q8_K)},
      {DType::IQ4_NL, QK4_NL, sizeof(block_iq4_nl)}, {DType::MXFP4, QK_MXFP4, sizeof(block_mxfp4)},
  };
  for (const Row& r : rows) {
    const DTypeInfo& i = dtype_info(r.t);
    INFO(std::string(i.name));
    CHECK(i.block_size == r.block);
    CHECK(i.type_size == r.bytes);
    CHECK((i.to_float != nullptr));
  }
}

// ---- hand-built blocks ------------------------------------------------------------------------------
// Each case picks the logical content (scales, quant levels) at random, writes the bytes itself at
// the documented offsets, and computes the expected floats from the logical content.

TEST_CASE("dequantize hand-built legacy blocks: q4_0 q4_1 q5_0 q5_1 q8_0 q8_1 iq4_nl") {
  std::mt19937 rng(7);
  const int nb = 5;
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q8_1,
                  DType::IQ4_NL}) {
    const DTypeInfo& info = dtype_info(t);
    INFO(std::string(info.name));
    std::vector<uint8_t> bytes(nb * info.type_size);
    std::vector<double> want(nb * 32);
    for (int b = 0; b < nb; ++b) {
      const size_t o = b * info.type_size;
      float d, m = 0;
      put_u16(bytes, o, random_half_scale(rng, &d));
      if (rng() & 1) {  // negative scales are legal
        bytes[o + 1] |= 0x80;
        d = -d;
      }
      const bool has_min = t == DType::Q4_1 || t == DType::Q5_1;
      if (has_min) put_u16(bytes, o + 2, random_half_scale(rng, &m));
      if (t == DType::Q8_1) put_u16(bytes, o + 2, 0x3C00);  // s: not used by dequantization
      for (int e = 0; e < 32; ++e) {
        const int bits = t == DType::Q5_0 || t == DType::Q5_1 ? 5 : t == DType::Q8_0 || t == DType::Q8_1 ? 8 : 4;
        const int q = static_cast<int>(rng() % (1u << bits));
        double v;
        if (bits == 8) {  // int8 levels at qs = o + 2 (q8_0) or o + 4 (q8_1)
          const int8_t s = static_cast<int8_t>(q);
          bytes[o + (t == DType::Q8_0 ? 2 : 4) + e] = static_cast<uint8_t>(s);
          v = static_cast<double>(d) * s;
        } else {
          // nibbles at qs: element e < 16 low nibble of byte e, else high nibble of byte e - 16
          const size_t qs = o + (t == DType::Q4_0 || t == DType::IQ4_NL ? 2 : t == DType::Q4_1 ? 4 : t == DType::Q5_0 ? 6 : 8);
          bytes[qs + e % 16] |= static_cast<uint8_t>((q & 0xF) << (e < 16 ? 0 : 4));
          if (bits == 5 && (q & 16)) bytes[o + (t == DType::Q5_0 ? 2 : 4) + e / 8] |= 1 << (e % 8);
          if (t == DType::Q4_0) v = static_cast<double>(d) * (q - 8);
          else if (t == DType::Q5_0) v = static_cast<double>(d) * (q - 16);
          else if (t == DType::IQ4_NL) v = static_cast<double>(d) * kvalues_iq4nl[q];
          else v = static_cast<double>(d) * q + m;
        }
        want[b * 32 + e] = v;
      }
    }
    check_close(dequant(t, bytes, nb * 32), want, 1e-6);
  }
}

TEST_CASE("dequantize hand-built mxfp4 blocks, including extreme exponents") {
  const double e2m1[16] = {0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6};
  std::mt19937 rng(11);
  const int exps[] = {0, 1, 2, 100, 118, 127, 130, 200, 254, 255};
  const int nb = sizeof(exps) / sizeof(exps[0]);
  std::vector<uint8_t> bytes(nb * 17);
  std::vector<double> want(nb * 32);
  for (int b = 0; b < nb; ++b) {
    bytes[b * 17] = static_cast<uint8_t>(exps[b]);
    for (int e = 0; e < 32; ++e) {
      const int q = static_cast<int>(rng() % 16);
      bytes[b * 17 + 1 + e % 16] |= static_cast<uint8_t>(q << (e < 16 ? 0 : 4));
      // OCP MX: E2M1 value times 2^(E8M0 - 127); in float, 2^128 * 6 is past the range (inf).
      const double v = std::ldexp(e2m1[q], exps[b] - 127);
      want[b * 32 + e] = std::fabs(v) > std::numeric_limits<float>::max() ? std::copysign(INFINITY, v) : v;
    }
  }
  const auto got = dequant(DType::MXFP4, bytes, nb * 32);
  for (int i = 0; i < nb * 32; ++i) {
    INFO("element " << i);
    CHECK(static_cast<double>(got[i]) == want[i]);
  }
}

namespace {
// The 6-bit scale/min packing of q4_K/q5_K, written from the layout description.
void pack_k4_scales(uint8_t* s, const int sc[8], const int mn[8]) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }
}
}  // namespace

TEST_CASE("dequantize hand-built K-quant blocks: q2_K q3_K q4_K q5_K q6_K q8_K") {
  std::mt19937 rng(21);
  const int nb = 3;
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_K}) {
    const DTypeInfo& info = dtype_info(t);
    INFO(std::string(info.name));
    std::vector<uint8_t> bytes(nb * info.type_size);
    std::vector<double> want(nb * 256);
    for (int b = 0; b < nb; ++b) {
      uint8_t* p = bytes.data() + b * info.type_size;
      double* w = want.data() + b * 256;
      float d, dmin;
      const uint16_t hd = random_half_scale(rng, &d), hm = random_half_scale(rng, &dmin);
      std::vector<int> q(256);
      if (t == DType::Q2_K) {  // scales[16] qs[64] d dmin
        int sc[16], mn[16];
        for (int s = 0; s < 16; ++s) {
          sc[s] = rng() % 16, mn[s] = rng() % 16;
          p[s] = static_cast<uint8_t>(sc[s] | (mn[s] << 4));
        }
        std::memcpy(p + 80, &hd, 2), std::memcpy(p + 82, &hm, 2);
        for (int e = 0; e < 256; ++e) {
          q[e] = rng() % 4;
          const int r = e % 128;
          p[16 + 32 * (e / 128) + r % 32] |= static_cast<uint8_t>(q[e] << (2 * (r / 32)));
          w[e] = static_cast<double>(d) * sc[e / 16] * q[e] - static_cast<double>(dmin) * mn[e / 16];
        }
      } else if (t == DType::Q3_K) {  // hmask[32] qs[64] scales[12] d
        int sc[16];
        for (int s = 0; s < 16; ++s) {
          sc[s] = rng() % 64;  // stored value; the scale is sc - 32
          p[96 + s % 8] |= static_cast<uint8_t>((sc[s] & 0xF) << (4 * (s / 8)));
          p[96 + 8 + s % 4] |= static_cast<uint8_t>((sc[s] >> 4) << (2 * (s / 4)));
        }
        std::memcpy(p + 108, &hd, 2);
        for (int e = 0; e < 256; ++e) {
          q[e] = static_cast<int>(rng() % 8) - 4;  // signed 3-bit level in [-4, 3]
          const int u = q[e] + 4, r = e % 128;   // stored: high bit set means "no -4"
          p[32 + 32 * (e / 128) + r % 32] |= static_cast<uint8_t>((u & 3) << (2 * (r / 32)));
          if (u & 4) p[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
          w[e] = static_cast<double>(d) * (sc[e / 16] - 32) * q[e];
        }
      } else if (t == DType::Q4_K || t == DType::Q5_K) {  // d dmin scales[12] (qh[32]) qs[128]
        int sc[8], mn[8];
        for (int s = 0; s < 8; ++s) sc[s] = rng() % 64, mn[s] = rng() % 64;
        std::memcpy(p, &hd, 2), std::memcpy(p + 2, &hm, 2);
        pack_k4_scales(p + 4, sc, mn);
        const bool five = t == DType::Q5_K;
        uint8_t* qs = p + (five ? 48 : 16);
        for (int e = 0; e < 256; ++e) {
          q[e] = static_cast<int>(rng() % (five ? 32 : 16));
          const int c = e / 64, l = e % 32, high_nibble = (e % 64) / 32;
          qs[32 * c + l] |= static_cast<uint8_t>((q[e] & 0xF) << (4 * high_nibble));
          if (five && (q[e] & 16)) p[16 + e % 32] |= static_cast<uint8_t>(1 << (e / 32));
          w[e] = static_cast<double>(d) * sc[e / 32] * q[e] - static_cast<double>(dmin) * mn[e / 32];
        }
      } else if (t == DType::Q6_K) {  // ql[128] qh[64] scales[16] (int8) d
        int8_t sc[16];
        for (int s = 0; s < 16; ++s) {
          sc[s] = static_cast<int8_t>(rng() % 256);
          p[192 + s] = static_cast<uint8_t>(sc[s]);
        }
        std::memcpy(p + 208, &hd, 2);
        for (int e = 0; e < 256; ++e) {
          q[e] = static_cast<int>(rng() % 64);
          const int h = e / 128, r = e % 128, k = r / 32, l = r % 32;
          p[64 * h + 32 * (k % 2) + l] |= static_cast<uint8_t>((q[e] & 0xF) << (4 * (k / 2)));
          p[128 + 32 * h + l] |= static_cast<uint8_t>((q[e] >> 4) << (2 * k));
          w[e] = static_cast<double>(d) * sc[e / 16] * (q[e] - 32);
        }
      } else {  // Q8_K: float d, int8 qs[256], int16 bsums[16]
        const float fd = d * ((rng() & 1) ? -1.0f : 1.0f);
        std::memcpy(p, &fd, 4);
        for (int e = 0; e < 256; ++e) {
          const int8_t v = static_cast<int8_t>(rng() % 256);
          p[4 + e] = static_cast<uint8_t>(v);
          w[e] = static_cast<double>(fd) * v;
        }
      }
    }
    check_close(dequant(t, bytes, nb * 256), want, 1e-6);
  }
}

TEST_CASE("dequantization does not need aligned input") {
  for (DType t : {DType::F16, DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::Q8_K, DType::MXFP4}) {
    const DTypeInfo& info = dtype_info(t);
    INFO(std::string(info.name));
    const int64_t n = 512;
    const size_t nbytes = dtype_row_size(t, n);
    std::vector<uint8_t> buf(nbytes + 1);
    std::mt19937 rng(3);
    for (auto& c : buf) c = static_cast<uint8_t>(rng() & 0x3B);  // keeps fp16 fields finite
    std::vector<uint8_t> aligned(buf.begin() + 1, buf.end());
    std::vector<float> a(n), b(n);
    info.to_float(buf.data() + 1, a.data(), n);
    info.to_float(aligned.data(), b.data(), n);
    CHECK(std::memcmp(a.data(), b.data(), n * 4) == 0);
  }
}

// ---- GGML's exact rounding, hand-computed ----------------------------------------------------------

TEST_CASE("q8_0 rounds half away from zero with d = amax/127") {
  std::vector<float> x(32, 1.0f);
  x[0] = 127.0f, x[1] = 2.5f, x[2] = -2.5f, x[3] = 0.49f, x[4] = -126.5f;
  block_q8_0 b;
  quants::quantize_q8_0(x.data(), &b, 32);
  CHECK(b.d == 0x3C00);  // 1.0
  CHECK(b.qs[0] == 127);
  CHECK(b.qs[1] == 3);
  CHECK(b.qs[2] == -3);
  CHECK(b.qs[3] == 0);
  CHECK(b.qs[4] == -127);
  CHECK(b.qs[5] == 1);
}

TEST_CASE("q4_0 / q5_0 use the signed max and truncate x/d + 8.5 (+16.5), clamped") {
  std::vector<float> x(32, 1.0f);
  x[0] = -8.0f, x[1] = 0.5f, x[2] = -0.5f, x[3] = 7.9f, x[16] = 3.0f;
  block_q4_0 b;
  quants::quantize_q4_0(x.data(), &b, 32);
  CHECK(b.d == 0x3C00);  // d = -8 / -8 = 1
  CHECK((b.qs[0] & 0xF) == 0);
  CHECK((b.qs[1] & 0xF) == 9);   // 0.5 + 8.5 = 9
  CHECK((b.qs[2] & 0xF) == 8);   // -0.5 + 8.5 = 8
  CHECK((b.qs[3] & 0xF) == 15);  // 16.4 -> 16, clamped to 15
  CHECK((b.qs[0] >> 4) == 11);   // x[16] = 3
  x[0] = 8.0f;  // positive max: d = -1
  quants::quantize_q4_0(x.data(), &b, 32);
  CHECK(b.d == 0xBC00);
  CHECK((b.qs[0] & 0xF) == 0);
  CHECK((b.qs[1] & 0xF) == 8);  // -0.5 + 8.5 = 8
  std::vector<float> y(32, 1.0f);
  y[0] = -16.0f, y[1] = 15.9f, y[17] = -3.0f;
  block_q5_0 c;
  quants::quantize_q5_0(y.data(), &c, 32);
  CHECK(c.d == 0x3C00);
  uint32_t qh;
  std::memcpy(&qh, c.qh, 4);
  CHECK((c.qs[0] & 0xF) == 0);
  CHECK(((c.qs[1] & 0xF) | (((qh >> 1) & 1) << 4)) == 31);   // 32.4 -> 31
  CHECK(((c.qs[1] >> 4) | (((qh >> 17) & 1) << 4)) == 13);   // -3 + 16.5 = 13.5 -> 13
}

TEST_CASE("q4_1 / q5_1 use min and (max-min)/15 (/31), rounding by +0.5 truncation") {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i % 16);
  x[5] = 2.5f, x[6] = 2.49f;
  block_q4_1 b;
  quants::quantize_q4_1(x.data(), &b, 32);
  CHECK(b.d == 0x3C00);
  CHECK(b.m == 0x0000);
  CHECK((b.qs[5] & 0xF) == 3);
  CHECK((b.qs[6] & 0xF) == 2);
  CHECK((b.qs[15] >> 4) == 15);
  for (int i = 0; i < 32; ++i) x[i] = 10.0f + i;  // min 10, max 41: d = 1
  block_q5_1 c;
  quants::quantize_q5_1(x.data(), &c, 32);
  CHECK(c.d == 0x3C00);
  CHECK(c.m == fp32_to_fp16(10.0f));
  std::vector<float> y(32);
  quants::dequantize_q5_1(&c, y.data(), 32);
  CHECK(y == x);
}

TEST_CASE("q8_1 stores s = fp16(d * sum(q))") {
  const auto x = random_normal(64, 17);
  block_q8_1 b[2];
  quants::quantize_q8_1(x.data(), b, 64);
  block_q8_0 c[2];
  quants::quantize_q8_0(x.data(), c, 64);
  for (int i = 0; i < 2; ++i) {
    CHECK(b[i].d == c[i].d);
    CHECK(std::memcmp(b[i].qs, c[i].qs, 32) == 0);
    float amax = 0;
    int sum = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * i + j])), sum += b[i].qs[j];
    CHECK(b[i].s == fp32_to_fp16(sum * (amax / 127)));
  }
}

TEST_CASE("q8_K: iscale = -127/max, nearest_int rounds half to even, float d, bsums") {
  std::vector<float> x(256, 1.0f);
  x[0] = 127.0f, x[1] = 2.5f, x[2] = 3.5f, x[3] = -127.0f, x[4] = -0.5f;
  block_q8_K b;
  quants::quantize_q8_k(x.data(), &b, 256);
  CHECK(b.d == -1.0f);
  CHECK(b.qs[0] == -127);
  CHECK(b.qs[1] == -2);  // -2.5 -> -2 (even)
  CHECK(b.qs[2] == -4);  // -3.5 -> -4 (even)
  CHECK(b.qs[3] == 127);
  CHECK(b.qs[4] == 0);   // 0.5 -> 0 (even)
  CHECK(b.qs[5] == -1);
  for (int j = 0; j < 16; ++j) {
    int s = 0;
    for (int l = 0; l < 16; ++l) s += b.qs[16 * j + l];
    CHECK(b.bsums[j] == s);
  }
}

TEST_CASE("mxfp4: e = floor(log2 amax) - 2 + 127, nearest level, first on ties") {
  std::vector<float> x(32, 1.0f);
  x[0] = 6.0f, x[1] = 5.0f, x[2] = -0.25f, x[3] = -1.25f, x[4] = 0.75f, x[16] = -7.0f;
  block_mxfp4 b;
  quants::quantize_mxfp4(x.data(), &b, 32);
  CHECK(b.e == 127);              // amax 7: floor(log2 7) = 2
  CHECK((b.qs[0] & 0xF) == 7);    // 6
  CHECK((b.qs[1] & 0xF) == 6);    // 5: 4 and 6 tie, 4 comes first
  CHECK((b.qs[2] & 0xF) == 0);    // -0.25: +0 and -0.5 tie, +0 first
  CHECK((b.qs[3] & 0xF) == 10);   // -1.25: -1 and -1.5 tie, -1 first
  CHECK((b.qs[4] & 0xF) == 1);    // 0.75: 0.5 and 1 tie, 0.5 first
  CHECK((b.qs[0] >> 4) == 15);    // -7 -> -6 (clipped)
}

TEST_CASE("iq4_nl: an all-zero block gives d = 0 and every index at the level nearest 0") {
  std::vector<float> x(32, 0.0f);
  block_iq4_nl b;
  quants::quantize_iq4_nl(x.data(), &b, 32);
  CHECK(b.d == 0);
  for (int j = 0; j < 16; ++j) CHECK(b.qs[j] == 0x88);
}

// ---- quantize -> dequantize on random data -----------------------------------------------------------

TEST_CASE("quantize -> dequantize error is within each type's bound") {
  struct Bound {
    DType t;
    double max_err;  // per element, as a fraction of the block's largest magnitude
    double rms;      // relative RMS error over the whole vector
  };
  // Per-element bounds follow from the formats: half a step (a full step where GGML clamps the
  // top level), plus the fp16 rounding of the scale. RMS limits: the measured values
  // (q8_0 0.0054, q8_K 0.0069, q4_0 0.088, q5_0 0.043, q4_1 0.079, q5_1 0.038, iq4_nl 0.076,
  // mxfp4 0.114) times ~1.3.
  const Bound bounds[] = {
      {DType::Q8_0, 0.5 / 127 + 1.0 / 2048, 0.0070}, {DType::Q8_1, 0.5 / 127 + 1.0 / 2048, 0.0070},
      {DType::Q8_K, 0.5 / 127 * 1.0001, 0.0090},     {DType::Q4_0, 1.0 / 8 + 1.0 / 1024, 0.115},
      {DType::Q5_0, 1.0 / 16 + 1.0 / 1024, 0.057},   {DType::Q4_1, 2.0 / 30 + 3.0 / 2048, 0.10},
      {DType::Q5_1, 2.0 / 62 + 3.0 / 2048, 0.050},   {DType::IQ4_NL, 0.20, 0.10},
      {DType::MXFP4, 0.50, 0.15},
  };
  const int64_t n = 16 * 256;
  for (const Bound& bd : bounds) {
    const DTypeInfo& info = dtype_info(bd.t);
    INFO(std::string(info.name));
    REQUIRE((info.from_float != nullptr));
    for (uint32_t seed : {1u, 2u, 3u}) {
      const float scale = seed == 2 ? 0.02f : (seed == 3 ? 300.0f : 1.0f);
      const auto x = random_normal(n, seed, scale);
      std::vector<uint8_t> q(dtype_row_size(bd.t, n));
      info.from_float(x.data(), q.data(), n);
      std::vector<float> y(n);
      info.to_float(q.data(), y.data(), n);
      double se = 0, sx = 0;
      int over = 0;
      for (int64_t b = 0; b < n / info.block_size; ++b) {
        double amax = 0;
        for (int64_t j = 0; j < info.block_size; ++j) amax = std::max(amax, std::fabs((double)x[b * info.block_size + j]));
        for (int64_t j = b * info.block_size; j < (b + 1) * info.block_size; ++j) {
          const double e = std::fabs((double)y[j] - x[j]);
          over += e > bd.max_err * amax;
          se += e * e, sx += (double)x[j] * x[j];
        }
      }
      const double rms = std::sqrt(se / sx);
      CHECK(over == 0);
      CHECK(rms < bd.rms);
    }
  }
}

TEST_CASE("quantizers survive non-finite and extreme input") {
  std::vector<float> x = random_normal(256, 8);
  x[0] = NAN, x[40] = INFINITY, x[80] = -INFINITY, x[120] = 3e38f, x[160] = 1e-42f;
  for (int b = 0; b < 8; ++b) x[32 * b + 7] = b % 2 ? 1e30f : -1e-40f;
  for (uint32_t id = 0; id < 64; ++id) {
    const DTypeInfo* info = dtype_info(id);
    if (!info || !info->from_float) continue;
    std::vector<uint8_t> q(dtype_row_size(info->type, 256));
    std::vector<float> y(256);
    info->from_float(x.data(), q.data(), 256);
    info->to_float(q.data(), y.data(), 256);
  }
  CHECK(true);  // the point is no crash / sanitizer report
}
