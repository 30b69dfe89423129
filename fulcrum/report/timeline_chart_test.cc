#include "fulcrum/report/timeline_chart.h"

#include <gtest/gtest.h>

#include <string>

namespace fulcrum {
namespace {

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Three forwards back to back merge into one block that spans them and counts them; a backward after them
// stays apart (another kind), as does a forward after a gap wider than the threshold.
TEST(MergeAdjacent, JoinsTouchingWorkOfOneKindOnly) {
  const std::vector<ChartInterval> in{{0.0, 1.0, 0, "F0", 1},  {1.0, 2.0, 0, "F1", 1}, {2.05, 3.0, 0, "F2", 1},
                                      {3.0, 4.0, 1, "B0", 1},  {5.0, 6.0, 0, "F3", 1}};
  const std::vector<ChartInterval> out = merge_adjacent(in, 0.1);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_DOUBLE_EQ(out[0].start_seconds, 0.0);
  EXPECT_DOUBLE_EQ(out[0].end_seconds, 3.0);
  EXPECT_EQ(out[0].count, 3);
  EXPECT_EQ(out[0].label, "F0 … F2 (3 in a row)");
  EXPECT_EQ(out[1].label, "B0");
  EXPECT_EQ(out[2].count, 1);
  int total = 0;
  for (const ChartInterval& i : out) total += i.count;
  EXPECT_EQ(total, 5) << "merging drops nothing";
}

// With a zero gap threshold only exactly touching intervals would merge; none here do.
TEST(MergeAdjacent, KeepsApartWhatDoesNotTouch) {
  const std::vector<ChartInterval> in{{0.0, 1.0, 0, "a", 1}, {1.5, 2.0, 0, "b", 1}};
  EXPECT_EQ(merge_adjacent(in, 0.0).size(), 2u);
  EXPECT_EQ(merge_adjacent(in, 0.6).size(), 1u);
}

// One group per row, named, escaped; intervals thousands of times narrower than a pixel and touching are drawn
// as one rectangle per kind run, so the chart's size follows what can be seen.
TEST(TimelineSvg, OneGroupPerRowAndMergedSubPixelWork) {
  TimelineChart chart;
  chart.id = "t";
  chart.kinds = {{"forward", "#aaaaaa"}, {"backward", "#555555"}};
  chart.rows.resize(3);
  for (int r = 0; r < 3; ++r) {
    chart.rows[r].name = r == 2 ? "rank <2>" : "rank " + std::to_string(r);
    for (int k = 0; k < 10000; ++k) {
      chart.rows[r].work.push_back({k * 1e-4, (k + 1) * 1e-4, 0, "F", 1});
    }
    chart.rows[r].work.push_back({1.5, 2.0, 1, "B", 1});
  }
  const std::string svg = timeline_svg(chart, 600);
  EXPECT_EQ(count_of(svg, "class=\"timeline-row\""), 3);
  EXPECT_NE(svg.find("data-row=\"rank &lt;2&gt;\""), std::string::npos);
  EXPECT_EQ(svg.find("rank <2>"), std::string::npos) << "names are escaped";
  // Per row: the idle background, one forward run, one backward.
  EXPECT_EQ(count_of(svg, "<rect"), 3 * 3);
  EXPECT_NE(svg.find("10000 in a row"), std::string::npos);
  EXPECT_LT(svg.size(), 8000u);
}

TEST(TimelineSvg, LegendListsTheKindsInUse) {
  TimelineChart chart;
  chart.kinds = {{"forward", "#aaaaaa"}, {"unused", "#bbbbbb"}, {"optimizer", "#cccccc"}};
  chart.rows.push_back({"rank 0", {{0, 1, 0, "F", 1}}, {{0, 1, 2, "opt", 1}}});
  const std::string legend = legend_html(chart);
  EXPECT_NE(legend.find("forward"), std::string::npos);
  EXPECT_NE(legend.find("optimizer"), std::string::npos);
  EXPECT_EQ(legend.find("unused"), std::string::npos);
}

}  // namespace
}  // namespace fulcrum
