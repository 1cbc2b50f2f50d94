// The mixture-of-experts and MLA ops: ROUTER, MATMUL_ID (every weight type), MOE_SUM,
// SWIGLU_OAI, CONCAT, and ATTENTION reading V as a view of K. Harness rows compare the CPU
// backend with backends/ref; the semantic checks compare against values worked out by hand or
// against the dense ops.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <set>

#include "backends/cpu/kernels/moe.h"
#include "backends/ref/ops_ref.h"
#include "op_case.h"
#include "tensor/quants/fp8.h"
#include "tensor/quants/quant_blocks.h"

using namespace kestrel;
using namespace kestrel::test;

namespace {

Tensor* ids_output(Case& c, int64_t k, int64_t T) {
  Tensor* t = c.g.external(c.buf.tensor(DType::I32, k, T));
  for (int64_t i = 0; i < k * T; ++i) static_cast<int32_t*>(t->data)[i] = -1;
  c.outputs.push_back(t);
  return t;
}

// A ROUTER node over logits [E, T]; returns {weights, ids}.
std::pair<Tensor*, Tensor*> add_router(Case& c, Tensor* logits, Tensor* bias, int k, int gating, int groups = 0,
                                       int keep = 0, bool norm = false, float scale = 0.0f) {
  const int64_t T = logits->ne[1];
  Tensor* w = output(c, k, T);
  Tensor* ids = ids_output(c, k, T);
  c.g.add(Op::ROUTER, w, logits, bias, ids).params = RouterParams{
      .gating = gating, .n_used = k, .n_groups = groups, .n_groups_used = keep, .normalize = norm, .weights_scale = scale};
  return {w, ids};
}

}  // namespace

TEST_CASE("ROUTER: softmax, sigmoid with selection bias, softmax over the chosen, groups (hand-computed)") {
  struct Want {
    int gating, groups, keep;
    bool norm, bias;
    float scale;
    int32_t id0, id1;
    float w0, w1;
  };
  // logits [0.1, 2.0, -1.0, 1.5]; bias [0, 0, 3, 0]
  const Want cases[] = {
      {1, 0, 0, true, false, 0.0f, 1, 3, 0.622459f, 0.377541f},        // softmax, top-2, renormalised
      {1, 0, 0, false, false, 0.0f, 1, 3, 0.553745f, 0.335863f},       // softmax weights as they are
      {2, 0, 0, true, true, 2.5f, 2, 1, 0.584788f, 1.915212f},         // sigmoid; bias picks expert 2 only
      {3, 0, 0, false, false, 0.0f, 1, 3, 0.622459f, 0.377541f},       // softmax over the two chosen logits
      {1, 2, 1, true, false, 0.0f, 1, 0, 0.869892f, 0.130108f},        // groups {0,1},{2,3}: keep the first
  };
  for (const Want& wc : cases) {
    Case c;
    c.name = "router gating " + std::to_string(wc.gating);
    Tensor* logits = c.g.external(c.buf.tensor(DType::F32, 4, 1));
    const float lv[] = {0.1f, 2.0f, -1.0f, 1.5f};
    std::copy(lv, lv + 4, logits->f32());
    Tensor* bias = nullptr;
    if (wc.bias) {
      bias = c.g.external(c.buf.tensor(DType::F32, 4));
      const float bv[] = {0, 0, 3, 0};
      std::copy(bv, bv + 4, bias->f32());
    }
    auto [w, ids] = add_router(c, logits, bias, 2, wc.gating, wc.groups, wc.keep, wc.norm, wc.scale);
    auto ref = make_ref_backend();
    run_graph(*ref, c.g);
    const int32_t* id = static_cast<const int32_t*>(ids->data);
    CHECK(id[0] == wc.id0);
    CHECK(id[1] == wc.id1);
    CHECK(w->f32()[0] == doctest::Approx(wc.w0).epsilon(1e-5));
    CHECK(w->f32()[1] == doctest::Approx(wc.w1).epsilon(1e-5));
    check_case(c);
  }
}

TEST_CASE("ROUTER: random logits, every variant, CPU threads vs ref") {
  std::mt19937 rng(11);
  for (int gating = 1; gating <= 3; ++gating) {
    for (int variant = 0; variant < 3; ++variant) {
      Case c;
      c.name = "router " + std::to_string(gating) + "/" + std::to_string(variant);
      Tensor* logits = input(c, DType::F32, rng, 16, 9);
      Tensor* bias = variant == 1 ? input(c, DType::F32, rng, 16) : nullptr;
      add_router(c, logits, bias, 4, gating, variant == 2 ? 4 : 0, variant == 2 ? 2 : 0, variant != 0, variant == 1 ? 2.5f : 0.0f);
      check_case(c);
    }
  }
}

namespace {

// A MATMUL_ID case: weights [K, N, E] of `type` (K a few blocks of it), X shared by the slots
// (variant 0) or one per slot, a bias per expert (variant 1), and ids id_of(i) for pair i = slot
// + slots * token, or (variant 2) no ids: slot i of E uses matrix i.
struct MatmulIdCase {
  Tensor w;
  Tensor *x, *ids, *bias, *dst;
  int64_t slots;
};
MatmulIdCase add_matmul_id(Case& c, std::mt19937& rng, DType type, int64_t N, int64_t E, int64_t T, int64_t slots, int variant,
                           const std::function<int32_t(int64_t)>& id_of) {
  const int64_t bs = dtype_info(type).block_size;
  const int64_t K = bs == 1 ? 40 : (bs == 32 ? 64 : 256);
  c.name = std::string("matmul_id ") + dtype_name(type) + " N " + std::to_string(N) + " T " + std::to_string(T) + " variant " +
           std::to_string(variant);
  MatmulIdCase m;
  m.w = c.buf.tensor(type, K, N, E);
  fill_random_weights(m.w, rng);
  m.slots = variant == 2 ? E : slots;
  m.x = input(c, DType::F32, rng, K, variant == 0 ? 1 : m.slots, T);
  m.ids = nullptr;
  if (variant != 2) {
    m.ids = c.g.external(c.buf.tensor(DType::I32, m.slots, T));
    for (int64_t i = 0; i < m.slots * T; ++i) static_cast<int32_t*>(m.ids->data)[i] = id_of(i);
  }
  m.bias = variant == 1 ? input(c, DType::F32, rng, N, E) : nullptr;
  m.dst = output(c, N, m.slots, T);
  c.g.add(Op::MATMUL_ID, m.dst, c.g.external(m.w), m.x, m.ids, m.bias);
  return m;
}

}  // namespace

TEST_CASE("MATMUL_ID: every weight type, shared and per-slot inputs, ids or per-head, biases") {
  std::mt19937 rng(12);
  for (DType type : kAllTypes) {
    const int64_t N = 7, E = 4, T = 5;
    for (int variant = 0; variant < 3; ++variant) {
      Case c;
      const MatmulIdCase m = add_matmul_id(c, rng, type, N, E, T, 2, variant,
                                           [&](int64_t i) { return static_cast<int32_t>((i * 3 + i / 2) % E); });
      check_case(c, 1e-3, 1e-4);

      // Each (slot, token) of the reference equals a dense MATMUL with the chosen expert's matrix.
      auto ref = make_ref_backend();
      run_graph(*ref, c.g);
      const int64_t K = m.w.ne[0];
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < m.slots; ++i) {
          const int32_t e = m.ids ? static_cast<int32_t*>(m.ids->data)[t * m.slots + i] : static_cast<int32_t>(i);
          Tensor we = make_tensor(type, K, N, 1, 1, static_cast<uint8_t*>(m.w.data) + e * m.w.nb[2]);
          Tensor xc = make_tensor(DType::F32, K, 1, 1, 1, m.x->f32(m.x->ne[1] == 1 ? 0 : i, t));
          std::vector<float> y(N);
          Tensor yt = make_tensor(DType::F32, N, 1, 1, 1, y.data());
          Node mm;
          mm.op = Op::MATMUL;
          mm.dst = &yt;
          mm.src[0] = &we;
          mm.src[1] = &xc;
          ref::matmul(mm);
          for (int64_t r = 0; r < N; ++r)
            CHECK(m.dst->f32(i, t)[r] == doctest::Approx(y[r] + (m.bias ? m.bias->f32(e)[r] : 0.0f)).epsilon(1e-5));
        }
      }
    }
  }
}

TEST_CASE("MATMUL_ID of many tokens: an expert with several tiles of pairs, one with none, invalid ids") {
  // More than 8 tokens (65 for FP8, F16 and BF16): CUDA groups the (slot, token) pairs by expert
  // into tiles of 32 (moe_group.cu) for its tensor cores. Expert 0 takes over 32 pairs (two tiles or more),
  // expert 3 none; ids -1 (pair 5) and E (pair 17) give zeros. N = 70 spans two 64-row tiles
  // with a tail.
  std::mt19937 rng(15);
  for (DType type : kAllTypes) {
    const bool float_mma = type == DType::FP8_E4M3 || type == DType::F16 || type == DType::BF16;
    const int64_t N = 70, E = 5, T = float_mma ? 70 : 20;
    for (int variant = 0; variant < 3; ++variant) {
      Case c;
      const MatmulIdCase m = add_matmul_id(c, rng, type, N, E, T, 3, variant, [&](int64_t i) {
        const int32_t pick[] = {0, 1, 0, 2, 0, 4};
        return i == 5 ? -1 : i == 17 ? static_cast<int32_t>(E) : pick[(i * 7 + i / 5) % 6];
      });
      check_case(c, 1e-3, 1e-4);
      if (m.ids) {  // the reference's zeros for the invalid ids
        auto ref = make_ref_backend();
        run_graph(*ref, c.g);
        CHECK(m.dst->f32(5 % m.slots, 5 / m.slots)[N - 1] == 0.0f);
        CHECK(m.dst->f32(17 % m.slots, 17 / m.slots)[0] == 0.0f);
      }
    }
  }
}

TEST_CASE("MATMUL_ID reads each expert's weights once per batch (64 tokens, 8 experts, top-2)") {
  std::mt19937 rng(13);
  Case c;
  const int64_t K = 64, N = 32, E = 8, T = 64, k = 2;
  Tensor w = c.buf.tensor(DType::Q8_0, K, N, E);
  fill_random_weights(w, rng);
  Tensor* x = input(c, DType::F32, rng, K, 1, T);
  Tensor* ids = c.g.external(c.buf.tensor(DType::I32, k, T));
  std::set<int32_t> used;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < k; ++i) {
      const int32_t e = static_cast<int32_t>((t * 5 + i * 3) % (E - 1));  // expert 7 never chosen
      static_cast<int32_t*>(ids->data)[t * k + i] = e;
      used.insert(e);
    }
  }
  Tensor* dst = output(c, N, k, T);
  c.g.add(Op::MATMUL_ID, dst, c.g.external(w), x, ids);
  auto cpu = make_cpu_backend(2);
  cpu::ExpertMatmulStats& st = cpu::expert_matmul_stats();
  st.reset();
  run_graph(*cpu, c.g);
  const uint64_t expert_bytes = w.n_bytes() / E;
  MESSAGE("64 tokens x top-2 of 8: " << st.expert_matmuls.load() << " expert matmuls, " << st.weight_bytes.load()
                                     << " weight bytes read (all experts: " << w.n_bytes() << ")");
  CHECK(st.expert_matmuls.load() == used.size());           // one product per used expert, not per token
  CHECK(st.weight_bytes.load() == used.size() * expert_bytes);
  CHECK(st.weight_bytes.load() < w.n_bytes());              // the unused expert is never read
}

TEST_CASE("MOE_SUM, SWIGLU_OAI, CONCAT of strided views") {
  std::mt19937 rng(14);
  {
    Case c;
    c.name = "moe_sum";
    Tensor* x = input(c, DType::F32, rng, 48, 3, 5);
    Tensor* w = input(c, DType::F32, rng, 3, 5);
    Tensor* dst = output(c, 48, 5);
    c.g.add(Op::MOE_SUM, dst, x, w);
    check_case(c);
    auto ref = make_ref_backend();
    run_graph(*ref, c.g);
    for (int64_t t = 0; t < 5; ++t) {
      const float want = x->f32(0, t)[7] * w->f32(t)[0] + x->f32(1, t)[7] * w->f32(t)[1] + x->f32(2, t)[7] * w->f32(t)[2];
      CHECK(dst->f32(t)[7] == doctest::Approx(want).epsilon(1e-6));
    }
  }
  {
    Case c;
    c.name = "swiglu_oai";
    Tensor g = c.buf.tensor(DType::F32, 64, 6), u = c.buf.tensor(DType::F32, 64, 6);
    fill_random(g, rng, 12.0f);  // reaches past the clamp limit 7
    fill_random(u, rng, 12.0f);
    Tensor* dst = output(c, 64, 6);
    c.g.add(Op::SWIGLU_OAI, dst, c.g.external(g), c.g.external(u)).params = SwigluOaiParams{.alpha = 1.702f, .limit = 7.0f};
    check_case(c);
    auto ref = make_ref_backend();
    run_graph(*ref, c.g);
    for (int64_t i = 0; i < 64 * 6; ++i) {
      const float a = std::min(g.f32()[i], 7.0f), b = std::clamp(u.f32()[i], -7.0f, 7.0f);
      CHECK(dst->f32()[i] == doctest::Approx(a / (1 + std::exp(-1.702f * a)) * (b + 1)).epsilon(1e-5));
    }
  }
  {
    Case c;
    c.name = "concat of views";
    Tensor* q = input(c, DType::F32, rng, 4 * 24, 3);  // [4 heads x (16 + 8), 3]
    Tensor* a = c.g.view(q, 16, 4, 3, 24 * 4, 96 * 4, 0);
    Tensor* b = c.g.view(q, 8, 4, 3, 24 * 4, 96 * 4, 16 * 4);
    Tensor* dst = output(c, 24, 4, 3);
    c.g.add(Op::CONCAT, dst, b, a);  // rope part first: a real reordering
    check_case(c, 0.0, 0.0);
    auto ref = make_ref_backend();
    run_graph(*ref, c.g);
    CHECK(dst->f32(2, 1)[0] == q->f32(1)[2 * 24 + 16]);
    CHECK(dst->f32(2, 1)[8] == q->f32(1)[2 * 24 + 0]);
  }
}

TEST_CASE("ATTENTION with V as a view of K equals attention over a separate copy of V (MLA)") {
  std::mt19937 rng(15);
  const int64_t hd_k = 40, hd_v = 32, nh = 4, T = 3, cells = 9;
  Buffers buf;
  Tensor kc = buf.tensor(DType::F16, hd_k, cells);
  fill_random(kc, rng);
  Tensor v_view = make_tensor(DType::F16, hd_v, cells, 1, 1, kc.data);
  v_view.nb[1] = kc.nb[1];
  Tensor v_copy = buf.tensor(DType::F16, hd_v, cells);
  for (int64_t c = 0; c < cells; ++c) std::memcpy(v_copy.row(c), kc.row(c), hd_v * 2);
  std::vector<int32_t> cell_pos(cells), tok_pos = {6, 7, 8}, tok_seq = {0, 0, 0};
  std::vector<int32_t> table(cells), table_begin = {0, static_cast<int32_t>(cells)};  // one block per cell
  for (int64_t c = 0; c < cells; ++c) cell_pos[c] = table[c] = static_cast<int32_t>(c);
  const std::vector<int32_t> packed = pack_attention(tok_pos, tok_seq, cell_pos, 1, table_begin, table);
  Tensor batch = make_tensor(DType::I32, static_cast<int64_t>(packed.size()), 1, 1, 1, const_cast<int32_t*>(packed.data()));
  Tensor q = buf.tensor(DType::F32, hd_k, nh, T);
  fill_random(q, rng);
  std::vector<float> out[2];
  for (int which = 0; which < 2; ++which) {
    Graph g;
    Tensor* dst = g.external(buf.tensor(DType::F32, hd_v, nh, T));
    g.add(Op::ATTENTION, dst, g.external(q), g.external(kc), g.external(which ? v_copy : v_view), nullptr,
          g.external(batch)).params = AttentionParams{.scale = 0.2f};
    auto cpu = make_cpu_backend(2);
    run_graph(*cpu, g);
    out[which].assign(dst->f32(), dst->f32() + hd_v * nh * T);
  }
  CHECK(out[0] == out[1]);
}

// Hopper's warpgroup MMA for the tensor-core tiles (matmul_f16.cu, mmq.cu, wgmma.cuh), opt-in
// with KESTREL_CUDA_WGMMA=1 on an sm_90 device (the emulator is one). F16/BF16: MATMUL batches
// and grouped MATMUL_ID of more than 65 tokens, K with a stage tail (77) and several stages
// (1000), N with a row tile tail. Integer codes: batches of more than 8 tokens, types with one
// scale per chunk (on wgmma) and with two (Q6_K, NVFP4: mma.sync still), K of 9 chunks (a stage
// tail). Elsewhere the setting changes nothing and the rows check the other kernels.
TEST_CASE("MATMUL and MATMUL_ID: tensor-core tiles on wgmma (KESTREL_CUDA_WGMMA=1)") {
  struct Opt {  // on for this test case only, however it ends; cuBLAS off, or it takes the dense F16/BF16 batches
    Opt() { setenv("KESTREL_CUDA_WGMMA", "1", 1), setenv("KESTREL_CUDA_CUBLAS", "0", 1); }
    ~Opt() { unsetenv("KESTREL_CUDA_WGMMA"), unsetenv("KESTREL_CUDA_CUBLAS"); }
  } opt;
  std::mt19937 rng(44);
  for (DType type : {DType::F16, DType::BF16}) {
    for (int64_t K : {1000, 77}) {
      for (int64_t M : {70, 100}) {
        Case c;
        c.name = std::string("wgmma matmul ") + dtype_name(type) + " K=" + std::to_string(K) + " M=" + std::to_string(M);
        Tensor w = c.buf.tensor(type, K, 70);
        fill_random_weights(w, rng);
        Tensor* x = input(c, DType::F32, rng, K, M);
        c.g.add(Op::MATMUL, output(c, 70, M), c.g.external(w), x);
        check_case(c, 1e-4, 1e-4);
      }
    }
    for (int variant = 0; variant < 3; ++variant) {
      Case c;
      add_matmul_id(c, rng, type, 70, 5, 70, 3, variant, [](int64_t i) { return static_cast<int32_t>((i * 7 + i / 5) % 5); });
      c.name = "wgmma " + c.name;
      check_case(c, 1e-3, 1e-4);
    }
  }
  for (DType type : {DType::Q4_0, DType::Q8_0, DType::Q5_1, DType::MXFP4, DType::Q4_K, DType::Q6_K, DType::NVFP4}) {
    const int64_t bs = dtype_info(type).block_size, K = bs == 256 ? 512 : 9 * bs;  // a stage tail but for the K-quants
    for (int64_t M : {12, 40}) {
      Case c;
      c.name = std::string("wgmma mmq ") + dtype_name(type) + " M=" + std::to_string(M);
      Tensor w = c.buf.tensor(type, K, 70);
      fill_random_weights(w, rng);
      Tensor* x = input(c, DType::F32, rng, K, M);
      c.g.add(Op::MATMUL, output(c, 70, M), c.g.external(w), x);
      check_case(c, 1e-3, 1e-4);
    }
    Case c;
    add_matmul_id(c, rng, type, 70, 5, 20, 3, 0, [](int64_t i) { return static_cast<int32_t>((i * 7 + i / 5) % 5); });
    c.name = "wgmma " + c.name;
    check_case(c, 1e-3, 1e-4);
  }
}

// A gate (SWIGLU, GEGLU, SWIGLU_OAI) whose output an integer-code matmul reads next: CUDA writes the
// matmul's int8 input in the gate's kernel (elementwise.cu). The matmul's output must be the bits
// of the same graph with an unrelated node between the two (no fusion): dense MATMUL of 3 and 12
// rows (GEMV, tensor cores), MATMUL_ID of 2 slots x 3 tokens, Q4_0 (Q8_0 input) and Q4_K (Q8_K).
TEST_CASE("SWIGLU, GEGLU and SWIGLU_OAI feeding an integer matmul: the fused quantization gives the same bits") {
  for (DType wt : {DType::Q4_0, DType::Q4_K}) {
    const int64_t K = wt == DType::Q4_K ? 512 : 96, N = 24, E = 3;
    for (int shape = 0; shape < 3; ++shape) {
      for (Op gate : {Op::SWIGLU, Op::GEGLU, Op::SWIGLU_OAI}) {
        const bool id = shape == 2;
        const int64_t slots = id ? 2 : 1, T = shape == 1 ? 12 : 3;
        std::vector<float> outs[2];
        for (bool apart : {false, true}) {
          Case c;
          c.name = std::string("gate then matmul ") + dtype_name(wt) + " shape " + std::to_string(shape) + " " +
                   op_name(gate) + (apart ? " apart" : "");
          std::mt19937 rng(static_cast<unsigned>(31 + shape + 5 * K));
          // [K, slots, T] for the experts, [K, T] for a dense matmul (as the model builders make them).
          Tensor* g = id ? input(c, DType::F32, rng, K, slots, T) : input(c, DType::F32, rng, K, T);
          Tensor* u = id ? input(c, DType::F32, rng, K, slots, T) : input(c, DType::F32, rng, K, T);
          Tensor* h = id ? output(c, K, slots, T) : output(c, K, T);
          Tensor* other = input(c, DType::F32, rng, 5);  // in both graphs: the same random numbers after it
          Node& gn = c.g.add(gate, h, g, u);
          if (gate == Op::SWIGLU_OAI) gn.params = SwigluOaiParams{.alpha = 1.702f, .limit = 2.0f};
          if (apart) c.g.add(Op::SILU, output(c, 5), other);
          Tensor w = c.buf.tensor(wt, K, N, id ? E : 1);
          fill_random_weights(w, rng);
          Tensor* y = id ? output(c, N, slots, T) : output(c, N, T);
          if (id) {
            Tensor* ids = c.g.external(c.buf.tensor(DType::I32, slots, T));
            for (int64_t i = 0; i < slots * T; ++i) static_cast<int32_t*>(ids->data)[i] = static_cast<int32_t>((i * 2 + 1) % E);
            c.g.add(Op::MATMUL_ID, y, c.g.external(w), h, ids);
          } else {
            c.g.add(Op::MATMUL, y, c.g.external(w), h);
          }
          check_case(c, 1e-4, 1e-4);
          auto cuda = try_backend("cuda");
          if (!cuda) continue;
          run_on_device(*cuda, c.g);
          outs[apart].assign(y->f32(), y->f32() + N * slots * T);
        }
        CAPTURE(std::string(dtype_name(wt)));
        CAPTURE(shape);
        CHECK(outs[0] == outs[1]);
      }
    }
  }
}

namespace {

// X's columns as their MXFP8 values (OCP MX, the scale rounded up so nothing saturates): per 32
// values the least 2^s with max|x| <= 448 * 2^s, each x / 2^s rounded to E4M3.
std::vector<double> mxfp8_values(const float* x, int64_t n) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i += 32) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::abs(x[i + j]));
    if (amax == 0) continue;
    int e = 0;
    const float f = std::frexp(amax, &e);
    const int s = std::clamp(e - 9 + (f > 0.875f ? 1 : 0), -127, 127);
    for (int j = 0; j < 32; ++j) {
      float v = std::ldexp(x[i + j], -s), q;
      uint32_t bits = 0;
      std::memcpy(&bits, &v, 4);
      bits = e4m3_to_fp32_bits(e4m3_from_fp32_bits(bits));
      std::memcpy(&q, &bits, 4);
      out[static_cast<size_t>(i + j)] = std::ldexp(static_cast<double>(q), s);
    }
  }
  return out;
}

// Scales that differ by row, block and token (a scale given to the wrong row or token shows).
void vary_mx_scales(Tensor& w, Tensor* x) {
  const int64_t K = w.ne[0];
  for (int64_t r = 0; r < w.n_rows(); ++r)
    for (int64_t b = 0; b < K / 32; ++b) reinterpret_cast<block_mxfp4*>(w.row(r))[b].e += static_cast<uint8_t>((r * 7 + b * 3) % 5);
  for (int64_t i = 0; i < x->n_elements(); ++i) x->f32()[i] = std::ldexp(x->f32()[i], static_cast<int>((i / 32 * 5) % 7) - 3);
}

// MXFP4 batches on block-scaled tensor cores, opt-in with KESTREL_CUDA_MXFP4_MMA (`mode`): the
// sm_120 family's warp MMA (mmq_mx.cu, block_scale.cuh) or sm_100a's tcgen05 (mmq_mx_tc.cu,
// tcgen05.cuh); the emulator counts as either device, a GPU runs the one it has (`sm`). X is MXFP8
// there, not the reference's Q8_0, so the result is checked against that arithmetic
// (mxfp8_values), W's exact values and double sums. MATMUL: row and token tails (150 rows: two
// 128-row tcgen05 tiles, three 64-row warp tiles), K of 2 and 10 blocks (tcgen05's stages of 4:
// a partial last one), a block of zeros in X; up to 8 columns the integer GEMV keeps the batch
// (checked against the reference). MATMUL_ID (gpt-oss's experts): shared and per-slot X, expert
// biases, per-head matrices, 20 tokens.
void check_block_scaled_mxfp4(const char* mode, const char* sm) {
  setenv("KESTREL_CUDA_MXFP4_MMA", mode, 1);
  struct Unset {  // however the check ends
    ~Unset() { unsetenv("KESTREL_CUDA_MXFP4_MMA"); }
  } unset;
  auto probe = try_backend("cuda");
  const std::string dev = probe ? probe->device->info().device : "";
  if (dev.find("[emulated]") == std::string::npos && dev.find(sm) == std::string::npos) {
    MESSAGE("no emulated CUDA device or one of ", sm, " here");
    return;
  }
  std::mt19937 rng(53);
  const int64_t N = 150;
  for (int64_t K : {64, 320}) {
    for (int64_t M : {5, 40, 100}) {
      Case c;
      c.name = "mxfp4 block-scaled K=" + std::to_string(K) + " M=" + std::to_string(M);
      CAPTURE(c.name);
      Tensor w = c.buf.tensor(DType::MXFP4, K, N);
      fill_random_weights(w, rng);
      Tensor* x = input(c, DType::F32, rng, K, M);
      vary_mx_scales(w, x);
      for (int k = 0; k < 32; ++k) x->f32()[K + k] = 0.0f;  // column 1's first block
      Tensor* y = output(c, N, M);
      c.g.add(Op::MATMUL, y, c.g.external(w), x);
      if (M <= 8) {
        check_case(c, 1e-4, 1e-4);
        continue;
      }
      auto cuda = try_backend("cuda");
      run_on_device(*cuda, c.g);
      const std::vector<double> xm = mxfp8_values(x->f32(), K * M);
      std::vector<float> wr(static_cast<size_t>(K));
      double worst = 0;
      for (int64_t r = 0; r < N; ++r) {
        dtype_info(DType::MXFP4).to_float(w.row(r), wr.data(), K);
        for (int64_t m = 0; m < M; ++m) {
          double want = 0;
          for (int64_t k = 0; k < K; ++k) want += double(wr[static_cast<size_t>(k)]) * xm[static_cast<size_t>(m * K + k)];
          worst = worse_error(worst, std::abs(y->f32()[m * N + r] - want) / (1e-5 + 1e-5 * std::abs(want)));
        }
      }
      CHECK(worst <= 1.0);
    }
  }
  for (int variant = 0; variant < 3; ++variant) {
    Case c;
    const int64_t E = 4, T = 20;
    const MatmulIdCase m = add_matmul_id(c, rng, DType::MXFP4, N, E, T, 2, variant, [](int64_t i) {
      return static_cast<int32_t>((i * 5 + i / 3) % 4);
    });
    CAPTURE(c.name);
    Tensor w = m.w;
    vary_mx_scales(w, m.x);
    auto cuda = try_backend("cuda");
    run_on_device(*cuda, c.g);
    const int64_t K = m.w.ne[0], x_slots = m.x->ne[1];
    const std::vector<double> xm = mxfp8_values(m.x->f32(), K * m.x->n_rows());
    std::vector<float> wr(static_cast<size_t>(K));
    double worst = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < m.slots; ++i) {
        const int64_t e = m.ids ? static_cast<const int32_t*>(m.ids->data)[i + m.slots * t] : i;
        const int64_t col = (x_slots == 1 ? 0 : i) + x_slots * t;
        for (int64_t r = 0; r < N; ++r) {
          dtype_info(DType::MXFP4).to_float(m.w.row(r + N * e), wr.data(), K);
          double want = m.bias ? m.bias->f32()[r + N * e] : 0.0;
          for (int64_t k = 0; k < K; ++k) want += double(wr[static_cast<size_t>(k)]) * xm[static_cast<size_t>(col * K + k)];
          const float got = m.dst->f32()[r + N * (i + m.slots * t)];
          worst = worse_error(worst, std::abs(got - want) / (1e-5 + 1e-5 * std::abs(want)));
        }
      }
    CHECK(worst <= 1.0);
  }
}

}  // namespace

TEST_CASE("MATMUL: MXFP4 on the sm_120 family's block-scaled warp MMA (KESTREL_CUDA_MXFP4_MMA=1)") {
  check_block_scaled_mxfp4("1", "(sm_12");
}

TEST_CASE("MATMUL: MXFP4 on sm_100a's block-scaled tcgen05 MMA (KESTREL_CUDA_MXFP4_MMA=tcgen05)") {
  check_block_scaled_mxfp4("tcgen05", "(sm_100)");
}
