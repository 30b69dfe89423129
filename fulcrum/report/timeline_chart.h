#ifndef FULCRUM_REPORT_TIMELINE_CHART_H_
#define FULCRUM_REPORT_TIMELINE_CHART_H_

#include <string>
#include <vector>

namespace fulcrum {

// A horizontal timeline drawn as inline SVG: rows of intervals, each of a kind that gives its colour and its
// legend entry. Time runs left to right from 0; what no interval covers is idle and stays blank.
struct ChartKind {
  std::string name;    // "LLM forward"
  std::string colour;  // "#rrggbb"
};

struct ChartInterval {
  double start_seconds = 0;
  double end_seconds = 0;
  int kind = 0;       // index into TimelineChart::kinds
  std::string label;  // what ran, shown on hover
  int count = 1;      // intervals it stands for, after merging
};

struct ChartRow {
  std::string name;                 // "rank 3"
  std::vector<ChartInterval> work;  // the row's main band (compute)
  std::vector<ChartInterval> comm;  // a thin band under it (communication streams); may be empty
};

struct TimelineChart {
  std::string id;  // the SVG element's id
  std::vector<ChartKind> kinds;
  std::vector<ChartRow> rows;
  double end_seconds = 0;        // where the axis ends; 0: the last interval's end
  std::vector<double> markers;   // times drawn as thin vertical lines (wave boundaries)
  double row_height_px = 20;     // of each row's main band
};

// `intervals` in start order, each merged into the one before it when both are of one kind and the gap between
// them is under `gap_seconds`: the merged interval spans the first's start to the last's end, counts them all
// and says so in its label. Nothing is dropped: the total count stays the same.
std::vector<ChartInterval> merge_adjacent(std::vector<ChartInterval> intervals, double gap_seconds);

// The chart `width_px` wide, row names included: each row a <g class="timeline-row" data-row="name">, its
// intervals merged where they touch within half a pixel (so a plan's size does not grow with its passes beyond
// what can be seen), an axis in seconds below.
std::string timeline_svg(const TimelineChart& chart, int width_px = 1100);

// The legend of the kinds the chart uses, as an HTML list of coloured swatches.
std::string legend_html(const TimelineChart& chart);

}  // namespace fulcrum

#endif  // FULCRUM_REPORT_TIMELINE_CHART_H_
