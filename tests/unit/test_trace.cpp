// The trace (core/trace.h): nothing recorded while off; valid Trace Event Format JSON with spans
// that nest on every thread; the engine's steps, scheduler decisions and ops in it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "common/testdata.h"
#include "core/trace.h"
#include "engine/context.h"
#include "engine/scheduler.h"
#include "model/model.h"

using namespace kestrel;
using nlohmann::json;

namespace {

json written(const std::string& path) {
  REQUIRE(trace::write(path).ok());
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::remove(path.c_str());
  return json::parse(ss.str());  // throws (fails the test) on invalid JSON
}

// Every event well-formed, and on each thread every complete span inside the spans it starts in.
void check_events(const json& t) {
  REQUIRE(t.contains("traceEvents"));
  REQUIRE(t["traceEvents"].is_array());
  std::map<int, std::vector<std::pair<double, double>>> spans;  // tid -> (start, end)
  for (const json& e : t["traceEvents"]) {
    REQUIRE(e.contains("ph"));
    REQUIRE(e.contains("name"));
    CHECK(e["pid"] == 1);
    CHECK(e["tid"].is_number_integer());
    CHECK(e["ts"].is_number());
    if (e["ph"] == "X") {
      CHECK(e["dur"].get<double>() >= 0);
      spans[e["tid"].get<int>()].emplace_back(e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>());
    }
    if (e.contains("args")) CHECK(e["args"].is_object());
  }
  const double eps = 0.002;  // the format's 3 decimals of a microsecond
  for (auto& [tid, v] : spans) {
    std::sort(v.begin(), v.end(), [](auto a, auto b) { return a.first != b.first ? a.first < b.first : a.second > b.second; });
    std::vector<double> open;  // ends of the spans enclosing the current one
    for (auto [b, e] : v) {
      while (!open.empty() && open.back() <= b + eps) open.pop_back();
      if (!open.empty()) CHECK_MESSAGE(e <= open.back() + eps, "thread " << tid << ": a span overlaps its parent's end");
      open.push_back(e);
    }
  }
}

size_t count(const json& t, const std::string& name) {
  size_t n = 0;
  for (const json& e : t["traceEvents"]) n += e["name"] == name;
  return n;
}

}  // namespace

TEST_CASE("trace: off records nothing; on, nested spans on several threads") {
  { trace::Span s("test", "before start"); }
  trace::start();
  {
    trace::Span outer("test", "outer", R"({"k":1})");
    std::vector<std::thread> th;
    for (int t = 0; t < 3; ++t)
      th.emplace_back([t] {
        trace::thread_name("worker " + std::to_string(t));
        trace::Span a("test", "a \"quoted\" \\ name\n");
        for (int i = 0; i < 10; ++i) trace::Span b("test", "inner");
        trace::instant("test", "mark");
      });
    for (auto& x : th) x.join();
  }
  const json t = written("/tmp/kestrel_trace_unit.json");
  check_events(t);
  CHECK(count(t, "before start") == 0);
  CHECK(count(t, "outer") == 1);
  CHECK(count(t, "inner") == 30);
  CHECK(count(t, "mark") == 3);
  CHECK(count(t, "thread_name") == 3);
  CHECK(count(t, "a \"quoted\" \\ name\n") == 3);
  // Stopped: nothing more is recorded, and the next trace starts empty.
  { trace::Span s("test", "after"); }
  trace::start();
  CHECK(written("/tmp/kestrel_trace_unit.json")["traceEvents"].empty());
}

TEST_CASE("trace: the engine's steps, scheduler decisions and ops on each thread") {
  const std::string path = test::testdata_file("models/stories260K-q8_0.gguf");
  if (path.empty()) return;
  ModelLoadOptions lo;
  lo.backend = "cpu";
  lo.n_threads = 2;
  auto model = Model::load(path, lo);
  REQUIRE(model.ok());
  SchedulerOptions so;
  so.n_ctx = 128;
  so.n_parallel = 2;
  so.n_threads = 2;
  auto sched = Scheduler::create(*model.value(), so);
  REQUIRE(sched.ok());
  trace::start();
  std::vector<uint64_t> ids;
  for (int i = 0; i < 2; ++i) {
    RequestSpec spec;
    spec.prompt = {1, 400, 70, 263, 419, static_cast<int32_t>(29 + i)};
    spec.max_tokens = 4;
    spec.stop_at_eog = false;  // four tokens each, whatever is sampled
    auto id = sched.value()->submit(std::move(spec));
    REQUIRE(id.ok());
    ids.push_back(id.value());
  }
  for (uint64_t id : ids) REQUIRE(sched.value()->wait(id).ok());
  const json t = written("/tmp/kestrel_trace_engine.json");
  check_events(t);
  CHECK(count(t, "admit") == 2);
  CHECK(count(t, "finish") == 2);
  // Four steps (the prompts, then three tokens), but wait() can return inside the last one, whose
  // span then ends after write() stopped the trace (and is dropped, as spans still open are).
  CHECK(count(t, "step") >= 3);
  CHECK(count(t, "decode") >= 3);
  std::map<int, int> op_threads;
  bool step_args = false;
  for (const json& e : t["traceEvents"]) {
    if (e["name"] == "step" && e.contains("args")) step_args |= e["args"].contains("tokens") && e["args"].contains("decoding");
    if (e["cat"] == "op") ++op_threads[e["tid"].get<int>()];
  }
  CHECK(step_args);
  CHECK(op_threads.size() >= 2);  // the engine's thread and the pool's worker
}

// On the CUDA backend (a GPU, or the emulated build): the kernels of each decode on a track of
// their own ("cuda stream"), named as the CPU names its ops, inside the host's decode span.
TEST_CASE("trace: CUDA kernels as spans on the stream's track") {
  if (!create_device("cuda").ok()) {
    MESSAGE("no CUDA device (real or emulated) here");
    return;
  }
  const std::string path = test::testdata_file("models/stories260K-q8_0.gguf");
  if (path.empty()) return;
  ModelLoadOptions lo;
  lo.backend = "cuda";
  auto model = Model::load(path, lo);
  REQUIRE(model.ok());
  ContextOptions co;
  co.n_ctx = 64;
  auto ctx = Context::create(*model.value(), co);
  REQUIRE(ctx.ok());
  const std::vector<int32_t> prompt = {1, 400, 70, 263};
  REQUIRE(ctx.value()->decode({.tokens = prompt}).ok());  // untraced: a step graph may be captured
  trace::start();
  const int32_t next = 29;
  for (int i = 0; i < 2; ++i) REQUIRE(ctx.value()->decode({.tokens = {&next, 1}}).ok());
  const json t = written("/tmp/kestrel_trace_cuda.json");
  check_events(t);
  int stream_tid = -1;
  for (const json& e : t["traceEvents"])
    if (e["name"] == "thread_name" && e["args"]["name"] == "cuda stream") stream_tid = e["tid"].get<int>();
  REQUIRE(stream_tid > 0);
  std::vector<std::pair<double, double>> decodes;  // the host's decode spans
  std::map<std::string, int> kernels;
  for (const json& e : t["traceEvents"])
    if (e["ph"] == "X" && e["name"] == "decode") decodes.emplace_back(e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>());
  REQUIRE(decodes.size() == 2);
  for (const json& e : t["traceEvents"]) {
    if (e["ph"] != "X" || e["tid"] != stream_tid) continue;
    CHECK(e["cat"] == "kernel");
    ++kernels[e["name"].get<std::string>()];
    const double b = e["ts"].get<double>(), end = b + e["dur"].get<double>();
    const bool inside = std::any_of(decodes.begin(), decodes.end(),
                                    [&](auto d) { return b >= d.first - 0.002 && end <= d.second + 0.002; });
    CHECK_MESSAGE(inside, e["name"].get<std::string>() << " outside every decode span");
  }
  CHECK(kernels["matmul q8_0"] >= 2 * 5 * 4);  // q, k, v, o and the FFN's products, 5 layers, 2 steps
  CHECK(kernels["attention"] == 2 * 5);
  CHECK(!kernels.empty());
}
