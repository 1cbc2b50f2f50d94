// KV cache layouts: a cache whose V is a view of K (MLA), DeepSeek2's cache size against full
// K/V (numbers from the GGUF's own metadata), what `kestrel info` reports, and prefill and
// one-token decode agreeing on the MLA cache.
#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/cpu_model.h"
#include "common/test_backend.h"
#include "common/testdata.h"
#include "engine/context.h"
#include "kv/kv_cache.h"

using namespace kestrel;

TEST_CASE("KV cache: V as a view of K stores K only") {
  auto cpu = test::make_cpu_backend(1);
  KvCache::Options o;
  o.n_cells = 16;
  o.k_rows = {288, 288};
  o.v_rows = {256, 256};
  o.v_in_k = true;
  auto kv = KvCache::create(o, *cpu);
  REQUIRE(kv.ok());
  CHECK(kv.value()->bytes() == 2u * 16 * 288 * 2);
  for (int l = 0; l < 2; ++l) {
    const Tensor &k = kv.value()->k(l), &v = kv.value()->v(l);
    CHECK(v.data == k.data);
    CHECK(v.nb[1] == k.nb[1]);
    CHECK(v.ne[0] == 256);
  }
  KvCache::Options full = o;
  full.v_in_k = false;
  auto kv2 = KvCache::create(full, *cpu);
  REQUIRE(kv2.ok());
  CHECK(kv2.value()->bytes() == 2u * 16 * (288 + 256) * 2);
  o.v_rows = {289, 256};  // V cannot be wider than the K row it views
  CHECK(!KvCache::create(o, *cpu).ok());
  o.v_rows = {256};
  CHECK(!KvCache::create(o, *cpu).ok());
}

TEST_CASE("deepseek2: the MLA cache holds latent + rope per token, smaller than full K/V") {
  const std::string path = test::testdata_file("models/deepseek2-f16.gguf");
  if (path.empty()) return;
  auto file = gguf::File::open(path);
  REQUIRE(file.ok());
  const gguf::File& f = *file.value();
  // The numbers straight from the file's metadata.
  const int64_t n_layer = *f.get_int("deepseek2.block_count"), n_head = *f.get_int("deepseek2.attention.head_count");
  const int64_t kv_lora = *f.get_int("deepseek2.attention.kv_lora_rank"), rope = *f.get_int("deepseek2.rope.dimension_count");
  const int64_t k_mla = *f.get_int("deepseek2.attention.key_length_mla"), v_mla = *f.get_int("deepseek2.attention.value_length_mla");
  const uint64_t mla_per_token = n_layer * (kv_lora + rope) * 2;         // F16
  const uint64_t full_per_token = n_layer * n_head * (k_mla + v_mla) * 2;  // every head's K and V
  const test::CpuModel m = test::load_cpu_model(std::move(file.value()));
  CHECK(m.ctx->kv().bytes() == mla_per_token * 512);
  CHECK(m.ctx->kv().bytes() < full_per_token * 512);
  const auto info = nlohmann::json::parse(m.model->describe_json());
  CHECK(info["memory"]["kv_bytes_per_token"] == mla_per_token);
  CHECK(info["memory"]["kv_bytes_per_token_full_kv"] == full_per_token);
  MESSAGE("deepseek2 KV bytes per token: MLA " << mla_per_token << ", full K/V " << full_per_token);
  // Total vs active parameters: one token reads 2 of the 4 routed experts.
  CHECK(info["n_params_active"].get<uint64_t>() < info["n_params"].get<uint64_t>());
}

TEST_CASE("deepseek2: prompt in one batch and one token at a time give the same logits") {
  const std::string path = test::testdata_file("models/deepseek2-f16.gguf");
  if (path.empty()) return;
  ModelLoadOptions lo;
  lo.backend = "cpu";
  auto model = Model::load(path, lo);
  REQUIRE(model.ok());
  const std::vector<int32_t> prompt = {1, 400, 70, 263, 419, 29, 3, 88, 140, 6};
  std::vector<float> last[2];
  for (int mode = 0; mode < 2; ++mode) {
    ContextOptions co;
    co.n_ctx = 64;
    co.n_batch = mode == 0 ? 512 : 1;  // one step, or one token per step (decode path)
    auto ctx = Context::create(*model.value(), co);
    REQUIRE(ctx.ok());
    REQUIRE(ctx.value()->decode({.tokens = prompt}).ok());
    auto l = ctx.value()->logits(-1);
    REQUIRE(l.ok());
    last[mode].assign(l->begin(), l->end());
  }
  double max_diff = 0;
  for (size_t i = 0; i < last[0].size(); ++i) max_diff = std::max(max_diff, std::fabs(double(last[0][i]) - last[1][i]));
  CHECK(max_diff < 1e-3);
}
