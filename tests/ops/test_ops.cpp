// Every op x type x shape on every backend against backends/ref, on random data.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "backends/backend.h"
#include "backends/cpu/repacked.h"
#include "core/fp16.h"
#include "op_case.h"
#include "tensor/quants/quant_blocks.h"

using namespace kestrel;
using namespace kestrel::test;

TEST_CASE("GET_ROWS: every type") {
  std::mt19937 rng(1);
  for (DType type : kAllTypes) {
    Case c;
    c.name = std::string("get_rows ") + dtype_name(type);
    Tensor table = c.buf.tensor(type, 256, 13);
    fill_random_weights(table, rng);
    c.i32a = {3, 0, 12, 3, 7};
    Tensor* ids = c.g.external(make_tensor(DType::I32, 5, 1, 1, 1, c.i32a.data()));
    Tensor* dst = output(c, 256, 5);
    c.g.add(Op::GET_ROWS, dst, c.g.external(table), ids);
    check_case(c);
  }
}

// The CPU places Q4_0, Q4_K, Q8_0 and Q6_K matrices regrouped by eight rows (Tensor::layout); a tied
// embedding table is then gathered from that layout (cpu::get_rows_grouped): the same rows, bit for
// bit, as the reference reading the file layout.
TEST_CASE("GET_ROWS: a table in the CPU's grouped layout gives the file layout's rows") {
  std::mt19937 rng(12);
  for (DType type : {DType::Q4_0, DType::Q4_K, DType::Q8_0, DType::Q6_K}) {
    CAPTURE(dtype_name(type));
    const int64_t K = 512, N = 24;
    REQUIRE(cpu::grouped_fits(type, K, N));
    Buffers buf;
    Tensor plain = buf.tensor(type, K, N), grouped = buf.tensor(type, K, N);
    fill_random_weights(plain, rng);
    cpu::to_grouped(type, static_cast<const uint8_t*>(plain.data), K, N, static_cast<uint8_t*>(grouped.data));
    grouped.layout = cpu::kLayoutGrouped8;
    std::vector<int32_t> ids = {3, 0, 23, 8, 3, 17};
    Tensor idt = make_tensor(DType::I32, 6, 1, 1, 1, ids.data());
    std::vector<float> want, got;
    for (bool use_grouped : {false, true}) {
      Graph g;
      Tensor* dst = g.external(buf.tensor(DType::F32, K, 6));
      g.add(Op::GET_ROWS, dst, g.external(use_grouped ? grouped : plain), g.external(idt));
      auto backend = use_grouped ? make_cpu_backend(2) : make_ref_backend();
      REQUIRE(backend->device->supports(g.nodes()[0]));
      run_graph(*backend, g);
      (use_grouped ? got : want).assign(dst->f32(), dst->f32() + K * 6);
    }
    CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("row-wise ops: rms_norm, mul, add, silu, swiglu, geglu, softmax") {
  std::mt19937 rng(2);
  const int64_t shapes[][2] = {{1, 1}, {7, 3}, {64, 5}, {257, 9}, {4096, 2}};
  for (auto& s : shapes) {
    const int64_t K = s[0], R = s[1];
    for (Op op : {Op::RMS_NORM, Op::MUL, Op::ADD, Op::SILU, Op::SWIGLU, Op::GEGLU, Op::SOFTMAX}) {
      for (bool broadcast : {false, true}) {
        if (broadcast && op != Op::MUL && op != Op::ADD) continue;
        Case c;
        c.name = std::string(op_name(op)) + " [" + std::to_string(K) + "," + std::to_string(R) + "]" + (broadcast ? " bcast" : "");
        Tensor* a = input(c, DType::F32, rng, K, R);
        Tensor* b = input(c, DType::F32, rng, K, broadcast ? 1 : R);
        Tensor* dst = output(c, K, R);
        Node& n = c.g.add(op, dst, a, op == Op::RMS_NORM || op == Op::SILU || op == Op::SOFTMAX ? nullptr : b);
        if (op == Op::RMS_NORM) n.params = NormParams{.eps = 1e-5f};
        if (op == Op::SOFTMAX) n.params = SoftmaxParams{.scale = 0.7f};
        check_case(c);
      }
    }
  }
}

// [ADD ->] RMS_NORM -> MUL by a gain: the residual and norm of every pre-norm block, which the
// CUDA backend runs as one kernel when the three nodes are adjacent. Each chain is built twice,
// once adjacent and once with an unrelated node between each two (so nothing fuses); on CUDA the
// two must agree bit for bit, and both agree with the reference.
TEST_CASE("ADD -> RMS_NORM -> MUL chains, fused on CUDA: broadcasts, in place, odd rows, no ADD") {
  // variant 0: new tensors; 1: b and gain broadcast; 2: in place (the norm and the MUL write the
  // ADD's output); 3: no ADD; 4: variant 0 with 12 rows; 5: no ADD, in place (the norm and the
  // MUL write their input, a SILU's output). Where K allows, an integer-code MATMUL of z follows
  // (Q4_0: Q8_0 activations; Q4_K: Q8_K), whose quantized input the fused kernel writes too: 3
  // rows take the GEMV, 12 the tensor-core GEMM. K a multiple of 4: the row in registers, 1 to 8 float4s a
  // thread, the last one partial for 1088 and 6144; K 5 and 257: the loops.
  int64_t R = 3;
  Tensor* mm = nullptr;
  const auto build = [&](Case& c, int64_t K, int variant, bool apart, Tensor** z_out) {
    std::mt19937 rng(static_cast<unsigned>(23 + K + 7 * variant));
    Tensor* a = input(c, DType::F32, rng, K, R);
    Tensor* b = input(c, DType::F32, rng, K, variant == 1 ? 1 : R);
    Tensor* gain = input(c, DType::F32, rng, K, variant == 1 ? 1 : R);
    Tensor* other = input(c, DType::F32, rng, 5);
    const auto gap = [&] {  // an unrelated node
      if (apart) c.g.add(Op::SILU, output(c, 5), other);
    };
    Tensor* h = a;
    if (variant == 5) {  // h written by a node that does not fuse (the harness poisons outputs first)
      h = output(c, K, R);
      c.g.add(Op::SILU, h, a);
      gap();
    }
    if (variant != 3 && variant != 5) {
      h = output(c, K, R);
      c.g.add(Op::ADD, h, a, b);
      gap();
    }
    Tensor* y = variant == 2 || variant == 5 ? h : output(c, K, R);
    c.g.add(Op::RMS_NORM, y, h).params = NormParams{.eps = 1e-5f};
    gap();
    Tensor* z = variant == 2 || variant == 5 ? y : output(c, K, R);
    c.g.add(Op::MUL, z, y, gain);
    *z_out = z;
    mm = nullptr;
    if (K % 64 == 0) {
      Tensor w = c.buf.tensor(K % 256 == 0 ? DType::Q4_K : DType::Q4_0, K, 40);
      fill_random_weights(w, rng);
      mm = output(c, 40, R);
      c.g.add(Op::MATMUL, mm, c.g.external(w), z);
    }
  };
  for (int64_t K : {5, 64, 257, 1088, 2048, 6144}) {
    for (int variant = 0; variant < 6; ++variant) {
      R = variant == 4 ? 12 : 3;  // variant 4: variant 0's tensors, 12 rows
      std::vector<float> zs[2], ms[2];
      for (bool apart : {false, true}) {
        Case c;
        c.name = "add_norm_mul K " + std::to_string(K) + " variant " + std::to_string(variant) + (apart ? " apart" : "");
        Tensor* z = nullptr;
        build(c, K, variant == 4 ? 0 : variant, apart, &z);
        check_case(c, 1e-4, 1e-4);
        auto cuda = try_backend("cuda");
        if (!cuda) continue;
        run_on_device(*cuda, c.g);
        zs[apart].assign(z->f32(), z->f32() + K * R);
        if (mm) ms[apart].assign(mm->f32(), mm->f32() + 40 * R);
      }
      CAPTURE(K);
      CAPTURE(variant);
      CHECK(std::memcmp(zs[0].data(), zs[1].data(), zs[0].size() * sizeof(float)) == 0);
      CHECK(ms[0] == ms[1]);  // the fused quantization gives quantize_x's bits
    }
  }
}

// The SIMD SILU/SWIGLU use their own exp: check it far from zero too, where exp over- and
// underflows (|x| up to 120) and where the polynomial's range reduction matters (and GEGLU's
// tanh, saturated there).
TEST_CASE("silu, swiglu, geglu: wide argument range") {
  std::mt19937 rng(21);
  for (Op op : {Op::SILU, Op::SWIGLU, Op::GEGLU}) {
    for (float scale : {8.0f, 120.0f}) {
      Case c;
      c.name = std::string(op_name(op)) + " scale " + std::to_string(scale);
      Tensor* a = input(c, DType::F32, rng, 1003, 3);
      Tensor* b = input(c, DType::F32, rng, 1003, 3);
      for (int64_t i = 0; i < a->n_elements(); ++i) a->f32(0)[i] *= scale;
      Tensor* dst = output(c, 1003, 3);
      c.g.add(op, dst, a, op == Op::SILU ? nullptr : b);
      check_case(c, 1e-6, 1e-6);
    }
  }
}

namespace {

// A MATMUL case: random weights of `type` [K, N] times a random X of M columns; returns dst.
Tensor* random_matmul(Case& c, DType type, int64_t K, int64_t N, int64_t M, std::mt19937& rng) {
  Tensor w = c.buf.tensor(type, K, N);
  fill_random_weights(w, rng);
  Tensor* x = input(c, DType::F32, rng, K, M);
  Tensor* dst = output(c, N, M);
  c.g.add(Op::MATMUL, dst, c.g.external(w), x);
  return dst;
}

}  // namespace

TEST_CASE("MATMUL: every weight type, odd shapes") {
  std::mt19937 rng(3);
  for (DType type : kAllTypes) {
    const int64_t bs = dtype_info(type).block_size;
    // One block, several, and an odd count of blocks (288 = 9 x 32, 768 = 3 x 256).
    const int64_t Ks[] = {bs == 1 ? 37 : bs, bs == 1 ? 256 : 2 * bs * (bs == 32 ? 4 : 1), bs == 1 ? 300 : 3 * bs * (bs == 32 ? 3 : 1)};
    for (int64_t K : Ks) {
      for (int64_t N : {1, 7, 33}) {
        for (int64_t M : {1, 5, 17}) {
          Case c;
          c.name = std::string("matmul ") + dtype_name(type) + " K=" + std::to_string(K) + " N=" + std::to_string(N) + " M=" + std::to_string(M);
          random_matmul(c, type, K, N, M, rng);
          check_case(c, 1e-3, 1e-4);
        }
      }
    }
  }
}

// The integer-code types on CUDA's integer kernels: M <= 8 takes the dp4a GEMV (gemv_q8.cu), more
// columns the int8 tensor-core GEMM (mmq.cu). Rows of more chunks than a warp has lanes and than
// a whole number of GEMM stages, row and column counts that leave partial tiles. Every backend
// within the usual tolerance; CUDA's within float rounding of the reference for the 32-value
// types (every product of both double sums is exact), where a float-accumulating kernel would be
// off by ~1e-6.
TEST_CASE("MATMUL: the integer-code types, decode shapes and batches, long rows") {
  std::mt19937 rng(31);
  for (DType type : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::IQ4_NL, DType::MXFP4,
                     DType::NVFP4, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const int64_t bs = dtype_info(type).block_size;
    const bool k_quant = bs == 256;
    for (int64_t K : {bs * (k_quant ? 5 : bs == 64 ? 17 : 33), bs * (k_quant ? 9 : bs == 64 ? 35 : 70)}) {
      for (int64_t M : {1, 2, 8, 9, 41}) {
        Case c;
        c.name = std::string(M <= 8 ? "gemv " : "mmq ") + dtype_name(type) + " K=" + std::to_string(K) + " M=" + std::to_string(M);
        Tensor* dst = random_matmul(c, type, K, 19, M, rng);
        check_case(c, 1e-4, 1e-4);
        // The K-quants' reference rounds each weight (d * sc * q - dmin * m) and activation
        // (float Q8_K scale times code) to float: only the usual tolerance there.
        auto cuda = try_backend("cuda");
        if (!cuda || k_quant) continue;
        auto ref = make_ref_backend();
        run_graph(*ref, c.g);
        const std::vector<float> want(dst->f32(), dst->f32() + 19 * M);
        run_on_device(*cuda, c.g);
        for (int64_t i = 0; i < 19 * M; ++i)
          CHECK_MESSAGE(std::fabs(dst->f32()[i] - want[static_cast<size_t>(i)]) <= 2e-7 * (1 + std::fabs(want[static_cast<size_t>(i)])),
                        c.name << " element " << i << ": cuda " << dst->f32()[i] << ", ref " << want[static_cast<size_t>(i)]);
      }
    }
  }
  // More rows than the GEMV's loads-ahead variant takes (gemv_q8.cu, kAheadRows): one chunk a time.
  for (DType type : {DType::Q4_0, DType::Q6_K}) {
    Case c;
    c.name = std::string("gemv of 4100 rows ") + dtype_name(type);
    random_matmul(c, type, dtype_info(type).block_size * 3, 4100, 1, rng);
    check_case(c, 1e-4, 1e-4);
  }
}

// F16 and BF16 on CUDA's GEMV (up to 8 columns, rows of a multiple of 8: a lane's last 16-byte
// step partly past the row) and tensor-core GEMM (more columns; any K, partial stages and tiles);
// odd K in decode falls back to the part-1 kernel. Every backend within the usual tolerance.
TEST_CASE("MATMUL: F16 and BF16 on the GEMV and the tensor-core GEMM") {
  std::mt19937 rng(43);
  for (DType type : {DType::F16, DType::BF16}) {
    for (int64_t K : {1000, 77}) {
      for (int64_t M : {1, 3, 8, 9, 40, 70}) {
        Case c;
        c.name = std::string("matmul ") + dtype_name(type) + " K=" + std::to_string(K) + " M=" + std::to_string(M);
        random_matmul(c, type, K, 70, M, rng);
        check_case(c, 1e-4, 1e-4);
      }
    }
  }
}

// F16/BF16 batches of more than 65 columns: on CUDA they go to cuBLAS where it loaded
// (gemm_cublas.cu; the emulator has its own cublasGemmEx), otherwise to the tensor-core tiles.
// Both ways against the reference, X dense and strided (a view with padded rows, starting one
// value in), K with tails. On the emulated device each product must have been issued to the
// library (ExecutorStats::library_gemms), and none with KESTREL_CUDA_CUBLAS=0.
TEST_CASE("MATMUL: F16 and BF16 batches on cuBLAS and on the tensor-core tiles") {
  struct Env {  // restored however the test case ends
    ~Env() { unsetenv("KESTREL_CUDA_CUBLAS"); }
  } env;
  std::mt19937 rng(47);
  for (const bool library : {true, false}) {
    setenv("KESTREL_CUDA_CUBLAS", library ? "1" : "0", 1);
    for (DType type : {DType::F16, DType::BF16}) {
      for (int64_t K : {77, 1000}) {
        for (int64_t M : {66, 100}) {
          for (const bool strided : {false, true}) {
            Case c;
            c.name = std::string(library ? "cuBLAS " : "tiles ") + dtype_name(type) + " K=" + std::to_string(K) +
                     " M=" + std::to_string(M) + (strided ? " strided" : "");
            Tensor w = c.buf.tensor(type, K, 70);
            fill_random_weights(w, rng);
            Tensor* x = input(c, DType::F32, rng, strided ? K + 5 : K, M);
            if (strided) x = c.g.view(x, K, M, 1, x->nb[1], x->nb[1] * M, sizeof(float));
            c.g.add(Op::MATMUL, output(c, 70, M), c.g.external(w), x);
            check_case(c, 1e-4, 1e-4);
            auto cuda = try_backend("cuda");
            if (!cuda || cuda->device->info().device.find("[emulated]") == std::string::npos) continue;
            run_on_device(*cuda, c.g);
            CHECK_MESSAGE(cuda->executor->stats().library_gemms == (library ? 1 : 0), c.name);
          }
        }
      }
    }
  }
  // KESTREL_CUDA_CUBLAS=dequant: quantized weights too, dequantized to F16 pieces of rows (16 KB
  // under the emulator: several pieces and a short last one), X rounded to F16 instead of the
  // type's Q8_0/Q8_K. That is not the reference's arithmetic, so the result is checked against
  // its own: the type's dequantized values and X, each rounded to F16, dotted in double. Up to
  // 65 columns the integer kernels stay (no library call).
  setenv("KESTREL_CUDA_CUBLAS", "dequant", 1);
  auto cuda = try_backend("cuda");
  if (!cuda || cuda->device->info().device.find("[emulated]") == std::string::npos) return;
  for (DType type : {DType::Q4_0, DType::Q8_0, DType::Q5_1, DType::IQ4_NL, DType::MXFP4, DType::NVFP4, DType::Q4_K, DType::Q6_K,
                     DType::FP8_E4M3}) {
    for (int64_t M : {8, 70}) {
      cuda = try_backend("cuda");  // fresh statistics
      Case c;
      const int64_t K = dtype_info(type).block_size == 256 ? 512 : 384, N = 75;
      c.name = std::string("cuBLAS dequant ") + dtype_name(type) + " M=" + std::to_string(M);
      CAPTURE(c.name);
      Tensor w = c.buf.tensor(type, K, N);
      fill_random_weights(w, rng);
      Tensor* x = input(c, DType::F32, rng, K, M);
      Tensor* y = output(c, N, M);
      c.g.add(Op::MATMUL, y, c.g.external(w), x);
      run_on_device(*cuda, c.g);
      const int64_t piece_rows = 16384 / (2 * K);
      CHECK(cuda->executor->stats().library_gemms == (M > 65 ? (N + piece_rows - 1) / piece_rows : 0));
      if (M <= 65) continue;
      std::vector<float> wf(static_cast<size_t>(K));
      double worst = 0;
      for (int64_t r = 0; r < N; ++r) {
        dtype_info(type).to_float(w.row(r), wf.data(), K);
        for (int64_t m = 0; m < M; ++m) {
          double want = 0;
          for (int64_t k = 0; k < K; ++k) want += double(round_fp16(wf[k])) * round_fp16(x->f32()[m * K + k]);
          worst = worse_error(worst, std::abs(y->f32()[m * N + r] - want) / (1e-4 + 1e-4 * std::abs(want)));
        }
      }
      CHECK(worst <= 1.0);
    }
  }
}

// FP8 weights holding every E4M3 code, subnormals (codes 1..7, 0x81..0x87) included: the CUDA
// kernels convert four codes at a time by placing their bits in a float (dequant.cuh), which must
// give each code's exact value, and a word with a NaN code (0x7F, 0xFF) takes the exact decoding.
// Decode shapes (the GEMV) and batches (FP8 tensor cores), rows of several blocks.
TEST_CASE("MATMUL: FP8 weights with every code, subnormal and NaN") {
  std::mt19937 rng(41);
  const int64_t K = 384, N = 21;
  for (int64_t M : {1, 3, 8, 9, 40}) {
    Case c;
    c.name = "matmul fp8 every code M=" + std::to_string(M);
    Tensor w = c.buf.tensor(DType::FP8_E4M3, K, N);
    std::uniform_real_distribution<float> scale(0.001f, 0.05f);
    for (int64_t r = 0; r < N; ++r) {
      auto* blocks = reinterpret_cast<block_fp8*>(w.row(r));
      for (int64_t b = 0; b < K / 128; ++b) {
        blocks[b].d = scale(rng);
        for (int j = 0; j < 128; ++j) {
          uint8_t code = static_cast<uint8_t>((r * 384 + b * 128 + j) * 7 % 256);  // every code, spread over rows
          if ((code & 0x7F) == 0x7F && r != 5) code ^= 1;  // NaN only in row 5
          blocks[b].qs[j] = code;
        }
      }
    }
    Tensor* x = input(c, DType::F32, rng, K, M);
    Tensor* dst = output(c, N, M);
    c.g.add(Op::MATMUL, dst, c.g.external(w), x);
    check_case(c, 1e-4, 1e-4);
  }
}

// Weights at their largest codes against activations at their largest magnitude: the integer
// kernels sum several byte products in int16 lanes before widening (qtile_avx2.cpp), which must not
// overflow. One value of -1 per 16 and +1 elsewhere quantizes to the extreme codes of every type;
// constant activations quantize to +-127 (Q8_0/Q8_1) or -128 (Q8_K).
TEST_CASE("MATMUL: extreme codes keep the integer sums exact") {
  std::mt19937 rng(11);
  for (DType type : kAllTypes) {
    const DTypeInfo& ti = dtype_info(type);
    if (!ti.from_float || ti.block_size == 1) continue;
    const int64_t K = 512, N = 24, M = 7;
    for (float sign : {1.0f, -1.0f}) {
      Case c;
      c.name = std::string("matmul extreme ") + dtype_name(type) + (sign > 0 ? " +" : " -");
      Tensor w = c.buf.tensor(type, K, N);
      std::vector<float> row(K);
      for (int64_t r = 0; r < N; ++r) {
        for (int64_t k = 0; k < K; ++k) row[k] = (k % 16 == (r % 16)) ? -1.0f : 1.0f;
        ti.from_float(row.data(), w.row(r), K);
      }
      Tensor* x = input(c, DType::F32, rng, K, M);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k) x->f32(m)[k] = sign * (m % 2 ? 1.0f : 0.5f);
      Tensor* dst = output(c, N, M);
      c.g.add(Op::MATMUL, dst, c.g.external(w), x);
      check_case(c, 1e-3, 1e-4);
    }
  }
}

TEST_CASE("ROPE: normal and neox, partial rotation, frequency factors, YaRN") {
  std::mt19937 rng(4);
  for (int mode : {ROPE_NORMAL, ROPE_NEOX}) {
    for (int variant = 0; variant < 4; ++variant) {
      Case c;
      const int64_t hd = 64, nh = 3, T = 5;
      RopeParams p;
      p.mode = mode;
      p.n_rot = variant == 1 ? 32 : 64;
      p.freq_base = variant == 2 ? 500000.0f : 10000.0f;
      p.freq_scale = variant == 3 ? 0.25f : 1.0f;
      p.ext_factor = variant == 3 ? 1.0f : 0.0f;
      p.n_ctx_orig = 4096;
      c.name = "rope mode " + std::to_string(mode) + " variant " + std::to_string(variant);
      Tensor* x = input(c, DType::F32, rng, hd, nh, T);
      c.i32a = {0, 1, 17, 300, 4095};
      Tensor* pos = c.g.external(make_tensor(DType::I32, T, 1, 1, 1, c.i32a.data()));
      Tensor* ff = nullptr;
      if (variant == 2) {
        ff = input(c, DType::F32, rng, p.n_rot / 2);
        for (int i = 0; i < p.n_rot / 2; ++i) ff->f32()[i] = 1.0f + std::fabs(ff->f32()[i]) * 30;
      }
      Tensor* dst = output(c, hd, nh, T);
      c.g.add(Op::ROPE, dst, x, pos, ff).params = p;
      check_case(c, 1e-5, 1e-4);
    }
  }
}

// ROPE(q) -> ROPE(k) -> KV_STORE(k) -> KV_STORE(v), which CUDA runs as one kernel when the four
// nodes are adjacent: built once adjacent and once with an unrelated node between each two
// (nothing fuses); on CUDA the two agree bit for bit (the ropes' outputs and both caches), and
// both agree with the reference. Every cache type; normal and neox; partial rotation with
// frequency factors; one token and several; variant 4: K and V interleaved in one buffer (each
// row K's values then V's), as a layer's two caches may be.
TEST_CASE("ROPE, ROPE, KV_STORE, KV_STORE fused on CUDA: the separate kernels' bits, every cache type") {
  const auto bytes_of = [](const Tensor* t) {
    const auto* p = static_cast<const uint8_t*>(t->data);
    return std::vector<uint8_t>(p, p + t->n_bytes());
  };
  for (DType cache_type : {DType::F16, DType::F32, DType::F8_E4M3}) {
    for (int variant = 0; variant < 5; ++variant) {
      const int64_t hd = 64, nh = 4, nkv = 2, T = variant % 2 || variant == 4 ? 3 : 1, cells = 7;
      std::vector<uint8_t> caches[2], ys[2];
      for (bool apart : {false, true}) {
        std::mt19937 rng(static_cast<unsigned>(31 + variant));
        Case c;
        c.name = std::string("rope_store ") + dtype_name(cache_type) + " variant " + std::to_string(variant) +
                 (apart ? " apart" : "");
        RopeParams p;
        p.mode = variant < 2 ? ROPE_NORMAL : ROPE_NEOX;
        p.n_rot = variant == 3 ? 32 : 64;
        p.n_ctx_orig = 4096;
        Tensor kc = c.buf.tensor(cache_type, hd * nkv, cells), vc = c.buf.tensor(cache_type, hd * nkv, cells);
        Tensor both = c.buf.tensor(cache_type, 2 * hd * nkv, cells);
        if (variant == 4) {  // views of one buffer's rows: K the first half, V the second
          kc = both, kc.ne[0] = hd * nkv;
          vc = kc, vc.data = static_cast<uint8_t*>(both.data) + kc.row_bytes();
        }
        fill_random(variant == 4 ? both : kc, rng);
        if (variant != 4) fill_random(vc, rng);
        Tensor* kct = c.g.external(kc);
        Tensor* vct = c.g.external(vc);
        c.i32a = {0, 17, 300};  // positions
        c.i32b = {5, 2, 6};     // slots
        c.i32a.resize(T), c.i32b.resize(T);
        Tensor* pos = input_i32(c, c.i32a);
        Tensor* slots = input_i32(c, c.i32b);
        Tensor* ff = nullptr;
        if (variant == 3) {
          ff = input(c, DType::F32, rng, p.n_rot / 2);
          for (int i = 0; i < p.n_rot / 2; ++i) ff->f32()[i] = 1.0f + std::fabs(ff->f32()[i]) * 30;
        }
        Tensor* q = input(c, DType::F32, rng, hd, nh, T);
        Tensor* k = input(c, DType::F32, rng, hd, nkv, T);
        Tensor* v = input(c, DType::F32, rng, hd * nkv, T);
        Tensor* other = input(c, DType::F32, rng, 5);
        const auto gap = [&] {
          if (apart) c.g.add(Op::SILU, output(c, 5), other);
        };
        Tensor* yq = output(c, hd, nh, T);
        c.g.add(Op::ROPE, yq, q, pos, ff).params = p;
        gap();
        Tensor* yk = output(c, hd, nkv, T);
        c.g.add(Op::ROPE, yk, k, pos, ff).params = p;
        gap();
        Tensor* yk2 = c.g.external(make_tensor(DType::F32, hd * nkv, T, 1, 1, yk->data));  // k's rows, cache rows
        c.g.add(Op::KV_STORE, kct, kct, yk2, slots);
        gap();
        c.g.add(Op::KV_STORE, vct, vct, v, slots);
        Tensor* cache_outs[2] = {kct, vct};  // (the shared buffer whole, for variant 4)
        if (variant == 4) cache_outs[0] = c.g.external(both), cache_outs[1] = nullptr;
        for (Tensor* t : cache_outs)
          if (t) c.outputs.push_back(t);
        check_case(c, 1e-5, 1e-4);
        auto cuda = try_backend("cuda");
        if (!cuda) continue;
        run_on_device(*cuda, c.g);
        for (const Tensor* t : {cache_outs[0], cache_outs[1], yq, yk}) {
          if (!t) continue;
          const std::vector<uint8_t> b = bytes_of(t);
          auto& into = t == yq || t == yk ? ys[apart] : caches[apart];
          into.insert(into.end(), b.begin(), b.end());
        }
      }
      CAPTURE(dtype_name(cache_type));
      CAPTURE(variant);
      CHECK(caches[0] == caches[1]);
      CHECK(ys[0] == ys[1]);
    }
  }
}

// Every cache type: F16, F32 and FP8 (plain E4M3 bytes, KV_STORE rounding to nearest even and
// saturating; attention reading them as the f16 values they are).
TEST_CASE("KV_STORE and ATTENTION: GQA, several sequences, windows, sinks, soft-cap") {
  std::mt19937 rng(5);
  for (DType cache_type : {DType::F16, DType::F32, DType::F8_E4M3, DType::Q8_0, DType::Q4_0}) {
    // variants 4-7: one token (decode splits heads, not tokens) and a head size with a scalar tail;
    // for the block types (a row's blocks of 32 run across its heads), heads of 48 values (a head
    // starts mid-block) and of 8 (four heads share a block).
    const bool blocks = dtype_info(cache_type).block_size > 1;
    for (int variant = 0; variant < 8; ++variant) {
      Case c;
      c.name = std::string("attention ") + dtype_name(cache_type) + " variant " + std::to_string(variant);
      const int64_t hd = variant < 4 ? 32 : !blocks ? 36 : variant % 2 ? 8 : 48;
      const int64_t nh = 8, nkv = hd == 8 ? 4 : 2, T = variant < 4 ? 6 : 1, cells = 23;
      Tensor kc = c.buf.tensor(cache_type, hd * nkv, cells), vc = c.buf.tensor(cache_type, hd * nkv, cells);
      fill_random(kc, rng);
      fill_random(vc, rng);
      Tensor* kct = c.g.external(kc);
      Tensor* vct = c.g.external(vc);
      // Cells: two sequences interleaved, some empty, the batch's own tokens in cells 17..22.
      for (int32_t i = 0; i < cells; ++i) {
        c.i32b.push_back(i % 5 == 4 ? -1 : i / 2);
        c.u64.push_back(i % 2 ? 2u : (i % 3 == 0 ? 3u : 1u));
      }
      c.i32a = {17, 18, 19, 20, 21, 22};  // slots
      std::vector<int32_t> tok_pos = {9, 10, 11, 9, 10, 12}, tok_seq = {0, 0, 0, 1, 1, 1};
      c.i32a.resize(T), tok_pos.resize(T), tok_seq.resize(T);
      for (int t = 0; t < T; ++t) {
        c.i32b[c.i32a[t]] = tok_pos[t];
        c.u64[c.i32a[t]] = uint64_t{1} << tok_seq[t];
      }
      c.i32c = tok_pos;
      c.i32c.insert(c.i32c.end(), tok_seq.begin(), tok_seq.end());
      // Block tables (blocks of one cell): each sequence's cells in cell order; cells of both
      // sequences (mask 3) are a shared block in both tables.
      c.i32e = {0};
      for (int s = 0; s < 2; ++s) {
        for (int32_t i = 0; i < cells; ++i)
          if ((c.u64[i] >> s) & 1u) c.i32d.push_back(i);
        c.i32e.push_back(static_cast<int32_t>(c.i32d.size()));
      }
      Tensor* batch = input_i32(c, pack_attention(tok_pos, tok_seq, c.i32b, 1, c.i32e, c.i32d));
      Tensor* slots = input_i32(c, c.i32a);
      Tensor* k = input(c, DType::F32, rng, hd * nkv, T);
      Tensor* v = input(c, DType::F32, rng, hd * nkv, T);
      c.g.add(Op::KV_STORE, kct, kct, k, slots);
      c.g.add(Op::KV_STORE, vct, vct, v, slots);
      Tensor* q = input(c, DType::F32, rng, hd, nh, T);
      Tensor* sinks = variant % 4 == 2 ? input(c, DType::F32, rng, nh) : nullptr;
      Tensor* dst = output(c, hd, nh, T);
      c.g.add(Op::ATTENTION, dst, q, kct, vct, sinks, batch).params =
          AttentionParams{.scale = 0.3f, .softcap = variant % 4 == 3 ? 5.0f : 0.0f, .window = variant % 4 == 1 ? 3 : 0};
      c.outputs.push_back(kct);
      c.outputs.push_back(vct);
      // Probabilities are rounded to f16; a backend's float sums can put one on the other side of
      // a rounding boundary than the reference's doubles, which moves an output by one f16 ulp of
      // that probability times V (up to ~1.2e-4 here). The quantized caches' random data met such
      // a case (q8_0 variant 3); the cache bytes themselves must match exactly either way.
      check_case(c, blocks ? 2e-4 : 1e-5, 1e-4);
    }
  }
}

// CUDA's decode attention (attention_decode.cu) splits the cache in pieces of 256 cells and reads
// K and V once per kv head group; its part-1 kernel stays for more than 16 tokens. Paged block
// tables (16 cells a block, out of order), 600 cells (three splits, the last partial), one to 20
// tokens, groups of 1, 4 and 16 heads, windows, sinks and soft-capping, F16, F32 and FP8 caches.
TEST_CASE("ATTENTION: long paged caches, decode and prefill token counts, GQA groups") {
  std::mt19937 rng(17);
  const int32_t bs = 16, n_blocks = 39, cells = bs * n_blocks;  // 624 cells, 600 used by the table
  for (DType cache_type : {DType::F16, DType::F32, DType::F8_E4M3}) {
    // Groups of 4 and 16 query heads per kv head, then of 40 and 20: more than CUDA's decode
    // kernel takes in one block (16), split into sub-groups (MLA's one kv head for every head).
    for (int variant = 0; variant < 8; ++variant) {
      const int64_t T = variant % 3 == 0 ? 1 : (variant % 3 == 1 ? 3 : 20);
      const int64_t nkv = variant < 3 || variant == 7 ? 2 : 1, nh = variant < 3 ? 8 : (variant < 6 ? 16 : 40);
      const int64_t hd = variant < 3 ? 64 : (variant < 6 ? 40 : (variant == 6 ? 32 : 72));
      Case c;
      c.name = std::string("long attention ") + dtype_name(cache_type) + " T=" + std::to_string(T) + " group " +
               std::to_string(nh / nkv);
      Tensor kc = c.buf.tensor(cache_type, hd * nkv, cells), vc = c.buf.tensor(cache_type, hd * nkv, cells);
      fill_random(kc, rng);
      fill_random(vc, rng);
      // One sequence: its table lists blocks 1..38 in a shuffled order, 600 cells of positions 0..599
      // (the last block partly empty); the batch's tokens at positions 600 - T .. 599.
      std::vector<int32_t> table(n_blocks - 1);
      for (int32_t i = 0; i < n_blocks - 1; ++i) table[static_cast<size_t>(i)] = (i * 7 + 3) % (n_blocks - 1) + 1;
      std::vector<int32_t> cell_pos(static_cast<size_t>(cells), -1);
      for (int32_t i = 0; i < 600; ++i) cell_pos[static_cast<size_t>(table[static_cast<size_t>(i / bs)] * bs + i % bs)] = i;
      std::vector<int32_t> tok_pos, tok_seq(static_cast<size_t>(T), 0);
      for (int64_t t = 0; t < T; ++t) tok_pos.push_back(static_cast<int32_t>(600 - T + t));
      Tensor* batch = input_i32(c, pack_attention(tok_pos, tok_seq, cell_pos, bs, {0, n_blocks - 1}, table));
      Tensor* q = input(c, DType::F32, rng, hd, nh, T);
      Tensor* sinks = variant == 1 ? input(c, DType::F32, rng, nh) : nullptr;
      Tensor* dst = output(c, hd, nh, T);
      c.g.add(Op::ATTENTION, dst, q, c.g.external(kc), c.g.external(vc), sinks, batch).params =
          AttentionParams{.scale = 0.2f, .softcap = variant == 4 ? 4.0f : 0.0f,
                          .window = variant == 0 || variant == 2 || variant == 7 ? 300 : 0};
      check_case(c, 1e-5, 1e-4);
    }
  }
}

// Prefill: more than 65 tokens take CUDA's tensor-core kernel (attention_flash.cu) over an F16
// or FP8 cache; an F32 cache stays on the part-1 kernel. Paged tables of 16-cell blocks in shuffled
// physical order, spare blocks of random data that no table lists, the last block partly empty.
// With two sequences, the second shares the first's first block (a cached prefix) and its
// tokens come first, so one 64-token tile of the batch holds both. Head sizes that fill the
// 64/128/256 variants, pad them (16, 36, 40, 100), and differ between K and V, and MLA's wide
// heads; one prompt starts at position 0 (no context before it).
TEST_CASE("ATTENTION: prefill batches on tensor cores, several sequences, windows, sinks, soft-cap") {
  struct Spec {
    int64_t t0, t1, nh, nkv, hd_k, hd_v;
    int32_t window, ctx;
    bool sinks;
    float softcap;
    DType cache;
  };
  const Spec specs[] = {
      {70, 0, 8, 2, 64, 64, 0, 230, false, 0.0f, DType::F16},     {150, 0, 4, 4, 128, 128, 0, 230, true, 0.0f, DType::F16},
      {60, 40, 8, 2, 40, 40, 0, 230, false, 0.0f, DType::F16},    {90, 30, 6, 2, 36, 36, 50, 230, false, 0.0f, DType::F16},
      {80, 0, 4, 1, 100, 100, 0, 230, false, 6.0f, DType::F16},   {66, 34, 2, 2, 256, 256, 0, 230, true, 0.0f, DType::F16},
      {70, 12, 4, 2, 64, 32, 20, 230, true, 3.0f, DType::F16},    {70, 0, 4, 2, 64, 64, 0, 230, true, 0.0f, DType::F32},
      {80, 0, 4, 2, 16, 16, 0, 0, false, 0.0f, DType::F16},
      // The FP8 cache: 8-byte loads (head size 64), and byte loads (36) with a window and soft-cap.
      {70, 30, 8, 2, 64, 64, 0, 230, true, 0.0f, DType::F8_E4M3}, {80, 0, 4, 2, 36, 36, 40, 230, false, 4.0f, DType::F8_E4M3},
      // The wide variant: MLA's absorbed form (K 576 = latent 512 + rope 64, V the 512, one kv
      // head for all), 128 V dimensions a warp; a K head that pads (300, its last warps' share of
      // the k-steps empty), V heads with warps left idle (200) or without 16-byte loads (196), one
      // over two blocks (600), FP8, a window and soft-cap.
      {70, 20, 8, 1, 576, 512, 0, 120, true, 0.0f, DType::F16},   {75, 0, 4, 2, 300, 200, 30, 100, false, 3.0f, DType::F16},
      {70, 0, 4, 1, 576, 196, 0, 60, false, 0.0f, DType::F16},     {66, 10, 4, 1, 576, 512, 0, 40, false, 0.0f, DType::F8_E4M3},
      {70, 0, 2, 1, 128, 600, 0, 50, true, 0.0f, DType::F16},
  };
  std::mt19937 rng(29);
  const int32_t bs = 16;
  for (const Spec& sp : specs) {
    Case c;
    c.name = std::string("prefill attention ") + dtype_name(sp.cache) + " T=" + std::to_string(sp.t0) + "+" +
             std::to_string(sp.t1) + " hd " + std::to_string(sp.hd_k) + "/" + std::to_string(sp.hd_v) + " window " +
             std::to_string(sp.window);
    // Sequence 0 holds positions 0..n0-1 (its last t0 are the batch's), sequence 1 0..n1-1.
    const int32_t n0 = static_cast<int32_t>(sp.ctx + sp.t0), n1 = static_cast<int32_t>(sp.t1 ? 40 + sp.t1 : 0);
    const int32_t blocks0 = (n0 + bs - 1) / bs, blocks1 = n1 ? (n1 + bs - 1) / bs - 1 : 0, spare = 3;
    const int32_t n_blocks = blocks0 + blocks1 + spare, cells = n_blocks * bs;
    std::vector<int32_t> phys(static_cast<size_t>(n_blocks));
    for (int32_t i = 0; i < n_blocks; ++i) phys[static_cast<size_t>(i)] = i;
    std::shuffle(phys.begin(), phys.end(), rng);
    std::vector<int32_t> cell_pos(static_cast<size_t>(cells), -1), table_begin = {0}, tables;
    for (int32_t i = 0; i < blocks0; ++i) tables.push_back(phys[static_cast<size_t>(i)]);
    table_begin.push_back(blocks0);
    if (n1) {
      tables.push_back(phys[0]);  // the shared prefix
      for (int32_t i = 0; i < blocks1; ++i) tables.push_back(phys[static_cast<size_t>(blocks0 + i)]);
      table_begin.push_back(static_cast<int32_t>(tables.size()));
    }
    for (size_t e = 0; e < tables.size(); ++e) {
      const bool second = table_begin.size() > 2 && static_cast<int32_t>(e) >= table_begin[1];
      const int32_t first_pos = static_cast<int32_t>(second ? e - static_cast<size_t>(table_begin[1]) : e) * bs;
      for (int32_t k = 0; k < bs; ++k)
        if (first_pos + k < (second ? n1 : n0)) cell_pos[static_cast<size_t>(tables[e] * bs + k)] = first_pos + k;
    }
    std::vector<int32_t> tok_pos, tok_seq;
    for (int32_t p = n1 - static_cast<int32_t>(sp.t1); p < n1; ++p) tok_pos.push_back(p), tok_seq.push_back(1);
    for (int32_t p = n0 - static_cast<int32_t>(sp.t0); p < n0; ++p) tok_pos.push_back(p), tok_seq.push_back(0);
    const int64_t T = static_cast<int64_t>(tok_pos.size());
    Tensor kc = c.buf.tensor(sp.cache, sp.hd_k * sp.nkv, cells), vc = c.buf.tensor(sp.cache, sp.hd_v * sp.nkv, cells);
    fill_random(kc, rng);
    fill_random(vc, rng);
    Tensor* batch = input_i32(c, pack_attention(tok_pos, tok_seq, cell_pos, bs, table_begin, tables));
    Tensor* q = input(c, DType::F32, rng, sp.hd_k, sp.nh, T);
    Tensor* sinks = sp.sinks ? input(c, DType::F32, rng, sp.nh) : nullptr;
    Tensor* dst = output(c, sp.hd_v, sp.nh, T);
    // (Wide heads get a smaller scale, as 1/sqrt(head) would: the same spread of scores.)
    c.g.add(Op::ATTENTION, dst, q, c.g.external(kc), c.g.external(vc), sinks, batch).params =
        AttentionParams{.scale = sp.hd_k > 256 ? 0.1f : 0.3f, .softcap = sp.softcap, .window = sp.window};
    // The kernel's sum of exp(s - max) is rescaled as the max grows, so it differs from the
    // reference's in the last bits, and now and then a p rounds to the next f16: an output moves
    // by that p's f16 step times a V value (about 1.5e-5 here; the CPU's float sums do the same).
    // A wrong mask, cell or rescale is off by the output's size, about 0.05.
    check_case(c, 1e-4, 1e-4);
  }
}

// Rows drawn from a few levels (many ties across the cut), with NaN, +-inf and signed zeros
// sprinkled in; V from 1 to past a block's worth of chunks, k from 1 to 256 and to V.
TEST_CASE("TOP_K: ties, NaN, infinities, signed zeros, tails") {
  std::mt19937 rng(21);
  const float specials[] = {std::nanf(""), INFINITY, -INFINITY, 0.0f, -0.0f};
  for (int64_t V : {1, 7, 33, 300, 1000, 4099}) {
    for (int64_t k : {int64_t{1}, int64_t{5}, int64_t{40}, std::min<int64_t>(V, 256), V}) {
      if (k > V || k > 256) continue;
      for (int variant = 0; variant < 3; ++variant) {
        Case c;
        c.name = "top_k V=" + std::to_string(V) + " k=" + std::to_string(k) + " variant " + std::to_string(variant);
        const int64_t R = 3;
        Tensor* x = input(c, DType::F32, rng, V, R);
        std::uniform_int_distribution<int> level(-4, 4), pick(0, 19);
        for (int64_t i = 0; i < V * R; ++i) {
          float& v = x->f32()[i];
          if (variant >= 1) v = 0.5f * static_cast<float>(level(rng));  // ties everywhere
          if (variant == 2 && pick(rng) == 0) v = specials[static_cast<size_t>(pick(rng)) % 5];
        }
        Tensor* vals = output(c, k, R);
        Tensor* ids = c.g.external(c.buf.tensor(DType::I32, k, R));
        for (int64_t i = 0; i < k * R; ++i) static_cast<int32_t*>(ids->data)[i] = -1;
        c.outputs.push_back(ids);
        c.g.add(Op::TOP_K, vals, x, ids);
        check_case(c, 1e-30, 0.0);  // copies of the inputs: exact

        // The reference's answer, checked without its code: ids distinct, values theirs, in
        // strict order, and nothing left out beats the last one kept.
        auto ref = make_ref_backend();
        run_graph(*ref, c.g);
        auto beats = [](float a, int32_t ia, float b, int32_t ib) {
          if (std::isnan(a) != std::isnan(b)) return std::isnan(a);
          if (!std::isnan(a) && a != b) return a > b;
          return ia < ib;
        };
        for (int64_t r = 0; r < R; ++r) {
          const float* row = x->f32(r);
          const int32_t* id = static_cast<const int32_t*>(ids->data) + r * k;
          std::vector<bool> kept(static_cast<size_t>(V), false);
          for (int64_t j = 0; j < k; ++j) {
            REQUIRE(id[j] >= 0);
            REQUIRE(id[j] < V);
            CHECK(!kept[static_cast<size_t>(id[j])]);
            kept[static_cast<size_t>(id[j])] = true;
            CHECK(std::memcmp(&vals->f32(r)[j], &row[id[j]], sizeof(float)) == 0);
            if (j > 0) CHECK(beats(row[id[j - 1]], id[j - 1], row[id[j]], id[j]));
          }
          for (int64_t i = 0; i < V; ++i)
            if (!kept[static_cast<size_t>(i)]) CHECK(!beats(row[i], static_cast<int32_t>(i), row[id[k - 1]], id[k - 1]));
        }
      }
    }
  }
}
