// Every registered architecture's tiny configurations: a random model built in memory with the
// GGUF writer (model/synth.h), run on every compiled backend (compiled_backends(): the CPU with
// 1-4 threads, CUDA where a device exists) through a prompt and a few decode steps, logits compared
// with backends/ref by NMSE. Registering an architecture
// puts it under this test; nothing here names one.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string_view>

#include "backends/cpu/repacked.h"
#include "backends/cpu/weights_cpu.h"
#include "common/cpu_model.h"
#include "common/testdata.h"
#include "core/fp16.h"
#include "engine/context.h"
#include "model/synth.h"
#include "tensor/quants/quant_blocks.h"

using namespace kestrel;

namespace {

// Logits of the last `kept` positions of `prompt` (one decode call), then of one decode step per
// token of `steps`.
std::vector<float> prompt_then_steps(Context& c, const std::vector<int32_t>& prompt, int32_t kept,
                                     std::initializer_list<int32_t> steps) {
  const int32_t n = static_cast<int32_t>(prompt.size());
  std::unique_ptr<bool[]> want(new bool[static_cast<size_t>(n)]());
  std::fill(want.get() + n - kept, want.get() + n, true);
  Status st = c.decode({.tokens = prompt, .want_logits = {want.get(), static_cast<size_t>(n)}});
  REQUIRE_MESSAGE(st.ok(), st.to_string());
  std::vector<float> out;
  const auto keep = [&](int32_t row) {
    auto l = c.logits(row);
    REQUIRE(l.ok());
    out.insert(out.end(), l->begin(), l->end());
  };
  for (int32_t i = n - kept; i < n; ++i) keep(i);
  for (int32_t tok : steps) {
    st = c.decode({.tokens = std::span<const int32_t>(&tok, 1)});
    REQUIRE_MESSAGE(st.ok(), st.to_string());
    keep(-1);
  }
  return out;
}

// Logits of a 12-token prompt (every position) followed by 3 single-token decode steps.
// From the bytes in memory, or (path given) from that file, mapped.
std::vector<float> run_model(const std::vector<uint8_t>& gguf, const std::string& backend, int threads,
                             const std::string& path = "", DType kv_type = DType::F16,
                             std::optional<DType> kv_type_v = std::nullopt) {
  auto file = path.empty() ? gguf::File::from_bytes(gguf, "<synth>") : gguf::File::open(path);
  REQUIRE_MESSAGE(file.ok(), file.status().to_string());
  ContextOptions co;
  co.n_ctx = 64;
  co.n_threads = threads;
  co.kv_type = kv_type;
  co.kv_type_v = kv_type_v;
  const test::CpuModel m = test::load_model_on(backend, std::move(file.value()), co);
  return prompt_then_steps(*m.ctx, {1, 17, 5, 42, 9, 9, 33, 60, 3, 21, 48, 12}, 12, {7, 55, 2});
}

// Logits of the last 8 positions of an 80-token prompt and of 2 decode steps after it. More than
// 65 tokens in one step: CUDA's prefill attention runs on tensor cores (attention_flash.cu).
std::vector<float> run_long_prompt(const std::vector<uint8_t>& gguf, const std::string& backend,
                                   DType kv_type = DType::F16, std::optional<DType> kv_type_v = std::nullopt) {
  auto file = gguf::File::from_bytes(gguf, "<synth>");
  REQUIRE_MESSAGE(file.ok(), file.status().to_string());
  ContextOptions co;
  co.n_ctx = 128;
  co.kv_type = kv_type;
  co.kv_type_v = kv_type_v;
  const test::CpuModel m = test::load_model_on(backend, std::move(file.value()), co);
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 80; ++i) prompt.push_back((i * 13 + 1) % 61);
  return prompt_then_steps(*m.ctx, prompt, 8, {7, 55});
}

// A random-weight model of one tiny configuration, as a GGUF writer.
gguf::Writer synth(const ArchDef& arch, const TinyConfig& tiny, DType type, uint64_t seed) {
  SynthOptions so;
  so.weight_type = type;
  so.seed = seed;
  auto w = synth_model(arch, tiny, so);
  REQUIRE_MESSAGE(w.ok(), w.status().to_string());
  return std::move(w.value());
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return den > 0 ? num / den : INFINITY;
}

}  // namespace

TEST_CASE("synthetic models: every registered architecture on every backend vs ref") {
  int configs = 0;
  for (const ArchDef* arch : all_archs()) {
    CHECK_MESSAGE(!arch->tiny.empty(), arch->name << " has no tiny configuration");
    for (const TinyConfig& tiny : arch->tiny) {
      for (DType type : {DType::F32, DType::Q8_0, DType::MXFP4, DType::Q4_0, DType::FP8_E4M3}) {
        CAPTURE(tiny.name);
        CAPTURE(dtype_name(type));
        const std::vector<uint8_t> bytes = synth(*arch, tiny, type, 7).to_bytes();
        const std::vector<float> want = run_model(bytes, "ref", 1);
        // A meaningful reference: finite, and not flat.
        double mean = 0, var = 0;
        for (float v : want) {
          REQUIRE(std::isfinite(v));
          mean += v;
        }
        mean /= want.size();
        for (float v : want) var += (v - mean) * (v - mean);
        CHECK(var / want.size() > 1e-3);
        std::string errors;  // logged for every configuration: how close each backend came
        // In a sanitizer build (test::thorough), the emulated GPU takes every other configuration
        // (each weight type still meets it on several architectures) and the CPU 1 and 3 threads.
        const bool sample = !test::thorough();
        for (const std::string& backend : compiled_backends()) {
          if (backend == "ref" || !create_device(backend).ok()) continue;  // the oracle; no device here
          if (sample && backend == "cuda" && configs % 2 == 1) continue;
          for (int threads = 1; threads <= (backend == "cpu" ? 4 : 1); threads += sample ? 2 : 1) {
            const double e = nmse(run_model(bytes, backend, threads), want);
            // Gemma's GEGLU rounds its input to F16 (as llama.cpp's CPU does): a last-bit
            // difference upstream (a backend's summation order) can cross an F16 rounding
            // boundary, and the next Q8_0/Q4_0 activation block's scale can move with it.
            const double tol = std::string(arch->name) == "gemma3" ? 1e-4 : 1e-6;
            CHECK_MESSAGE(e < tol, std::string(tiny.name) << " " << std::string(dtype_name(type)) << " " << backend << " x" << threads
                                              << ": NMSE " << e);
            char buf[64];
            std::snprintf(buf, sizeof buf, " %s %.3g", backend.c_str(), e);
            if (threads == 1) errors += buf;
          }
        }
        MESSAGE(std::string(tiny.name) << " " << std::string(dtype_name(type)) << ": NMSE vs ref:" << errors);
        ++configs;
      }
    }
  }
  MESSAGE(configs << " architecture configurations x weight types checked");
  CHECK(configs >= 3 * 7);
}

// A prompt longer than 65 tokens on every backend: on CUDA its attention takes the tensor-core
// kernel (attention_flash.cu). On the emulator it gives the reference's logits exactly, except
// where a p rounds to the other f16 neighbour (its sum differs in the last bits); deepseek2's
// tiny model turns that into an NMSE of 1.4e-4 (the CPU's own float sums give 1.5e-4 there). On
// a GPU the f32 sums of the tensor cores add more such flips. A wrong mask or cell measured 3.6e-3
// to 0.3.
TEST_CASE("synthetic models: an 80-token prompt (CUDA's tensor-core prefill attention) vs ref") {
  for (const ArchDef* arch : all_archs()) {
    for (const TinyConfig& tiny : arch->tiny) {
      CAPTURE(std::string(tiny.name));
      const std::vector<uint8_t> bytes = synth(*arch, tiny, DType::Q8_0, 11).to_bytes();
      const std::vector<float> want = run_long_prompt(bytes, "ref");
      std::string errors;
      for (const std::string& backend : compiled_backends()) {
        if (backend == "ref" || !create_device(backend).ok()) continue;
        const double e = nmse(run_long_prompt(bytes, backend), want);
        CHECK_MESSAGE(e < 1e-3, std::string(tiny.name) << " " << backend << ": NMSE " << e);
        char buf[64];
        std::snprintf(buf, sizeof buf, " %s %.3g", backend.c_str(), e);
        errors += buf;
      }
      MESSAGE(std::string(tiny.name) << " q8_0, 80-token prompt: NMSE vs ref:" << errors);
    }
  }
}

// The FP8 KV cache (ContextOptions::kv_type = F8_E4M3): every backend against the reference with
// the same cache type, for a 12-token prompt with decode steps (the decode kernels) and an
// 80-token prompt (CUDA's tensor-core prefill). The cache holds half the bytes, and the logits
// do move from the F16 cache's (E4M3 keeps 3 mantissa bits): the option takes effect.
TEST_CASE("synthetic models: an FP8 KV cache on every backend vs ref") {
  for (const ArchDef* arch : all_archs()) {
    for (const TinyConfig& tiny : arch->tiny) {
      CAPTURE(std::string(tiny.name));
      const std::vector<uint8_t> bytes = synth(*arch, tiny, DType::Q8_0, 13).to_bytes();
      const std::vector<float> want = run_model(bytes, "ref", 1, "", DType::F8_E4M3);
      const std::vector<float> want_long = run_long_prompt(bytes, "ref", DType::F8_E4M3);
      const double moved = nmse(want, run_model(bytes, "ref", 1));
      CHECK(moved > 0);
      std::string errors;
      for (const std::string& backend : compiled_backends()) {
        if (backend == "ref" || !create_device(backend).ok()) continue;
        const double e = nmse(run_model(bytes, backend, 1, "", DType::F8_E4M3), want);
        const double e_long = nmse(run_long_prompt(bytes, backend, DType::F8_E4M3), want_long);
        CHECK_MESSAGE(e < 1e-6, std::string(tiny.name) << " " << backend << ": NMSE " << e);
        CHECK_MESSAGE(e_long < 1e-3, std::string(tiny.name) << " " << backend << ", 80 tokens: NMSE " << e_long);
        char buf[96];
        std::snprintf(buf, sizeof buf, " %s %.3g (80 tokens %.3g)", backend.c_str(), e, e_long);
        errors += buf;
      }
      MESSAGE(std::string(tiny.name) << " q8_0, FP8 cache: NMSE vs ref:" << errors << "; vs the F16 cache " << moved);
    }
  }
  // Half of the F16 cache's bytes; a type that is not a cache type is refused.
  const std::vector<uint8_t> model = synth(*all_archs().front(), all_archs().front()->tiny.front(), DType::Q8_0, 13).to_bytes();
  size_t bytes[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    ContextOptions co;
    co.n_ctx = 64;
    co.kv_type = i == 0 ? DType::F16 : DType::F8_E4M3;
    auto f = gguf::File::from_bytes(model, "<synth>");
    REQUIRE(f.ok());
    const test::CpuModel m = test::load_model_on("ref", std::move(f.value()), co);
    bytes[i] = m.ctx->kv().bytes();
    if (i == 1) {
      ContextOptions bad = co;
      bad.kv_type_v = DType::Q4_K;
      auto c = Context::create(*m.model, bad);
      REQUIRE_FALSE(c.ok());
      CHECK(c.status().code() == KESTREL_ERR_INVALID_ARGUMENT);
      CHECK(c.status().message().find("V cache type q4_K is not a KV cache type") != std::string::npos);
    }
  }
  CHECK(bytes[1] * 2 == bytes[0]);
}

// The block-quantized KV caches (--cache-type-k/-v q8_0, q4_0, and either beside F16): every
// backend against the reference with the same cache types, for the 12-token prompt with decode
// steps and, for q8_0, the 80-token prompt; the logits move from the F16 cache's (the option takes
// effect). A configuration whose rows are not whole blocks, or an MLA model (V a view of K) given
// two types, is refused with the reason.
TEST_CASE("synthetic models: Q8_0 and Q4_0 KV caches on every backend vs ref") {
  struct Types {
    DType k;
    std::optional<DType> v;
  };
  const Types mixes[] = {{DType::Q8_0, {}}, {DType::Q4_0, {}}, {DType::Q8_0, DType::F16}, {DType::F16, DType::Q4_0}};
  const size_t n_mixes = test::thorough() ? 4 : 2;
  int ran = 0, refused = 0;
  for (const ArchDef* arch : all_archs()) {
    for (const TinyConfig& tiny : arch->tiny) {
      CAPTURE(std::string(tiny.name));
      const std::vector<uint8_t> bytes = synth(*arch, tiny, DType::Q8_0, 13).to_bytes();
      auto f = gguf::File::from_bytes(bytes, "<synth>");
      REQUIRE(f.ok());
      ContextOptions co;
      co.n_ctx = 64;
      const test::CpuModel base = test::load_model_on("ref", std::move(f.value()), co);
      const KvLayout layout = base.model->kv_layout();
      const std::vector<float> f16 = run_model(bytes, "ref", 1);
      for (size_t mi = 0; mi < n_mixes; ++mi) {
        const Types& t = mixes[mi];
        const DType v = t.v.value_or(t.k);
        CAPTURE(std::string(dtype_name(t.k)) + "/" + dtype_name(v));
        const std::string why = layout.cache_type_error(t.k, false) + layout.cache_type_error(v, true);
        if (!why.empty() || (layout.v_in_k && t.k != v)) {
          ContextOptions bad = co;
          bad.kv_type = t.k, bad.kv_type_v = t.v;
          auto c = Context::create(*base.model, bad);
          REQUIRE_FALSE(c.ok());
          CHECK(c.status().code() == KESTREL_ERR_INVALID_ARGUMENT);
          const std::string msg = c.status().message();
          CHECK((msg.find("does not fit this model") != std::string::npos || msg.find("both take one type") != std::string::npos));
          ++refused;
          continue;
        }
        const std::vector<float> want = run_model(bytes, "ref", 1, "", t.k, t.v);
        const std::vector<float> want_long = mi == 0 ? run_long_prompt(bytes, "ref", t.k, t.v) : std::vector<float>{};
        const double moved = nmse(want, f16);
        CHECK(moved > 0);
        std::string errors;
        // Probabilities (and queries) are rounded to f16 here: where a backend's float sum lands a
        // probability on the other side of a rounding boundary than the reference's double, the
        // layer's output moves by an f16 ulp and the next layers carry it (seen: NMSE 1e-6 to 1e-5
        // on two architectures' mixed K/V). A kernel reading the wrong block is far above this.
        const double tol = 1e-4;
        for (const std::string& backend : compiled_backends()) {
          if (backend == "ref" || !create_device(backend).ok()) continue;
          // Sanitizer builds (test::thorough): the emulated GPU takes the q8_0 cache's 12 tokens.
          const bool sampled = !test::thorough() && backend == "cuda";
          if (sampled && mi > 0) continue;
          for (int threads = 1; threads <= (backend == "cpu" ? 3 : 1); threads += 2) {
            const double e = nmse(run_model(bytes, backend, threads, "", t.k, t.v), want);
            CHECK_MESSAGE(e < tol, backend << " x" << threads << ": NMSE " << e);
            char buf[64];
            std::snprintf(buf, sizeof buf, " %s x%d %.3g", backend.c_str(), threads, e);
            errors += buf;
          }
          if (mi == 0 && !sampled) {
            const double e_long = nmse(run_long_prompt(bytes, backend, t.k, t.v), want_long);
            CHECK_MESSAGE(e_long < 1e-3, backend << ", 80 tokens: NMSE " << e_long);
          }
        }
        MESSAGE(std::string(tiny.name) << " K " << std::string(dtype_name(t.k)) << " V " << std::string(dtype_name(v)) << ": NMSE vs ref:" << errors
                                       << "; vs the F16 cache " << moved);
        ++ran;
      }
    }
  }
  MESSAGE(ran << " configurations ran, " << refused << " refused");
  CHECK(ran >= 6);
}

// A step that keeps only each row's best logits (DecodeBatch::top_k: the TOP_K op where the step
// runs) gives exactly the top of the whole rows the same step computes, in the sampler's strict
// order, on every backend; logits() then refuses and an out-of-range top_k is an error.
TEST_CASE("synthetic models: a step keeping each row's best logits gives the top of its whole rows") {
  const ArchDef* arch = all_archs().front();
  const std::vector<uint8_t> bytes = synth(*arch, arch->tiny.front(), DType::Q8_0, 9).to_bytes();
  const std::vector<int32_t> prompt = {1, 17, 5, 42, 9, 9, 33, 60, 3};
  bool want[9];
  for (int i = 0; i < 9; ++i) want[i] = i % 3 != 1;
  for (const std::string& backend : compiled_backends()) {
    if (!create_device(backend).ok()) continue;
    CAPTURE(backend);
    auto file = gguf::File::from_bytes(bytes, "<synth>");
    REQUIRE(file.ok());
    ContextOptions co;
    co.n_ctx = 64;
    const test::CpuModel m = test::load_model_on(backend, std::move(file.value()), co);
    Context& c = *m.ctx;
    const int32_t V = m.model->hparams().n_vocab;
    REQUIRE(c.decode({.tokens = prompt, .want_logits = {want, 9}}).ok());
    std::vector<std::vector<float>> whole;
    for (int32_t i = 0; i < 9; ++i)
      if (want[i]) whole.emplace_back(c.logits(i)->begin(), c.logits(i)->end());
    for (int32_t k : {1, 7, std::min(V, kMaxBestLogits)}) {
      CAPTURE(k);
      c.kv().clear();
      REQUIRE(c.decode({.tokens = prompt, .want_logits = {want, 9}, .top_k = k}).ok());
      CHECK(c.logits(0).status().code() == KESTREL_ERR_INVALID_ARGUMENT);
      size_t n = 0;
      for (int32_t i = 0; i < 9; ++i) {
        if (!want[i]) continue;
        const std::vector<float>& w = whole[n++];
        std::vector<int32_t> order(static_cast<size_t>(V));
        for (int32_t t = 0; t < V; ++t) order[static_cast<size_t>(t)] = t;
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return w[a] > w[b]; });
        auto row = c.row(i);
        REQUIRE(row.ok());
        REQUIRE(row->all.empty());
        REQUIRE(row->best.size() == static_cast<size_t>(k));
        CHECK(row->n_vocab == V);
        for (int32_t j = 0; j < k; ++j) {
          CHECK(row->best[j].id == order[static_cast<size_t>(j)]);
          CHECK(row->best[j].logit == w[static_cast<size_t>(order[static_cast<size_t>(j)])]);
        }
      }
    }
    c.kv().clear();
    CHECK(c.decode({.tokens = prompt, .top_k = kMaxBestLogits + 1}).code() == KESTREL_ERR_INVALID_ARGUMENT);
    CHECK(c.decode({.tokens = prompt, .top_k = -1}).code() == KESTREL_ERR_INVALID_ARGUMENT);
  }
}

// The CPU backend places weights at load (backends/cpu/weights_cpu.h): from a mapped file into huge pages,
// Q4_0 and Q4_K regrouped; from memory, regrouped in place. Same logits, bit for bit, as the file's
// pages and layout, on every architecture.
TEST_CASE("synthetic models: weights placed and repacked at load give the file layout's bits") {
  if (!cpu::regroup_enabled()) {
    MESSAGE("no AVX2/FMA (or KESTREL_NO_REPACK set): weights stay where the file has them");
    return;
  }
  const std::string path = "/tmp/kestrel_test_repack_" + std::to_string(getpid()) + ".gguf";
  int regrouped = 0;
  for (const ArchDef* arch : all_archs()) {
    for (const TinyConfig& tiny : arch->tiny) {
      for (DType type : {DType::Q4_0, DType::Q4_K, DType::Q8_0}) {
        CAPTURE(tiny.name);
        CAPTURE(dtype_name(type));
        const gguf::Writer w = synth(*arch, tiny, type, 9);
        REQUIRE(w.write(path).ok());
        const std::vector<uint8_t> bytes = w.to_bytes();
        {
          ModelLoadOptions lo;
          lo.backend = "cpu";
          auto model = Model::load(path, lo);
          REQUIRE_MESSAGE(model.ok(), model.status().to_string());
          const Tensor* out = model.value()->weights().output;
          regrouped += out && out->layout == cpu::kLayoutGrouped8;
        }
        const std::vector<float> in_memory = run_model(bytes, "cpu", 2), mapped = run_model(bytes, "cpu", 2, path);
        setenv("KESTREL_NO_REPACK", "1", 1);
        const std::vector<float> plain = run_model(bytes, "cpu", 2, path);
        unsetenv("KESTREL_NO_REPACK");
        REQUIRE(in_memory.size() == plain.size());
        REQUIRE(mapped.size() == plain.size());
        CHECK(std::memcmp(in_memory.data(), plain.data(), plain.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(mapped.data(), plain.data(), plain.size() * sizeof(float)) == 0);
      }
    }
  }
  std::remove(path.c_str());
  CHECK(regrouped > 0);  // the test did exercise the regrouped layout
}

// CUDA rearranges Q4_0 and Q8_0 matrices whose rows hold a multiple of 256 values into its
// split-rows layout at upload (backends/cuda/kernels.h). Every architecture's tiny configuration,
// widened so that its matrices qualify, must give the same logits bit for bit with the layout as
// with the file's (KESTREL_NO_REPACK=1): a 12-token prompt (the tensor-core GEMMs, MoE's grouped
// GEMM) and decode steps (the GEMVs).
TEST_CASE("synthetic models: CUDA's split-rows layout gives the file layout's bits") {
  if (!create_device("cuda").ok()) {
    MESSAGE("no CUDA device (real or emulated) here");
    return;
  }
  int split = 0, config = 0;
  for (const ArchDef* arch : all_archs()) {
    for (const TinyConfig& tiny : arch->tiny) {
      TinyConfig wide{tiny.name, tiny.kv};
      for (auto& [key, value] : wide.kv)
        if (key == "embedding_length" || key == "feed_forward_length" || key == "expert_feed_forward_length")
          value = gguf::Value::make_u32(256);
      ++config;
      for (DType type : {DType::Q4_0, DType::Q8_0}) {
        // Sampled builds (sanitizers): one of the two types per configuration, alternating.
        if (!test::thorough() && (config % 2 == 0) != (type == DType::Q8_0)) continue;
        CAPTURE(std::string(tiny.name));
        CAPTURE(std::string(dtype_name(type)));
        const std::vector<uint8_t> bytes = synth(*arch, wide, type, 11).to_bytes();
        {
          ContextOptions co;
          const test::CpuModel m = test::load_model_on("cuda", gguf::File::from_bytes(bytes, "<synth>").value(), co);
          const Tensor* out = m.model->weights().output;
          split += out && out->layout != 0;
        }
        const std::vector<float> with_split = run_model(bytes, "cuda", 1);
        setenv("KESTREL_NO_REPACK", "1", 1);
        const std::vector<float> plain = run_model(bytes, "cuda", 1);
        unsetenv("KESTREL_NO_REPACK");
        REQUIRE(with_split.size() == plain.size());
        CHECK(std::memcmp(with_split.data(), plain.data(), plain.size() * sizeof(float)) == 0);
      }
    }
  }
  CHECK(split > 0);  // the layout was exercised
}

TEST_CASE("synthetic models: inconsistent MoE / MLA metadata is a clear error, not a crash") {
  auto with = [](const char* arch_name, const std::string& key, gguf::Value v) {
    const ArchDef* arch = find_arch(arch_name);
    REQUIRE(arch);
    TinyConfig cfg = arch->tiny.at(0);
    bool found = false;
    for (auto& [k, val] : cfg.kv)
      if (k == key) val = v, found = true;
    if (!found) cfg.kv.emplace_back(key, v);
    return synth_model(*arch, cfg, SynthOptions{});
  };
  auto e1 = with("qwen3moe", "expert_used_count", gguf::Value::make_u32(9));  // 8 experts
  REQUIRE(!e1.ok());
  CHECK(e1.status().to_string().find("expert_used_count") != std::string::npos);
  auto e2 = with("deepseek2", "expert_group_count", gguf::Value::make_u32(3));  // 8 experts
  REQUIRE(!e2.ok());
  CHECK(e2.status().to_string().find("expert_group_count") != std::string::npos);
  auto e3 = with("deepseek2", "attention.kv_lora_rank", gguf::Value::make_u32(0));
  REQUIRE(!e3.ok());
  CHECK(e3.status().to_string().find("kv_lora_rank") != std::string::npos);
  auto e4 = with("gpt-oss", "expert_gating_func", gguf::Value::make_u32(7));
  REQUIRE(!e4.ok());
  CHECK(e4.status().to_string().find("expert_gating_func") != std::string::npos);
  // Per-layer arrays: refused where the architecture has none, checked where it has them.
  auto e5 = with("llama", "feed_forward_length", gguf::Value::make_i32_array({128, 64}));
  REQUIRE(!e5.ok());
  CHECK(e5.status().to_string().find("varies per layer") != std::string::npos);
  auto e6 = with("nemotron_h", "attention.head_count_kv", gguf::Value::make_i32_array({0, 0, 2}));  // 5 layers
  REQUIRE(!e6.ok());
  CHECK(e6.status().to_string().find("3 values for 5 layers") != std::string::npos);
  auto e7 = with("nemotron_h", "attention.head_count_kv", gguf::Value::make_i32_array({0, 0, 3, 0, 0}));  // 4 heads
  REQUIRE(!e7.ok());
  CHECK(e7.status().to_string().find("head_count_kv") != std::string::npos);
  auto e8 = with("nemotron_h", "ssm.group_count", gguf::Value::make_u32(3));  // 8 heads
  REQUIRE(!e8.ok());
  CHECK(e8.status().to_string().find("group_count") != std::string::npos);
  // A hybrid with no attention layer at all (every head_count_kv 0) is a model, with no K/V.
  auto ok = with("nemotron_h", "attention.head_count_kv", gguf::Value::make_i32_array({0, 0, 0, 0, 0}));
  CHECK_MESSAGE(ok.ok(), ok.status().to_string());
}

namespace {

// A model's GGUF rebuilt with its metadata and every tensor, each passed through edit(name,
// info, bytes) first (which may change the bytes in place); then the tensors of `extra`.
std::vector<uint8_t> rebuilt(const std::vector<uint8_t>& bytes,
                             const std::function<void(const gguf::TensorInfo&, std::vector<uint8_t>&)>& edit,
                             const std::vector<std::pair<std::string, std::vector<float>>>& extra = {}) {
  auto f = gguf::File::from_bytes(bytes, "<synth>");
  REQUIRE(f.ok());
  gguf::Writer w;
  for (const gguf::KeyValue& kv : f.value()->metadata()) w.set(kv.key, kv.value);
  for (const gguf::TensorInfo& ti : f.value()->tensors()) {
    const uint8_t* p = f.value()->tensor_data(ti);
    std::vector<uint8_t> data(p, p + ti.nbytes);
    edit(ti, data);
    REQUIRE(w.add_tensor(ti.name, ti.type, std::vector<int64_t>(ti.ne, ti.ne + ti.n_dims), data.data(), data.size()).ok());
  }
  for (const auto& [name, v] : extra)
    REQUIRE(w.add_tensor(name, DType::F32, {static_cast<int64_t>(v.size())}, v.data(), v.size() * sizeof(float)).ok());
  return w.to_bytes();
}

// The matrices a second-level scale can go with in a synthetic model: products of F32, F16 or
// Q8_0 weights (where scaling by a power of two is exact in the stored values too), not the
// gathered embedding table, not stacked matrices with a bias.
bool scalable(const gguf::File& f, const gguf::TensorInfo& ti) {
  const std::string_view name = ti.name;
  if (ti.n_dims < 2 || !name.ends_with(".weight") || name == "token_embd.weight") return false;
  if (name.find("ssm_conv1d") != name.npos || name.find("ssm_norm") != name.npos) return false;  // values, not matrices
  if (ti.type != DType::F32 && ti.type != DType::F16 && ti.type != DType::Q8_0) return false;
  return ti.n_dims < 3 || !f.find_tensor(std::string(name.substr(0, name.size() - 7)) + ".bias");
}

// Scales a tensor's stored values (matrix e of a stack by factors[e]): exact for powers of two.
void scale_values(const gguf::TensorInfo& ti, std::vector<uint8_t>& data, const std::vector<float>& factors) {
  const size_t per = data.size() / static_cast<size_t>(ti.ne[2]);
  for (size_t e = 0; e < static_cast<size_t>(ti.ne[2]); ++e) {
    uint8_t* p = data.data() + e * per;
    const float s = factors[factors.size() == 1 ? 0 : e];
    if (ti.type == DType::F32) {
      for (size_t i = 0; i < per / 4; ++i) reinterpret_cast<float*>(p)[i] *= s;
    } else if (ti.type == DType::F16) {
      auto* h = reinterpret_cast<uint16_t*>(p);
      for (size_t i = 0; i < per / 2; ++i) h[i] = fp32_to_fp16(fp16_to_fp32(h[i]) * s);
    } else {  // Q8_0: the block's fp16 scale
      for (size_t b = 0; b < per / sizeof(block_q8_0); ++b) {
        auto* blk = reinterpret_cast<block_q8_0*>(p) + b;
        blk->d = fp32_to_fp16(fp16_to_fp32(blk->d) * s);
      }
    }
  }
}

}  // namespace

// NVFP4 files converted from ModelOpt checkpoints carry a second scale per matrix ("<name>.scale",
// weight_scale_2), which multiplies the matrix's product. A model with such tensors (powers of
// two, one per matrix or one per expert / head) must give, on every backend, the logits of the
// same model with its stored weights multiplied by them: bit for bit, since a power of two
// scales every product and partial sum exactly. A scale the builders forgot (a matrix taken by
// another path) fails it; so does one applied twice or to the wrong expert.
TEST_CASE("synthetic models: second-level scales multiply their matrix's product") {
  int scaled_archs = 0;
  for (const ArchDef* arch : all_archs()) {
    for (DType type : {DType::F32, DType::Q8_0}) {
      CAPTURE(arch->name);
      CAPTURE(dtype_name(type));
      const std::vector<uint8_t> bytes = synth(*arch, arch->tiny.at(0), type, 5).to_bytes();
      auto f = gguf::File::from_bytes(bytes, "<synth>");
      REQUIRE(f.ok());
      std::map<std::string, std::vector<float>> factors;  // matrix name -> its scale tensor's values
      int j = 0;
      for (const gguf::TensorInfo& ti : f.value()->tensors()) {
        if (!scalable(*f.value(), ti)) continue;
        const bool per_matrix = ti.n_dims == 3 && j % 2 == 0;  // some stacks with one value, some with one each
        std::vector<float> v(per_matrix ? static_cast<size_t>(ti.ne[2]) : 1);
        for (size_t e = 0; e < v.size(); ++e) v[e] = std::ldexp(1.0f, static_cast<int>((j + e) % 3));  // 1, 2, 4
        factors[ti.name] = v;
        ++j;
      }
      REQUIRE(j > 3);
      std::vector<std::pair<std::string, std::vector<float>>> extra;
      for (const auto& [name, v] : factors) extra.emplace_back(name.substr(0, name.size() - 7) + ".scale", v);
      extra.emplace_back("blk.0.attn_output.input_scale", std::vector<float>{3.0f});  // checked, not used
      const auto keep = [](const gguf::TensorInfo&, std::vector<uint8_t>&) {};
      const std::vector<uint8_t> with_scales = rebuilt(bytes, keep, extra);
      const std::vector<uint8_t> prescaled = rebuilt(bytes, [&](const gguf::TensorInfo& ti, std::vector<uint8_t>& d) {
        if (factors.count(ti.name)) scale_values(ti, d, factors.at(ti.name));
      });
      const std::vector<float> want = run_model(prescaled, "ref", 1);
      CHECK(nmse(want, run_model(bytes, "ref", 1)) > 1e-4);  // the scales matter
      for (const std::string& backend : compiled_backends()) {
        if (!create_device(backend).ok()) continue;
        CAPTURE(backend);
        const std::vector<float> got = run_model(with_scales, backend, 1);
        CHECK(nmse(got, run_model(prescaled, backend, 1)) == 0.0);
        CHECK(nmse(got, want) < 1e-6);
      }
      ++scaled_archs;
    }
  }
  CHECK(scaled_archs >= 12);
}

// What a scale tensor cannot be: refused by name (the tensor and its matrix), never ignored.
TEST_CASE("synthetic models: a second-level scale that cannot apply is refused") {
  struct Case {
    const char* arch;
    std::string name;
    std::vector<float> values;
    kestrel_status code;
    const char* says;
  };
  const float inf = INFINITY;
  const std::vector<Case> cases = {
      {"llama", "token_embd.scale", {2.0f}, KESTREL_ERR_UNSUPPORTED, "gathered"},
      {"llama", "blk.0.attn_norm.scale", {2.0f}, KESTREL_ERR_UNSUPPORTED, "not a matrix"},
      {"llama", "blk.0.attn_q.scale", {2.0f, 2.0f}, KESTREL_ERR_FORMAT, "must hold 1"},
      {"llama", "blk.1.ffn_up.scale", {inf}, KESTREL_ERR_FORMAT, "not finite"},
      {"llama", "blk.1.ffn_up.input_scale", {NAN}, KESTREL_ERR_FORMAT, "not finite"},
      {"gpt-oss", "blk.0.ffn_up_exps.scale", {2.0f}, KESTREL_ERR_UNSUPPORTED, "bias"},
      {"nemotron_h", "blk.0.ssm_conv1d.scale", {2.0f}, KESTREL_ERR_UNSUPPORTED, "Mamba"},
      {"nemotron_h", "blk.0.ssm_norm.scale", {2.0f}, KESTREL_ERR_UNSUPPORTED, "Mamba"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const ArchDef* arch = find_arch(c.arch);
    REQUIRE(arch);
    const std::vector<uint8_t> bytes = synth(*arch, arch->tiny.at(0), DType::Q8_0, 3).to_bytes();
    auto file = gguf::File::from_bytes(rebuilt(bytes, [](const gguf::TensorInfo&, std::vector<uint8_t>&) {}, {{c.name, c.values}}),
                                       "<synth>");
    REQUIRE(file.ok());
    ModelLoadOptions lo;
    lo.backend = "ref";
    auto m = Model::from_file(std::move(file.value()), lo);
    REQUIRE(!m.ok());
    CHECK(m.status().code() == c.code);
    CHECK(m.status().to_string().find(c.name) != std::string::npos);
    CHECK(m.status().to_string().find(c.says) != std::string::npos);
  }
  // A scale stored as F16 is a format error naming the type.
  const ArchDef* llama = find_arch("llama");
  const std::vector<uint8_t> bytes = synth(*llama, llama->tiny.at(0), DType::Q8_0, 3).to_bytes();
  auto f = gguf::File::from_bytes(bytes, "<synth>");
  REQUIRE(f.ok());
  gguf::Writer w;
  for (const gguf::KeyValue& kv : f.value()->metadata()) w.set(kv.key, kv.value);
  for (const gguf::TensorInfo& ti : f.value()->tensors())
    REQUIRE(w.add_tensor(ti.name, ti.type, std::vector<int64_t>(ti.ne, ti.ne + ti.n_dims), f.value()->tensor_data(ti), ti.nbytes).ok());
  const uint16_t two = fp32_to_fp16(2.0f);
  REQUIRE(w.add_tensor("blk.0.attn_k.scale", DType::F16, {1}, &two, sizeof two).ok());
  auto file = gguf::File::from_bytes(w.to_bytes(), "<synth>");
  REQUIRE(file.ok());
  ModelLoadOptions lo;
  lo.backend = "ref";
  auto m = Model::from_file(std::move(file.value()), lo);
  REQUIRE(!m.ok());
  CHECK(m.status().code() == KESTREL_ERR_FORMAT);
  CHECK(m.status().to_string().find("must be F32") != std::string::npos);
}
