// SVG line charts for kestrel perf --plot: one self-contained file (no scripts, no external
// assets) with a grid of charts, log axes where asked, a legend per chart.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace kestrel::cli {

struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y); non-positive values are skipped on log axes
  bool markers = false;                           // points only, no line (measured or predicted points on a roofline)
};

struct PlotChart {
  std::string title, x_label, y_label;
  bool log_x = false, log_y = false;
  std::vector<PlotSeries> series;
};

// The charts two to a row under a title.
std::string svg_charts(const std::string& title, const std::vector<PlotChart>& charts);

}  // namespace kestrel::cli
