#include "perf_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kestrel::cli {
namespace {

constexpr double kW = 520, kH = 340;                       // one chart's box
constexpr double kLeft = 70, kRight = 20, kTop = 36, kBottom = 48;  // its plot area's margins
const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"};

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

std::string num(double v) {
  char b[32];
  const double a = std::fabs(v);
  if (a >= 1e6 || (a > 0 && a < 1e-2)) std::snprintf(b, sizeof b, "%.0e", v);
  else if (a >= 100 || a == std::floor(a)) std::snprintf(b, sizeof b, "%.0f", v);
  else std::snprintf(b, sizeof b, "%.2g", v);
  return b;
}

struct Axis {
  bool log = false;
  double lo = 0, hi = 1;
  double map(double v, double a, double b) const {  // value -> pixel between a and b
    const double t = log ? (std::log10(v) - lo) / (hi - lo) : (v - lo) / (hi - lo);
    return a + t * (b - a);
  }
  std::vector<double> ticks() const {
    std::vector<double> t;
    if (log) {
      for (double e = std::ceil(lo); e <= hi + 1e-9; ++e) t.push_back(std::pow(10.0, e));
      if (t.size() < 2) t = {std::pow(10.0, lo), std::pow(10.0, hi)};
      return t;
    }
    // About five ticks at 1, 2 or 5 times a power of ten.
    const double raw = (hi - lo) / 5, mag = std::pow(10.0, std::floor(std::log10(raw))), n = raw / mag;
    const double s = mag * (n < 1.5 ? 1 : n < 3.5 ? 2 : n < 7.5 ? 5 : 10);
    for (double v = std::ceil(lo / s) * s; v <= hi + 1e-9; v += s) t.push_back(v);
    return t;
  }
};

Axis make_axis(bool log, double lo, double hi) {
  Axis a;
  a.log = log;
  if (log) {
    lo = std::log10(lo), hi = std::log10(hi);
    lo = std::floor(lo), hi = std::ceil(hi);
  } else {
    lo = std::min(lo, 0.0);
    hi = hi > lo ? hi * 1.05 : lo + 1;
  }
  if (hi <= lo) hi = lo + 1;
  a.lo = lo, a.hi = hi;
  return a;
}

void chart(std::string& out, const PlotChart& c, double ox, double oy) {
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  for (const PlotSeries& s : c.series)
    for (auto [x, y] : s.points) {
      if ((c.log_x && x <= 0) || (c.log_y && y <= 0) || !std::isfinite(x) || !std::isfinite(y)) continue;
      xlo = std::min(xlo, x), xhi = std::max(xhi, x), ylo = std::min(ylo, y), yhi = std::max(yhi, y);
    }
  if (!std::isfinite(xlo)) xlo = 1, xhi = 10, ylo = 1, yhi = 10;
  const Axis ax = make_axis(c.log_x, xlo, xhi), ay = make_axis(c.log_y, ylo, yhi);
  const double x0 = ox + kLeft, x1 = ox + kW - kRight, y0 = oy + kH - kBottom, y1 = oy + kTop;
  char b[512];
  out += "<g class=\"chart\">\n";
  std::snprintf(b, sizeof b, "<text x=\"%.1f\" y=\"%.1f\" class=\"title\">%s</text>\n", ox + kW / 2, oy + 20,
                esc(c.title).c_str());
  out += b;
  std::snprintf(b, sizeof b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" class=\"frame\"/>\n", x0, y1,
                x1 - x0, y0 - y1);
  out += b;
  // A grid line from (gx0, gy0) to (gx1, gy1) and its label at (lx, ly).
  auto tick = [&](double gx0, double gy0, double gx1, double gy1, double lx, double ly, const char* anchor, double t) {
    std::snprintf(b, sizeof b,
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/><text x=\"%.1f\" y=\"%.1f\" "
                  "class=\"tick\" text-anchor=\"%s\">%s</text>\n",
                  gx0, gy0, gx1, gy1, lx, ly, anchor, num(t).c_str());
    out += b;
  };
  for (double t : ax.ticks()) {
    const double x = ax.map(t, x0, x1);
    tick(x, y0, x, y1, x, y0 + 16, "middle", t);
  }
  for (double t : ay.ticks()) {
    const double y = ay.map(t, y0, y1);
    tick(x0, y, x1, y, x0 - 6, y + 4, "end", t);
  }
  std::snprintf(b, sizeof b, "<text x=\"%.1f\" y=\"%.1f\" class=\"label\" text-anchor=\"middle\">%s</text>\n",
                (x0 + x1) / 2, y0 + 36, esc(c.x_label).c_str());
  out += b;
  std::snprintf(b, sizeof b,
                "<text x=\"%.1f\" y=\"%.1f\" class=\"label\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f "
                "%.1f)\">%s</text>\n",
                ox + 16, (y0 + y1) / 2, ox + 16, (y0 + y1) / 2, esc(c.y_label).c_str());
  out += b;
  for (size_t i = 0; i < c.series.size(); ++i) {
    const PlotSeries& s = c.series[i];
    const char* color = kColors[i % (sizeof kColors / sizeof *kColors)];
    std::string pts;
    for (auto [x, y] : s.points) {
      if ((c.log_x && x <= 0) || (c.log_y && y <= 0) || !std::isfinite(x) || !std::isfinite(y)) continue;
      const double px = ax.map(x, x0, x1), py = ay.map(y, y0, y1);
      if (s.markers) {
        std::snprintf(b, sizeof b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", px, py, color);
        out += b;
      } else {
        std::snprintf(b, sizeof b, "%s%.1f,%.1f", pts.empty() ? "" : " ", px, py);
        pts += b;
      }
    }
    if (!pts.empty())
      out += "<polyline fill=\"none\" stroke=\"" + std::string(color) + "\" stroke-width=\"2\" points=\"" + pts + "\"/>\n";
    std::snprintf(b, sizeof b,
                  "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%.1f\" y=\"%.1f\" "
                  "class=\"legend\">%s</text>\n",
                  x0 + 8, y1 + 8 + 16.0 * i, color, x0 + 22, y1 + 17 + 16.0 * i, esc(s.name).c_str());
    out += b;
  }
  out += "</g>\n";
}

}  // namespace

std::string svg_charts(const std::string& title, const std::vector<PlotChart>& charts) {
  const int cols = charts.size() > 1 ? 2 : 1;
  const int rows = static_cast<int>((charts.size() + cols - 1) / cols);
  const double width = cols * kW, height = 40 + rows * kH;
  char b[512];
  std::snprintf(b, sizeof b,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\">\n",
                width, height, width, height);
  std::string out = b;
  out +=
      "<style>text{font-family:sans-serif;font-size:12px;fill:#222}.title{font-size:14px;font-weight:bold;"
      "text-anchor:middle}.frame{fill:none;stroke:#444}.grid{stroke:#ddd}.tick{font-size:11px;fill:#555}"
      ".legend{font-size:12px}</style>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::snprintf(b, sizeof b, "<text x=\"%.1f\" y=\"24\" class=\"title\">%s</text>\n", width / 2, esc(title).c_str());
  out += b;
  for (size_t i = 0; i < charts.size(); ++i)
    chart(out, charts[i], static_cast<double>(i % cols) * kW, 40 + static_cast<double>(i / cols) * kH);
  out += "</svg>\n";
  return out;
}

}  // namespace kestrel::cli
