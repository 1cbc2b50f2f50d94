// The engine (continuous batching) through the C API: batched requests give the same tokens and
// bit-identical logits as alone (for every weight type of the test models), a shared prefix is computed once, cancellation and finished
// requests free their KV blocks, stop strings, preemption under a small cache, bad input.
#include <doctest/doctest.h>

#include <chrono>

#include <atomic>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/testdata.h"
#include "kestrel.h"

namespace {

struct Model {
  kestrel_model* m = nullptr;
  explicit Model(const char* file = "stories260K-f32.gguf") {
    const std::string path = kestrel::test::testdata_file(std::string("models/") + file);
    if (!path.empty()) REQUIRE(kestrel_model_load(path.c_str(), nullptr, &m) == KESTREL_OK);
  }
  ~Model() { kestrel_model_free(m); }
  std::vector<kestrel_token> tokens(const std::string& text) const {
    std::vector<kestrel_token> t(text.size() + 8);
    size_t n = 0;
    REQUIRE(kestrel_tokenize(m, text.data(), text.size(), true, false, t.data(), t.size(), &n) == KESTREL_OK);
    t.resize(n);
    return t;
  }
};

struct Engine {
  kestrel_engine* e = nullptr;
  Engine(const Model& m, uint32_t n_ctx, uint32_t n_parallel, uint32_t n_batch = 64) {
    kestrel_engine_options o;
    kestrel_engine_options_init(&o);
    o.n_ctx = n_ctx;
    o.n_parallel = n_parallel;
    o.n_batch = n_batch;
    o.n_threads = 1;  // tiny models: a thread pool only adds waits (and ctest runs binaries side by side)
    REQUIRE(kestrel_engine_new(m.m, &o, &e) == KESTREL_OK);
  }
  ~Engine() { kestrel_engine_free(e); }
  nlohmann::json stats() const {
    char buf[2048];
    size_t len = 0;
    REQUIRE(kestrel_engine_stats(e, buf, sizeof buf, &len) == KESTREL_OK);
    return nlohmann::json::parse(std::string(buf, len));
  }
};

// What one request produced.
struct Out {
  std::vector<kestrel_token> prompt;
  std::vector<kestrel_token> tokens;
  std::string text;
  std::vector<std::vector<float>> logits;
  kestrel_request_result result{sizeof(kestrel_request_result)};  // room for every field
  uint64_t id = 0;
  int stop_after = -1;  // on_token returns false after this many tokens
};

bool on_token(kestrel_token t, const char* piece, size_t len, void* user) {
  auto* o = static_cast<Out*>(user);
  if (t >= 0) o->tokens.push_back(t);
  o->text.append(piece, len);
  return o->stop_after < 0 || static_cast<int>(o->tokens.size()) < o->stop_after;
}
void on_logits(const float* l, int32_t n, void* user) { static_cast<Out*>(user)->logits.emplace_back(l, l + n); }

kestrel_request greedy(Out& o, int32_t max_tokens, const kestrel_sampler_options* so) {
  kestrel_request r;
  kestrel_request_init(&r);
  r.prompt = o.prompt.data();
  r.n_prompt = static_cast<int32_t>(o.prompt.size());
  r.max_tokens = max_tokens;
  r.sampling = so;
  r.on_token = on_token;
  r.on_logits = on_logits;
  r.user = &o;
  return r;
}

kestrel_sampler_options greedy_sampling() {
  kestrel_sampler_options so;
  kestrel_sampler_options_init(&so);
  so.temperature = 0;
  return so;
}

const char* kPrompts[] = {"Once upon a time", "The little dog", "Lily and Tom went to the park", "One day, a cat",
                          "There was a big tree", "The sun was hot", "Ben had a red ball", "Mom said"};

}  // namespace

// Batch invariance for every weight type the test models have: F32; Q4_0, Q8_0 and F16
// (stories260K); Q4_K, Q6_K (llama-gqa); Q5_K, Q8_0 and MoE experts (qwen3moe); MXFP4 experts and
// attention sinks (gpt-oss); Q5_0, MLA and a shared expert (deepseek2); sliding-window layers
// with their own rope, sandwich norms and GEGLU (gemma3); partial rotary, q/k/v biases and a
// skipped NextN block (glm4moe); Mamba-2 layers' recurrent states beside attention (nemotron_h),
// with relu^2 experts in a latent width (nemotron_h_moe).
// Alone, a request decodes
// one token per step (the fused kernels); together, its tokens share steps with other requests'
// prefill chunks (the tiled GEMM), and the logits must not change by a bit.
const char* kBatchModels[] = {"stories260K-f32.gguf",  "stories260K-q4_0.gguf",   "stories260K-q8_0.gguf",
                              "llama-gqa-q4_k_m.gguf", "qwen3moe-q4_k_m.gguf",    "gpt-oss-mxfp4_moe.gguf",
                              "deepseek2-q4_k_m.gguf", "gemma3-q8_0.gguf",        "glm4moe-q8_0.gguf",
                              "nemotron_h-q8_0.gguf",    "nemotron_h_moe-q8_0.gguf"};

TEST_CASE("engine: 16 concurrent greedy requests equal each run alone, logits bit for bit") {
  std::string file;
  for (const char* f : kBatchModels) SUBCASE(f) { file = f; }
  CAPTURE(file);
  Model m(file.c_str());
  if (!m.m) return;
  const kestrel_sampler_options so = greedy_sampling();
  std::vector<Out> alone(16), together(16);
  for (int i = 0; i < 16; ++i) {
    std::string p = kPrompts[i % 8];
    if (i >= 8) p += " and then";  // 16 different prompts, some sharing their start
    alone[i].prompt = together[i].prompt = m.tokens(p);
  }
  {
    Engine e(m, 1024, 1);
    for (auto& o : alone) {
      kestrel_request r = greedy(o, 24, &so);
      REQUIRE(kestrel_engine_generate(e.e, &r, &o.result) == KESTREL_OK);
    }
  }
  Engine e(m, 1024, 8, 48);  // 8 at a time, prompts chunked into 48-token steps with decodes
  for (auto& o : together) {
    kestrel_request r = greedy(o, 24, &so);
    REQUIRE(kestrel_submit(e.e, &r, &o.id) == KESTREL_OK);
  }
  for (auto& o : together) REQUIRE(kestrel_wait(e.e, o.id, &o.result) == KESTREL_OK);
  for (int i = 0; i < 16; ++i) {
    CAPTURE(i);
    CHECK(together[i].result.finish == alone[i].result.finish);
    CHECK(together[i].tokens == alone[i].tokens);
    CHECK(together[i].text == alone[i].text);
    REQUIRE(together[i].logits.size() == alone[i].logits.size());
    for (size_t k = 0; k < alone[i].logits.size(); ++k)
      CHECK(std::memcmp(together[i].logits[k].data(), alone[i].logits[k].data(), alone[i].logits[k].size() * 4) == 0);
  }
  const auto st = e.stats();
  CHECK(st["requests_finished"] == 16);
  CHECK(st["kv"]["blocks_used"] == 0);  // every block free or cached
}

TEST_CASE("engine: a common 200-token prefix is computed once") {
  Model m;
  if (!m.m) return;
  const int32_t V = kestrel_model_n_vocab(m.m);
  Out a, b;
  for (int32_t i = 0; i < 200; ++i) a.prompt.push_back(1 + (i * 53) % (V - 1));
  b.prompt = a.prompt;
  a.prompt.push_back(7);
  b.prompt.push_back(9);
  b.prompt.push_back(11);
  const kestrel_sampler_options so = greedy_sampling();
  Engine e(m, 1024, 2);
  kestrel_request ra = greedy(a, 4, &so), rb = greedy(b, 4, &so);
  REQUIRE(kestrel_engine_generate(e.e, &ra, &a.result) == KESTREL_OK);
  REQUIRE(kestrel_engine_generate(e.e, &rb, &b.result) == KESTREL_OK);
  CHECK(a.result.n_cached == 0);
  CHECK(b.result.n_cached == 192);  // 12 blocks of 16: only the last 10 tokens were prefilled
  const auto st = e.stats();
  CHECK(st["tokens_cached"] == 192);
  CHECK(st["prefix_cache_hit_rate"].get<double>() > 0.4);
}

// kestrel_request_result.queue_s: with one sequence slot, the second request waits in the queue
// until the first has finished, the first does not wait behind anything.
TEST_CASE("engine: queue_s is the time a request waited for a place in a batch") {
  Model m;
  if (!m.m) return;
  const kestrel_sampler_options so = greedy_sampling();
  Engine e(m, 1024, 1);
  Out a, b;
  a.prompt = m.tokens("Once upon a time");
  b.prompt = m.tokens("The little dog");
  kestrel_request ra = greedy(a, 96, &so), rb = greedy(b, 4, &so);
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(kestrel_submit(e.e, &ra, &a.id) == KESTREL_OK);
  REQUIRE(kestrel_submit(e.e, &rb, &b.id) == KESTREL_OK);
  REQUIRE(kestrel_wait(e.e, a.id, &a.result) == KESTREL_OK);
  const double a_done = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(kestrel_wait(e.e, b.id, &b.result) == KESTREL_OK);
  CHECK(a.result.n_generated == 96);
  CHECK(a.result.queue_s >= 0);
  CHECK(b.result.queue_s > a.result.queue_s);
  // b was admitted after a's 96 tokens: its wait is most of a's whole run (which a_done bounds).
  CHECK(b.result.queue_s <= a_done + 0.5);
  CHECK(b.result.queue_s > 0.5 * (a_done - a.result.queue_s) - 0.01);
}

// A hybrid model's Mamba state summarises a whole prefix and is not kept per block: no prefix is
// attached (docs/API.md), the second request prefills all of its prompt, and its tokens are
// those of the same prompt run first.
TEST_CASE("engine: a hybrid model shares no prefix, and a repeated prompt gives the same tokens") {
  Model m("nemotron_h-q8_0.gguf");
  if (!m.m) return;
  const int32_t V = kestrel_model_n_vocab(m.m);
  Out a, b;
  for (int32_t i = 0; i < 100; ++i) a.prompt.push_back(1 + (i * 53) % (V - 1));
  b.prompt = a.prompt;
  const kestrel_sampler_options so = greedy_sampling();
  Engine e(m, 1024, 2);
  kestrel_request ra = greedy(a, 8, &so), rb = greedy(b, 8, &so);
  REQUIRE(kestrel_engine_generate(e.e, &ra, &a.result) == KESTREL_OK);
  REQUIRE(kestrel_engine_generate(e.e, &rb, &b.result) == KESTREL_OK);
  CHECK(a.result.n_cached == 0);
  CHECK(b.result.n_cached == 0);
  CHECK(b.tokens == a.tokens);
  CHECK(a.tokens.size() == 8);
}

TEST_CASE("engine: cancellation, stop strings, max tokens, bad input") {
  Model m;
  if (!m.m) return;
  const kestrel_sampler_options so = greedy_sampling();
  Engine e(m, 512, 4);
  // A callback returning false cancels; kestrel_cancel from another thread too.
  Out c1, c2, ref;
  c1.prompt = c2.prompt = ref.prompt = m.tokens("Once upon a time");
  c1.stop_after = 3;
  kestrel_request r1 = greedy(c1, 100, &so), r2 = greedy(c2, 100000, &so), rr = greedy(ref, 40, &so);
  REQUIRE(kestrel_engine_generate(e.e, &r1, &c1.result) == KESTREL_OK);
  CHECK(c1.result.finish == KESTREL_FINISH_CANCELLED);
  CHECK(c1.tokens.size() == 3);
  r2.stop_at_eog = false;
  REQUIRE(kestrel_submit(e.e, &r2, &c2.id) == KESTREL_OK);
  std::thread([&] { while (kestrel_cancel(e.e, c2.id) != KESTREL_OK) std::this_thread::yield(); }).join();
  REQUIRE(kestrel_wait(e.e, c2.id, &c2.result) == KESTREL_OK);
  CHECK(c2.result.finish == KESTREL_FINISH_CANCELLED);
  CHECK(kestrel_cancel(e.e, c2.id) == KESTREL_ERR_OUT_OF_RANGE);  // finished and forgotten
  CHECK(e.stats()["kv"]["blocks_used"] == 0);

  // max_tokens, then a stop string taken from that text.
  REQUIRE(kestrel_engine_generate(e.e, &rr, &ref.result) == KESTREL_OK);
  CHECK(ref.result.n_generated <= 40);
  REQUIRE(ref.text.size() > 20);
  const std::string stop = ref.text.substr(ref.text.size() / 2, 3);
  Out s;
  s.prompt = ref.prompt;
  kestrel_request rs = greedy(s, 40, &so);
  const char* stops[] = {"no such text", stop.c_str()};
  rs.stop_strings = stops;
  rs.n_stop_strings = 2;
  REQUIRE(kestrel_engine_generate(e.e, &rs, &s.result) == KESTREL_OK);
  CHECK(s.result.finish == KESTREL_FINISH_STOP);
  CHECK(s.text == ref.text.substr(0, ref.text.find(stop)));
  CHECK(s.result.stop_string == 1);  // which one matched
  CHECK(ref.result.stop_string == -1);

  // Bad input fails at submit, with a message.
  uint64_t id = 0;
  Out bad;
  kestrel_request rb = greedy(bad, 4, &so);
  CHECK(kestrel_submit(e.e, &rb, &id) == KESTREL_ERR_INVALID_ARGUMENT);  // no prompt
  bad.prompt = {1, 2, kestrel_model_n_vocab(m.m)};
  rb = greedy(bad, 4, &so);
  CHECK(kestrel_submit(e.e, &rb, &id) == KESTREL_ERR_OUT_OF_RANGE);
  CHECK(std::string(kestrel_last_error()).find("outside") != std::string::npos);
  bad.prompt.assign(600, 5);
  rb = greedy(bad, 4, &so);
  CHECK(kestrel_submit(e.e, &rb, &id) == KESTREL_ERR_CONTEXT_FULL);
  bad.prompt = {1};
  rb = greedy(bad, 0, &so);
  CHECK(kestrel_submit(e.e, &rb, &id) == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(kestrel_cancel(e.e, 987654) == KESTREL_ERR_OUT_OF_RANGE);
  CHECK(kestrel_wait(e.e, 987654, nullptr) == KESTREL_ERR_OUT_OF_RANGE);
}

TEST_CASE("engine: a cache too small for all requests preempts and recomputes, same output") {
  std::string file;
  for (const char* f : {"stories260K-f32.gguf", "stories260K-q4_0.gguf"}) SUBCASE(f) { file = f; }
  CAPTURE(file);
  Model m(file.c_str());
  if (!m.m) return;
  const kestrel_sampler_options so = greedy_sampling();
  std::vector<Out> alone(6), small(6);
  for (int i = 0; i < 6; ++i) alone[i].prompt = small[i].prompt = m.tokens(std::string(kPrompts[i]) + " in the garden");
  {
    Engine e(m, 1024, 1);
    for (auto& o : alone) {
      kestrel_request r = greedy(o, 40, &so);
      r.stop_at_eog = false;
      REQUIRE(kestrel_engine_generate(e.e, &r, &o.result) == KESTREL_OK);
    }
  }
  Engine e(m, 128, 6, 32);  // 6 requests x ~50 tokens do not fit in 128 cells at once
  for (auto& o : small) {
    kestrel_request r = greedy(o, 40, &so);
    r.stop_at_eog = false;
    REQUIRE(kestrel_submit(e.e, &r, &o.id) == KESTREL_OK);
  }
  for (auto& o : small) REQUIRE(kestrel_wait(e.e, o.id, &o.result) == KESTREL_OK);
  for (int i = 0; i < 6; ++i) {
    CAPTURE(i);
    CHECK(small[i].result.finish == KESTREL_FINISH_LENGTH);
    CHECK(small[i].tokens == alone[i].tokens);
  }
  const auto st = e.stats();
  MESSAGE("preempted " << st["requests_preempted"] << " times");
  CHECK(st["requests_preempted"].get<int>() > 0);
  CHECK(st["kv"]["blocks_used"] == 0);
}
