// The paged KV cache: block pool reference counts and LRU prefix cache, block tables, prefix
// sharing (attach_prefix), copy on write, rollback, and a model decoding a shared 200-token
// prefix once.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "backends/backend.h"
#include "common/cpu_model.h"
#include "common/test_backend.h"
#include "common/testdata.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"
#include "tensor/attention_batch.h"

using namespace kestrel;

TEST_CASE("block pool: reference counts, publish, LRU eviction") {
  BlockPool p(3);
  const int32_t a = p.allocate(), b = p.allocate(), c = p.allocate();
  CHECK(p.allocate() == -1);
  CHECK(p.n_held() == 3);
  p.publish(a, 11);
  p.publish(b, 22);
  p.retain(a);
  p.release(a);
  CHECK(p.n_cached() == 0);  // still held once
  p.release(a);
  p.release(b);
  p.release(c);
  CHECK(p.n_cached() == 2);  // a then b, least recent first
  CHECK(p.n_free() == 1);
  CHECK(p.lookup(11) == a);
  CHECK(p.allocate() == c);  // free blocks before cached ones
  CHECK(p.allocate() == a);  // then the least recently released cached block: evicted
  CHECK(p.lookup(11) == -1);
  CHECK(p.lookup(22) == b);
  p.retain(b);               // a cached block back in use
  CHECK(p.n_cached() == 0);
  CHECK(p.allocate() == -1);
  p.unpublish(b);
  CHECK(p.lookup(22) == -1);
  CHECK(block_hash(0, std::vector<int32_t>{1, 2}.data(), 2) != block_hash(0, std::vector<int32_t>{2, 1}.data(), 2));
  CHECK(block_hash(7, std::vector<int32_t>{1, 2}.data(), 2) != block_hash(0, std::vector<int32_t>{1, 2}.data(), 2));
}

namespace {

struct Paged {
  std::unique_ptr<test::TestBackend> cpu = test::make_cpu_backend(1);
  std::unique_ptr<KvCache> kv;
  explicit Paged(int32_t n_cells, int32_t n_seq, int32_t block) {
    KvCache::Options o;
    o.n_cells = n_cells;
    o.n_seq_max = n_seq;
    o.block_size = block;
    o.k_rows = {4};
    o.v_rows = {4};
    o.type_k = o.type_v = DType::F32;
    auto r = KvCache::create(o, *cpu);
    REQUIRE(r.ok());
    kv = std::move(r.value());
  }
  // Appends tokens [first, first + n) of `toks` to seq at positions first.., writing K = token id.
  std::vector<int32_t> add(int32_t seq, const std::vector<int32_t>& toks, int32_t first, int32_t n) {
    std::vector<int32_t> pos(n), sq(n, seq), tk(toks.begin() + first, toks.begin() + first + n), slots;
    std::iota(pos.begin(), pos.end(), first);
    REQUIRE(kv->claim(tk, pos, sq, &slots).ok());
    for (int32_t i = 0; i < n; ++i) k_row(slots[i])[0] = static_cast<float>(tk[i]);
    return slots;
  }
  float* k_row(int32_t cell) { return reinterpret_cast<float*>(kv->k(0).row(cell)); }
  // What sequence `seq` would read, position -> K[0], through its block table.
  std::vector<std::pair<int32_t, float>> view(int32_t seq) {
    std::vector<std::pair<int32_t, float>> out;
    const int32_t B = kv->block_size();
    for (int32_t b : kv->block_table(seq))
      for (int32_t j = 0; j < B; ++j) {
        const int32_t c = b * B + j;
        if (kv->cell_pos(c) >= 0) out.emplace_back(kv->cell_pos(c), k_row(c)[0]);
      }
    return out;
  }
};

std::vector<int32_t> seq_tokens(int32_t n, int32_t salt) {
  std::vector<int32_t> t(n);
  for (int32_t i = 0; i < n; ++i) t[i] = 100 + (i * 7 + salt) % 50;
  return t;
}

}  // namespace

TEST_CASE("paged KV: the packed attention batch's length steps in powers of two of table entries") {
  Paged p(256, 2, 1);  // blocks of one cell: a table entry per position
  const auto toks = seq_tokens(100, 0);
  std::vector<size_t> lengths;
  for (int32_t n = 0; n < 100; ++n) {
    p.add(0, toks, n, 1);
    std::vector<int32_t> packed;
    const int32_t pos = n, seq = 0;
    p.kv->pack_attention_batch(std::span<const int32_t>(&pos, 1), std::span<const int32_t>(&seq, 1), &packed);
    const AttentionBatch b = AttentionBatch::view(packed.data());
    CHECK(packed[5] == n + 1);                   // the entries in use
    CHECK(b.n_cells_of(0) == n + 1);             // as the tables say
    CHECK(b.cell(0, n) == b.tables[n]);          // blocks of one cell
    if (lengths.empty() || lengths.back() != packed.size()) lengths.push_back(packed.size());
  }
  // Room for 32, 64 and 128 entries: three lengths over 100 positions, each step a doubling.
  REQUIRE(lengths.size() == 3);
  CHECK(lengths[1] - lengths[0] == 32);
  CHECK(lengths[2] - lengths[1] == 64);
}

TEST_CASE("paged KV: prefix sharing, copy on write, rollback, cached blocks") {
  Paged p(32, 4, 4);  // 8 blocks of 4 cells
  KvCache& kv = *p.kv;
  const auto a = seq_tokens(10, 0);
  p.add(0, a, 0, 10);  // blocks: [0-3] [4-7] published, [8-9] partial
  CHECK(kv.block_table(0).size() == 3);
  CHECK(kv.stats().blocks_held == 3);

  // Same first 9 tokens then others: the two full blocks are shared, the rest is decoded.
  auto b = a;
  b[9] = 999;
  b.push_back(5);
  CHECK(kv.attach_prefix(1, b) == 8);
  CHECK(kv.stats().blocks_held == 3);
  CHECK(kv.block_table(1)[0] == kv.block_table(0)[0]);
  p.add(1, b, 8, 3);
  CHECK(kv.stats().blocks_held == 4);
  CHECK(kv.seq_pos_max(1) == 10);
  // Never the whole prompt: the last token is decoded for its logits.
  CHECK(kv.attach_prefix(2, std::vector<int32_t>(a.begin(), a.begin() + 8)) == 4);
  kv.seq_remove(2, 0, -1);
  // A different first block matches nothing.
  auto other = a;
  other[0] = 1;
  CHECK(kv.attach_prefix(2, other) == 0);

  // Fork seq 0 into seq 3: the partial last block is shared until one of them appends.
  REQUIRE(kv.seq_copy(0, 3, 0, -1).ok());
  CHECK(kv.block_table(3) == kv.block_table(0));
  const auto tail = seq_tokens(12, 1);
  p.add(3, tail, 10, 1);                                  // copy on write
  CHECK(kv.block_table(3).back() != kv.block_table(0).back());
  CHECK(kv.block_table(3)[1] == kv.block_table(0)[1]);   // full blocks still shared
  CHECK(p.view(0).size() == 10);
  CHECK(p.view(3).size() == 11);
  CHECK(p.view(3)[9].second == static_cast<float>(a[9]));  // K rows came along with the copy

  // Speculative rollback on seq 0 leaves seq 3's shared blocks intact.
  REQUIRE(kv.seq_remove(0, 5, -1).ok());
  CHECK(kv.seq_pos_max(0) == 4);
  CHECK(p.view(0).size() == 5);
  CHECK(p.view(3).size() == 11);
  for (auto [pos, k] : p.view(3)) CHECK(k == static_cast<float>(pos < 10 ? a[pos] : tail[pos]));
  p.add(0, a, 5, 5);  // and seq 0 can grow again from position 5
  CHECK(kv.seq_pos_max(0) == 9);

  // Finished sequences leave their published blocks cached for the next request.
  kv.seq_remove(-1, 0, -1);
  CHECK(kv.stats().blocks_held == 0);
  CHECK(kv.stats().blocks_cached >= 2);
  CHECK(kv.n_used() == 0);
  CHECK(kv.attach_prefix(2, b) == 8);
  kv.seq_remove(2, 0, -1);

  // Filling the cache with other content evicts them, least recently used first.
  p.add(1, seq_tokens(32, 3), 0, 32);
  CHECK(kv.stats().blocks_cached == 0);
  CHECK(kv.attach_prefix(2, b) == 0);
  std::vector<int32_t> slots;
  CHECK(kv.claim(std::vector<int32_t>{1}, std::vector<int32_t>{0}, std::vector<int32_t>{3}, &slots).code() ==
        KESTREL_ERR_CONTEXT_FULL);
  kv.clear();
  CHECK(kv.stats().blocks_free == 8);
}

// On the CPU, and on CUDA (a GPU, or the emulated build): block tables, shared blocks and
// copy-on-write then live in device memory.
TEST_CASE("paged KV: a shared 200-token prefix is computed once and gives the same logits") {
  const std::string path = test::testdata_file("models/stories260K-f32.gguf");
  if (path.empty()) return;
  std::string backend;
  SUBCASE("cpu") { backend = "cpu"; }
  if (create_device("cuda").ok())
    SUBCASE("cuda") { backend = "cuda"; }
  CAPTURE(backend);
  auto file = gguf::File::open(path);
  REQUIRE(file.ok());
  ContextOptions co;
  co.n_ctx = 512;
  co.n_seq_max = 2;
  const test::CpuModel m = test::load_model_on(backend, std::move(file.value()), co);
  Context& c = *m.ctx;
  const int32_t V = m.model->hparams().n_vocab;
  std::vector<int32_t> prefix(200);
  for (int32_t i = 0; i < 200; ++i) prefix[i] = 1 + (i * 37) % (V - 1);
  std::vector<int32_t> pa = prefix, pb = prefix;
  for (int32_t i = 0; i < 20; ++i) pa.push_back(2 + i), pb.push_back(V - 2 - i);
  std::vector<int32_t> sa(pa.size(), 0);
  REQUIRE(c.decode({.tokens = pa, .seq_ids = sa}).ok());

  const int32_t hit = c.kv().attach_prefix(1, pb);
  CHECK(hit == 192);  // twelve full blocks of 16
  const std::vector<int32_t> suffix(pb.begin() + hit, pb.end()), sb(suffix.size(), 1);
  std::vector<int32_t> pos(suffix.size());
  std::iota(pos.begin(), pos.end(), hit);
  REQUIRE(c.decode({.tokens = suffix, .positions = pos, .seq_ids = sb}).ok());  // 28 tokens, not 220
  const std::vector<float> shared(c.logits(-1)->begin(), c.logits(-1)->end());
  CHECK(c.kv().stats().prefix_hit_tokens == 192);

  auto alone = Context::create(*m.model, co);
  REQUIRE(alone.ok());
  REQUIRE(alone.value()->decode({.tokens = pb}).ok());
  const auto ref = alone.value()->logits(-1);
  REQUIRE(ref.ok());
  double md = 0;
  for (int32_t i = 0; i < V; ++i) md = std::max(md, std::fabs(double(shared[i]) - ref.value()[i]));
  MESSAGE("shared-prefix vs alone: max |diff| " << md);
  // Not bit for bit on CUDA: the 220 tokens alone take its tensor-core prefill attention, the
  // shared run's 28-token suffix the decode path (4e-5 measured on the emulator).
  CHECK(md <= 2e-4);
}
