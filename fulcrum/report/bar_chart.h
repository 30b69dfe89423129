#ifndef FULCRUM_REPORT_BAR_CHART_H_
#define FULCRUM_REPORT_BAR_CHART_H_

#include <string>
#include <vector>

namespace fulcrum {

// One horizontal bar of stacked parts (seconds, bytes), drawn left to right in order.
struct StackedBar {
  std::string name;
  std::vector<double> parts;
};

// Horizontal stacked bars on one scale (`scale_max` fills the plot), each a <g class="bar">, the i-th part of
// every bar in colours[i], its total written after it by `format`; `cap` > 0 draws a line at that value.
std::string stacked_bars_svg(const std::string& id, const std::vector<StackedBar>& bars,
                             const std::vector<std::string>& colours, double scale_max, double cap,
                             std::string (*format)(double));

// A legend: each name after a swatch of its colour.
std::string legend_list_html(const std::vector<std::string>& names, const std::vector<std::string>& colours);

}  // namespace fulcrum

#endif  // FULCRUM_REPORT_BAR_CHART_H_
