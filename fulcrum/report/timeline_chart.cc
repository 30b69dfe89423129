#include "fulcrum/report/timeline_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "fulcrum/report/html.h"

namespace fulcrum {
namespace {

constexpr double kMinLabelWidthPx = 92;
constexpr double kMaxLabelWidthPx = 300;
constexpr double kNameCharPx = 6.2;  // an 11 px sans-serif character, on average
constexpr double kCommHeightPx = 5;
constexpr double kRowGapPx = 6;
constexpr double kAxisHeightPx = 26;

// A step of 1, 2 or 5 times a power of ten giving about `ticks` ticks over `span`.
double tick_step(double span, int ticks) {
  const double raw = span / ticks;
  if (!(raw > 0) || !std::isfinite(raw)) return std::isfinite(span) && span > 0 ? span : 1;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  if (!(power > 0)) return span;
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * power >= raw) return m * power;
  }
  return 10 * power;
}

double chart_end(const TimelineChart& chart) {
  double end = chart.end_seconds;
  if (end <= 0) {
    for (const ChartRow& r : chart.rows) {
      for (const auto* band : {&r.work, &r.comm}) {
        for (const ChartInterval& i : *band) end = std::max(end, i.end_seconds);
      }
    }
  }
  return end > 0 && std::isfinite(end) ? end : 1;
}

void draw_band(std::string& out, const std::vector<ChartInterval>& band, const std::vector<ChartKind>& kinds,
               double y, double height, double x0, double px_per_second, double gap_seconds) {
  std::vector<ChartInterval> sorted = band;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const ChartInterval& a, const ChartInterval& b) { return a.start_seconds < b.start_seconds; });
  // One group per kind, its colour set once.
  std::map<int, std::string> groups;
  for (const ChartInterval& i : merge_adjacent(std::move(sorted), gap_seconds)) {
    const double x = x0 + i.start_seconds * px_per_second;
    const double w = std::max(0.3, (i.end_seconds - i.start_seconds) * px_per_second);
    groups[i.kind] += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"><title>{}</title></rect>",
                                  svg_number(x), svg_number(y), svg_number(w), svg_number(height),
                                  html_escape(fmt::format("{}: {} – {}", i.label, human_seconds(i.start_seconds),
                                                          human_seconds(i.end_seconds))));
  }
  for (const auto& [kind, rects] : groups) {
    const std::string& colour = kind >= 0 && kind < static_cast<int>(kinds.size()) ? kinds[kind].colour : "#999999";
    out += fmt::format("<g fill=\"{}\" data-kind=\"{}\">{}</g>", html_escape(colour), kind, rects);
  }
}

// Characters, not bytes, of UTF-8 text; and its first `chars` characters.
size_t utf8_length(const std::string& text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}
std::string utf8_prefix(const std::string& text, size_t chars) {
  size_t seen = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80 && seen++ == chars) return text.substr(0, i);
  }
  return text;
}

}  // namespace

std::vector<ChartInterval> merge_adjacent(std::vector<ChartInterval> intervals, double gap_seconds) {
  std::vector<ChartInterval> out;
  std::vector<std::string> first_labels;  // of each run merged into out[i]
  out.reserve(intervals.size());
  for (ChartInterval& i : intervals) {
    if (!out.empty()) {
      ChartInterval& last = out.back();
      if (last.kind == i.kind && i.start_seconds - last.end_seconds < gap_seconds) {
        last.end_seconds = std::max(last.end_seconds, i.end_seconds);
        last.count += i.count;
        last.label = fmt::format("{} … {} ({} in a row)", first_labels.back(), i.label, last.count);
        continue;
      }
    }
    first_labels.push_back(i.label);
    out.push_back(std::move(i));
  }
  return out;
}

std::string timeline_svg(const TimelineChart& chart, int width_px) {
  const double end = chart_end(chart);
  // The name column as wide as the longest name needs, within bounds; a longer name is cut, whole in its tooltip.
  size_t longest = 0;
  for (const ChartRow& r : chart.rows) longest = std::max(longest, utf8_length(r.name));
  const double label_width_px =
      std::clamp(std::ceil(static_cast<double>(longest) * kNameCharPx) + 8, kMinLabelWidthPx, kMaxLabelWidthPx);
  const size_t name_chars = static_cast<size_t>((label_width_px - 8) / kNameCharPx);
  const double plot_width = std::max(100.0, width_px - label_width_px - 10);
  const double px_per_second = plot_width / end;
  const double gap_seconds = 0.5 / px_per_second;
  bool any_comm = false;
  for (const ChartRow& r : chart.rows) any_comm = any_comm || !r.comm.empty();
  const double row_height = std::max(2.0, chart.row_height_px);
  const double row_pitch = row_height + (any_comm ? kCommHeightPx + 1 : 0) + kRowGapPx * std::min(1.0, row_height / 20);
  const double height = std::ceil(static_cast<double>(chart.rows.size()) * row_pitch + kAxisHeightPx);
  std::string out = fmt::format(
      "<svg id=\"{}\" class=\"timeline\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\">",
      html_escape(chart.id), width_px, svg_number(height), width_px, svg_number(height));
  for (size_t r = 0; r < chart.rows.size(); ++r) {
    const ChartRow& row = chart.rows[r];
    const double y = static_cast<double>(r) * row_pitch;
    out += fmt::format("<g class=\"timeline-row\" data-row=\"{}\">", html_escape(row.name));
    // Names 11 px high: on rows closer than that, every few rows' only.
    const size_t label_every = row_pitch >= 12 ? 1 : static_cast<size_t>(std::ceil(12 / row_pitch));
    if (r % label_every == 0) {
      const std::string shown = utf8_length(row.name) > name_chars ? utf8_prefix(row.name, name_chars - 1) + "…" : row.name;
      out += fmt::format("<text x=\"0\" y=\"{}\" class=\"row-name\"><title>{}</title>{}</text>",
                         svg_number(y + row_height / 2 + 4), html_escape(row.name), html_escape(shown));
    }
    out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" class=\"idle\"/>", svg_number(label_width_px),
                       svg_number(y), svg_number(plot_width), svg_number(row_height));
    draw_band(out, row.work, chart.kinds, y, row_height, label_width_px, px_per_second, gap_seconds);
    if (!row.comm.empty()) {
      draw_band(out, row.comm, chart.kinds, y + row_height + 1, kCommHeightPx, label_width_px, px_per_second, gap_seconds);
    }
    out += "</g>";
  }
  const double rows_bottom = static_cast<double>(chart.rows.size()) * row_pitch;
  for (double m : chart.markers) {
    const double x = label_width_px + m * px_per_second;
    out += fmt::format("<line x1=\"{0}\" y1=\"0\" x2=\"{0}\" y2=\"{1}\" class=\"marker\"/>", svg_number(x),
                       svg_number(rows_bottom - kRowGapPx));
  }
  // The axis: ticks of 1, 2 or 5 × a power of ten.
  const double step = tick_step(end, 8);
  out += "<g class=\"axis\">";
  out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/>", svg_number(label_width_px),
                     svg_number(rows_bottom), svg_number(label_width_px + plot_width));
  for (int t = 0; t <= 20 && t * step <= end * (1 + 1e-9); ++t) {
    const double x = label_width_px + t * step * px_per_second;
    out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/><text x=\"{0}\" y=\"{3}\">{4}</text>",
                       svg_number(x), svg_number(rows_bottom), svg_number(rows_bottom + 4),
                       svg_number(rows_bottom + 17), html_escape(human_seconds(t * step)));
  }
  out += "</g></svg>";
  return out;
}

std::string legend_html(const TimelineChart& chart) {
  std::set<int> used;
  for (const ChartRow& r : chart.rows) {
    for (const auto* band : {&r.work, &r.comm}) {
      for (const ChartInterval& i : *band) used.insert(i.kind);
    }
  }
  std::string out = "<ul class=\"legend\">";
  for (int k : used) {
    if (k < 0 || k >= static_cast<int>(chart.kinds.size())) continue;
    out += fmt::format("<li>{}{}</li>", swatch_html(chart.kinds[k].colour), html_escape(chart.kinds[k].name));
  }
  out += fmt::format("<li>{}idle</li></ul>", swatch_html("#f4f4f4"));
  return out;
}

}  // namespace fulcrum
