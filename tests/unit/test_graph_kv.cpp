// The graph memory planner, the KV cache's sequence operations and the thread pool.
#include <doctest/doctest.h>

#include <algorithm>

#include <atomic>
#include <cmath>
#include <set>

#include "backends/backend.h"
#include "common/test_backend.h"
#include "core/thread_pool.h"
#include "kv/kv_cache.h"
#include "tensor/graph.h"

using namespace kestrel;
using kestrel::test::make_cpu_backend;
using kestrel::test::make_ref_backend;

TEST_CASE("plan reuses memory of dead intermediates and never overlaps live ones") {
  Graph g;
  std::vector<float> in(64, 1.0f);
  Tensor* x = g.external(make_tensor(DType::F32, 64, 1, 1, 1, in.data()));
  // A chain: each intermediate dies after the next node, so the arena stays ~2 tensors big.
  Tensor* cur = x;
  std::vector<Tensor*> chain;
  for (int i = 0; i < 10; ++i) {
    Tensor* y = g.intermediate(DType::F32, 64);
    g.add(Op::SILU, y, cur);
    chain.push_back(y);
    cur = y;
  }
  g.mark_output(cur);
  const size_t need = g.plan();
  CHECK(need <= 3 * 256);
  std::vector<uint8_t> arena(need + 64);
  g.bind(arena.data());
  // Live ranges: node i reads chain[i-1] and writes chain[i]: they must not overlap.
  for (int i = 1; i < 10; ++i) CHECK(chain[i]->data != chain[i - 1]->data);
  auto ref = make_ref_backend();
  REQUIRE(ref->run(g, 0, g.nodes().size()).ok());
  float v = 1.0f;
  for (int i = 0; i < 10; ++i) v = v / (1.0f + std::exp(-v));
  CHECK(cur->f32()[5] == doctest::Approx(v));

  // A view keeps its owner alive: reshape of an early tensor read at the end.
  Graph g2;
  Tensor* a = g2.external(make_tensor(DType::F32, 64, 1, 1, 1, in.data()));
  Tensor* b = g2.intermediate(DType::F32, 64);
  g2.add(Op::SILU, b, a);
  Tensor* bv = g2.reshape(b, 8, 8);
  Tensor* c = g2.intermediate(DType::F32, 64);
  g2.add(Op::SILU, c, a);
  Tensor* d = g2.intermediate(DType::F32, 8, 8);
  g2.add(Op::ADD, d, bv, g2.reshape(c, 8, 8));
  g2.plan();
  std::vector<uint8_t> arena2(4096);
  g2.bind(arena2.data());
  std::set<void*> ptrs = {b->data, c->data, d->data};
  CHECK(ptrs.size() == 3);
  CHECK(bv->data == b->data);

  // used_after: b is read (through its view) by node 2, c too; d is an output; a is external.
  CHECK(g2.used_after(b, 1));
  CHECK(g2.used_after(bv, 1));
  CHECK_FALSE(g2.used_after(b, 2));
  CHECK_FALSE(g2.used_after(c, 2));
  CHECK(g2.used_after(c, 1));
  CHECK(g2.used_after(a, 2));
  CHECK_FALSE(g2.used_after(d, 2));  // not marked an output: dead at the end
  g2.mark_output(d);
  CHECK(g2.used_after(d, 2));
  // In the chain, each intermediate is dead after the node that reads it; the output is not.
  CHECK_FALSE(g.used_after(chain[3], 4));
  CHECK(g.used_after(chain[3], 3));
  CHECK(g.used_after(cur, 9));
}

// The cells token t of batch b may attend to (its sequence's block table, visible ones).
std::vector<int32_t> visible_cells(const AttentionBatch& b, int32_t t, int32_t window) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < b.n_cells_of(t); ++i)
    if (b.visible(t, b.cell(t, i), window)) out.push_back(b.cell(t, i));
  return out;
}
bool sees(const AttentionBatch& b, int32_t t, int32_t cell, int32_t window) {
  const auto v = visible_cells(b, t, window);
  return std::find(v.begin(), v.end(), cell) != v.end();
}

TEST_CASE("KV cache: claim, visibility, sequence operations, context full") {
  auto cpu = make_cpu_backend(1);
  KvCache::Options o;
  o.n_cells = 8;
  o.n_seq_max = 3;
  o.k_rows = {4};
  o.v_rows = {4};
  auto kv = KvCache::create(o, *cpu);
  REQUIRE(kv.ok());
  KvCache& c = *kv.value();
  CHECK(c.block_size() == 1);  // 8 cells for 3 sequences: blocks of one cell
  std::vector<int32_t> slots;
  const std::vector<int32_t> pos = {0, 1, 2, 0, 1}, seq = {0, 0, 0, 1, 1}, tok = {5, 6, 7, 8, 9};
  REQUIRE(c.claim(tok, pos, seq, &slots).ok());
  CHECK(c.n_used() == 5);
  CHECK(c.seq_pos_max(0) == 2);
  CHECK(c.seq_pos_max(1) == 1);
  std::vector<int32_t> packed;
  c.pack_attention_batch(pos, seq, &packed);
  AttentionBatch b = AttentionBatch::view(packed.data());
  CHECK(sees(b, 1, slots[0], 0));    // seq 0 pos 1 sees pos 0
  CHECK(!sees(b, 1, slots[2], 0));   // not the future
  CHECK(!sees(b, 1, slots[3], 0));   // not another sequence
  CHECK(!sees(b, 2, slots[0], 2));   // window 2: pos 2 does not see pos 0
  CHECK(c.seq_copy(0, 2, 0, 2).ok());  // seq 2 shares cells of pos 0, 1
  CHECK(c.seq_pos_max(2) == 1);
  CHECK(c.seq_remove(0, 0, -1).ok());
  CHECK(c.n_used() == 4);            // pos 0,1 still held by seq 2
  CHECK(c.seq_pos_max(0) == -1);
  const std::vector<int32_t> big(5, 3), bigs(5, 0);
  CHECK(c.claim(big, big, bigs, &slots).code() == KESTREL_ERR_CONTEXT_FULL);
  CHECK(c.n_used() == 4);            // nothing claimed on failure
  const std::vector<int32_t> badseq = {3};
  CHECK(c.claim(std::vector<int32_t>{0}, std::vector<int32_t>{0}, badseq, &slots).code() == KESTREL_ERR_OUT_OF_RANGE);
  c.seq_keep(1);
  CHECK(c.n_used() == 2);
  c.clear();
  CHECK(c.n_used() == 0);
}

TEST_CASE("thread pool runs every index once per call, many calls in a row") {
  for (int n : {1, 2, 3, 4}) {
    ThreadPool pool(n);
    std::atomic<int> sum{0}, wrong_nth{0};
    for (int rep = 0; rep < 2000; ++rep)
      pool.run([&](int ith, int nth) {
        if (nth != n) ++wrong_nth;
        sum += ith + 1;
      });
    CHECK(wrong_nth.load() == 0);
    CHECK(sum.load() == 2000 * n * (n + 1) / 2);
  }
}

TEST_CASE("ChunkedSplit hands out every item exactly once, own share first") {
  for (int n_threads : {1, 2, 3, 4}) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{100}, int64_t{1001}}) {
      for (int64_t chunk : {int64_t{1}, int64_t{3}, int64_t{64}}) {
        CAPTURE(n_threads);
        CAPTURE(n);
        CAPTURE(chunk);
        ThreadPool pool(n_threads);
        ChunkedSplit work(n, n_threads, chunk);
        std::vector<std::atomic<int>> taken(static_cast<size_t>(n));
        std::atomic<int> bad_piece{0};
        pool.run([&](int ith, int) {
          int64_t b, e;
          while (work.next(ith, &b, &e)) {
            if (e - b > chunk || b >= e) ++bad_piece;
            for (int64_t i = b; i < e; ++i) ++taken[static_cast<size_t>(i)];
          }
        });
        int wrong = 0;
        for (auto& t : taken) wrong += t.load() != 1;
        CHECK(wrong == 0);
        CHECK(bad_piece.load() == 0);
        // Alone, a thread takes its own share front to back before anything else.
        for (int ith = 0; ith < n_threads; ++ith) {
          ChunkedSplit fresh(n, n_threads, chunk);
          int64_t own0, own1, b, e, at;
          ThreadPool::split(n, ith, n_threads, &own0, &own1);
          for (at = own0; at < own1; at = e) {
            REQUIRE(fresh.next(ith, &b, &e));
            CHECK(b == at);
            CHECK(e == std::min(own1, at + chunk));
          }
        }
      }
    }
  }
}
