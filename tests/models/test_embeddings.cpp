// Embeddings (engine/embed.h): for each pooling type, the pooled vector equals a hand
// computation from the model's hidden states (the final hidden state of every token, captured
// before the output norm, then RMS-normed with output_norm's weights here, pooled and
// normalized); several inputs batched into one decode equal each input alone; bad inputs are
// errors naming them. On the stories model and a random-weight Qwen3 (a decoder used for
// embeddings: last-token pooling by default).
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/cpu_model.h"
#include "common/testdata.h"
#include "engine/embed.h"

using namespace kestrel;

namespace {

// The pooled, normalized embedding of one input, by hand from the pre-norm hidden states.
std::vector<double> by_hand(Context& ctx, const std::vector<int32_t>& tokens, Pooling pooling, bool normalize) {
  ctx.kv().clear();
  std::unique_ptr<bool[]> want(new bool[tokens.size()]);
  std::fill(want.get(), want.get() + tokens.size(), true);
  REQUIRE(ctx.decode({.tokens = tokens, .want_logits = {want.get(), tokens.size()}}).ok());
  const Model& m = ctx.model();
  const size_t E = static_cast<size_t>(m.hparams().n_embd);
  const Tensor* norm = m.weights().output_norm;
  REQUIRE(norm->type == DType::F32);
  const float* w = static_cast<const float*>(norm->data);
  const size_t n = tokens.size();
  const size_t r0 = pooling == Pooling::kLast ? n - 1 : 0, r1 = pooling == Pooling::kMean ? n : r0 + 1;
  std::vector<double> acc(E, 0.0);
  for (size_t r = r0; r < r1; ++r) {
    auto h = ctx.hidden(static_cast<int32_t>(r));
    REQUIRE(h.ok());
    double ss = 0;
    for (size_t k = 0; k < E; ++k) ss += static_cast<double>(h.value()[k]) * h.value()[k];
    const double scale = 1.0 / std::sqrt(ss / static_cast<double>(E) + m.hparams().rms_eps);
    for (size_t k = 0; k < E; ++k) acc[k] += h.value()[k] * scale * w[k];
  }
  double len = 0;
  for (double& x : acc) {
    x /= static_cast<double>(r1 - r0);
    len += x * x;
  }
  if (normalize)
    for (double& x : acc) x /= std::sqrt(len);
  ctx.kv().clear();
  return acc;
}

void check_model(const std::string& rel, Pooling default_pooling) {
  const std::string path = test::testdata_file(rel);
  if (path.empty()) return;
  auto file = gguf::File::open(path);
  REQUIRE(file.ok());
  ContextOptions co;
  co.n_ctx = 256;
  co.n_seq_max = 4;
  co.n_batch = 16;  // inputs longer than a step: pooling spans steps
  co.capture_hidden = true;
  const test::CpuModel m = test::load_cpu_model(std::move(file.value()), co);
  auto p = model_pooling(*m.model);
  REQUIRE(p.ok());
  CHECK(p.value() == default_pooling);
  const size_t E = static_cast<size_t>(m.model->hparams().n_embd);
  const int32_t V = m.model->hparams().n_vocab;
  std::vector<std::vector<int32_t>> inputs;
  for (size_t len : {1, 5, 23, 40, 7}) {
    std::vector<int32_t> t;
    for (size_t i = 0; i < len; ++i) t.push_back(static_cast<int32_t>((i * 37 + len * 11 + 3) % static_cast<size_t>(V)));
    inputs.push_back(t);
  }
  std::vector<std::span<const int32_t>> spans(inputs.begin(), inputs.end());
  for (Pooling pooling : {Pooling::kMean, Pooling::kCls, Pooling::kLast}) {
    for (bool normalize : {true, false}) {
      CAPTURE(static_cast<int>(pooling));
      CAPTURE(normalize);
      std::vector<float> batched;
      REQUIRE(embed(*m.ctx, spans, pooling, normalize, &batched).ok());
      REQUIRE(batched.size() == inputs.size() * E);
      for (size_t i = 0; i < inputs.size(); ++i) {
        CAPTURE(i);
        const std::vector<double> want = by_hand(*m.ctx, inputs[i], pooling, normalize);
        std::vector<float> alone;
        REQUIRE(embed(*m.ctx, std::vector<std::span<const int32_t>>{spans[i]}, pooling, normalize, &alone).ok());
        double err = 0, len = 0;
        for (size_t k = 0; k < E; ++k) {
          err = std::max(err, std::fabs(batched[i * E + k] - want[k]));
          len += static_cast<double>(batched[i * E + k]) * batched[i * E + k];
          CHECK(alone[k] == doctest::Approx(batched[i * E + k]).epsilon(1e-5));
        }
        CHECK(err < 1e-6 * std::max(1.0, std::sqrt(len)));  // measured: below 4e-8 relative
        if (normalize) CHECK(std::sqrt(len) == doctest::Approx(1.0).epsilon(1e-5));
      }
    }
  }
  // Bad inputs, named; the context still works after them.
  std::vector<int32_t> empty, too_long(300, 1), bad_id = {1, V + 5};
  std::vector<float> out;
  Status st = embed(*m.ctx, std::vector<std::span<const int32_t>>{spans[0], empty}, Pooling::kMean, true, &out);
  CHECK(st.code() == KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(st.message().find("input 1") != std::string::npos);
  CHECK(embed(*m.ctx, std::vector<std::span<const int32_t>>{too_long}, Pooling::kMean, true, &out).code() ==
        KESTREL_ERR_CONTEXT_FULL);
  CHECK_FALSE(embed(*m.ctx, std::vector<std::span<const int32_t>>{bad_id}, Pooling::kMean, true, &out).ok());
  CHECK(embed(*m.ctx, spans, Pooling::kLast, true, &out).ok());
}

}  // namespace

TEST_CASE("embeddings equal a hand computation from the hidden states, batched or alone") {
  check_model("models/stories260K-f32.gguf", Pooling::kLast);
}

TEST_CASE("a decoder model (random-weight Qwen3) used for embeddings") {
  check_model("models/qwen3-f32.gguf", Pooling::kLast);
}
