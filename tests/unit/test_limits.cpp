// Limits checked before work: GGUF metadata that sizes the model (vocab_size, context_length, the
// token list) refused at load naming the key and value; a context whose KV cache cannot fit
// refused before anything is allocated; the caps themselves; and a thread pool whose thread k
// cannot start, which stops the ones it started and reports the error instead of hanging.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include "common/sanitized.h"
#include "core/limits.h"
#include "core/thread_pool.h"
#include "engine/context.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "model/model.h"
#include "model/synth.h"

using namespace kestrel;
using gguf::Value;

namespace {

// The tiny llama of the synthetic-model test (64 tokens), built with `kv` over its metadata.
gguf::Writer tiny_llama(const std::vector<std::pair<std::string, Value>>& kv = {}, int32_t n_vocab = 64) {
  const ArchDef* arch = find_arch("llama");
  REQUIRE(arch);
  TinyConfig cfg = arch->tiny.at(0);
  for (const auto& [k, v] : kv) cfg.kv.emplace_back(k, v);
  SynthOptions o;
  o.n_vocab = n_vocab;
  auto w = synth_model(*arch, cfg, o);
  REQUIRE_MESSAGE(w.ok(), w.status().to_string());
  return std::move(w.value());
}

Expected<std::unique_ptr<Model>> load(const gguf::Writer& w) {
  auto f = gguf::File::from_bytes(w.to_bytes(), "limits.gguf");
  if (!f.ok()) return f.status();
  ModelLoadOptions lo;
  lo.backend = "cpu";
  return Model::from_file(std::move(f.value()), lo);
}

// The tiny llama with one metadata key set after its tensors were made.
gguf::Writer with_key(const std::string& key, Value v) {
  gguf::Writer w = tiny_llama();
  w.set(key, std::move(v));
  return w;
}

// Loading must fail with `code` and a message holding every needle.
void check_refused(const gguf::Writer& w, kestrel_status code, const std::vector<std::string>& needles) {
  auto m = load(w);
  REQUIRE_FALSE(m.ok());
  CHECK(m.status().code() == code);
  for (const std::string& n : needles)
    CHECK_MESSAGE(m.status().message().find(n) != std::string::npos, "'" << n << "' not in: " << m.status().message());
}

// Runs f in a forked child with a deadline; the child's exit code (or "signal N").
std::string in_child(int seconds, const std::function<int()>& f) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) signal(sig, SIG_DFL);  // not doctest's handlers
    alarm(static_cast<unsigned>(seconds));
    _exit(f());
  }
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0) {
  }
  if (WIFSIGNALED(ws)) return "signal " + std::to_string(WTERMSIG(ws));
  return "exit " + std::to_string(WEXITSTATUS(ws));
}

// Virtual memory of this process now, from /proc/self/statm.
uint64_t vm_bytes() {
  std::ifstream in("/proc/self/statm");
  uint64_t pages = 0;
  in >> pages;
  return pages * static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
}

}  // namespace

TEST_CASE("limits: the caps and saturating size arithmetic") {
  CHECK(limits::check_threads("n_threads", 0).ok());
  CHECK(limits::check_threads("n_threads", limits::kMaxThreads).ok());
  const Status t = limits::check_threads("kestrel_x: n_threads", 100000);
  CHECK(t.code() == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(t.message().find("kestrel_x: n_threads = 100000") != std::string::npos);
  CHECK(limits::check_threads("n_threads", -1).code() == KESTREL_ERR_INVALID_ARGUMENT);

  CHECK(limits::check_context("engine", {0, 0, 1}).ok());
  CHECK(limits::check_context("engine", {limits::kMaxCtx, limits::kMaxBatch, limits::kMaxSeq}).ok());
  const Status c = limits::check_context("engine", {limits::kMaxCtx + 1, 1, 1});
  CHECK(c.message().find("engine: n_ctx = 16777217") != std::string::npos);
  CHECK(limits::check_context("engine", {1, limits::kMaxBatch + 1, 1}).message().find("n_batch") != std::string::npos);
  CHECK(limits::check_context("engine", {1, 1, 65, "n_parallel"}).message().find("n_parallel = 65") != std::string::npos);
  CHECK(limits::check_context("engine", {1, 1, 0}).code() == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(limits::check_context("engine", {-1, 1, 1}).code() == KESTREL_ERR_INVALID_ARGUMENT);

  CHECK(limits::mul_sat(uint64_t{1} << 40, uint64_t{1} << 30) == UINT64_MAX);
  CHECK(limits::mul_sat(3, 5) == 15);
  CHECK(limits::add_sat(UINT64_MAX - 1, 2) == UINT64_MAX);
  CHECK(limits::physical_memory() > (uint64_t{1} << 20));
}

TEST_CASE("GGUF metadata: vocab_size out of range is refused at load, naming the key and value") {
  CHECK(load(tiny_llama()).ok());
  check_refused(with_key("llama.vocab_size", Value::make_i32(-5)), KESTREL_ERR_FORMAT, {"llama.vocab_size", "-5"});
  check_refused(with_key("llama.vocab_size", Value::make_u64(uint64_t{1} << 40)), KESTREL_ERR_FORMAT,
                {"llama.vocab_size", "1099511627776"});
  check_refused(with_key("llama.vocab_size", Value::make_u32(0)), KESTREL_ERR_FORMAT, {"llama.vocab_size", "0"});
  check_refused(with_key("llama.vocab_size", Value::make_string("64")), KESTREL_ERR_FORMAT,
                {"llama.vocab_size", "not an integer"});
  CHECK(load(with_key("llama.vocab_size", Value::make_u32(64))).ok());
}

TEST_CASE("GGUF metadata: a token list shorter than the model's vocabulary is refused at load") {
  gguf::Writer w = with_key("llama.vocab_size", Value::make_u32(64));
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  for (int i = 3; i < 40; ++i) {
    std::string piece = "t";  // (appending: GCC 12 warns falsely on "t" + std::to_string)
    piece += std::to_string(i);
    tokens.push_back(piece);
  }
  w.set("tokenizer.ggml.tokens", Value::make_string_array(tokens));
  w.set("tokenizer.ggml.scores", Value::make_f32_array(std::vector<float>(tokens.size(), 0.0f)));
  std::vector<int32_t> types(tokens.size(), 1);
  types[0] = 2, types[1] = types[2] = 3;
  w.set("tokenizer.ggml.token_type", Value::make_i32_array(types));
  check_refused(w, KESTREL_ERR_FORMAT, {"tokenizer.ggml.tokens", "40", "64"});
}

TEST_CASE("GGUF metadata: context_length above the cap is refused at load") {
  check_refused(with_key("llama.context_length", Value::make_u32(1u << 30)), KESTREL_ERR_FORMAT,
                {"llama.context_length", "1073741824"});
  check_refused(with_key("llama.context_length", Value::make_i32(-1)), KESTREL_ERR_FORMAT, {"llama.context_length"});
  CHECK(load(with_key("llama.context_length", Value::make_u32(1u << 24))).ok());
}

TEST_CASE("context: a KV cache larger than this machine's memory is refused before allocating") {
  // 2 layers x (K + V) x 65536 values x 2 bytes = 512 KiB per token; the model's 2^24-token
  // context (the default n_ctx) would need 8 TiB.
  const gguf::Writer w = tiny_llama({{"embedding_length", Value::make_u32(8)},
                                     {"feed_forward_length", Value::make_u32(8)},
                                     {"attention.head_count", Value::make_u32(1)},
                                     {"attention.head_count_kv", Value::make_u32(1)},
                                     {"attention.key_length", Value::make_u32(65536)},
                                     {"attention.value_length", Value::make_u32(65536)},
                                     {"rope.dimension_count", Value::make_u32(8)},
                                     {"context_length", Value::make_u32(1u << 24)}});
  auto m = load(w);
  REQUIRE_MESSAGE(m.ok(), m.status().to_string());
  if (limits::physical_memory() >= (uint64_t{8} << 40)) return;  // a machine with 8 TiB: nothing to refuse
  // In a child: how much memory the refusal touched (the old code filled per-cell tables first).
  const std::string r = in_child(60, [&] {
    rusage before{}, after{};
    getrusage(RUSAGE_SELF, &before);
    ContextOptions co;
    co.n_threads = 1;
    auto c = Context::create(*m.value(), co);
    getrusage(RUSAGE_SELF, &after);
    if (c.ok()) return 10;
    const std::string msg = c.status().message();
    if (c.status().code() != KESTREL_ERR_OUT_OF_MEMORY) return 11;
    if (msg.find("llama.context_length") == std::string::npos || msg.find("16777216") == std::string::npos ||
        msg.find("524288 per token") == std::string::npos)
      return 12;
    return after.ru_maxrss - before.ru_maxrss > 32 * 1024 ? 13 : 0;  // KiB
  });
  CHECK_MESSAGE(r == "exit 0", "child: " << r << " (10 created, 11 wrong code, 12 message, 13 touched > 32 MiB)");
}

TEST_CASE("thread pool: when thread k cannot start, the started ones are stopped and the error reported") {
  // Sanitizer runtimes map their own per-thread memory and die when that fails: not under them.
  if (test::kSanitized) return;
  const std::string r = in_child(20, [] {
    // Room for a few 8 MiB thread stacks, not for 64.
    rlimit lim{};
    lim.rlim_cur = lim.rlim_max = vm_bytes() + (48u << 20);
    if (setrlimit(RLIMIT_AS, &lim) != 0) return 20;
    try {
      ThreadPool pool(64);
      return 21;  // every thread started: the limit did not bite
    } catch (const std::system_error& e) {
      return std::string(e.what()).find("thread") != std::string::npos ? 0 : 22;
    }
  });
  CHECK_MESSAGE(r == "exit 0", "child: " << r << " (signal 14: hung; 6: aborted; 21: no failure; 22: message)");
}

TEST_CASE("thread pool: many threads start, run and stop") {
  ThreadPool pool(8);
  std::vector<int> hit(8, 0);
  pool.run([&](int ith, int nth) { hit[static_cast<size_t>(ith)] = nth; });
  for (int h : hit) CHECK(h == 8);
}
