#include "sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace kestrel {

float log_softmax_top(std::span<const float> logits, int32_t token, int k, std::vector<TokenLogprob>* top) {
  if (top) top->clear();
  if (logits.empty()) return std::numeric_limits<float>::quiet_NaN();
  float m = -std::numeric_limits<float>::infinity();
  for (const float x : logits) m = std::max(m, x);
  double sum = 0;
  for (const float x : logits) sum += std::exp(static_cast<double>(x) - m);
  const double lse = m + std::log(sum);
  if (top && k > 0) {
    const size_t n = std::min(static_cast<size_t>(k), logits.size());
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    // NaN orders as -inf (a strict weak order whatever the row holds).
    const auto key = [&](int32_t i) { return std::isnan(logits[i]) ? -std::numeric_limits<float>::infinity() : logits[i]; };
    const auto before = [&](int32_t a, int32_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); };
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(), before);
    for (size_t i = 0; i < n; ++i) top->push_back({ids[i], static_cast<float>(logits[ids[i]] - lse)});
  }
  if (token < 0 || static_cast<size_t>(token) >= logits.size()) return std::numeric_limits<float>::quiet_NaN();
  return static_cast<float>(logits[token] - lse);
}

}  // namespace kestrel
