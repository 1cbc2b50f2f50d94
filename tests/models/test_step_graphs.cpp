// CUDA step graphs (backends/cuda/step_graphs.h): steps replayed from a captured graph give the
// bits of the same steps launched kernel by kernel, for every registered architecture's tiny
// models, through decode steps of one token (crossing KV blocks, so the tables grow), steps of
// three tokens and of two sequences in between (other signatures, captured beside), and a new
// prompt. On the emulated build and on a GPU; skipped where no CUDA device opens.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "common/cpu_model.h"
#include "model/synth.h"

using namespace kestrel;

namespace {

struct GraphRun {
  std::vector<float> logits;
  ExecutorStats stats;
};

// The model on CUDA with step graphs on or off (the setting is read when the context is made).
test::CpuModel cuda_model(const std::vector<uint8_t>& gguf, bool graphs, const ContextOptions& co) {
  if (graphs)
    unsetenv("KESTREL_CUDA_GRAPHS");
  else
    setenv("KESTREL_CUDA_GRAPHS", "0", 1);
  test::CpuModel m = test::load_model_on("cuda", gguf::File::from_bytes(gguf, "<synth>").value(), co);
  unsetenv("KESTREL_CUDA_GRAPHS");
  return m;
}

// Every wanted row's logits over a fixed script of steps, on CUDA, graphs on or off.
GraphRun run_script(const std::vector<uint8_t>& gguf, bool graphs) {
  ContextOptions co;
  co.n_ctx = 128;
  co.n_seq_max = 2;  // blocks of 16 cells: sequence 0 grows over four
  test::CpuModel m = cuda_model(gguf, graphs, co);
  GraphRun r;
  auto step = [&](std::vector<int32_t> tokens, std::vector<int32_t> seqs) {
    const Status st = m.ctx->decode({.tokens = tokens, .seq_ids = seqs});
    REQUIRE_MESSAGE(st.ok(), st.to_string());
    auto l = m.ctx->logits(-1);
    REQUIRE(l.ok());
    r.logits.insert(r.logits.end(), l->begin(), l->end());
  };
  step({1, 17, 5, 42, 9, 9, 33, 60, 3, 21}, {});
  for (int i = 0; i < 24; ++i) {
    step({(i * 7 + 3) % 61}, {});
    if (i % 6 == 5) step({(i * 5 + 1) % 61, 4, 19}, {});  // a 3-token step (a draft verification)
  }
  step({11, 12, 13, 14}, {1, 1, 1, 1});  // a second sequence's prompt
  for (int i = 0; i < 6; ++i) step({(i * 3 + 2) % 61, (i * 11 + 5) % 61}, {0, 1});  // both at once
  r.stats = m.ctx->executor().stats();
  return r;
}

}  // namespace

TEST_CASE("CUDA step graphs: replayed steps give the launched steps' bits") {
  if (!create_device("cuda").ok()) {
    MESSAGE("no CUDA device (real or emulated) here");
    return;
  }
  int64_t replays = 0;
  for (const ArchDef* arch : all_archs()) {
    const TinyConfig& tiny = arch->tiny.front();
    CAPTURE(std::string(tiny.name));
    SynthOptions so;
    so.weight_type = DType::Q4_0;
    so.seed = 5;
    auto w = synth_model(*arch, tiny, so);
    REQUIRE_MESSAGE(w.ok(), w.status().to_string());
    const std::vector<uint8_t> bytes = w.value().to_bytes();
    const GraphRun launched = run_script(bytes, false);
    const GraphRun graphed = run_script(bytes, true);
    CHECK(launched.stats.graph_runs == 0);
    CHECK(graphed.stats.graph_captures >= 3);  // decode, the 3-token step, the two-sequence step
    CHECK(graphed.stats.graph_capture_failures == 0);
    CHECK(graphed.stats.graph_replays >= graphed.stats.graph_captures);
    replays += graphed.stats.graph_replays;
    REQUIRE(graphed.logits.size() == launched.logits.size());
    CHECK(std::memcmp(graphed.logits.data(), launched.logits.data(), launched.logits.size() * sizeof(float)) == 0);
  }
  MESSAGE("steps replayed from graphs: " << replays);
}

// Four 70-token prompts of an F16 model, each in the cells the one before left: their matmuls go
// to cuBLAS where it loads (gemm_cublas.cu; the emulator's own cublasGemmEx here). The first step
// makes the stream's handle and scratch, the second signs with them, the third is captured with
// its library calls and the fourth replays them: the bits of four launched steps, with a quarter
// fewer calls issued.
TEST_CASE("CUDA step graphs: large F16 steps replay their cuBLAS calls") {
  auto dev = create_device("cuda");
  if (!dev.ok()) {
    MESSAGE("no CUDA device (real or emulated) here");
    return;
  }
  const ArchDef* arch = find_arch("llama");
  REQUIRE(arch);
  SynthOptions so;
  so.weight_type = DType::F16;
  so.seed = 8;
  auto w = synth_model(*arch, arch->tiny.front(), so);
  REQUIRE_MESSAGE(w.ok(), w.status().to_string());
  const std::vector<uint8_t> bytes = w.value().to_bytes();
  GraphRun runs[2];
  for (const bool graphs : {false, true}) {
    ContextOptions co;
    co.n_ctx = 256;
    test::CpuModel m = cuda_model(bytes, graphs, co);
    GraphRun& r = runs[graphs];
    for (int s = 0; s < 4; ++s) {
      std::vector<int32_t> tokens;
      for (int i = 0; i < 70; ++i) tokens.push_back((s * 70 + i * 13 + 1) % 61);
      const Status st = m.ctx->decode({.tokens = tokens});
      REQUIRE_MESSAGE(st.ok(), st.to_string());
      auto l = m.ctx->logits(-1);
      REQUIRE(l.ok());
      r.logits.insert(r.logits.end(), l->begin(), l->end());
      REQUIRE(m.ctx->kv().seq_remove(0, 0, 70).ok());  // the next prompt takes the same cells
    }
    r.stats = m.ctx->executor().stats();
  }
  CHECK(runs[1].stats.graph_captures >= 1);
  CHECK(runs[1].stats.graph_capture_failures == 0);
  CHECK(runs[1].stats.graph_replays >= 1);
  CHECK(runs[1].stats.library_gemms * 4 == runs[0].stats.library_gemms * 3);
  if (dev.value()->info().device.find("[emulated]") != std::string::npos) CHECK(runs[0].stats.library_gemms > 0);
  REQUIRE(runs[1].logits.size() == runs[0].logits.size());
  CHECK(std::memcmp(runs[1].logits.data(), runs[0].logits.data(), runs[0].logits.size() * sizeof(float)) == 0);
}
