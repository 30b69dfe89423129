#include "fulcrum/data/dataset_stats.h"

#include <gtest/gtest.h>

#include <vector>

namespace fulcrum {
namespace {

TEST(Summarize, NearestRankPercentilesAndHistogram) {
  std::vector<uint32_t> values;
  for (uint32_t v = 1; v <= 100; ++v) values.push_back(v);
  const Distribution d = summarize(values, 10);
  EXPECT_EQ(d.min, 1);
  EXPECT_EQ(d.max, 100);
  EXPECT_EQ(d.p50, 50);  // the 50th of 100 sorted values
  EXPECT_EQ(d.p90, 90);
  EXPECT_EQ(d.p99, 99);
  EXPECT_DOUBLE_EQ(d.mean, 50.5);
  EXPECT_EQ(d.total, 5050);
  // Bins [0,10) holds 1..9, [10,20) holds 10..19, ..., [100,110) holds 100.
  ASSERT_EQ(d.histogram.size(), 11u);
  EXPECT_EQ(d.histogram[0], (std::pair<int64_t, int64_t>{0, 9}));
  EXPECT_EQ(d.histogram[1], (std::pair<int64_t, int64_t>{10, 10}));
  EXPECT_EQ(d.histogram[10], (std::pair<int64_t, int64_t>{100, 1}));
}

TEST(ComputeStats, CountsTextOnlyAndTasks) {
  Dataset data;
  data.add(1, 300, 1, "caption");
  data.add(0, 50, 0, "chat");
  data.add(3, 900, 3, "caption");
  const DatasetStats s = compute_stats(data);
  EXPECT_EQ(s.samples, 3);
  EXPECT_EQ(s.text_only, 1);
  ASSERT_EQ(s.tasks.size(), 2u);
  EXPECT_EQ(s.tasks[0], std::make_pair(std::string("caption"), int64_t{2}));
  EXPECT_EQ(s.vision.histogram.size(), 3u);  // 0, 1 and 3 tiles
  const auto json = stats_to_json(s);
  EXPECT_EQ(json["tasks"]["chat"], 1);
  EXPECT_EQ(json["vision"]["max"], 3);
}

}  // namespace
}  // namespace fulcrum
