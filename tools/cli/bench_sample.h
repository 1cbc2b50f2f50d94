// One bench test's repetitions (tokens/s, or GB/s for a probe) and the statistics the tables
// show: llama-bench's mean and standard deviation, and the median.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

namespace kestrel::cli {

struct Sample {
  std::vector<double> ts;  // one value per repetition (tokens/s, or GB/s for a probe)
  double mean() const {
    double s = 0;
    for (double v : ts) s += v;
    return ts.empty() ? 0 : s / static_cast<double>(ts.size());
  }
  double stddev() const {
    if (ts.size() < 2) return 0;
    const double m = mean();
    double s = 0;
    for (double v : ts) s += (v - m) * (v - m);
    return std::sqrt(s / static_cast<double>(ts.size() - 1));
  }
  double median() const {
    std::vector<double> v = ts;
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : (v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2);
  }
};

}  // namespace kestrel::cli
