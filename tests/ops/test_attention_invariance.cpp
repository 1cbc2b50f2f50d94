// The CPU's tiled ATTENTION (backends/cpu/kernels/attention_avx2.cpp) gives a token the same bits
// whatever else the call holds: the whole prompt at once, or each token alone as a decode step
// whose sequence table ends at the token's own block (so fewer cells past its reach), on 1 or 3
// threads, with the AVX2 or the AVX-512 inner loops. The engine's batch-invariance test relies
// on it; the op harness (test_ops.cpp) checks the values against the reference. Random caches
// of every cache type, paged tables in shuffled block order, GQA groups of 4 and 16 (one kv
// head: the decode split of a group across threads), heads with a tail (36), windows, sinks and
// soft-capping, two sequences in one batch.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "backends/cpu/simd.h"
#include "op_case.h"

using namespace kestrel;
using namespace kestrel::test;

namespace {

struct Spec {
  DType cache;
  int64_t hd, nh, nkv;
  int32_t window;
  bool sinks;
  float softcap;
};

struct Setup {
  Buffers buf;
  Tensor kc, vc, q, sinks;
  std::vector<int32_t> cell_pos, tables, table_begin, tok_pos, tok_seq;
  int32_t bs = 16;
};

// Runs ATTENTION for tokens `which` (indices into the setup's tokens) on the CPU; with `cut`,
// each sequence's table ends at the block of the last such token's position.
std::vector<float> run(Setup& s, const Spec& sp, const std::vector<int32_t>& which, bool cut, int threads) {
  Case c;
  const int64_t T = static_cast<int64_t>(which.size());
  std::vector<int32_t> pos, seq;
  std::vector<float> q(static_cast<size_t>(sp.hd * sp.nh * T));
  for (int64_t i = 0; i < T; ++i) {
    const int32_t t = which[static_cast<size_t>(i)];
    pos.push_back(s.tok_pos[static_cast<size_t>(t)]);
    seq.push_back(s.tok_seq[static_cast<size_t>(t)]);
    std::memcpy(q.data() + i * sp.hd * sp.nh, s.q.f32(0, t), static_cast<size_t>(sp.hd * sp.nh) * sizeof(float));
  }
  std::vector<int32_t> begin = {0}, tables;
  for (size_t sq = 0; sq + 1 < s.table_begin.size(); ++sq) {
    int32_t end = s.table_begin[sq + 1];
    if (cut) {
      int32_t last = -1;
      for (int64_t i = 0; i < T; ++i)
        if (seq[static_cast<size_t>(i)] == static_cast<int32_t>(sq)) last = std::max(last, pos[static_cast<size_t>(i)]);
      end = std::min(end, s.table_begin[sq] + last / s.bs + 1);
    }
    for (int32_t e = s.table_begin[sq]; e < end; ++e) tables.push_back(s.tables[static_cast<size_t>(e)]);
    begin.push_back(static_cast<int32_t>(tables.size()));
  }
  Tensor* batch = input_i32(c, pack_attention(pos, seq, s.cell_pos, s.bs, begin, tables));
  Tensor* qt = c.g.external(make_tensor(DType::F32, sp.hd, sp.nh, T, 1, q.data()));
  Tensor* dst = output(c, sp.hd, sp.nh, T);
  c.g.add(Op::ATTENTION, dst, qt, c.g.external(s.kc), c.g.external(s.vc), sp.sinks ? c.g.external(s.sinks) : nullptr,
          batch)
      .params = AttentionParams{.scale = 0.25f, .softcap = sp.softcap, .window = sp.window};
  run_graph(*make_cpu_backend(threads), c.g);
  return std::vector<float>(dst->f32(0), dst->f32(0) + sp.hd * sp.nh * T);
}

}  // namespace

TEST_CASE("ATTENTION on the CPU: a token's bits do not depend on the batch, the threads or the ISA") {
  if (!cpu::has_avx2_fma()) {
    MESSAGE("no AVX2/FMA: the CPU runs the reference attention");
    return;
  }
  const Spec specs[] = {
      {DType::F16, 64, 8, 2, 0, false, 0.0f},  {DType::F16, 36, 8, 2, 40, true, 0.0f},
      {DType::F32, 64, 16, 1, 0, true, 0.0f},  {DType::F32, 36, 4, 1, 0, false, 3.0f},
      {DType::Q8_0, 64, 8, 2, 30, false, 0.0f}, {DType::Q4_0, 40, 16, 1, 0, true, 0.0f},
      {DType::Q4_0, 64, 8, 2, 0, false, 0.0f},  // (read in place: heads a multiple of 16)
      {DType::F8_E4M3, 64, 8, 2, 0, false, 4.0f},
      // Groups of 2 and 3 (1-2 rows a kv head in a decode step: the microkernels' several-chain
      // paths), heads of 128 and 80 (whole and partial runs of chains), and of 40 (an F16 V row
      // read in place ending in 8 values; K transposed 8 values at a time).
      {DType::F16, 128, 4, 2, 0, false, 0.0f}, {DType::F16, 80, 6, 2, 0, true, 0.0f},
      {DType::F16, 40, 6, 2, 0, false, 0.0f},
  };
  std::vector<bool> isas = {false};
  if (cpu::has_avx512_vnni()) isas.push_back(true);
  const bool isa_before = cpu::use_avx512();
  std::mt19937 rng(41);
  for (const Spec& sp : specs) {
    CAPTURE(dtype_name(sp.cache));
    CAPTURE(sp.hd);
    CAPTURE(sp.nh / sp.nkv);
    Setup s;
    // Sequence 0: positions 0..149, its last 40 the batch's; sequence 1: 0..69, its last 20.
    const int32_t n0 = 150, n1 = 70, blocks0 = (n0 + 15) / 16, blocks1 = (n1 + 15) / 16, n_blocks = blocks0 + blocks1 + 2;
    std::vector<int32_t> phys(static_cast<size_t>(n_blocks));
    for (int32_t i = 0; i < n_blocks; ++i) phys[static_cast<size_t>(i)] = i;
    std::shuffle(phys.begin(), phys.end(), rng);
    s.cell_pos.assign(static_cast<size_t>(n_blocks * 16), -1);
    s.table_begin = {0};
    for (int32_t sq = 0, next = 0; sq < 2; ++sq) {
      const int32_t n = sq ? n1 : n0, nb = sq ? blocks1 : blocks0;
      for (int32_t b = 0; b < nb; ++b, ++next) {
        const int32_t blk = phys[static_cast<size_t>(next)];
        s.tables.push_back(blk);
        for (int32_t k = 0; k < 16 && b * 16 + k < n; ++k) s.cell_pos[static_cast<size_t>(blk * 16 + k)] = b * 16 + k;
      }
      s.table_begin.push_back(static_cast<int32_t>(s.tables.size()));
    }
    for (int32_t p = n1 - 20; p < n1; ++p) s.tok_pos.push_back(p), s.tok_seq.push_back(1);
    for (int32_t p = n0 - 40; p < n0; ++p) s.tok_pos.push_back(p), s.tok_seq.push_back(0);
    const int32_t T = static_cast<int32_t>(s.tok_pos.size());
    s.kc = s.buf.tensor(sp.cache, sp.hd * sp.nkv, n_blocks * 16);
    s.vc = s.buf.tensor(sp.cache, sp.hd * sp.nkv, n_blocks * 16);
    fill_random(s.kc, rng);
    fill_random(s.vc, rng);
    s.q = s.buf.tensor(DType::F32, sp.hd, sp.nh, T);
    fill_random(s.q, rng, 2.0f);
    s.sinks = s.buf.tensor(DType::F32, sp.nh);
    fill_random(s.sinks, rng);
    std::vector<int32_t> all(static_cast<size_t>(T));
    for (int32_t t = 0; t < T; ++t) all[static_cast<size_t>(t)] = t;

    cpu::allow_avx512(false);
    const std::vector<float> want = run(s, sp, all, false, 2);
    const size_t row = static_cast<size_t>(sp.hd * sp.nh);
    for (bool avx512 : isas) {
      cpu::allow_avx512(avx512);
      CAPTURE(avx512);
      for (int threads : {1, 3}) {
        CAPTURE(threads);
        CHECK(std::memcmp(run(s, sp, all, false, threads).data(), want.data(), want.size() * sizeof(float)) == 0);
        int differ = 0;
        for (int32_t t = 0; t < T; t += 3) {  // alone, as a decode step would run it
          const std::vector<float> one = run(s, sp, {t}, true, threads);
          differ += std::memcmp(one.data(), want.data() + row * static_cast<size_t>(t), row * sizeof(float)) != 0;
        }
        CHECK_MESSAGE(differ == 0, differ << " tokens differ alone from in the batch");
      }
    }
    // Not all zeros or NaN: the outputs are real attention.
    double sum = 0;
    for (float v : want) sum += std::fabs(v);
    CHECK(std::isfinite(sum));
    CHECK(sum > 0.01 * static_cast<double>(want.size()));
  }
  cpu::allow_avx512(isa_before);
}
