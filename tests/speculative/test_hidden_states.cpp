// The hidden-state hook (ContextOptions::capture_hidden) EAGLE/MTP-style drafters will read: the
// captured rows are exactly the output head's input (RMS norm, gain and the output matrix turn
// them into the logits), they do not depend on the batch, and asking without the option is an
// error.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "common/cpu_model.h"
#include "common/testdata.h"

using namespace kestrel;

TEST_CASE("hidden states: the output head's input, for every row with logits, batch-independent") {
  const std::string path = test::testdata_file("models/stories260K-f32.gguf");
  if (path.empty()) return;
  auto file = gguf::File::open(path);
  REQUIRE(file.ok());
  ContextOptions co;
  co.n_ctx = 64;
  co.capture_hidden = true;
  const test::CpuModel cm = test::load_cpu_model(std::move(file.value()), co);
  const Model& m = *cm.model;
  Context& ctx = *cm.ctx;
  const std::vector<int32_t> tokens = {1, 403, 407, 261, 378};
  const bool want[] = {false, true, false, true, true};
  REQUIRE(ctx.decode({.tokens = tokens, .want_logits = want}).ok());
  const int64_t E = m.hparams().n_embd, V = m.hparams().n_vocab;
  const Tensor& gain = *m.weights().output_norm;
  const Tensor& out = *m.weights().output;
  REQUIRE(gain.type == DType::F32);
  REQUIRE(out.type == DType::F32);
  std::vector<float> last_hidden;
  for (int32_t row : {1, 3, 4}) {
    CAPTURE(row);
    auto h = ctx.hidden(row);
    REQUIRE(h.ok());
    REQUIRE(static_cast<int64_t>(h->size()) == E);
    // logits = output . (gain * h / rms(h)), in double.
    double ss = 0;
    for (float v : h.value()) ss += static_cast<double>(v) * v;
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(E) + m.hparams().rms_eps);
    const auto logits = ctx.logits(row).value();
    for (int64_t v = 0; v < V; v += 37) {
      double z = 0;
      const float* w = reinterpret_cast<const float*>(out.row(v));
      for (int64_t j = 0; j < E; ++j) z += static_cast<double>(w[j]) * gain.f32(0)[j] * h.value()[j] * inv;
      CHECK(logits[v] == doctest::Approx(z).epsilon(1e-4).scale(1.0));
    }
    last_hidden.assign(h->begin(), h->end());
  }
  CHECK_FALSE(ctx.hidden(0).ok());  // a row without logits has no hidden state kept

  // The last token alone, after the others are cached: the same bits.
  REQUIRE(ctx.kv().seq_remove(0, 4, -1).ok());
  REQUIRE(ctx.decode({.tokens = std::span<const int32_t>(tokens).subspan(4)}).ok());
  auto alone = ctx.hidden(-1);
  REQUIRE(alone.ok());
  CHECK(std::memcmp(alone->data(), last_hidden.data(), last_hidden.size() * sizeof(float)) == 0);

  co.capture_hidden = false;
  auto plain = Context::create(m, co);
  REQUIRE(plain.ok());
  REQUIRE(plain.value()->decode({.tokens = tokens}).ok());
  auto none = plain.value()->hidden(-1);
  CHECK_FALSE(none.ok());
  CHECK(none.status().message().find("capture_hidden") != std::string::npos);
}
