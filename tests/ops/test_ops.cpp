// Every op x type x shape on every backend against backends/ref, on random data.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "backends/backend.h"
#include "op_harness.h"

using namespace kestrel;
using namespace kestrel::test;

namespace {

struct Case {
  std::string name;
  Buffers buf;
  Graph g;
  std::vector<Tensor*> outputs;
  // Extra state some ops point at (attention batches, slots).
  std::vector<int32_t> i32a, i32b, i32c;
  std::vector<uint64_t> u64;
  AttentionBatch attn;
};

const DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1,
                           DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K,
                           DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::MXFP4};

// Runs c on the reference backend, then on the CPU backend with 1..4 threads, and compares.
void check_case(Case& c, double tol_abs = 1e-5, double tol_rel = 1e-4) {
  CAPTURE(c.name);
  std::vector<std::vector<uint8_t>> initial, want;
  for (Tensor* t : c.outputs) initial.emplace_back(static_cast<uint8_t*>(t->data), static_cast<uint8_t*>(t->data) + t->n_bytes());
  auto restore = [&] {
    for (size_t i = 0; i < c.outputs.size(); ++i) std::memcpy(c.outputs[i]->data, initial[i].data(), initial[i].size());
  };
  auto ref = make_ref_backend();
  restore();
  run_graph(*ref, c.g);
  for (Tensor* t : c.outputs) want.emplace_back(static_cast<uint8_t*>(t->data), static_cast<uint8_t*>(t->data) + t->n_bytes());
  for (int threads = 1; threads <= 4; ++threads) {
    CAPTURE(threads);
    auto cpu = make_cpu_backend(threads);
    restore();
    run_graph(*cpu, c.g);
    for (size_t i = 0; i < c.outputs.size(); ++i) {
      Tensor got = *c.outputs[i], exp = *c.outputs[i];
      std::vector<float> a, b;
      const int64_t n = got.n_elements();
      a.resize(n);
      b.resize(n);
      const ToFloatFn tf = dtype_info(got.type).to_float;
      tf(got.data, a.data(), n);
      tf(want[i].data(), b.data(), n);
      Tensor ta = make_tensor(DType::F32, n, 1, 1, 1, a.data()), tb = make_tensor(DType::F32, n, 1, 1, 1, b.data());
      std::string where;
      const double err = compare(ta, tb, tol_abs, tol_rel, &where);
      CHECK_MESSAGE(err <= 1.0, c.name << " (" << threads << " threads): " << where);
    }
  }
}

Tensor* input(Case& c, DType type, std::mt19937& rng, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1) {
  Tensor t = c.buf.tensor(type, ne0, ne1, ne2);
  fill_random(t, rng);
  return c.g.external(t);
}

Tensor* output(Case& c, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1) {
  Tensor* t = c.g.external(c.buf.tensor(DType::F32, ne0, ne1, ne2));
  fill_nan(*t);
  c.outputs.push_back(t);
  return t;
}

}  // namespace

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

TEST_CASE("row-wise ops: rms_norm, mul, add, silu, swiglu, softmax") {
  std::mt19937 rng(2);
  const int64_t shapes[][2] = {{1, 1}, {7, 3}, {64, 5}, {257, 9}, {4096, 2}};
  for (auto& s : shapes) {
    const int64_t K = s[0], R = s[1];
    for (Op op : {Op::RMS_NORM, Op::MUL, Op::ADD, Op::SILU, Op::SWIGLU, Op::SOFTMAX}) {
      for (bool broadcast : {false, true}) {
        if (broadcast && op != Op::MUL && op != Op::ADD) continue;
        Case c;
        c.name = std::string(op_name(op)) + " [" + std::to_string(K) + "," + std::to_string(R) + "]" + (broadcast ? " bcast" : "");
        Tensor* a = input(c, DType::F32, rng, K, R);
        Tensor* b = input(c, DType::F32, rng, K, broadcast ? 1 : R);
        Tensor* dst = output(c, K, R);
        Node& n = c.g.add(op, dst, a, op == Op::RMS_NORM || op == Op::SILU || op == Op::SOFTMAX ? nullptr : b);
        n.fp[0] = op == Op::RMS_NORM ? 1e-5f : 0.7f;
        check_case(c);
      }
    }
  }
}

TEST_CASE("MATMUL: every weight type, odd shapes") {
  std::mt19937 rng(3);
  for (DType type : kAllTypes) {
    const int64_t bs = dtype_info(type).block_size;
    const int64_t Ks[] = {bs == 1 ? 37 : bs, bs == 1 ? 256 : 2 * bs * (bs == 32 ? 4 : 1)};
    for (int64_t K : Ks) {
      for (int64_t N : {1, 7, 33}) {
        for (int64_t M : {1, 5, 17}) {
          Case c;
          c.name = std::string("matmul ") + dtype_name(type) + " K=" + std::to_string(K) + " N=" + std::to_string(N) + " M=" + std::to_string(M);
          Tensor w = c.buf.tensor(type, K, N);
          fill_random_weights(w, rng);
          Tensor* x = input(c, DType::F32, rng, K, M);
          Tensor* dst = output(c, N, M);
          c.g.add(Op::MATMUL, dst, c.g.external(w), x);
          check_case(c, 1e-3, 1e-4);
        }
      }
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
      Node& n = c.g.add(Op::ROPE, dst, x, pos, ff);
      rope_params_store(p, n.ip, n.fp);
      check_case(c, 1e-5, 1e-4);
    }
  }
}

TEST_CASE("KV_STORE and ATTENTION: GQA, several sequences, windows, sinks, soft-cap") {
  std::mt19937 rng(5);
  for (DType cache_type : {DType::F16, DType::F32}) {
    for (int variant = 0; variant < 4; ++variant) {
      Case c;
      c.name = std::string("attention ") + dtype_name(cache_type) + " variant " + std::to_string(variant);
      const int64_t hd = 32, nh = 8, nkv = 2, T = 6, cells = 23;
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
      for (int t = 0; t < T; ++t) {
        c.i32b[c.i32a[t]] = tok_pos[t];
        c.u64[c.i32a[t]] = uint64_t{1} << tok_seq[t];
      }
      c.i32c = tok_pos;
      c.i32c.insert(c.i32c.end(), tok_seq.begin(), tok_seq.end());
      c.attn = {static_cast<int32_t>(T), c.i32c.data(), c.i32c.data() + T, static_cast<int32_t>(cells), c.i32b.data(), c.u64.data()};
      Tensor* k = input(c, DType::F32, rng, hd * nkv, T);
      Tensor* v = input(c, DType::F32, rng, hd * nkv, T);
      c.g.add(Op::KV_STORE, kct, kct, k).aux = c.i32a.data();
      c.g.add(Op::KV_STORE, vct, vct, v).aux = c.i32a.data();
      Tensor* q = input(c, DType::F32, rng, hd, nh, T);
      Tensor* sinks = variant == 2 ? input(c, DType::F32, rng, nh) : nullptr;
      Tensor* dst = output(c, hd, nh, T);
      Node& n = c.g.add(Op::ATTENTION, dst, q, kct, vct, sinks);
      n.aux = &c.attn;
      n.fp[0] = 0.3f;
      n.fp[1] = variant == 3 ? 5.0f : 0.0f;
      n.ip[0] = variant == 1 ? 3 : 0;
      c.outputs.push_back(kct);
      c.outputs.push_back(vct);
      check_case(c, 1e-5, 1e-4);
    }
  }
}
