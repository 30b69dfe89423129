#include "fulcrum/data/dataset_stats.h"

#include <gtest/gtest.h>

#include <vector>

#include "fulcrum/data/length_file.h"
#include "fulcrum/data/test_data.h"

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

// The per-file figures published with the reference (reference/omnibal.md §3.8) for two of the bundled files.
TEST(ComputeStats, AgreesWithThePublishedTableOfTheBundledFiles) {
  struct Row {
    const char* file;
    int64_t tiles1, tiles3, tiles4, tiles5;
    double mean, sd;
    int64_t min, max;
  };
  const Row rows[] = {{"data/vision/ai2d_train_12k_wh_token_lengths.json", 5793, 3710, 603, 2307, 691, 397, 293, 1501},
                      {"data/vision/chartqa_train_18k_wh_token_lengths.json", 579, 1096, 14, 16628, 1305, 207, 371, 1832}};
  for (const Row& row : rows) {
    Dataset data;
    read_length_file(testing::source_path(row.file), data);
    const DatasetStats s = compute_stats(data);
    const std::vector<std::pair<int64_t, int64_t>> tiles{{1, row.tiles1}, {3, row.tiles3}, {4, row.tiles4}, {5, row.tiles5}};
    EXPECT_EQ(s.vision.histogram, tiles) << row.file;
    EXPECT_NEAR(s.tokens.mean, row.mean, 0.5) << row.file;
    EXPECT_NEAR(s.tokens.stddev, row.sd, 1.0) << row.file;  // published rounded; ai2d computes to 396.45
    EXPECT_EQ(s.tokens.min, row.min) << row.file;
    EXPECT_EQ(s.tokens.max, row.max) << row.file;
  }
}

}  // namespace
}  // namespace fulcrum
