// The recurrent-state cache of hybrid models beside the paged KV cache: states start at zero,
// follow their sequence (zeroed when it is removed whole, copied whole, restored from a
// checkpoint), refuse what they cannot do (drop a suffix without a checkpoint, copy part of a
// sequence) without changing anything, and share no prefix.
#include <doctest/doctest.h>

#include <numeric>
#include <vector>

#include "common/test_backend.h"
#include "kv/kv_cache.h"

using namespace kestrel;

namespace {

struct Hybrid {
  std::unique_ptr<test::TestBackend> cpu = test::make_cpu_backend(1);
  std::unique_ptr<KvCache> kv;
  Hybrid() {
    KvCache::Options o;  // layer 0 attention, layer 1 Mamba (conv 6, state 10 values), layer 2 an FFN
    o.n_cells = 64;
    o.n_seq_max = 3;
    o.block_size = 4;
    o.k_rows = {4, 0, 0};
    o.v_rows = {4, 0, 0};
    o.conv_rows = {0, 6, 0};
    o.ssm_rows = {0, 10, 0};
    o.type_k = o.type_v = DType::F32;
    auto r = KvCache::create(o, *cpu);
    REQUIRE_MESSAGE(r.ok(), r.status().to_string());
    kv = std::move(r.value());
  }
  void add(int32_t seq, int32_t first, int32_t n) {
    std::vector<int32_t> pos(n), sq(n, seq), tk(n, 7), slots;
    std::iota(pos.begin(), pos.end(), first);
    REQUIRE(kv->claim(tk, pos, sq, &slots).ok());
  }
  float* conv(int32_t seq) { return reinterpret_cast<float*>(kv->recurrent()->conv(1).row(seq)); }
  float* ssm(int32_t seq) { return reinterpret_cast<float*>(kv->recurrent()->ssm(1).row(seq)); }
  // What a decode step would do: move the states on (a value per sequence, 1 per token).
  void step(int32_t seq, float v) {
    for (int i = 0; i < 6; ++i) conv(seq)[i] += v;
    for (int i = 0; i < 10; ++i) ssm(seq)[i] += v;
  }
};

}  // namespace

TEST_CASE("recurrent state: layout, zero start, no K/V on recurrent layers, memory per sequence") {
  Hybrid h;
  REQUIRE(h.kv->recurrent());
  CHECK(h.kv->recurrent()->has(1));
  CHECK_FALSE(h.kv->recurrent()->has(0));
  CHECK(h.kv->k(1).data == nullptr);
  CHECK(h.kv->k(2).data == nullptr);
  CHECK(h.kv->recurrent()->bytes_per_seq() == (6 + 10) * sizeof(float));
  for (int32_t s = 0; s < 3; ++s) CHECK(h.ssm(s)[9] == 0.0f);
}

TEST_CASE("recurrent state: removals, checkpoints, copies and refusals") {
  Hybrid h;
  h.add(0, 0, 6);
  h.step(0, 6.0f);
  // Dropping a suffix without a checkpoint is refused and changes nothing.
  Status st = h.kv->seq_remove(0, 3, -1);
  CHECK(st.code() == KESTREL_ERR_UNSUPPORTED);
  CHECK(st.message().find("recurrent") != std::string::npos);
  CHECK(h.kv->seq_pos_max(0) == 5);
  CHECK(h.ssm(0)[0] == 6.0f);
  CHECK(h.kv->seq_remove(0, 1, 3).code() == KESTREL_ERR_UNSUPPORTED);  // a middle range too
  CHECK(h.kv->seq_remove(0, 6, -1).ok());  // past its end: nothing to do
  // A checkpoint at 6, three more tokens, then back: the state and the cells are those at 6.
  REQUIRE(h.kv->checkpoint(0).ok());
  h.add(0, 6, 3);
  h.step(0, 3.0f);
  CHECK(h.kv->seq_remove(0, 7, -1).code() == KESTREL_ERR_UNSUPPORTED);  // not the checkpoint's position
  REQUIRE(h.kv->seq_remove(0, 6, -1).ok());
  CHECK(h.kv->seq_pos_max(0) == 5);
  CHECK(h.ssm(0)[0] == 6.0f);
  CHECK(h.conv(0)[5] == 6.0f);
  // A whole copy into an empty sequence carries the state; a partial one is refused.
  CHECK(h.kv->seq_copy(0, 1, 2, -1).code() == KESTREL_ERR_UNSUPPORTED);
  CHECK(h.kv->seq_pos_max(1) == -1);
  REQUIRE(h.kv->seq_copy(0, 1, -1, -1).ok());
  CHECK(h.kv->seq_pos_max(1) == 5);
  CHECK(h.ssm(1)[3] == 6.0f);
  CHECK(h.kv->seq_copy(0, 1, -1, -1).code() == KESTREL_ERR_UNSUPPORTED);  // into a non-empty one
  // Removing a sequence whole zeroes its state; keep and clear zero the others'.
  REQUIRE(h.kv->seq_remove(1, 0, -1).ok());
  CHECK(h.ssm(1)[3] == 0.0f);
  h.add(2, 0, 2);
  h.step(2, 2.0f);
  h.kv->seq_keep(2);
  CHECK(h.ssm(0)[0] == 0.0f);
  CHECK(h.ssm(2)[0] == 2.0f);
  h.kv->clear();
  CHECK(h.ssm(2)[0] == 0.0f);
  CHECK(h.conv(2)[0] == 0.0f);
}

TEST_CASE("recurrent state: no prefix is attached (a state summarises all of a sequence)") {
  Hybrid h;
  std::vector<int32_t> toks(20, 7), pos(20), sq(20, 0), slots;
  std::iota(pos.begin(), pos.end(), 0);
  REQUIRE(h.kv->claim(toks, pos, sq, &slots).ok());
  CHECK(h.kv->attach_prefix(1, toks) == 0);
  CHECK(h.kv->seq_pos_max(1) == -1);
}
