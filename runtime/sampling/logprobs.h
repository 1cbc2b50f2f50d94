// Log-probabilities of a logits row (log-softmax), as OpenAI's logprobs report them: the model's
// distribution at that position, before any sampling transform (bias, penalties, temperature,
// truncation, grammar).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace kestrel {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0;
};

// The log-probability of `token` (NaN for -1), and in *top the k most likely tokens, most likely
// first, equal logits by lower id. The normalizer is summed in double.
float log_softmax_top(std::span<const float> logits, int32_t token, int k, std::vector<TokenLogprob>* top);

}  // namespace kestrel
