// The inline-PTX wrappers (backends/cuda/ptx.cuh) on the SIMT emulator: each mma against a scalar
// reference with fragments loaded by the PTX ISA's layouts (written out again here, independently
// of the header), ldmatrix against the documented register layout, ldmatrix feeding mma, cp.async
// and its alignment fault, and the warp-barrier nature of the collective instructions.
#ifndef KESTREL_CUDA_EMULATE
#define KESTREL_CUDA_EMULATE 1
#endif
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/emu/cuda_shim.h"
#include "backends/cuda/ptx.cuh"

namespace ptx = kestrel::ptx;
using kestrel::cuda_emu::launch_kernel;

namespace {

// ---- fragment layouts, per register, as the PTX ISA's figures draw them --------------------------
// Lane l: g = l / 4 (groupID), t = l % 4 (threadID_in_group).
// m16n8k16 .f16/.bf16: A register r, half h (h = 0 in bits 0-15) -> row g + 8 (r odd), col
// 2t + h + 8 (r >= 2). B register r, half h -> k = 2t + h + 8r, n = g.
// m16n8k32 .s8: A register r, byte j -> row g + 8 (r odd), col 4t + j + 16 (r >= 2).
// B register r, byte j -> k = 4t + j + 16r, n = g.
// C/D (both shapes) value i -> row g + 8 (i >= 2), col 2t + i % 2.
unsigned cd_row(unsigned lane, unsigned i) { return lane / 4 + (i >= 2 ? 8 : 0); }
unsigned cd_col(unsigned lane, unsigned i) { return 2 * (lane % 4) + i % 2; }

constexpr int kBf16 = 0, kF16 = 1;

// Each warp multiplies its own tile: A 16x16 row-major, B 16x8 row-major (K x N), C and D 16x8
// row-major; 16-bit elements as raw bits. With in_place, D is accumulated in C's registers.
__global__ void mma_k16_kernel(const uint16_t* A, const uint16_t* B, const float* C, float* D, int kind,
                               bool in_place) {
  const unsigned warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  const unsigned g = lane / 4, t = lane % 4;
  A += 256 * warp;
  B += 128 * warp;
  C += 128 * warp;
  D += 128 * warp;
  uint32_t a[4], b[2];
  float c[4], d[4];
  for (unsigned r = 0; r < 4; ++r) {
    const unsigned row = g + 8 * (r % 2), col = 2 * t + 8 * (r / 2);
    a[r] = ptx::pack_b16x2(A[16 * row + col], A[16 * row + col + 1]);
  }
  for (unsigned r = 0; r < 2; ++r) {
    const unsigned k = 2 * t + 8 * r;
    b[r] = ptx::pack_b16x2(B[8 * k + g], B[8 * (k + 1) + g]);
  }
  for (unsigned i = 0; i < 4; ++i) c[i] = C[8 * cd_row(lane, i) + cd_col(lane, i)];
  float* acc = d;
  if (in_place) {
    for (unsigned i = 0; i < 4; ++i) d[i] = c[i];
  }
  if (kind == kBf16) ptx::mma_m16n8k16_bf16(acc, a, b, in_place ? acc : c);
  else ptx::mma_m16n8k16_f16(acc, a, b, in_place ? acc : c);
  for (unsigned i = 0; i < 4; ++i) D[8 * cd_row(lane, i) + cd_col(lane, i)] = d[i];
}

// The same for the 8-bit shapes: A 16x32, B 32x8 (K x N), C and D 16x8; int8 codes with int C and D
// (.s8), or E4M3 codes with float C and D (.e4m3: the .s8 fragment layout).
template <class Code, class Acc>
__global__ void mma_k32_kernel(const Code* A, const Code* B, const Acc* C, Acc* D) {
  const unsigned warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  const unsigned g = lane / 4, t = lane % 4;
  A += 512 * warp;
  B += 256 * warp;
  C += 128 * warp;
  D += 128 * warp;
  uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  Acc c[4], d[4];
  for (unsigned r = 0; r < 4; ++r)
    for (unsigned j = 0; j < 4; ++j) {
      const unsigned row = g + 8 * (r % 2), col = 4 * t + j + 16 * (r / 2);
      a[r] |= uint32_t{static_cast<uint8_t>(A[32 * row + col])} << (8 * j);
    }
  for (unsigned r = 0; r < 2; ++r)
    for (unsigned j = 0; j < 4; ++j) {
      const unsigned k = 4 * t + j + 16 * r;
      b[r] |= uint32_t{static_cast<uint8_t>(B[8 * k + g])} << (8 * j);
    }
  for (unsigned i = 0; i < 4; ++i) c[i] = C[8 * cd_row(lane, i) + cd_col(lane, i)];
  if constexpr (std::is_same_v<Acc, int>) ptx::mma_m16n8k32_s8(d, a, b, c);
  else ptx::mma_m16n8k32_e4m3(d, a, b, c);
  for (unsigned i = 0; i < 4; ++i) D[8 * cd_row(lane, i) + cd_col(lane, i)] = d[i];
}

// The OCP E4M3 value of a code, from its fields (finite codes only).
double e4m3_value(uint8_t c) {
  const int e = (c >> 3) & 15, m = c & 7;
  const double v = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return c & 0x80 ? -v : v;
}

// A random value exact in the 16-bit format, never zero.
uint16_t random_b16(std::mt19937& rng, int kind) {
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (;;) {
    const float v = u(rng);
    const uint16_t h = kind == kBf16 ? ptx::f32_to_bf16(v) : ptx::f32_to_f16(v);
    if ((h & 0x7fffu) != 0) return h;
  }
}
double b16_value(uint16_t h, int kind) { return kind == kBf16 ? ptx::bf16_to_f32(h) : ptx::f16_to_f32(h); }

// ---- ldmatrix ---------------------------------------------------------------------------------------

// A 16x16 tile of 16-bit values, rows padded to 48 bytes (row addresses stay 16-byte aligned; the
// rows of one matrix are not contiguous).
struct SmemTile {
  alignas(16) uint16_t v[16][24];
};
// Where the four 8x8 matrices sit in the tile: an order unlike the mma A fragment's, so a mix-up
// between lanes' addresses and matrices shows.
constexpr unsigned kRow0[4] = {8, 0, 8, 0}, kCol0[4] = {0, 8, 8, 0};

constexpr int kX4 = 0, kX2 = 1, kX4Trans = 2, kMisaligned = 3;

__global__ void ldmatrix_kernel(const uint16_t* src, uint32_t* out, int variant) {
  __shared__ SmemTile tile;
  const unsigned lane = threadIdx.x;
  for (unsigned e = lane; e < 256; e += 32) tile.v[e / 16][e % 16] = src[e];
  __syncthreads();
  const unsigned m = lane / 8, j = lane % 8;  // lanes 8m..8m+7 give the rows of matrix m
  const uint16_t* row = &tile.v[kRow0[m] + j][kCol0[m]];
  uint32_t r[4] = {0, 0, 0, 0};
  if (variant == kX4) ptx::ldmatrix_x4(r, row);
  if (variant == kX2) ptx::ldmatrix_x2(r, lane < 16 ? row : nullptr);  // lanes 16-31: ignored
  if (variant == kX4Trans) ptx::ldmatrix_x4_trans(r, row);
  if (variant == kMisaligned) ptx::ldmatrix_x4(r, lane == 5 ? row + 1 : row);
  for (unsigned i = 0; i < 4; ++i) out[4 * lane + i] = r[i];
}

// ldmatrix feeding mma, as a GEMM's inner loop does: A 16x16 and B 16x16 (K x N) row-major in
// shared memory, D (16x16) = A * B + C as two m16n8k16 f16 mmas.
__global__ void ldmatrix_mma_kernel(const uint16_t* A, const uint16_t* B, const float* C, float* D) {
  __shared__ SmemTile a_tile, b_tile;
  const unsigned lane = threadIdx.x;
  for (unsigned e = lane; e < 256; e += 32) {
    a_tile.v[e / 16][e % 16] = A[e];
    b_tile.v[e / 16][e % 16] = B[e];
  }
  __syncthreads();
  // A: matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15) are a0..a3.
  uint32_t a[4], b[4];
  ptx::ldmatrix_x4(a, &a_tile.v[lane % 16][8 * (lane / 16)]);
  // B: matrix m at k = 8 (m % 2), n = 8 (m / 2), transposed: b[0], b[1] for n 0-7, b[2], b[3] for 8-15.
  const unsigned m = lane / 8;
  ptx::ldmatrix_x4_trans(b, &b_tile.v[8 * (m % 2) + lane % 8][8 * (m / 2)]);
  for (unsigned n0 = 0; n0 < 16; n0 += 8) {
    float c[4], d[4];
    for (unsigned i = 0; i < 4; ++i) c[i] = C[16 * cd_row(lane, i) + n0 + cd_col(lane, i)];
    ptx::mma_m16n8k16_f16(d, a, &b[n0 / 4], c);
    for (unsigned i = 0; i < 4; ++i) D[16 * cd_row(lane, i) + n0 + cd_col(lane, i)] = d[i];
  }
}

// ---- cp.async -------------------------------------------------------------------------------------

struct SmemChunks {
  alignas(16) unsigned char b[32][16];
};

// Each lane copies one 16-byte chunk to shared memory, then reads its neighbour's (visible after
// the wait and the barrier).
__global__ void cp_async_kernel(const unsigned char* src, unsigned char* dst, int src_offset, int smem_offset) {
  __shared__ SmemChunks s;
  const unsigned lane = threadIdx.x;
  ptx::cp_async_16(&s.b[lane][0] + smem_offset, src + src_offset + 16 * lane);
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  __syncthreads();
  const unsigned from = (lane + 1) % 32;
  for (unsigned k = 0; k < 16; ++k) dst[16 * lane + k] = s.b[from][k];
}

// Lanes 16-31 leave before a collective instruction: the others wait for them forever on a GPU.
__global__ void diverged_mma(float* out) {
  if (threadIdx.x % 32 >= 16) return;
  const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  const float c[4] = {0, 0, 0, 0};
  float d[4];
  ptx::mma_m16n8k16_bf16(d, a, b, c);
  out[threadIdx.x] = d[0];
}

__global__ void diverged_ldmatrix(const uint16_t* src, uint32_t* out) {
  __shared__ SmemTile tile;
  if (threadIdx.x < 8) tile.v[threadIdx.x][0] = src[threadIdx.x];
  __syncthreads();
  if (threadIdx.x % 32 == 31) return;
  uint32_t r[2];
  ptx::ldmatrix_x2(r, &tile.v[threadIdx.x % 8][0]);
  out[threadIdx.x] = r[0];
}

}  // namespace

TEST_CASE("ptx emulation: mma m16n8k16 bf16 and f16 match a double reference of A*B + C") {
  std::mt19937 rng(11);
  constexpr unsigned kWarps = 4;  // two blocks of two warps: each warp its own tile
  for (int kind : {kBf16, kF16}) {
    for (bool in_place : {false, true}) {
      CAPTURE(kind);
      CAPTURE(in_place);
      std::vector<uint16_t> A(256 * kWarps), B(128 * kWarps);
      std::vector<float> C(128 * kWarps), D(128 * kWarps, NAN);
      for (uint16_t& v : A) v = random_b16(rng, kind);
      for (uint16_t& v : B) v = random_b16(rng, kind);
      std::uniform_real_distribution<float> uc(0.25f, 8.0f);
      for (float& v : C) v = (rng() & 1 ? -1.0f : 1.0f) * uc(rng);
      REQUIRE(launch_kernel(mma_k16_kernel, dim3(2), dim3(64), 0, A.data(), B.data(), C.data(), D.data(), kind,
                            in_place) == "");
      int bad = 0;
      for (unsigned w = 0; w < kWarps; ++w)
        for (unsigned m = 0; m < 16; ++m)
          for (unsigned n = 0; n < 8; ++n) {
            const double c = C[128 * w + 8 * m + n];
            double want = c, scale = std::fabs(c);
            for (unsigned k = 0; k < 16; ++k) {
              const double p = b16_value(A[256 * w + 16 * m + k], kind) * b16_value(B[128 * w + 8 * k + n], kind);
              want += p;
              scale += std::fabs(p);
            }
            const double got = D[128 * w + 8 * m + n];
            if (!(std::fabs(got - want) <= 1e-5 * scale)) ++bad;
          }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("ptx emulation: mma m16n8k32 s8 is exactly A*B + C") {
  std::mt19937 rng(12);
  constexpr unsigned kWarps = 4;
  std::vector<int8_t> A(512 * kWarps), B(256 * kWarps);
  std::vector<int> C(128 * kWarps), D(128 * kWarps, 0);
  std::uniform_int_distribution<int> u8(-128, 127), uc(-100000, 100000);
  auto nonzero8 = [&] {
    int v = 0;
    while (v == 0) v = u8(rng);
    return static_cast<int8_t>(v);
  };
  for (int8_t& v : A) v = nonzero8();
  for (int8_t& v : B) v = nonzero8();
  for (int& v : C) v = uc(rng) | 1;
  A[0] = B[0] = -128;  // the extremes
  A[1] = B[8] = 127;
  REQUIRE(launch_kernel(mma_k32_kernel<int8_t, int>, dim3(2), dim3(64), 0, A.data(), B.data(), C.data(), D.data()) == "");
  int bad = 0;
  for (unsigned w = 0; w < kWarps; ++w)
    for (unsigned m = 0; m < 16; ++m)
      for (unsigned n = 0; n < 8; ++n) {
        long want = C[128 * w + 8 * m + n];
        for (unsigned k = 0; k < 32; ++k) want += long{A[512 * w + 32 * m + k]} * B[256 * w + 8 * k + n];
        bad += D[128 * w + 8 * m + n] != want;
      }
  CHECK(bad == 0);
}

TEST_CASE("ptx emulation: mma m16n8k32 e4m3 is A*B + C over the codes' values") {
  std::mt19937 rng(14);
  constexpr unsigned kWarps = 4;
  std::vector<uint8_t> A(512 * kWarps), B(256 * kWarps);
  std::vector<float> C(128 * kWarps), D(128 * kWarps, 0.0f);
  auto code = [&] {  // any finite code but zero, subnormals included
    for (;;) {
      const auto c = static_cast<uint8_t>(rng());
      if ((c & 0x7F) != 0x7F && (c & 0x7F) != 0) return c;
    }
  };
  for (uint8_t& v : A) v = code();
  for (uint8_t& v : B) v = code();
  std::uniform_real_distribution<float> uc(-1000.0f, 1000.0f);
  for (float& v : C) v = uc(rng);
  A[0] = B[0] = 0x7E;  // 448: the extremes
  A[1] = B[8] = 0x81;  // -2^-9
  REQUIRE(launch_kernel(mma_k32_kernel<uint8_t, float>, dim3(2), dim3(64), 0, A.data(), B.data(), C.data(), D.data()) == "");
  int bad = 0;
  for (unsigned w = 0; w < kWarps; ++w)
    for (unsigned m = 0; m < 16; ++m)
      for (unsigned n = 0; n < 8; ++n) {
        double want = C[128 * w + 8 * m + n];
        for (unsigned k = 0; k < 32; ++k) want += e4m3_value(A[512 * w + 32 * m + k]) * e4m3_value(B[256 * w + 8 * k + n]);
        bad += D[128 * w + 8 * m + n] != static_cast<float>(want);
      }
  CHECK(bad == 0);
}

TEST_CASE("ptx emulation: ldmatrix x4, x2 and x4.trans give each lane the documented fragment") {
  std::mt19937 rng(13);
  std::vector<uint16_t> src(256);
  // Distinct values: the low byte is the index.
  for (unsigned e = 0; e < 256; ++e) src[e] = static_cast<uint16_t>(e | (rng() & 0xff00u));
  // Element (r, c) of matrix i.
  auto M = [&](unsigned i, unsigned r, unsigned c) -> uint32_t { return src[16 * (kRow0[i] + r) + kCol0[i] + c]; };
  for (int variant : {kX4, kX2, kX4Trans}) {
    CAPTURE(variant);
    std::vector<uint32_t> out(128, 0xdeadbeefu);
    REQUIRE(launch_kernel(ldmatrix_kernel, dim3(1), dim3(32), 0, src.data(), out.data(), variant) == "");
    int bad = 0;
    for (unsigned lane = 0; lane < 32; ++lane) {
      const unsigned g = lane / 4, t = lane % 4;
      for (unsigned i = 0; i < 4; ++i) {
        uint32_t want = 0;  // x2 leaves registers 2 and 3 as the kernel set them
        if (variant == kX4 || (variant == kX2 && i < 2)) want = M(i, g, 2 * t) | M(i, g, 2 * t + 1) << 16;
        if (variant == kX4Trans) want = M(i, 2 * t, g) | M(i, 2 * t + 1, g) << 16;
        bad += out[4 * lane + i] != want;
      }
    }
    CHECK(bad == 0);
  }
  std::vector<uint32_t> out(128);
  const std::string e = launch_kernel(ldmatrix_kernel, dim3(1), dim3(32), 0, src.data(), out.data(), kMisaligned);
  CHECK(e.find("thread 5 threw: misaligned 16-byte vector ldmatrix row") != std::string::npos);
}

TEST_CASE("ptx emulation: ldmatrix fragments feed mma (x4 for A, x4.trans for B)") {
  std::mt19937 rng(14);
  std::vector<uint16_t> A(256), B(256);
  std::vector<float> C(256), D(256, NAN);
  for (uint16_t& v : A) v = random_b16(rng, kF16);
  for (uint16_t& v : B) v = random_b16(rng, kF16);
  for (size_t i = 0; i < C.size(); ++i) C[i] = static_cast<float>(i % 7) - 3.5f;
  REQUIRE(launch_kernel(ldmatrix_mma_kernel, dim3(1), dim3(32), 0, A.data(), B.data(), C.data(), D.data()) == "");
  int bad = 0;
  for (unsigned m = 0; m < 16; ++m)
    for (unsigned n = 0; n < 16; ++n) {
      double want = C[16 * m + n], scale = std::fabs(want);
      for (unsigned k = 0; k < 16; ++k) {
        const double p = b16_value(A[16 * m + k], kF16) * b16_value(B[16 * k + n], kF16);
        want += p;
        scale += std::fabs(p);
      }
      if (!(std::fabs(D[16 * m + n] - want) <= 1e-5 * scale)) ++bad;
    }
  CHECK(bad == 0);
}

TEST_CASE("ptx emulation: cp.async copies 16 bytes; a misaligned address is the launch's error") {
  struct alignas(16) Buffer {
    unsigned char b[16 * 33];
  };
  Buffer src{};
  std::mt19937 rng(15);
  for (unsigned char& v : src.b) v = static_cast<unsigned char>(rng());
  std::vector<unsigned char> dst(16 * 32, 0);
  REQUIRE(launch_kernel(cp_async_kernel, dim3(1), dim3(32), 0, src.b, dst.data(), 0, 0) == "");
  int bad = 0;
  for (unsigned lane = 0; lane < 32; ++lane)
    for (unsigned k = 0; k < 16; ++k) bad += dst[16 * lane + k] != src.b[16 * ((lane + 1) % 32) + k];
  CHECK(bad == 0);
  const std::string e1 = launch_kernel(cp_async_kernel, dim3(1), dim3(32), 0, src.b, dst.data(), 4, 0);
  CHECK(e1.find("misaligned 16-byte vector cp.async global source") != std::string::npos);
  const std::string e2 = launch_kernel(cp_async_kernel, dim3(1), dim3(32), 0, src.b, dst.data(), 0, 8);
  CHECK(e2.find("misaligned 16-byte vector cp.async shared destination") != std::string::npos);
}

TEST_CASE("ptx emulation: mma and ldmatrix are warp-collective; lanes that skip them are an error") {
  std::vector<float> out(64);
  const std::string e1 = launch_kernel(diverged_mma, dim3(1), dim3(64), 0, out.data());
  CHECK(e1.find("waits for lanes that have exited") != std::string::npos);
  std::vector<uint16_t> src(8, 1);
  std::vector<uint32_t> out2(32);
  const std::string e2 = launch_kernel(diverged_ldmatrix, dim3(1), dim3(32), 0, src.data(), out2.data());
  CHECK(e2.find("waits for lanes that have exited") != std::string::npos);
  // A partial warp (a block of 48 threads) cannot run a .sync.aligned instruction either.
  std::vector<uint16_t> A(256 * 2, 0x3f80), B(128 * 2, 0x3f80);
  std::vector<float> C(128 * 2, 0.0f), D(128 * 2);
  const std::string e3 =
      launch_kernel(mma_k16_kernel, dim3(1), dim3(48), 0, A.data(), B.data(), C.data(), D.data(), kBf16, false);
  CHECK(e3.find("mma.sync needs all 32 lanes") != std::string::npos);
}
