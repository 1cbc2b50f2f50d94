// kestrel_logprobs through the C API: on random logits (ties, -inf, a NaN) against a log-softmax
// computed here in long double; and in a running engine, the rows kestrel_request.on_logits
// hands over (the rows the sampler saw) paired with the tokens on_token reports: greedy decoding
// picks each row's top-1, and a sampled token's log-probability is that row's log-softmax.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/testdata.h"
#include "kestrel.h"

namespace {

std::vector<long double> log_softmax(const std::vector<float>& l) {
  long double m = -INFINITY, sum = 0;
  for (float x : l) m = std::max<long double>(m, x);
  for (float x : l) sum += std::exp(static_cast<long double>(x) - m);
  std::vector<long double> out;
  for (float x : l) out.push_back(static_cast<long double>(x) - m - std::log(sum));
  return out;
}

bool close(float got, long double want) {
  if (std::isinf(want)) return got == static_cast<float>(want);  // -inf logits: -inf
  return std::fabs(got - static_cast<float>(want)) < 1e-5f;
}

}  // namespace

TEST_CASE("kestrel_logprobs equals a log-softmax computed independently") {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0, 4);
  for (int n : {1, 2, 17, 1000, 32000}) {
    std::vector<float> l(static_cast<size_t>(n));
    for (float& x : l) x = d(rng);
    if (n > 10) {
      l[3] = l[5] = l[7];  // ties: lower id first
      l[9] = -INFINITY;
    }
    const auto want = log_softmax(l);
    std::vector<size_t> order(l.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return l[a] > l[b]; });
    for (int k : {0, 1, 5, 20, n + 3}) {
      CAPTURE(n);
      CAPTURE(k);
      std::vector<kestrel_token_logprob> top(static_cast<size_t>(std::max(k, 1)), {-7, 1.0f});
      const kestrel_token tok = static_cast<kestrel_token>(n / 2);
      float lp = 0;
      REQUIRE(kestrel_logprobs(l.data(), n, tok, &lp, top.data(), k) == KESTREL_OK);
      CHECK(close(lp, want[static_cast<size_t>(tok)]));
      const int got = std::min(k, n);
      for (int i = 0; i < got; ++i) {
        CHECK(top[static_cast<size_t>(i)].token == static_cast<kestrel_token>(order[static_cast<size_t>(i)]));
        CHECK(close(top[static_cast<size_t>(i)].logprob, want[order[static_cast<size_t>(i)]]));
      }
      if (k < static_cast<int>(top.size())) CHECK(top[static_cast<size_t>(std::max(k, 0))].token == -7);  // nothing past k
    }
  }
  std::vector<float> l = {1, 2, NAN, 3};
  kestrel_token_logprob top[4];
  float lp = 0;
  CHECK(kestrel_logprobs(l.data(), 4, -1, &lp, top, 4) == KESTREL_OK);  // NaN in: no crash, NaN out
  CHECK(std::isnan(lp));
  CHECK(kestrel_logprobs(nullptr, 4, 0, &lp, top, 1) == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(kestrel_logprobs(l.data(), 0, 0, &lp, top, 1) == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(kestrel_logprobs(l.data(), 4, 4, &lp, top, 1) == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(kestrel_logprobs(l.data(), 4, 0, &lp, nullptr, 2) == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(kestrel_logprobs(l.data(), 4, 0, nullptr, nullptr, 0) == KESTREL_OK);
}

TEST_CASE("logprobs of a running request: the rows the sampler saw, paired with its tokens") {
  const std::string path = kestrel::test::testdata_file("models/stories260K-f32.gguf");
  if (path.empty()) return;
  kestrel_model* model = nullptr;
  REQUIRE(kestrel_model_load(path.c_str(), nullptr, &model) == KESTREL_OK);
  kestrel_engine_options eo;
  kestrel_engine_options_init(&eo);
  eo.n_ctx = 512;
  eo.n_threads = 1;
  kestrel_engine* engine = nullptr;
  REQUIRE(kestrel_engine_new(model, &eo, &engine) == KESTREL_OK);
  kestrel_token prompt[64];
  size_t n_prompt = 0;
  REQUIRE(kestrel_tokenize(model, "Once upon a time", 16, true, false, prompt, 64, &n_prompt) == KESTREL_OK);

  for (float temperature : {0.0f, 1.0f}) {
    struct Seen {
      std::vector<std::vector<float>> rows;
      std::vector<kestrel_token> tokens;
    } seen;
    kestrel_sampler_options so;
    kestrel_sampler_options_init(&so);
    so.temperature = temperature;
    so.seed = 42;
    kestrel_request r;
    kestrel_request_init(&r);
    r.prompt = prompt;
    r.n_prompt = static_cast<int32_t>(n_prompt);
    r.max_tokens = 24;
    r.sampling = &so;
    r.user = &seen;
    r.on_logits = [](const float* l, int32_t n, void* u) { static_cast<Seen*>(u)->rows.emplace_back(l, l + n); };
    r.on_token = [](kestrel_token t, const char*, size_t, void* u) {
      if (t >= 0) static_cast<Seen*>(u)->tokens.push_back(t);
      return true;
    };
    kestrel_request_result res;
    REQUIRE(kestrel_engine_generate(engine, &r, &res) == KESTREL_OK);
    REQUIRE(seen.rows.size() == seen.tokens.size());
    REQUIRE(!seen.tokens.empty());
    for (size_t i = 0; i < seen.tokens.size(); ++i) {
      CAPTURE(temperature);
      CAPTURE(i);
      const auto& row = seen.rows[i];
      kestrel_token_logprob top[5];
      float lp = 0;
      REQUIRE(kestrel_logprobs(row.data(), static_cast<int32_t>(row.size()), seen.tokens[i], &lp, top, 5) == KESTREL_OK);
      const auto want = log_softmax(row);
      CHECK(close(lp, want[static_cast<size_t>(seen.tokens[i])]));
      CHECK(lp <= 0.0f);
      for (int j = 1; j < 5; ++j) CHECK(top[j - 1].logprob >= top[j].logprob);
      if (temperature == 0.0f) {
        CHECK(top[0].token == seen.tokens[i]);  // greedy: the row's most likely token
        CHECK(lp == top[0].logprob);
      }
    }
  }
  kestrel_engine_free(engine);
  kestrel_model_free(model);
}
