#include "fulcrum/report/bar_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "fulcrum/report/html.h"

namespace fulcrum {

std::string stacked_bars_svg(const std::string& id, const std::vector<StackedBar>& bars,
                             const std::vector<std::string>& colours, double scale_max, double cap,
                             std::string (*format)(double)) {
  constexpr double kLabel = 92, kWidth = 1100, kBar = 16, kGap = 6, kValue = 110;
  const double plot = kWidth - kLabel - kValue;
  const double height = std::ceil(static_cast<double>(bars.size()) * (kBar + kGap) + 4);
  std::string out = fmt::format("<svg id=\"{}\" class=\"bars\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
                                "role=\"img\">",
                                html_escape(id), kWidth, svg_number(height), kWidth, svg_number(height));
  const double scale = scale_max > 0 ? plot / scale_max : 0;
  for (size_t b = 0; b < bars.size(); ++b) {
    const double y = static_cast<double>(b) * (kBar + kGap);
    out += fmt::format("<g class=\"bar\" data-row=\"{0}\"><text x=\"0\" y=\"{1}\">{0}</text>", html_escape(bars[b].name),
                       svg_number(y + kBar - 3));
    double x = kLabel;
    for (size_t p = 0; p < bars[b].parts.size(); ++p) {
      const double w = std::max(0.0, bars[b].parts[p]) * scale;
      if (w <= 0 || colours.empty()) continue;
      out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}</title></rect>",
                         svg_number(x), svg_number(y), svg_number(w), svg_number(kBar),
                         html_escape(colours[p % colours.size()]), html_escape(format(bars[b].parts[p])));
      x += w;
    }
    const double total = std::accumulate(bars[b].parts.begin(), bars[b].parts.end(), 0.0);
    out += fmt::format("<text x=\"{}\" y=\"{}\">{}</text></g>", svg_number(x + 6), svg_number(y + kBar - 3),
                       html_escape(format(total)));
  }
  if (cap > 0) {
    const double x = kLabel + cap * scale;
    out += fmt::format("<line x1=\"{0}\" y1=\"0\" x2=\"{0}\" y2=\"{1}\" class=\"cap\"/>", svg_number(x),
                       svg_number(height));
  }
  return out + "</svg>";
}

std::string legend_list_html(const std::vector<std::string>& names, const std::vector<std::string>& colours) {
  std::string out = "<ul class=\"legend\">";
  for (size_t i = 0; i < names.size() && i < colours.size(); ++i) {
    out += fmt::format("<li>{}{}</li>", swatch_html(colours[i]), html_escape(names[i]));
  }
  return out + "</ul>";
}

}  // namespace fulcrum
