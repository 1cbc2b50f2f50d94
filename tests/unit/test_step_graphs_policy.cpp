// The CUDA step graphs' policy (backends/cuda/step_graphs.h) on the emulated runtime: a signature
// is launched on its first sight, captured on its second and replayed after; a capture that fails
// (the scratch would have to grow) leaves that signature launching, with the run still done; short
// runs are never captured; more signatures than are kept, taken in turn, never capture.
#ifdef KESTREL_TEST_EMU_RUNTIME  // the emulated build: the library's CUDA objects are host code
#define KESTREL_CUDA_EMULATE 1
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "backends/cuda/step_graphs.h"

using namespace kestrel;

namespace {

// A graph of `n` ADD nodes over one tensor (enough for the signature; run_nodes does the work).
struct Nodes {
  Graph g;
  explicit Nodes(size_t n, int64_t width) {
    Tensor* x = g.intermediate(DType::F32, width);
    for (size_t i = 0; i < n; ++i) {
      Tensor* y = g.intermediate(DType::F32, width);
      g.add(Op::ADD, y, x, x);
      x = y;
    }
  }
};

}  // namespace

TEST_CASE("step graphs: launch, capture on the second sight, replay; failures and short runs launch") {
  cuda::Stream s;
  REQUIRE(cudaStreamCreate(&s.stream) == cudaSuccess);
  int value = 0, launches = 0;
  // The "kernels": one recorded fill of `value` with the run's number (a capture records it; a
  // replay sets it again).
  auto fill = [&](int v) {
    return [&, v] {
      ++launches;
      return cudaMemsetAsync(&value, v, 1, s.stream) == cudaSuccess ? Status::Ok() : Error(KESTREL_ERR_BACKEND, "memset");
    };
  };
  Nodes a(12, 16), b(12, 32), tiny(3, 16);
  cuda::StepGraphs graphs(true);

  REQUIRE(graphs.run(a.g.nodes(), 0, 12, s, fill(1)).ok());  // first sight: launched
  CHECK((launches == 1 && value == 1));
  REQUIRE(graphs.run(a.g.nodes(), 0, 12, s, fill(2)).ok());  // second: captured, then replayed
  CHECK((launches == 2 && value == 2));
  value = 0;
  REQUIRE(graphs.run(a.g.nodes(), 0, 12, s, fill(3)).ok());  // replay: the captured fill (2), no launch
  CHECK((launches == 2 && value == 2));
  CHECK(graphs.stats().graph_captures == 1);
  CHECK(graphs.stats().graph_replays == 2);

  // A capture that would grow the scratch fails; the run launches instead, and so do later ones.
  auto grows_in_capture = [&] {
    ++launches;
    if (!s.capturing) return Status::Ok();
    auto mem = s.scratch(s.scratch_size() + 1);  // refused while capturing
    return mem.ok() ? Status::Ok() : mem.status();
  };
  const int before = launches;
  for (int i = 0; i < 3; ++i) REQUIRE(graphs.run(b.g.nodes(), 0, 12, s, grows_in_capture).ok());
  CHECK(graphs.stats().graph_capture_failures == 1);
  CHECK(launches == before + 4);  // first sight, the failed capture and its real launch, then launched
  CHECK(!s.capturing);

  // Runs under kMinNodes nodes never enter the policy.
  const int64_t runs = graphs.stats().graph_runs;
  for (int i = 0; i < 3; ++i) REQUIRE(graphs.run(tiny.g.nodes(), 0, 3, s, fill(4)).ok());
  CHECK(graphs.stats().graph_runs == runs);

  // More signatures than are kept, in turn: each is evicted before its second sight.
  std::vector<std::unique_ptr<Nodes>> many;
  for (size_t i = 0; i <= cuda::StepGraphs::kMaxGraphs; ++i)
    many.push_back(std::make_unique<Nodes>(12, 48 + 16 * static_cast<int64_t>(i)));
  const int64_t captures = graphs.stats().graph_captures;
  for (int round = 0; round < 3; ++round)
    for (auto& m : many) REQUIRE(graphs.run(m->g.nodes(), 0, 12, s, fill(5)).ok());
  CHECK(graphs.stats().graph_captures == captures);
  CHECK(cudaStreamDestroy(s.stream) == cudaSuccess);
  s.stream = nullptr;
}
#endif
