// The sampler chain against independent references: the RNG against published vectors, greedy
// against a plain argmax scan, truncation (top-k / top-p / min-p) against a full sort done here,
// penalties against the formula, and the draw distribution against softmax(logits / T) with a
// chi-square test (threshold at a false-failure rate of 1e-6 per check).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/chi_square.h"
#include "sampling/rng.h"
#include "sampling/sampler.h"

using namespace kestrel;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<float> random_logits(size_t n, uint64_t seed, float scale = 2.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// All truncation off: the draw is softmax(logits / T).
SamplerParams plain(float temperature, uint64_t seed = 1) {
  SamplerParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

// ---- independent references -----------------------------------------------------------------------

// The kept (id, logit) set after top-k, top-p and min-p, by a full sort (logit desc, id asc).
std::vector<std::pair<int32_t, float>> ref_truncate(const std::vector<float>& logits, int32_t top_k, float top_p,
                                                     float min_p) {
  std::vector<std::pair<int32_t, float>> c;
  for (size_t i = 0; i < logits.size(); ++i) c.emplace_back(static_cast<int32_t>(i), logits[i]);
  std::sort(c.begin(), c.end(), [](auto& a, auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  if (top_k > 0 && static_cast<size_t>(top_k) < c.size()) c.resize(static_cast<size_t>(top_k));
  const double mx = c.front().second;
  if (top_p < 1.0f) {
    double z = 0;
    for (auto& x : c) z += std::exp(static_cast<double>(x.second) - mx);
    double cum = 0;
    size_t keep = 0;
    while (keep < c.size()) {
      cum += std::exp(static_cast<double>(c[keep].second) - mx) / z;
      ++keep;
      if (cum >= top_p) break;
    }
    c.resize(keep);
  }
  if (min_p > 0.0f) {
    std::vector<std::pair<int32_t, float>> kept;
    for (auto& x : c)
      if (std::exp(static_cast<double>(x.second) - mx) >= min_p) kept.push_back(x);
    c = kept;
  }
  return c;
}

// Probability per token id of softmax(logit / T) over the kept set (0 elsewhere).
std::vector<double> ref_probs(const std::vector<std::pair<int32_t, float>>& kept, size_t n_vocab, double t) {
  std::vector<double> p(n_vocab, 0.0);
  double mx = -INFINITY;
  for (auto& x : kept) mx = std::max(mx, x.second / t);
  double z = 0;
  for (auto& x : kept) z += std::exp(x.second / t - mx);
  for (auto& x : kept) p[static_cast<size_t>(x.first)] = std::exp(x.second / t - mx) / z;
  return p;
}

// A draw distribution passes when its chi-square p-value exceeds 1e-6 (common/chi_square.h).
constexpr double kFalseFailure = 1e-6;

std::vector<int64_t> draw_counts(Sampler& s, const std::vector<float>& logits, int64_t n) {
  std::vector<int64_t> counts(logits.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    auto t = s.sample(logits);
    if (!t.ok() || t.value() < 0 || static_cast<size_t>(t.value()) >= logits.size())
      FAIL("draw " << i << " failed or is out of range: " << (t.ok() ? std::to_string(t.value()) : t.status().to_string()));
    ++counts[static_cast<size_t>(t.value())];
  }
  return counts;
}

void check_distribution(const SamplerParams& p, const std::vector<float>& logits) {
  constexpr int64_t kDraws = 200000;
  Sampler s(p);
  const auto counts = draw_counts(s, logits, kDraws);
  const auto kept = ref_truncate(logits, p.top_k, p.top_p, p.min_p);
  const auto probs = ref_probs(kept, logits.size(), p.temperature);
  const test::ChiSquare c = test::chi_square(counts, probs);
  INFO("T=" << p.temperature << " k=" << p.top_k << " p=" << p.top_p << " min_p=" << p.min_p << " kept=" << kept.size()
            << " chi2=" << c.statistic << " df=" << c.dof << " p-value=" << c.p_value);
  CHECK_FALSE(c.outside_support);
  CHECK(c.p_value > kFalseFailure);
}

bool has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

}  // namespace

TEST_CASE("sampler rng: SplitMix64 and xoshiro256** match published vectors") {
  uint64_t sm = 0;
  CHECK(splitmix64_next(&sm) == 0xE220A8397B1DCDAFull);
  CHECK(splitmix64_next(&sm) == 0x6E789E6AA1B965F4ull);
  CHECK(splitmix64_next(&sm) == 0x06C45D188009454Full);
  CHECK(splitmix64_next(&sm) == 0xF88BB8A8724C81ECull);

  Rng x = Rng::from_state({1, 2, 3, 4});
  const uint64_t expected[] = {11520ull,
                               0ull,
                               1509978240ull,
                               1215971899390074240ull,
                               1216172134540287360ull,
                               607988272756665600ull,
                               16172922978634559625ull,
                               8476171486693032832ull,
                               10595114339597558777ull,
                               2904607092377533576ull};
  for (uint64_t e : expected) CHECK(x.next_u64() == e);

  Rng a(42), b(42), c(43);
  bool all_same = true;
  double sum = 0;
  for (int i = 0; i < 100000; ++i) {
    const double u = a.uniform();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    sum += u;
    if (b.uniform() != u) FAIL("same seed diverged at draw " << i);
    if (c.uniform() != u) all_same = false;
  }
  CHECK_FALSE(all_same);
  CHECK(std::fabs(sum / 100000 - 0.5) < 0.005);  // sd of the mean is 0.0009
}

TEST_CASE("sampler validate: defaults pass, each bad field is named") {
  CHECK(validate(SamplerParams{}).ok());
  SamplerParams neg_t;
  neg_t.temperature = -1.0f;
  CHECK(validate(neg_t).ok());

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const auto expect_bad = [](SamplerParams p, const char* field) {
    const Status st = validate(p);
    INFO("field " << field << ": " << st.to_string());
    CHECK(st.code() == KESTREL_ERR_INVALID_ARGUMENT);
    CHECK(has(st.message(), field));
    Sampler s(p);  // an invalid sampler reports the same error instead of sampling
    const std::vector<float> logits = {0.5f, 1.0f};
    auto t = s.sample(logits);
    CHECK_FALSE(t.ok());
    CHECK(t.status().code() == KESTREL_ERR_INVALID_ARGUMENT);
  };
  SamplerParams p;
  p = {}; p.temperature = nan; expect_bad(p, "temperature");
  p = {}; p.temperature = inf; expect_bad(p, "temperature");
  p = {}; p.top_p = -0.1f; expect_bad(p, "top_p");
  p = {}; p.top_p = nan; expect_bad(p, "top_p");
  p = {}; p.min_p = 1.5f; expect_bad(p, "min_p");
  p = {}; p.min_p = nan; expect_bad(p, "min_p");
  p = {}; p.repeat_penalty = 0.0f; expect_bad(p, "repeat_penalty");
  p = {}; p.repeat_penalty = -1.0f; expect_bad(p, "repeat_penalty");
  p = {}; p.repeat_penalty = nan; expect_bad(p, "repeat_penalty");
  p = {}; p.presence_penalty = inf; expect_bad(p, "presence_penalty");
  p = {}; p.frequency_penalty = nan; expect_bad(p, "frequency_penalty");
  p = {}; p.penalty_last_n = -1; expect_bad(p, "penalty_last_n");
  p = {}; p.logit_bias = {{0, 1.0f}, {-3, 1.0f}}; expect_bad(p, "logit_bias[1]");
  p = {}; p.logit_bias = {{2, nan}}; expect_bad(p, "logit_bias[0]");
  p = {}; p.logit_bias = {{2, inf}}; expect_bad(p, "logit_bias[0]");
  p = {}; p.logit_bias = {{2, -inf}, {1, -5.0f}};
  CHECK(validate(p).ok());  // -inf bans a token
}

TEST_CASE("sampler greedy: temperature <= 0 is the argmax, ties to the lowest id") {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const auto logits = random_logits(1000 + seed * 37, seed);
    size_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i)
      if (logits[i] > logits[best]) best = i;
    for (float t : {0.0f, -1.0f}) {
      SamplerParams p;  // truncation settings are irrelevant to greedy
      p.temperature = t;
      p.seed = seed;
      Sampler s(p);
      auto tok = s.sample(logits);
      REQUIRE(tok.ok());
      CHECK(tok.value() == static_cast<int32_t>(best));
    }
  }
  std::vector<float> ties = {1.0f, 3.0f, -2.0f, 3.0f, 3.0f, 0.0f};
  Sampler s(plain(0.0f));
  CHECK(s.sample(ties).value() == 1);
  ties[1] = kNegInf;
  CHECK(s.sample(ties).value() == 3);
}

TEST_CASE("sampler top_k = 1 equals greedy, ties included") {
  for (uint64_t seed = 0; seed < 50; ++seed) {
    auto logits = random_logits(500, seed + 100);
    if (seed % 2) {  // a tie at the top between two ids
      const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
      logits[static_cast<size_t>(best + 7) % logits.size()] = logits[static_cast<size_t>(best)];
    }
    SamplerParams g = plain(0.0f);
    SamplerParams k = plain(1.3f, seed);
    k.top_k = 1;
    Sampler sg(g), sk(k);
    CHECK(sg.sample(logits).value() == sk.sample(logits).value());
  }
}

TEST_CASE("sampler seeds: same seed same run, different seed different run, reset rewinds") {
  const auto logits = random_logits(2000, 7, 1.0f);
  const auto run = [&](Sampler& s, int n) {
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
      auto t = s.sample(logits);
      REQUIRE(t.ok());
      s.accept(t.value());
      out.push_back(t.value());
    }
    return out;
  };
  SamplerParams p = plain(1.0f, 1234);
  p.repeat_penalty = 1.1f;  // history matters too
  p.top_k = 200;
  Sampler a(p), b(p);
  const auto ra = run(a, 100);
  CHECK(ra == run(b, 100));
  p.seed = 1235;
  Sampler c(p);
  CHECK(ra != run(c, 100));
  a.reset();
  CHECK(ra == run(a, 100));
}

TEST_CASE("sampler distribution: plain temperature sampling matches softmax(logits / T)") {
  for (float t : {1.0f, 0.7f, 1.6f}) {
    const auto logits = random_logits(40, static_cast<uint64_t>(t * 1000), 1.5f);
    check_distribution(plain(t, 99), logits);
  }
}

TEST_CASE("sampler distribution: top-k, top-p, min-p and their combination") {
  const auto logits = random_logits(48, 2024, 1.5f);
  SamplerParams p = plain(1.0f, 5);
  p.top_k = 10;
  check_distribution(p, logits);
  p = plain(0.9f, 6);
  p.top_p = 0.8f;
  check_distribution(p, logits);
  p = plain(1.2f, 7);
  p.min_p = 0.1f;
  check_distribution(p, logits);
  p = plain(0.8f, 8);
  p.top_k = 20;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  check_distribution(p, logits);
}

TEST_CASE("sampler distribution: the chi-square check has power (a wrong temperature fails)") {
  const auto logits = random_logits(40, 31, 1.5f);
  constexpr int64_t kDraws = 200000;
  Sampler s(plain(0.8f, 3));
  const auto counts = draw_counts(s, logits, kDraws);
  const auto kept = ref_truncate(logits, 0, 1.0f, 0.0f);
  CHECK(test::chi_square(counts, ref_probs(kept, logits.size(), 1.0)).p_value < kFalseFailure);
  CHECK(test::chi_square(counts, ref_probs(kept, logits.size(), 0.8)).p_value > kFalseFailure);
}

// Speculative verification needs the distribution sample() draws from: distribution() against
// the same independent reference the draws are checked against above.
TEST_CASE("sampler distribution(): the probabilities sample() draws with, truncation and penalties included") {
  const auto logits = random_logits(64, 77, 1.5f);
  SamplerParams p = plain(0.8f, 9);
  p.top_k = 20;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  for (bool penalties : {false, true}) {
    if (penalties) p.repeat_penalty = 1.3f, p.presence_penalty = 0.5f;
    Sampler s(p);
    std::vector<float> penalized = logits;
    if (penalties)
      for (int32_t t : {3, 17, 3}) s.accept(t);
    for (int32_t t : {3, 17}) {  // the formula of "sampler penalties" below, once per distinct token
      if (!penalties) break;
      float& l = penalized[static_cast<size_t>(t)];
      l = l > 0 ? l / p.repeat_penalty : l * p.repeat_penalty;
      l -= p.presence_penalty;
    }
    std::vector<std::pair<int32_t, double>> dist;
    REQUIRE(s.distribution(logits, &dist).ok());
    const auto want = ref_probs(ref_truncate(penalized, p.top_k, p.top_p, p.min_p), logits.size(), p.temperature);
    double total = 0;
    for (const auto& [id, prob] : dist) {
      CHECK(prob == doctest::Approx(want[static_cast<size_t>(id)]).epsilon(1e-9));
      total += prob;
    }
    CHECK(total == doctest::Approx(1.0).epsilon(1e-12));
    size_t nonzero = 0;
    for (double w : want) nonzero += w > 0;
    CHECK(dist.size() == nonzero);
  }
  Sampler g(plain(0.0f));  // greedy: the argmax, certainly
  std::vector<std::pair<int32_t, double>> dist;
  REQUIRE(g.distribution(logits, &dist).ok());
  REQUIRE(dist.size() == 1);
  CHECK(dist[0].first == static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
  CHECK(dist[0].second == 1.0);
}

TEST_CASE("sampler truncation: debug_apply keeps exactly the reference set, in best-first order") {
  std::mt19937_64 g(77);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 1 + g() % 6000;
    auto logits = random_logits(n, 1000 + static_cast<uint64_t>(trial), trial % 3 == 0 ? 0.3f : 3.0f);
    if (trial % 4 == 1)  // coarse values: many ties
      for (float& x : logits) x = std::round(x * 2.0f) / 2.0f;
    if (trial % 5 == 2)  // some banned tokens
      for (size_t i = 0; i < n; i += 3) logits[i] = kNegInf;
    if (trial % 5 == 2) logits[n - 1] = 0.25f;  // at least one finite
    SamplerParams p = plain(0.5f + static_cast<float>(g() % 100) / 50.0f);
    const int mode = trial % 6;
    p.top_k = (mode == 0 || mode == 3) ? 0 : static_cast<int32_t>(1 + g() % 300);
    p.top_p = (mode == 1) ? 1.0f : static_cast<float>(g() % 1001) / 1000.0f;
    p.min_p = (mode == 2 || mode == 3) ? 0.0f : static_cast<float>(g() % 1001) / 2000.0f;
    if (mode == 5) p.top_p = 0.999f;  // a long nucleus: the doubling sort runs several rounds
    INFO("trial " << trial << " n=" << n << " k=" << p.top_k << " p=" << p.top_p << " min_p=" << p.min_p);
    Sampler s(p);
    const std::vector<float> before = logits;
    auto got = s.debug_apply(logits);
    REQUIRE(got.ok());
    CHECK(logits == before);  // the input is not touched
    const auto want = ref_truncate(logits, p.top_k, p.top_p, p.min_p);
    REQUIRE(got->size() == want.size());
    const bool best_first = (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) || p.top_p < 1.0f;
    auto got_sorted = got.value();
    auto want_sorted = want;
    if (!best_first) {  // untruncated by rank: the draw walks id order
      std::sort(want_sorted.begin(), want_sorted.end());
    }
    for (size_t i = 0; i < want_sorted.size(); ++i) {
      CHECK(got_sorted[i].first == want_sorted[i].first);
      CHECK(got_sorted[i].second == want_sorted[i].second / p.temperature);
    }
    auto tok = s.sample(logits);  // the drawn token is in the kept set
    REQUIRE(tok.ok());
    CHECK(std::any_of(want.begin(), want.end(), [&](auto& x) { return x.first == tok.value(); }));
  }
}

TEST_CASE("sampler penalties: repeat, frequency and presence change logits as specified") {
  const size_t n = 50;
  auto logits = random_logits(n, 4242, 3.0f);
  logits[3] = 2.5f;   // a positive logit: divided by the repeat penalty
  logits[7] = -1.5f;  // a negative one: multiplied
  logits[9] = 0.0f;
  SamplerParams p = plain(1.0f);
  p.repeat_penalty = 1.3f;
  p.frequency_penalty = 0.25f;
  p.presence_penalty = 0.7f;
  p.penalty_last_n = 6;
  p.logit_bias = {{11, 4.0f}, {12, -0.5f}, {13, kNegInf}};
  Sampler s(p);
  // 20 falls out of the 6-token window; 3 x2, 7 x1, 9 x1, 11 x1, 60 (past n_vocab) x1; -5 ignored.
  for (int32_t t : {20, 3, 7, -5, 3, 9, 11, 60}) s.accept(t);
  std::map<int32_t, int> counts = {{3, 2}, {7, 1}, {9, 1}, {11, 1}};

  auto got = s.debug_apply(logits);
  REQUIRE(got.ok());
  REQUIRE(got->size() == n);  // no truncation: id order
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = static_cast<int32_t>(i);
    float want = logits[i];
    for (auto& [tok, b] : p.logit_bias)
      if (tok == id) want += b;
    if (counts.count(id)) {
      const int c = counts[id];
      want = want > 0 ? want / 1.3f : want * 1.3f;
      want -= static_cast<float>(c) * 0.25f + 0.7f;
    }
    INFO("token " << i);
    CHECK(got.value()[i].first == id);
    if (std::isinf(want))
      CHECK(got.value()[i].second == want);
    else
      CHECK(got.value()[i].second == doctest::Approx(want).epsilon(1e-6));
  }
  // Token 11: bias first (positive), then the penalty divides.
  CHECK(got.value()[11].second == doctest::Approx((logits[11] + 4.0f) / 1.3f - 0.95f).epsilon(1e-6));

  // Penalties are off with penalty_last_n 0; reset forgets the history.
  SamplerParams off = p;
  off.penalty_last_n = 0;
  off.logit_bias.clear();
  Sampler s0(off);
  for (int32_t t : {3, 3, 7}) s0.accept(t);
  CHECK(s0.debug_apply(logits).value()[3].second == logits[3]);
  s.reset();
  CHECK(s.debug_apply(logits).value()[3].second == logits[3]);
}

TEST_CASE("sampler penalties steer greedy decoding away from repeats") {
  std::vector<float> logits = {1.0f, 0.9f, 0.2f};
  SamplerParams p = plain(0.0f);
  p.repeat_penalty = 1.5f;  // 1.0 / 1.5 < 0.9
  Sampler s(p);
  CHECK(s.sample(logits).value() == 0);
  s.accept(0);
  CHECK(s.sample(logits).value() == 1);
}

TEST_CASE("sampler logit bias: -inf bans a token; out-of-range ids are errors") {
  const auto logits = random_logits(20, 5, 1.0f);
  const auto top = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  SamplerParams p = plain(2.0f, 9);
  p.logit_bias = {{top, kNegInf}};
  Sampler s(p);
  for (int i = 0; i < 2000; ++i) CHECK(s.sample(logits).value() != top);
  p.temperature = 0.0f;
  Sampler g(p);
  CHECK(g.sample(logits).value() != top);

  p.logit_bias = {{20, 1.0f}};
  Sampler bad(p);
  auto t = bad.sample(logits);
  REQUIRE_FALSE(t.ok());
  CHECK(t.status().code() == KESTREL_ERR_OUT_OF_RANGE);
  CHECK(has(t.status().message(), "logit_bias[0]"));
  CHECK(has(t.status().message(), "20"));
}

TEST_CASE("sampler bad logits: NaN and +inf are errors naming the index, -inf is allowed") {
  auto logits = random_logits(100, 6, 1.0f);
  for (float t : {0.0f, 1.0f}) {
    Sampler s(plain(t));
    auto bad = logits;
    bad[37] = std::numeric_limits<float>::quiet_NaN();
    auto r = s.sample(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == KESTREL_ERR_INVALID_ARGUMENT);
    CHECK(has(r.status().message(), "logits[37]"));
    bad[37] = std::numeric_limits<float>::infinity();
    r = s.sample(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(has(r.status().message(), "logits[37]"));

    std::vector<float> all_banned(10, kNegInf);
    r = s.sample(all_banned);
    REQUIRE_FALSE(r.ok());
    CHECK(has(r.status().message(), "-inf"));
    all_banned[6] = -3.0f;  // one finite token left: always chosen
    for (int i = 0; i < 50; ++i) CHECK(s.sample(all_banned).value() == 6);

    CHECK_FALSE(s.sample(std::span<const float>()).ok());
  }
}

TEST_CASE("sampler n_vocab 1 and extreme temperatures") {
  const std::vector<float> one = {-7.5f};
  for (float t : {0.0f, 0.5f, 1.0f}) {
    SamplerParams p;  // the defaults: top-k, top-p and min-p all on
    p.temperature = t;
    Sampler s(p);
    for (int i = 0; i < 10; ++i) CHECK(s.sample(one).value() == 0);
  }
  const auto logits = random_logits(1000, 8, 3.0f);
  const auto top = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  Sampler cold(plain(1e-30f, 4));  // (l - max) / T underflows to -inf for all but the max
  for (int i = 0; i < 20; ++i) CHECK(cold.sample(logits).value() == top);
  Sampler hot(plain(1e30f, 4));  // nearly uniform; must not produce NaN
  for (int i = 0; i < 20; ++i) CHECK(hot.sample(logits).ok());
  std::vector<float> huge = {3e38f, -3e38f, 1e38f};
  Sampler h(plain(1.0f, 4));
  for (int i = 0; i < 20; ++i) CHECK(h.sample(huge).value() == 0);
}

TEST_CASE("sampler large vocabulary: defaults stay inside the top 40") {
  const auto logits = random_logits(151936, 9, 2.0f);
  SamplerParams p;  // temperature 0.8, top_k 40, top_p 0.95, min_p 0.05
  p.seed = 11;
  Sampler s(p);
  const auto kept = ref_truncate(logits, p.top_k, p.top_p, p.min_p);
  REQUIRE(!kept.empty());
  for (int i = 0; i < 200; ++i) {
    auto t = s.sample(logits);
    REQUIRE(t.ok());
    CHECK(std::any_of(kept.begin(), kept.end(), [&](auto& x) { return x.first == t.value(); }));
  }
  SamplerParams q = plain(1.0f, 12);  // top-p over the whole vocabulary
  q.top_p = 0.95f;
  Sampler sq(q);
  auto got = sq.debug_apply(logits);
  REQUIRE(got.ok());
  const auto want = ref_truncate(logits, 0, 0.95f, 0.0f);
  REQUIRE(got->size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) CHECK(got.value()[i].first == want[i].first);
}

TEST_CASE("sampler top-p over large vocabularies: narrowed nucleus equals the full-sort reference") {
  int trial = 0;
  for (float scale : {0.01f, 1.0f, 4.0f, 40.0f}) {
    for (float top_p : {1e-6f, 0.3f, 0.9f, 0.999999f}) {
      auto logits = random_logits(20000, 500 + static_cast<uint64_t>(trial), scale);
      if (trial % 3 == 1)
        for (float& x : logits) x = std::round(x * 4.0f) / 4.0f;  // ties across the bucket edges
      if (trial % 3 == 2)
        for (size_t i = 0; i < logits.size(); i += 2) logits[i] = kNegInf;
      ++trial;
      SamplerParams p = plain(1.0f);
      p.top_p = top_p;
      Sampler s(p);
      auto got = s.debug_apply(logits);
      REQUIRE(got.ok());
      const auto want = ref_truncate(logits, 0, top_p, 0.0f);
      INFO("scale " << scale << " top_p " << top_p << " trial " << trial);
      REQUIRE(got->size() == want.size());
      for (size_t i = 0; i < want.size(); ++i) REQUIRE(got.value()[i].first == want[i].first);
    }
  }
}

namespace {
// The k best of a row in the chain's strict order, sorted here (what the TOP_K op returns).
std::vector<TokenLogit> best_of(const std::vector<float>& logits, size_t k) {
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  std::vector<TokenLogit> out;
  for (size_t j = 0; j < std::min(k, order.size()); ++j) out.push_back({order[j], logits[static_cast<size_t>(order[j])]});
  return out;
}
}  // namespace

TEST_CASE("sampler best_needed: greedy and top-k read only the best; bias, penalties, unbounded top-p need the row") {
  SamplerParams p;
  p.temperature = 0;
  CHECK(Sampler(p).best_needed() == 1);
  p.temperature = 0.7f;
  p.top_k = 40;
  CHECK(Sampler(p).best_needed() == 40);
  p.top_k = kMaxBestLogits + 1;
  CHECK(Sampler(p).best_needed() == 0);
  p.top_k = 0;  // top-p over the whole vocabulary
  CHECK(Sampler(p).best_needed() == 0);
  p.top_k = 8;
  p.repeat_penalty = 1.1f;
  CHECK(Sampler(p).best_needed() == 0);
  p.penalty_last_n = 0;  // penalties off after all
  CHECK(Sampler(p).best_needed() == 8);
  p.logit_bias = {{3, 1.0f}};
  CHECK(Sampler(p).best_needed() == 0);
  p = SamplerParams{};
  p.temperature = NAN;  // invalid options: the whole row, whose sample() reports them
  CHECK(Sampler(p).best_needed() == 0);
}

// The same seeds draw the same tokens from a row's best as from the whole row, ties and -inf
// included, for every combination best_needed() accepts; distributions agree exactly.
TEST_CASE("sampler on best-only rows: the same tokens and distributions as on whole rows") {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 60; ++trial) {
    const size_t V = trial % 3 == 0 ? 7 : 3000;
    std::vector<float> logits = random_logits(V, 100 + static_cast<uint64_t>(trial));
    if (trial % 2) {  // ties across the cut and banned tokens
      for (float& l : logits) l = std::round(l * 2.0f) / 2.0f;
      logits[static_cast<size_t>(trial) % V] = kNegInf;
    }
    SamplerParams p;
    p.seed = static_cast<uint64_t>(trial);
    p.temperature = trial % 5 == 0 ? 0.0f : 0.3f + 0.1f * static_cast<float>(trial % 7);
    p.top_k = 1 + trial % 50;
    p.top_p = trial % 4 == 0 ? 1.0f : 0.6f + 0.05f * static_cast<float>(trial % 6);
    p.min_p = trial % 3 == 0 ? 0.0f : 0.02f * static_cast<float>(trial % 4);
    Sampler whole(p), best(p);
    const int32_t k = best.best_needed();
    REQUIRE(k >= 1);
    // A step may keep more than a request needs (the batch keeps the most any row needs).
    const std::vector<TokenLogit> top = best_of(logits, static_cast<size_t>(k + trial % 3));
    const LogitRow row{{}, top, static_cast<int32_t>(V)};
    for (int draw = 0; draw < 20; ++draw) {
      auto a = whole.sample(logits);
      auto b = best.sample(row);
      REQUIRE(a.ok());
      REQUIRE(b.ok());
      CHECK(a.value() == b.value());
    }
    std::vector<std::pair<int32_t, double>> da, db;
    REQUIRE(whole.distribution(logits, &da).ok());
    REQUIRE(best.distribution(row, &db).ok());
    CHECK(da == db);
  }
}

TEST_CASE("sampler on best-only rows: NaN and +inf are errors, too few best logits an internal error") {
  SamplerParams p;
  p.temperature = 0.8f;
  p.top_k = 4;
  Sampler s(p);
  std::vector<float> logits = random_logits(50, 3);
  logits[17] = NAN;
  std::vector<TokenLogit> top = {{17, NAN}, {2, 1.0f}, {3, 0.5f}, {4, 0.1f}};
  auto r = s.sample(LogitRow{{}, top, 50});
  CHECK(r.status().code() == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(has(r.status().message(), "logits[17]"));
  top[0] = {9, 2.0f};
  top.pop_back();
  CHECK(s.sample(LogitRow{{}, top, 50}).status().code() == KESTREL_ERR_INTERNAL);
  CHECK(s.sample(LogitRow{{}, top, 3}).ok());  // a 3-token vocabulary has only three
  p.top_k = 0;
  Sampler needs_row(p);
  CHECK(needs_row.sample(LogitRow{{}, top, 50}).status().code() == KESTREL_ERR_INTERNAL);
}
