// Batch invariance of the quantized MATMUL (and, last, of CUDA's float-type MATMUL): the fused
// decode kernels (small batches), the tiled GEMM (larger ones) and the scalar tail rows all
// follow qgemm.h's arithmetic to the bit, so a column's result never depends on how many columns
// share the call, on the thread count, or on whether its row falls in a group of 8 or in the
// tail. Checked against the scalar qgemm_dot_canonical on random data, with bit-exact
// comparisons; on CPUs with AVX-512 VNNI both kernel sets (AVX2 and AVX-512) are checked.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels/gemm_f32.h"
#include "backends/cpu/kernels/qgemm.h"
#include "backends/cpu/simd.h"
#include "backends/ref/ops_ref.h"
#include "backends/cpu/repacked.h"
#include "op_case.h"

using namespace kestrel;
using namespace kestrel::test;

namespace {

// Runs MATMUL of w [K, N] with the first m columns of x on the CPU backend; returns y [N, m].
std::vector<float> run_matmul(const Tensor& w, const Tensor& x, int64_t m, int threads) {
  const int64_t K = w.ne[0], N = w.ne[1];
  Case c;
  Tensor* xs = c.g.external(make_tensor(DType::F32, K, m, 1, 1, x.data));
  Tensor* dst = output(c, N, m);
  c.g.add(Op::MATMUL, dst, c.g.external(w), xs);
  run_graph(*make_cpu_backend(threads), c.g);
  return std::vector<float>(dst->f32(0), dst->f32(0) + N * m);
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The batch where a type's fused kernels hand over to the tiled GEMM, for the tests' batch sizes:
// the AVX-512 kernels that serve every batch (kMaxFusedCols) are checked at 600 columns and
// beyond instead, still more than a 512-token step; their types' tiled GEMM is checked with the
// AVX2 kernel set, whose crossovers are lower.
int64_t crossover(DType t) { return std::min<int64_t>(cpu::qdirect_max_cols(t), 600); }

// The fused kernel sets this CPU can run (simd.h): AVX2, and AVX-512 VNNI where present; the
// scope switches to one and back.
std::vector<bool> avx512_choices() {
  return cpu::has_avx512_vnni() ? std::vector<bool>{false, true} : std::vector<bool>{false};
}
struct Avx512Scope {
  bool before = cpu::use_avx512();
  explicit Avx512Scope(bool on) { cpu::allow_avx512(on); }
  ~Avx512Scope() { cpu::allow_avx512(before); }
};

}  // namespace

TEST_CASE("quantized MATMUL: every column equals the canonical arithmetic bit for bit, in any batch") {
  if (!cpu::has_avx2_fma()) {
    MESSAGE("no AVX2/FMA: quantized weights take the float path");
    return;
  }
  std::mt19937 rng(31);
  for (DType type : kAllTypes) {
    const int64_t bs = dtype_info(type).block_size;
    if (!cpu::qgemm_supports(type, bs)) continue;
    // Batches on both sides of the type's switch from the fused kernels to the tiled GEMM.
    const int64_t fused = crossover(type), kCols = std::max<int64_t>(9, fused + 2);
    // One block, an odd and an even count (the 4-bit kernels take blocks in pairs), and more.
    const std::vector<int64_t> Ks = bs == 32 ? std::vector<int64_t>{32, 96, 256, 288} : std::vector<int64_t>{256, 768};
    for (int64_t K : Ks) {
      for (int64_t N : {7, 8, 21}) {  // a tail only, one group, two groups and a tail
        CAPTURE(dtype_name(type));
        CAPTURE(K);
        CAPTURE(N);
        Buffers buf;
        Tensor w = buf.tensor(type, K, N);
        fill_random_weights(w, rng);
        Tensor x = buf.tensor(DType::F32, K, kCols);
        fill_random(x, rng);
        // Columns of very different magnitudes, and one with an all-zero block (scale 0).
        for (int64_t c = 0; c < kCols; ++c)
          for (int64_t k = 0; k < K; ++k) x.f32(c)[k] *= static_cast<float>(c % 3 == 0 ? 1e-3 : c % 3 == 1 ? 1.0 : 40.0);
        std::fill(x.f32(4), x.f32(4) + 32, 0.0f);

        // The oracle: rows unpacked, columns quantized, the scalar arithmetic.
        cpu::UnpackedRows wu;
        wu.resize(N, K);
        cpu::qgemm_unpack(type, static_cast<const uint8_t*>(w.data), static_cast<int64_t>(w.nb[1]), 0, N, wu);
        cpu::QuantizedActs xa;
        xa.resize(K, kCols);
        for (int64_t c = 0; c < kCols; ++c) cpu::qgemm_quantize_acts(dtype_info(type).vec_dot_type, x.f32(c), K, xa, c);
        std::vector<float> want(static_cast<size_t>(N * kCols));
        for (int64_t c = 0; c < kCols; ++c)
          for (int64_t r = 0; r < N; ++r) want[c * N + r] = cpu::qgemm_dot_canonical(type, wu, r, xa, c);

        for (bool avx512 : avx512_choices()) {
          const Avx512Scope isa(avx512);
          CAPTURE(avx512);
          for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{4}, int64_t{5}, int64_t{9}, fused, fused + 1, fused + 2}) {
            if (m < 1 || m > kCols) continue;
            for (int threads : {1, 2, 3}) {
              CAPTURE(m);
              CAPTURE(threads);
              const std::vector<float> got = run_matmul(w, x, m, threads);
              int bad = 0;
              for (int64_t i = 0; i < N * m; ++i) bad += !same_bits(got[i], want[i]);
              CHECK_MESSAGE(bad == 0, bad << " of " << N * m << " results differ from the canonical arithmetic (first: "
                                          << got[0] << " vs " << want[0] << ")");
            }
          }
        }
      }
    }
  }
}

// The property itself, directly: a column computed alone (decode) and inside a batch too large
// for the fused kernels (prefill, tiled) gives the same bits, for every weight type (float types
// included).
TEST_CASE("MATMUL: a column alone and inside a batch give the same bits") {
  std::mt19937 rng(32);
  for (DType type : kAllTypes) {
    const int64_t bs = dtype_info(type).block_size;
    CAPTURE(dtype_name(type));
    const int64_t K = bs == 256 ? 512 : bs == 128 ? 384 : 320, N = 43, M = std::max<int64_t>(17, crossover(type) + 3);
    Buffers buf;
    Tensor w = buf.tensor(type, K, N);
    fill_random_weights(w, rng);
    Tensor x = buf.tensor(DType::F32, K, M);
    fill_random(x, rng);
    const std::vector<float> batch = run_matmul(w, x, M, 2);
    for (int64_t c : {int64_t{0}, int64_t{5}, M - 1}) {
      Tensor xc = make_tensor(DType::F32, K, 1, 1, 1, x.f32(c));
      const std::vector<float> alone = run_matmul(w, xc, 1, 2);
      CHECK(std::memcmp(alone.data(), batch.data() + c * N, N * sizeof(float)) == 0);
    }
  }
}

// The CPU's F16 and BF16 products read each weight row through a vectorised conversion
// (convert_avx2.cpp); both conversions are exact, so it must give dequantize_f16 (_bf16)'s values
// bit for bit: every 16-bit pattern, in rows whose lengths leave every tail.
TEST_CASE("F16 and BF16 rows: the vectorised conversions give the portable values") {
#if defined(__x86_64__)
  if (!cpu::has_avx2_fma()) return;
  std::vector<uint16_t> all(65536 + 7);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i * 40503u);  // every pattern, shuffled
  for (DType type : {DType::F16, DType::BF16}) {
    CAPTURE(dtype_name(type));
    const auto fast = type == DType::F16 ? cpu::f16_to_f32_avx2 : cpu::bf16_to_f32_avx2;
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{13}, static_cast<int64_t>(all.size())}) {
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n), -1.0f);
      dtype_info(type).to_float(all.data(), want.data(), n);
      fast(all.data(), got.data(), n);
      int64_t differ = 0;
      for (int64_t i = 0; i < n; ++i)
        if (!(std::isnan(want[i]) && std::isnan(got[i])) && !same_bits(want[i], got[i])) ++differ;
      CHECK(differ == 0);
    }
  }
#endif
}

// MATMUL's float path (F32, F16, BF16, ...) takes the register-blocked kernels of gemm_f32.h,
// which must give every (row, column) dot_f32_avx2's bits on the row's F32 values: both kernels,
// rows stored as F32, F16 and BF16, every count of rows and columns a pass takes, and lengths
// that leave every tail (the 16-value steps, the 8-value step, the scalar values), with strides
// wider than a row.
TEST_CASE("FP32 products: the blocked kernels give dot_f32_avx2's bits") {
#if defined(__x86_64__)
  if (!cpu::has_avx2_fma()) return;
  std::vector<std::pair<const char*, cpu::GemmF32Fn>> kernels = {{"avx2", cpu::gemm_f32_avx2}};
  if (cpu::has_avx512_vnni()) kernels.push_back({"avx512", cpu::gemm_f32_avx512});
  std::mt19937 rng(33);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (DType wt : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t K : {1, 7, 8, 9, 15, 16, 17, 23, 24, 31, 40, 100, 257, 1024}) {
      const int64_t ld = K + 5;
      constexpr int64_t kCols = 9;
      std::vector<float> vals(static_cast<size_t>(cpu::kGemmF32Rows * ld)), x(static_cast<size_t>(kCols * ld));
      for (float& v : vals) v = nd(rng);
      for (float& v : x) v = nd(rng) * 3.0f;
      // The rows as stored (wt) and their exact F32 values, which the oracle reads.
      const DTypeInfo& ti = dtype_info(wt);
      std::vector<uint8_t> stored(static_cast<size_t>(cpu::kGemmF32Rows) * dtype_row_size(wt, ld));
      std::vector<float> exact(vals.size());
      const void* rp[cpu::kGemmF32Rows];
      for (int r = 0; r < cpu::kGemmF32Rows; ++r) {
        uint8_t* row = stored.data() + r * dtype_row_size(wt, ld);
        ti.from_float(vals.data() + r * ld, row, ld);
        ti.to_float(row, exact.data() + r * ld, ld);
        rp[r] = row;
      }
      for (const auto& [name, gemm] : kernels) {
        for (int nr = 1; nr <= cpu::kGemmF32Rows; ++nr) {
          for (int64_t nc = 1; nc <= kCols; ++nc) {
            CAPTURE(dtype_name(wt));
            CAPTURE(name);
            CAPTURE(K);
            CAPTURE(nr);
            CAPTURE(nc);
            const int64_t ldy = nr + 3;
            std::vector<float> y(static_cast<size_t>(nc * ldy), -7.0f);
            gemm(wt, rp, nr, x.data(), ld, nc, K, y.data(), ldy);
            int bad = 0;
            for (int64_t c = 0; c < nc; ++c)
              for (int r = 0; r < nr; ++r)
                bad += !same_bits(y[c * ldy + r], cpu::dot_f32_avx2(exact.data() + r * ld, x.data() + c * ld, K));
            CHECK(bad == 0);
            CHECK(y[nr] == -7.0f);  // nothing written between a column's rows
          }
        }
      }
    }
  }
#endif
}

// CUDA (a GPU, or the emulated build): F16, BF16 and FP8 weights take their decode kernels for
// batches of up to 65 columns (kernels.h, kDecodeBatchCols), because tensor-core sums round
// differently from the decode kernels' float sums (and differently on a GPU than on the
// emulator). A column's bits must then not depend on the batch: alone, in 9, in 40 and in 65.
// Larger batches take the tensor cores and are only within tolerance (test_ops.cpp).
TEST_CASE("CUDA MATMUL: F16, BF16 and FP8 give a column the same bits alone and in batches up to 65") {
  auto cuda = try_backend("cuda");
  if (!cuda) {
    MESSAGE("no cuda device: skipped");
    return;
  }
  std::mt19937 rng(34);
  const auto run = [&](const Tensor& w, const float* x, int64_t m) {
    const int64_t K = w.ne[0], N = w.ne[1];
    Case c;
    Tensor* xs = c.g.external(make_tensor(DType::F32, K, m, 1, 1, const_cast<float*>(x)));
    Tensor* dst = output(c, N, m);
    c.g.add(Op::MATMUL, dst, c.g.external(w), xs);
    run_on_device(*cuda, c.g);
    return std::vector<float>(dst->f32(0), dst->f32(0) + N * m);
  };
  for (DType type : {DType::F16, DType::BF16, DType::FP8_E4M3}) {
    // K = 260 (a multiple of 4 but not of 8) keeps F16 and BF16 on the part-1 kernel at every
    // batch size up to 65; 384 takes their GEMV.
    for (int64_t K : type == DType::FP8_E4M3 ? std::vector<int64_t>{384} : std::vector<int64_t>{384, 260}) {
      const std::string type_name = dtype_name(type);
      CAPTURE(type_name);
      CAPTURE(K);
      const int64_t N = 37, M = 65;
      Buffers buf;
      Tensor w = buf.tensor(type, K, N);
      fill_random_weights(w, rng);
      Tensor x = buf.tensor(DType::F32, K, M);
      fill_random(x, rng);
      const std::vector<float> all = run(w, x.f32(0), M);
      for (int64_t m : {int64_t{1}, int64_t{9}, int64_t{40}}) {
        for (int64_t c0 : {int64_t{0}, M - m}) {
          CAPTURE(m);
          CAPTURE(c0);
          const std::vector<float> part = run(w, x.f32(c0), m);
          int bad = 0;
          for (int64_t i = 0; i < N * m; ++i) bad += !same_bits(part[i], all[c0 * N + i]);
          CHECK_MESSAGE(bad == 0, bad << " of " << N * m << " results differ from the 65-column batch's");
        }
      }
    }
  }
}

// The CPU backend's load-time layouts (backends/cpu/repacked.h): a Q4_0, Q4_K, Q8_0 or Q6_K matrix
// regrouped gives the plain type's bits through the fused kernels, the tiled GEMM and GET_ROWS,
// and the layout gives every row back byte for byte.
TEST_CASE("grouped layouts: a repacked matrix gives its plain type's bits in MATMUL and GET_ROWS") {
  if (!cpu::has_avx2_fma()) {
    MESSAGE("no AVX2/FMA: weights are never repacked");
    return;
  }
  std::mt19937 rng(33);
  for (DType plain : {DType::Q4_0, DType::Q4_K, DType::Q8_0, DType::Q6_K}) {
    const DType grouped = cpu::grouped_type(plain);
    REQUIRE(grouped != plain);
    REQUIRE(cpu::plain_type(grouped) == plain);
    // The batch sizes where each kernel set hands over to the tiled GEMM (the grouped layouts'
    // AVX-512 kernels serve larger batches than the plain type's).
    std::vector<int64_t> fused;
    for (bool avx512 : avx512_choices()) {
      const Avx512Scope isa(avx512);
      fused.push_back(crossover(grouped));
    }
    const bool kquant = plain == DType::Q4_K || plain == DType::Q6_K;
    const std::vector<int64_t> Ks = kquant ? std::vector<int64_t>{256, 768, 2048} : std::vector<int64_t>{64, 320, 2048};
    for (int64_t K : Ks) {
      for (int64_t N : {8, 24, 40}) {
        CAPTURE(dtype_name(grouped));
        CAPTURE(K);
        CAPTURE(N);
        REQUIRE(cpu::grouped_fits(plain, K, N));
        Buffers buf;
        Tensor w = buf.tensor(plain, K, N);
        fill_random_weights(w, rng);
        Tensor wr = buf.tensor(plain, K, N);
        cpu::to_grouped(plain, static_cast<const uint8_t*>(w.data), K, N, static_cast<uint8_t*>(wr.data));
        wr.layout = cpu::kLayoutGrouped8;
        std::vector<uint8_t> row(w.row_bytes());
        int rows_differ = 0;
        for (int64_t r = 0; r < N; ++r) {
          cpu::grouped_row(grouped, static_cast<const uint8_t*>(wr.data), K, r, row.data());
          rows_differ += std::memcmp(row.data(), w.row(r), row.size()) != 0;
        }
        CHECK(rows_differ == 0);
        CHECK(std::memcmp(w.data, wr.data, w.n_bytes()) != 0);  // the layout did move the bytes

        const int64_t kCols = *std::max_element(fused.begin(), fused.end()) + 3;
        Tensor x = buf.tensor(DType::F32, K, kCols);
        fill_random(x, rng);
        // Column 1 constant: every activation code at the extreme (Q8_K: -127, sums of 16 at -2032).
        std::fill(x.f32(1), x.f32(1) + K, 0.75f);
        for (bool avx512 : avx512_choices()) {
          const Avx512Scope isa(avx512);
          CAPTURE(avx512);
          const int64_t f = crossover(grouped), plain_f = crossover(plain);
          // 8 and 13: the AVX-512 kernels of the grouped layouts take up to 8 columns a call.
          for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{8}, int64_t{13},
                            plain_f, plain_f + 1, f, f + 1, f + 3}) {
            for (int threads : {1, 2, 3}) {
              CAPTURE(m);
              CAPTURE(threads);
              const std::vector<float> want = run_matmul(w, x, m, threads), got = run_matmul(wr, x, m, threads);
              int bad = 0;
              for (size_t i = 0; i < want.size(); ++i) bad += !same_bits(got[i], want[i]);
              CHECK_MESSAGE(bad == 0, bad << " of " << want.size() << " results differ from the plain type's");
            }
          }
        }

        std::vector<int32_t> ids = {0, static_cast<int32_t>(N - 1), 3, 3, static_cast<int32_t>(N / 2 + 1)};
        std::vector<float> rows_plain, rows_grouped;
        for (const Tensor* table : {&w, &wr}) {
          Case c;
          Tensor* id = c.g.external(make_tensor(DType::I32, static_cast<int64_t>(ids.size()), 1, 1, 1, ids.data()));
          Tensor* dst = output(c, K, static_cast<int64_t>(ids.size()));
          c.g.add(Op::GET_ROWS, dst, c.g.external(*table), id);
          run_graph(*make_cpu_backend(2), c.g);
          (table == &w ? rows_plain : rows_grouped).assign(dst->f32(0), dst->f32(0) + K * ids.size());
        }
        CHECK(std::memcmp(rows_plain.data(), rows_grouped.data(), rows_plain.size() * sizeof(float)) == 0);
      }
    }
  }
}

// The activation quantizer the integer kernels share (qgemm_quantize_acts, vectorized) against
// the reference's rounding of activations, bit for bit: codes times scales, and the sums of 16.
TEST_CASE("quantized activations: the CPU quantizer rounds as the reference does") {
  if (!cpu::has_avx2_fma()) {
    MESSAGE("no AVX2/FMA: activations are never quantized for integer kernels");
    return;
  }
  std::mt19937 rng(34);
  std::normal_distribution<float> nd;
  for (DType vdt : {DType::Q8_0, DType::Q8_1, DType::Q8_K}) {
    CAPTURE(dtype_name(vdt));
    const int64_t K = 1024;
    std::vector<float> x(K);
    for (int64_t k = 0; k < K; ++k) x[k] = nd(rng) * (k < 256 ? 1e-3f : k < 512 ? 1.0f : 50.0f);
    std::fill(x.begin() + 32, x.begin() + 64, 0.0f);  // an all-zero block
    // Ties: with amax 127 the scale is 1, so these halves round to even.
    for (int j = 0; j < 32; ++j) x[64 + j] = j == 0 ? 127.0f : static_cast<float>(j % 7) - 3.5f;
    x[96 + 5] = -x[96 + 5] - 400.0f;  // a negative extreme
    cpu::QuantizedActs xa;
    xa.resize(K, 1);
    cpu::qgemm_quantize_acts(vdt, x.data(), K, xa, 0);
    std::vector<float> want(K);
    ref::round_activations(vdt, x.data(), want.data(), K);
    int bad = 0, bad_sums = 0;
    // Equal values (the reference keeps the sign of a zero, integer codes cannot).
    for (int64_t k = 0; k < K; ++k) bad += xa.dx[k / 32] * static_cast<float>(xa.q[k]) != want[k];
    for (int64_t g = 0; g < K / 16; ++g) {
      int32_t s = 0;
      for (int j = 0; j < 16; ++j) s += xa.q[16 * g + j];
      bad_sums += s != xa.bs[g];
    }
    CHECK_MESSAGE(bad == 0, bad << " of " << K << " rounded activations differ from the reference");
    CHECK(bad_sums == 0);
  }
}

// Consecutive matmuls of one input (q, k, v; gate, up) run as one pass on the CPU backend
// (cpu::matmuls): each gives the bits it gives alone, whatever the matrices' sizes (row counts
// that are not multiples of 8 included) and however the threads' chunks cross them.
TEST_CASE("MATMUL: consecutive matmuls of one input give the bits each gives alone") {
  std::mt19937 rng(35);
  for (DType type : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16}) {
    CAPTURE(dtype_name(type));
    // Enough groups of 8 rows that the threads' chunks (ChunkedSplit) span several groups and
    // cross from one matrix into the next.
    const int64_t K = 256;
    const std::vector<int64_t> Ns = {520, 130, 264, 21};
    for (int64_t m : {int64_t{1}, int64_t{3}}) {
      CAPTURE(m);
      Buffers buf;
      std::vector<Tensor> ws;
      for (int64_t N : Ns) {
        ws.push_back(buf.tensor(type, K, N));
        fill_random_weights(ws.back(), rng);
      }
      Tensor x = buf.tensor(DType::F32, K, m);
      fill_random(x, rng);
      for (int threads : {1, 2, 3}) {
        CAPTURE(threads);
        Case c;
        Tensor* xs = c.g.external(x);
        std::vector<Tensor*> outs;
        for (const Tensor& w : ws) {
          outs.push_back(output(c, w.ne[1], m));
          c.g.add(Op::MATMUL, outs.back(), c.g.external(w), xs);
        }
        run_graph(*make_cpu_backend(threads), c.g);
        for (size_t j = 0; j < ws.size(); ++j) {
          const std::vector<float> alone = run_matmul(ws[j], x, m, threads);
          CHECK(std::memcmp(alone.data(), outs[j]->f32(0), alone.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}
