// Speculative decoding under greedy sampling, through the C API: on every reference prompt of
// stories260K and llama-gqa, with a draft model (the family's other quantized files) and with
// n-gram lookup, the output is token for token the output without speculation, one request
// (kestrel_generate) and eight at once (the engine). The cache holds exactly the prompt and the
// generated tokens afterwards (a continuation's logits equal a fresh context's bit for bit).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/testdata.h"
#include "kestrel.h"

namespace {

using nlohmann::json;

struct ModelHandle {
  kestrel_model* m = nullptr;
  explicit ModelHandle(const std::string& file) {
    const std::string path = kestrel::test::testdata_file("models/" + file);
    if (!path.empty()) REQUIRE_MESSAGE(kestrel_model_load(path.c_str(), nullptr, &m) == KESTREL_OK, file);
  }
  ~ModelHandle() { kestrel_model_free(m); }
};

struct ContextHandle {
  kestrel_context* c = nullptr;
  ContextHandle(const kestrel_model* m, uint32_t n_ctx) {
    kestrel_context_options co;
    kestrel_context_options_init(&co);
    co.n_ctx = n_ctx;
    co.n_threads = 1;  // tiny models: a thread pool only adds waits (and ctest runs binaries side by side)
    REQUIRE(kestrel_context_new(m, &co, &c) == KESTREL_OK);
  }
  ~ContextHandle() { kestrel_context_free(c); }
};

bool collect(kestrel_token t, const char*, size_t, void* user) {
  if (t >= 0) static_cast<std::vector<kestrel_token>*>(user)->push_back(t);
  return true;
}

kestrel_sampler_options greedy() {
  kestrel_sampler_options so;
  kestrel_sampler_options_init(&so);
  so.temperature = 0;
  return so;
}

struct Run {
  std::vector<kestrel_token> tokens;
  kestrel_spec_stats stats{};
  int32_t n = 0;
};

// kestrel_generate with the given speculation (NONE: draft_ctx unused).
Run generate(kestrel_context* ctx, const std::string& prompt, int32_t max_tokens, kestrel_spec_mode mode,
             kestrel_context* draft_ctx) {
  const kestrel_sampler_options so = greedy();
  kestrel_spec_options spec;
  kestrel_spec_options_init(&spec);
  spec.mode = mode;
  Run r;
  r.stats.struct_size = sizeof r.stats;
  kestrel_generate_options go;
  kestrel_generate_options_init(&go);
  go.max_tokens = max_tokens;
  go.stop_at_eog = false;
  go.sampling = &so;
  go.on_token = collect;
  go.user = &r.tokens;
  go.speculative = &spec;
  go.draft = draft_ctx;
  go.spec_stats = &r.stats;
  REQUIRE_MESSAGE(kestrel_generate(ctx, prompt.c_str(), &go, &r.n) == KESTREL_OK, kestrel_last_error());
  return r;
}

struct RefCase {
  std::string target, prompt_text;
  std::vector<kestrel_token> prompt_tokens;
  int32_t n_gen = 0;
};

// Every reference file of the families: its model, prompt and length.
std::vector<RefCase> reference_cases(const std::string& family) {
  std::vector<RefCase> out;
  for (const char* quant : {"f32", "f16", "q8_0", "q4_0", "q4_k_m"})
    for (const char* which : {"short", "long", "once"}) {
      const std::string rel = "reference/" + family + "-" + quant + "." + which + ".json";
      const std::string root = kestrel::test::testdata_root() + "/" + rel;
      const std::string text = kestrel::test::read_text_file(root);
      if (text.empty()) continue;  // no such case in testdata
      const json j = json::parse(text);
      out.push_back({j["model_file"].get<std::string>(), j["prompt_text"].get<std::string>(),
                     j["prompt_tokens"].get<std::vector<kestrel_token>>(), std::max(64, j["n_gen"].get<int32_t>())});
    }
  return out;
}

// The family's drafts: its quantized files.
std::vector<std::string> drafts_of(const std::string& family) {
  if (family == "stories260K") return {"stories260K-q8_0.gguf", "stories260K-q4_0.gguf"};
  if (family == "nemotron_h") return {"nemotron_h-q8_0.gguf"};  // hybrid: rollback through checkpoints
  return {"llama-gqa-q8_0.gguf", "llama-gqa-q4_k_m.gguf"};
}

}  // namespace

TEST_CASE("speculative, greedy: kestrel_generate gives the same tokens with a draft model and with n-gram") {
  for (const std::string family : {"stories260K", "llama-gqa", "nemotron_h"}) {
    const std::vector<RefCase> cases = reference_cases(family);
    REQUIRE_MESSAGE(!cases.empty(), "no reference files for " << family);
    for (const RefCase& rc : cases) {
      CAPTURE(rc.target);
      CAPTURE(rc.prompt_text.substr(0, 40));
      ModelHandle target(rc.target);
      if (!target.m) continue;
      ContextHandle ctx(target.m, 512);
      const Run plain = generate(ctx.c, rc.prompt_text, rc.n_gen, KESTREL_SPEC_NONE, nullptr);
      REQUIRE(plain.n == rc.n_gen);
      const Run ngram = generate(ctx.c, rc.prompt_text, rc.n_gen, KESTREL_SPEC_NGRAM, nullptr);
      CHECK(ngram.tokens == plain.tokens);
      CHECK(ngram.stats.n_steps > 0);
      for (const std::string& d : drafts_of(family)) {
        CAPTURE(d);
        ModelHandle draft(d);
        if (!draft.m) continue;
        ContextHandle dctx(draft.m, 512);
        const Run spec = generate(ctx.c, rc.prompt_text, rc.n_gen, KESTREL_SPEC_DRAFT, dctx.c);
        CHECK(spec.tokens == plain.tokens);
        CHECK(spec.stats.n_drafted > 0);
        CHECK(spec.stats.n_accepted <= spec.stats.n_drafted);
        MESSAGE(rc.target << " <- " << d << ": drafted " << spec.stats.n_drafted << ", accepted "
                          << spec.stats.n_accepted << " in " << spec.stats.n_steps << " passes");
      }
    }
  }
}

namespace {

struct EngineOut {
  std::vector<kestrel_token> tokens;
  kestrel_request_result result{};
  uint64_t id = 0;
};
bool engine_collect(kestrel_token t, const char*, size_t, void* user) {
  if (t >= 0) static_cast<EngineOut*>(user)->tokens.push_back(t);
  return true;
}

// Eight requests at once (the reference prompts and their prefixes), each speculating with
// `mode`; returns what each produced.
std::vector<EngineOut> run_engine(const kestrel_model* target, const kestrel_model* draft,
                                  const std::vector<std::vector<kestrel_token>>& prompts, int32_t max_tokens,
                                  kestrel_spec_mode mode, kestrel_kv_type kv = KESTREL_KV_F16) {
  kestrel_engine_options eo;
  kestrel_engine_options_init(&eo);
  eo.kv_type = kv;
  eo.n_ctx = 2048;
  eo.n_parallel = 8;
  eo.n_batch = 64;
  eo.n_threads = 1;
  eo.draft_model = draft;
  kestrel_engine* e = nullptr;
  REQUIRE_MESSAGE(kestrel_engine_new(target, &eo, &e) == KESTREL_OK, kestrel_last_error());
  const kestrel_sampler_options so = greedy();
  kestrel_spec_options spec;
  kestrel_spec_options_init(&spec);
  spec.mode = mode;
  std::vector<EngineOut> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    kestrel_request r;
    kestrel_request_init(&r);
    r.prompt = prompts[i].data();
    r.n_prompt = static_cast<int32_t>(prompts[i].size());
    r.max_tokens = max_tokens;
    r.stop_at_eog = false;
    r.sampling = &so;
    r.on_token = engine_collect;
    r.user = &out[i];
    r.speculative = &spec;
    REQUIRE_MESSAGE(kestrel_submit(e, &r, &out[i].id) == KESTREL_OK, kestrel_last_error());
  }
  for (auto& o : out) {
    o.result.struct_size = sizeof o.result;
    REQUIRE(kestrel_wait(e, o.id, &o.result) == KESTREL_OK);
  }
  char buf[4096];
  size_t len = 0;
  REQUIRE(kestrel_engine_stats(e, buf, sizeof buf, &len) == KESTREL_OK);
  const json st = json::parse(std::string(buf, len));
  CHECK(st["kv"]["blocks_used"] == 0);  // rollbacks left nothing behind
  kestrel_engine_free(e);
  return out;
}

}  // namespace

TEST_CASE("speculative, greedy: eight concurrent requests in the engine give the same tokens") {
  for (const std::string family : {"stories260K", "llama-gqa", "nemotron_h"}) {
    const std::vector<RefCase> cases = reference_cases(family);
    std::vector<std::vector<kestrel_token>> prompts;
    for (const RefCase& rc : cases)
      if (rc.target == cases.front().target) prompts.push_back(rc.prompt_tokens);
    for (size_t i = 0; prompts.size() < 8; ++i) {  // prefixes of the long prompt fill up to eight
      std::vector<kestrel_token> p = prompts[i % prompts.size()];
      p.resize(std::max<size_t>(2, p.size() / 2 + i));
      prompts.push_back(p);
    }
    ModelHandle target(cases.front().target);
    if (!target.m) continue;
    CAPTURE(cases.front().target);
    const std::vector<EngineOut> plain = run_engine(target.m, nullptr, prompts, 48, KESTREL_SPEC_NONE);
    const std::vector<EngineOut> ngram = run_engine(target.m, nullptr, prompts, 48, KESTREL_SPEC_NGRAM);
    for (size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(i);
      REQUIRE(plain[i].tokens.size() == 48);
      CHECK(ngram[i].tokens == plain[i].tokens);
    }
    for (const std::string& d : drafts_of(family)) {
      CAPTURE(d);
      ModelHandle draft(d);
      if (!draft.m) continue;
      const std::vector<EngineOut> spec = run_engine(target.m, draft.m, prompts, 48, KESTREL_SPEC_DRAFT);
      int32_t drafted = 0, accepted = 0;
      for (size_t i = 0; i < prompts.size(); ++i) {
        CAPTURE(i);
        CHECK(spec[i].tokens == plain[i].tokens);
        drafted += spec[i].result.n_drafted;
        accepted += spec[i].result.n_accepted;
      }
      CHECK(drafted > 0);
      MESSAGE(cases.front().target << " <- " << d << " (8 requests): drafted " << drafted << ", accepted " << accepted);
    }
  }
}

// A quantized KV cache changes nothing of speculation's or prefix sharing's bookkeeping: with a
// q8_0 cache (the target's and the draft's), eight requests sharing prefixes give the same tokens
// with a draft model, with n-gram and without, and leave no block behind (run_engine checks).
TEST_CASE("speculative, greedy: the same tokens over a q8_0 KV cache, with shared prefixes") {
  const std::vector<RefCase> cases = reference_cases("stories260K");
  REQUIRE(!cases.empty());
  std::vector<std::vector<kestrel_token>> prompts;
  for (const RefCase& rc : cases)
    if (rc.target == cases.front().target) prompts.push_back(rc.prompt_tokens);
  for (size_t i = 0; prompts.size() < 8; ++i) {
    std::vector<kestrel_token> p = prompts[i % prompts.size()];
    p.resize(std::max<size_t>(2, p.size() / 2 + i));
    prompts.push_back(p);
  }
  ModelHandle target(cases.front().target), draft("stories260K-q4_0.gguf");
  if (!target.m || !draft.m) return;
  const std::vector<EngineOut> plain = run_engine(target.m, nullptr, prompts, 32, KESTREL_SPEC_NONE, KESTREL_KV_Q8_0);
  const std::vector<EngineOut> ngram = run_engine(target.m, nullptr, prompts, 32, KESTREL_SPEC_NGRAM, KESTREL_KV_Q8_0);
  const std::vector<EngineOut> spec = run_engine(target.m, draft.m, prompts, 32, KESTREL_SPEC_DRAFT, KESTREL_KV_Q8_0);
  int32_t drafted = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(i);
    REQUIRE(plain[i].tokens.size() == 32);
    CHECK(ngram[i].tokens == plain[i].tokens);
    CHECK(spec[i].tokens == plain[i].tokens);
    drafted += spec[i].result.n_drafted;
  }
  CHECK(drafted > 0);
}

TEST_CASE("speculative: after a run the cache holds exactly the prompt and the generated tokens") {
  ModelHandle target("stories260K-f32.gguf"), draft("stories260K-q4_0.gguf");
  if (!target.m || !draft.m) return;
  ContextHandle ctx(target.m, 512), dctx(draft.m, 512), fresh(target.m, 512);
  const std::string prompt = "Once upon a time, there was a little";
  for (kestrel_spec_mode mode : {KESTREL_SPEC_DRAFT, KESTREL_SPEC_NGRAM}) {
    CAPTURE(static_cast<int>(mode));
    const Run r = generate(ctx.c, prompt, 57, mode, dctx.c);
    REQUIRE(r.n == 57);
    REQUIRE(r.stats.n_drafted > r.stats.n_accepted);  // some drafts were rejected and rolled back
    std::vector<kestrel_token> all(64);
    size_t n_prompt = 0;
    REQUIRE(kestrel_tokenize(target.m, prompt.data(), prompt.size(), true, false, all.data(), all.size(), &n_prompt) ==
            KESTREL_OK);
    all.resize(n_prompt);
    // One-token decoding leaves all but the last generated token in the cache; so must this.
    CHECK(kestrel_kv_seq_pos_max(ctx.c, 0) == static_cast<int32_t>(n_prompt) + r.n - 2);
    all.insert(all.end(), r.tokens.begin(), r.tokens.end());
    // The next step's logits: after the speculative run, and from a fresh context fed the same
    // tokens in steps of at most 64. A stale cell (a rejected draft) would change them. (A step of
    // more than 65 tokens takes CUDA's tensor-core prefill attention, whose float sums are not
    // the decode kernels': docs/CUDA.md.)
    kestrel_batch b{};
    b.n_tokens = 1;
    b.tokens = &all.back();
    REQUIRE(kestrel_decode(ctx.c, &b) == KESTREL_OK);
    const float* got = nullptr;
    int32_t nv = 0;
    REQUIRE(kestrel_get_logits(ctx.c, -1, &got, &nv) == KESTREL_OK);
    const std::vector<float> after(got, got + nv);
    kestrel_kv_clear(fresh.c);
    for (size_t i = 0; i < all.size(); i += 64) {
      kestrel_batch fb{};
      fb.n_tokens = static_cast<int32_t>(std::min<size_t>(64, all.size() - i));
      fb.tokens = all.data() + i;
      REQUIRE(kestrel_decode(fresh.c, &fb) == KESTREL_OK);
    }
    REQUIRE(kestrel_get_logits(fresh.c, -1, &got, &nv) == KESTREL_OK);
    CHECK(std::memcmp(after.data(), got, after.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("speculative: a draft context too small for the text drafts nothing, and the output stays the same") {
  ModelHandle target("stories260K-f32.gguf"), draft("stories260K-q8_0.gguf");
  if (!target.m || !draft.m) return;
  ContextHandle ctx(target.m, 256), tiny(draft.m, 32);
  const std::string prompt = "Once upon a time, there was a little";
  const Run plain = generate(ctx.c, prompt, 64, KESTREL_SPEC_NONE, nullptr);
  const Run spec = generate(ctx.c, prompt, 64, KESTREL_SPEC_DRAFT, tiny.c);
  CHECK(spec.tokens == plain.tokens);
  CHECK(spec.stats.n_drafted < 32);  // drafting stops once the draft's 32 cells are full
}

TEST_CASE("speculative: bad options and a draft with another vocabulary are clear errors") {
  ModelHandle target("stories260K-f32.gguf");
  if (!target.m) return;
  ContextHandle ctx(target.m, 128);
  kestrel_spec_options spec;
  kestrel_spec_options_init(&spec);
  kestrel_generate_options go;
  kestrel_generate_options_init(&go);
  go.max_tokens = 4;
  go.speculative = &spec;
  spec.mode = KESTREL_SPEC_DRAFT;  // no draft context
  CHECK(kestrel_generate(ctx.c, "Once", &go, nullptr) == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(std::string(kestrel_last_error()).find("draft") != std::string::npos);
  const int32_t bad_mode = 7;  // what a C caller could pass
  std::memcpy(&spec.mode, &bad_mode, sizeof bad_mode);
  CHECK(kestrel_generate(ctx.c, "Once", &go, nullptr) == KESTREL_ERR_INVALID_ARGUMENT);
  spec.mode = KESTREL_SPEC_NGRAM;
  spec.k_max = 0;
  CHECK(kestrel_generate(ctx.c, "Once", &go, nullptr) == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(std::string(kestrel_last_error()).find("k_max") != std::string::npos);
  spec.k_max = 4;
  spec.ngram_min = 3;
  spec.ngram_max = 2;
  CHECK(kestrel_generate(ctx.c, "Once", &go, nullptr) == KESTREL_ERR_INVALID_ARGUMENT);

  // An engine without a draft model refuses DRAFT requests at submit; one given a draft model
  // whose vocabulary differs refuses to start.
  kestrel_engine_options eo;
  kestrel_engine_options_init(&eo);
  eo.n_ctx = 128;
  kestrel_engine* e = nullptr;
  REQUIRE(kestrel_engine_new(target.m, &eo, &e) == KESTREL_OK);
  kestrel_spec_options ds;
  kestrel_spec_options_init(&ds);
  ds.mode = KESTREL_SPEC_DRAFT;
  const kestrel_token prompt[] = {1, 403};
  kestrel_request r;
  kestrel_request_init(&r);
  r.prompt = prompt;
  r.n_prompt = 2;
  r.speculative = &ds;
  uint64_t id = 0;
  CHECK(kestrel_submit(e, &r, &id) == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(std::string(kestrel_last_error()).find("draft model") != std::string::npos);
  kestrel_engine_free(e);

  const std::string other = kestrel::test::testdata_file("tokenizer/ggml-vocab-llama-spm.gguf");
  if (other.empty()) return;
  kestrel_model_options mo;
  kestrel_model_options_init(&mo);
  mo.vocab_only = true;
  kestrel_model* llama_vocab = nullptr;
  REQUIRE(kestrel_model_load(other.c_str(), &mo, &llama_vocab) == KESTREL_OK);
  eo.draft_model = llama_vocab;
  e = nullptr;
  CHECK(kestrel_engine_new(target.m, &eo, &e) == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(std::string(kestrel_last_error()).find("vocabulary") != std::string::npos);
  CHECK(e == nullptr);
  kestrel_model_free(llama_vocab);
}
