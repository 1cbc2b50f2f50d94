// Pearson's chi-square goodness-of-fit test against exact probabilities, for the speculative
// sampling tests: cells with an expected count of at least 5 are kept, the rest pooled into one.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

namespace kestrel::test {

// Upper regularized incomplete gamma Q(a, x): a series below a + 1, a continued fraction (modified
// Lentz) above, as in the standard numerical recipe.
inline double gamma_q(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_front = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 10000 && std::fabs(term) > std::fabs(sum) * 1e-16; ++n) {
      term *= x / (a + n);
      sum += term;
    }
    return 1.0 - sum * std::exp(log_front);
  }
  constexpr double kTiny = 1e-300;
  double b = x + 1 - a, c = 1 / kTiny, d = 1 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1) < 1e-16) break;
  }
  return std::exp(log_front) * h;
}

struct ChiSquare {
  double statistic = 0;
  int dof = 0;
  double p_value = 1;
  bool outside_support = false;  // an outcome of probability 0 was drawn (then p_value is 0)
};

// counts[i] observed out of n draws, prob[i] the exact probability of outcome i (summing to 1).
// Cells expected fewer than 5 times are pooled; a pool still under 5 joins the smallest cell.
inline ChiSquare chi_square(const std::vector<int64_t>& counts, const std::vector<double>& prob) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  ChiSquare r;
  std::vector<double> obs, exp;
  double pooled_o = 0, pooled_e = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double e = prob[i] * static_cast<double>(n), o = static_cast<double>(counts[i]);
    if (prob[i] == 0.0) {
      r.outside_support |= counts[i] != 0;
    } else if (e >= 5) {
      obs.push_back(o), exp.push_back(e);
    } else {
      pooled_o += o, pooled_e += e;
    }
  }
  if (pooled_e >= 5 || obs.empty()) {
    obs.push_back(pooled_o), exp.push_back(pooled_e);
  } else {
    size_t smallest = 0;
    for (size_t i = 1; i < exp.size(); ++i)
      if (exp[i] < exp[smallest]) smallest = i;
    obs[smallest] += pooled_o, exp[smallest] += pooled_e;
  }
  for (size_t i = 0; i < obs.size(); ++i)
    r.statistic += exp[i] > 0 ? (obs[i] - exp[i]) * (obs[i] - exp[i]) / exp[i] : (obs[i] > 0 ? INFINITY : 0.0);
  r.dof = static_cast<int>(obs.size()) - 1;
  r.p_value = r.dof > 0 ? gamma_q(r.dof / 2.0, r.statistic / 2.0) : (r.statistic > 0 ? 0.0 : 1.0);
  if (r.outside_support) r.p_value = 0;
  return r;
}

}  // namespace kestrel::test
