// kestrel_embed through the C API: the model's pooling (stories has no key: last token), inputs
// batched equal inputs alone, unit length when normalized, the size query, and refusals.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/testdata.h"
#include "kestrel.h"

TEST_CASE("kestrel_embed: pooling, batching, normalization, sizes") {
  const std::string path = kestrel::test::testdata_file("models/stories260K-f32.gguf");
  if (path.empty()) return;
  kestrel_model* model = nullptr;
  REQUIRE(kestrel_model_load(path.c_str(), nullptr, &model) == KESTREL_OK);
  kestrel_context_options co;
  kestrel_context_options_init(&co);
  co.n_ctx = 256;
  co.n_seq_max = 2;  // three inputs: two decodes
  kestrel_context* ctx = nullptr;
  REQUIRE(kestrel_context_new(model, &co, &ctx) == KESTREL_OK);
  std::vector<kestrel_token> tokens;
  std::vector<int32_t> lengths;
  for (const char* text : {"Once upon a time", "The cat sat on the mat.", "Hi"}) {
    kestrel_token t[64];
    size_t n = 0;
    REQUIRE(kestrel_tokenize(model, text, std::char_traits<char>::length(text), true, false, t, 64, &n) == KESTREL_OK);
    tokens.insert(tokens.end(), t, t + n);
    lengths.push_back(static_cast<int32_t>(n));
  }
  size_t need = 0;
  CHECK(kestrel_embed(ctx, tokens.data(), lengths.data(), 3, KESTREL_POOLING_MODEL, true, nullptr, 0, &need) ==
        KESTREL_ERR_BUFFER_TOO_SMALL);
  REQUIRE(need % 3 == 0);
  const size_t E = need / 3;
  std::vector<float> all(need), last(need);
  size_t n_out = 0;
  REQUIRE(kestrel_embed(ctx, tokens.data(), lengths.data(), 3, KESTREL_POOLING_MODEL, true, all.data(), all.size(), &n_out) ==
          KESTREL_OK);
  CHECK(n_out == need);
  REQUIRE(kestrel_embed(ctx, tokens.data(), lengths.data(), 3, KESTREL_POOLING_LAST, true, last.data(), last.size(), &n_out) ==
          KESTREL_OK);
  CHECK(all == last);  // no pooling key: the last token
  size_t at = 0;
  for (int i = 0; i < 3; ++i) {
    std::vector<float> one(E);
    REQUIRE(kestrel_embed(ctx, tokens.data() + at, &lengths[static_cast<size_t>(i)], 1, KESTREL_POOLING_MEAN, true, one.data(),
                          one.size(), &n_out) == KESTREL_OK);
    std::vector<float> mean(need);
    REQUIRE(kestrel_embed(ctx, tokens.data(), lengths.data(), 3, KESTREL_POOLING_MEAN, true, mean.data(), mean.size(),
                          &n_out) == KESTREL_OK);
    double len = 0;
    for (size_t k = 0; k < E; ++k) {
      CHECK(one[k] == doctest::Approx(mean[static_cast<size_t>(i) * E + k]).epsilon(1e-5));
      len += static_cast<double>(one[k]) * one[k];
    }
    CHECK(std::sqrt(len) == doctest::Approx(1.0).epsilon(1e-5));
    at += static_cast<size_t>(lengths[static_cast<size_t>(i)]);
  }
  // Refusals.
  const int32_t zero = 0;
  CHECK(kestrel_embed(ctx, tokens.data(), &zero, 1, KESTREL_POOLING_MEAN, true, all.data(), all.size(), &n_out) ==
        KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(kestrel_embed(ctx, tokens.data(), lengths.data(), 0, KESTREL_POOLING_MEAN, true, all.data(), all.size(), &n_out) ==
        KESTREL_ERR_INVALID_ARGUMENT);
  CHECK(kestrel_embed(ctx, tokens.data(), lengths.data(), 1, 7, true, all.data(), all.size(),
                      &n_out) == KESTREL_ERR_INVALID_ARGUMENT);
  const kestrel_token bad[2] = {1, 99999};
  const int32_t two = 2;
  CHECK(kestrel_embed(ctx, bad, &two, 1, KESTREL_POOLING_MEAN, true, all.data(), all.size(), &n_out) != KESTREL_OK);
  kestrel_context_free(ctx);
  kestrel_model_free(model);
}
