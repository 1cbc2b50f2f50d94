// Speculative sampling keeps the target's distribution exactly. Each test draws many seeded
// outputs and compares their frequencies with probabilities computed independently of the code
// under test (softmax of the target's logits), by Pearson's chi-square. A correct rule passes
// when the p-value exceeds 1e-7: a false failure has probability 1e-7 per check (chi-square
// asymptotics, every cell expected at least 5 times), below the 1e-6 asked for. The same checks
// with a deliberately wrong rule (on rejection, drawing from the target instead of the residual
// max(0, p - q)) must fail, with p-values far below 1e-7: the tests can tell. Under AddressSanitizer
// the model-level test draws a third as many samples and leaves the wrong rule to the Release run.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "common/chi_square.h"
#include "common/sanitized.h"
#include "common/cpu_model.h"
#include "common/testdata.h"
#include "engine/generate.h"
#include "speculative/verify.h"

using namespace kestrel;
using kestrel::test::chi_square;

namespace {

constexpr double kPass = 1e-7;

SamplerParams plain(uint64_t seed) {  // temperature 1 over the whole vocabulary
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

std::vector<double> softmax(std::span<const float> l) {
  double mx = -INFINITY, z = 0;
  for (float v : l) mx = std::max(mx, static_cast<double>(v));
  std::vector<double> p(l.size());
  for (size_t i = 0; i < l.size(); ++i) z += p[i] = std::exp(static_cast<double>(l[i]) - mx);
  for (double& v : p) v /= z;
  return p;
}

// A bigram "model" over V tokens: logits[prev] is the row after token prev.
struct Bigram {
  int V;
  std::vector<std::vector<float>> logits;
  Bigram(int v, uint32_t seed, float scale) : V(v), logits(static_cast<size_t>(v)) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, scale);
    for (auto& row : logits) {
      row.resize(static_cast<size_t>(v));
      for (float& x : row) x = nd(rng);
    }
  }
  std::span<const float> row(int32_t prev) const { return logits[static_cast<size_t>(prev)]; }
};

enum class DraftKind { kSampled, kCertain };

// Three tokens after token 0: the first sampled plainly, the rest by speculative steps of k
// drafts from the bigram q (sampled with their distributions, or its argmax with certainty).
std::vector<int32_t> speculate3(const Bigram& p, const Bigram& q, DraftKind kind, AcceptRule rule, uint64_t seed) {
  Sampler s(plain(seed)), ds(plain(seed ^ 0xABCDEFull));
  std::vector<int32_t> out = {s.sample(p.row(0)).value()};
  s.accept(out.back());
  while (out.size() < 3) {
    Draft d;
    int32_t prev = out.back();
    for (int i = 0; i < 3; ++i) {
      int32_t t;
      if (kind == DraftKind::kSampled) {
        std::vector<std::pair<int32_t, double>> qd;
        REQUIRE(ds.distribution(q.row(prev), &qd).ok());
        t = ds.draw_from(qd);
        d.q.push_back(std::move(qd));
      } else {
        const auto r = q.row(prev);
        t = static_cast<int32_t>(std::max_element(r.begin(), r.end()) - r.begin());
      }
      d.tokens.push_back(t);
      prev = t;
    }
    std::vector<LogitRow> rows = {whole_row(p.row(out.back()))};
    for (int32_t t : d.tokens) rows.push_back(whole_row(p.row(t)));
    VerifyResult vr;
    REQUIRE(verify(s, rows, d, &vr, rule).ok());
    out.insert(out.end(), vr.tokens.begin(), vr.tokens.end());
  }
  out.resize(3);
  return out;
}

}  // namespace

TEST_CASE("chi-square p-values: the incomplete gamma function") {
  for (double x : {0.1, 1.0, 3.0, 20.0}) {
    CHECK(test::gamma_q(1.0, x) == doctest::Approx(std::exp(-x)).epsilon(1e-12));
    CHECK(test::gamma_q(0.5, x) == doctest::Approx(std::erfc(std::sqrt(x))).epsilon(1e-10));
  }
  CHECK(test::gamma_q(5.0, 7.0) == doctest::Approx(0.172991).epsilon(1e-5));  // chi-square 14, 10 dof
}

TEST_CASE("speculative sampling: three tokens of a bigram model keep the exact distribution") {
  const int V = 10;
  const Bigram p(V, 7, 1.5f), q(V, 8, 1.5f);  // unrelated draft: many rejections
  // Exact: P(t1, t2, t3) = p(t1 | 0) p(t2 | t1) p(t3 | t2).
  std::vector<std::vector<double>> pr(V);
  for (int a = 0; a < V; ++a) pr[a] = softmax(p.row(a));
  std::vector<double> exact(static_cast<size_t>(V * V * V));
  for (int a = 0; a < V; ++a)
    for (int b = 0; b < V; ++b)
      for (int c = 0; c < V; ++c) exact[static_cast<size_t>((a * V + b) * V + c)] = pr[0][a] * pr[a][b] * pr[b][c];
  const int kDraws = test::kSanitized ? 50000 : 200000;
  for (DraftKind kind : {DraftKind::kSampled, DraftKind::kCertain}) {
    for (AcceptRule rule : {AcceptRule::kExact, AcceptRule::kWrongResampleFromTarget}) {
      std::vector<int64_t> counts(exact.size(), 0);
      for (int i = 0; i < kDraws; ++i) {
        const std::vector<int32_t> t = speculate3(p, q, kind, rule, 1000003ull * i + 17);
        ++counts[static_cast<size_t>((t[0] * V + t[1]) * V + t[2])];
      }
      const auto r = chi_square(counts, exact);
      CAPTURE(static_cast<int>(kind));
      CAPTURE(r.statistic);
      CAPTURE(r.dof);
      if (rule == AcceptRule::kExact) CHECK(r.p_value > kPass);
      else CHECK(r.p_value < kPass);  // the wrong rule is caught
    }
  }
}

namespace {

// Proposes the same tokens whatever the history: a drafter as bad as allowed, with certainty.
class FixedDrafter final : public Drafter {
 public:
  explicit FixedDrafter(std::vector<int32_t> t) : tokens_(std::move(t)) {}
  const char* name() const override { return "fixed"; }
  Status propose(std::span<const DraftRequest> reqs, std::span<Draft> out) override {
    for (size_t i = 0; i < reqs.size(); ++i) {
      out[i].clear();
      out[i].tokens.assign(tokens_.begin(), tokens_.begin() + std::min<size_t>(tokens_.size(), reqs[i].k));
    }
    return Status::Ok();
  }

 private:
  std::vector<int32_t> tokens_;
};

}  // namespace

TEST_CASE("speculative sampling on stories260K: the first two tokens keep the model's distribution") {
  const std::string tpath = test::testdata_file("models/stories260K-f32.gguf");
  const std::string dpath = test::testdata_file("models/stories260K-q4_0.gguf");
  if (tpath.empty() || dpath.empty()) return;
  ContextOptions co;  // one thread: thousands of tiny decodes, no thread-pool waits
  co.n_ctx = 64;
  co.n_threads = 1;
  auto tf = gguf::File::open(tpath);
  REQUIRE(tf.ok());
  const test::CpuModel target = test::load_cpu_model(std::move(tf.value()), co);
  auto df = gguf::File::open(dpath);
  REQUIRE(df.ok());
  const test::CpuModel draft = test::load_cpu_model(std::move(df.value()), co);
  Context& ctx = *target.ctx;
  // <s> Once upon a time, there was a little: "girl" or "boy" next, then several ways on.
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376};

  // Exact: P(t1, t2) = p1(t1) p2(t2 | t1), from the target's logits (softmax at temperature 1).
  REQUIRE(ctx.decode({.tokens = prompt}).ok());
  const std::vector<double> p1 = softmax(ctx.logits(-1).value());
  const size_t V = p1.size();
  std::vector<double> exact(V * V, 0.0);
  for (size_t a = 0; a < V; ++a) {
    if (p1[a] < 1e-7) continue;  // cannot reach an expected count of 5 here
    std::vector<int32_t> pa = prompt;
    pa.push_back(static_cast<int32_t>(a));
    ctx.kv().clear();
    REQUIRE(ctx.decode({.tokens = pa}).ok());
    const std::vector<double> p2 = softmax(ctx.logits(-1).value());
    for (size_t b = 0; b < V; ++b) exact[a * V + b] = p1[a] * p2[b];
  }
  // The fixed drafter always proposes the second token d for which the wrong rule moves the
  // most probability (it turns P(d | a) = p into p (2 - p)): certain, and often wrong.
  int32_t b_top = 0;
  double best = -1;
  for (size_t b = 0; b < V; ++b) {
    double shift = 0;
    for (size_t a = 0; a < V; ++a)
      if (p1[a] > 0) shift += p1[a] * (exact[a * V + b] / p1[a]) * (1 - exact[a * V + b] / p1[a]);
    if (shift > best) best = shift, b_top = static_cast<int32_t>(b);
  }

  auto model_drafter = make_model_drafter(*draft.ctx, *target.model);
  REQUIRE(model_drafter.ok());
  FixedDrafter fixed({b_top, b_top, b_top});
  struct Config {
    const char* name;
    Drafter* drafter;
    AcceptRule rule;
  };
  const Config configs[] = {{"draft model (stories260K-q4_0)", model_drafter.value().get(), AcceptRule::kExact},
                            {"fixed drafter", &fixed, AcceptRule::kExact},
                            {"fixed drafter, wrong rule", &fixed, AcceptRule::kWrongResampleFromTarget}};
  const int kDraws = test::kSanitized ? 1000 : 3000;
  for (const Config& c : configs) {
    if (test::kSanitized && c.rule != AcceptRule::kExact) continue;
    const std::string name = c.name;
    CAPTURE(name);
    std::vector<int64_t> counts(V * V, 0);
    GenerateOptions go;
    go.max_tokens = 3;  // the first token plain; a draft then proposes the second
    go.stop_at_eog = false;
    go.drafter = c.drafter;
    go.k_max = 3;
    go.rule = c.rule;
    int64_t drafted = 0;
    for (int i = 0; i < kDraws; ++i) {
      std::vector<int32_t> out;
      go.on_token = [&](int32_t t) {
        out.push_back(t);
        return true;
      };
      Sampler s(plain(7919ull * i + 3));
      GenerateResult res;
      REQUIRE(generate(ctx, prompt, s, go, &res).ok());
      REQUIRE(out.size() == 3);
      ++counts[static_cast<size_t>(out[0]) * V + static_cast<size_t>(out[1])];
      drafted += res.spec.drafted;
    }
    REQUIRE(drafted > 0);  // the second token always came out of a verified draft
    const auto r = chi_square(counts, exact);
    CAPTURE(r.statistic);
    CAPTURE(r.dof);
    if (c.rule == AcceptRule::kExact) CHECK(r.p_value > kPass);
    else CHECK(r.p_value < kPass);
  }
}
