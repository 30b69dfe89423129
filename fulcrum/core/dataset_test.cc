#include "fulcrum/core/dataset.h"

#include <gtest/gtest.h>

#include <vector>

#include "fulcrum/core/error.h"

namespace fulcrum {
namespace {

TEST(DatasetSubset, KeepsTheChosenSamplesInTheGivenOrder) {
  Dataset data;
  data.add(1, 100, 1, "caption");
  data.add(0, 200, 0);
  data.add(3, 300, 2, "ocr");
  const std::vector<uint32_t> ids{2, 0};
  const Dataset sub = data.subset(ids);
  ASSERT_EQ(sub.size(), 2u);
  EXPECT_EQ(sub.tokens(0), 300u);
  EXPECT_EQ(sub.vision(0), 3u);
  EXPECT_EQ(sub.images(0), 2);
  EXPECT_EQ(sub.task_names()[sub.task(0)], "ocr");
  EXPECT_EQ(sub.tokens(1), 100u);
  EXPECT_EQ(sub.task_names()[sub.task(1)], "caption");
  EXPECT_EQ(sub.vision_unit(), data.vision_unit());
}

// Errors about a subset's sample (a re-planned rest of an epoch) name the sample its file holds, not its place in
// the subset.
TEST(DatasetSubset, DescribesEachSampleAsItsFileHoldsIt) {
  Dataset data;
  for (uint32_t t = 1; t <= 8; ++t) data.add(1, 100 * t, 1);
  data.add_source({"a", "a.jsonl", 0, 5, 5, 1.0});
  data.add_source({"b", "b.jsonl", 5, 3, 3, 1.0});
  const std::vector<uint32_t> ids{7, 2};
  const Dataset sub = data.subset(ids);
  EXPECT_EQ(sub.describe_sample(0), "b.jsonl: record 2: sample 7");
  EXPECT_EQ(sub.describe_sample(1), "a.jsonl: record 2: sample 2");
  // A subset of a subset still names the first dataset's samples.
  const std::vector<uint32_t> first{0};
  EXPECT_EQ(sub.subset(first).describe_sample(0), "b.jsonl: record 2: sample 7");
}

TEST(DatasetSubset, RejectsAnIdOutsideTheDataset) {
  Dataset data;
  data.add(1, 100, 1);
  const std::vector<uint32_t> ids{1};
  EXPECT_THROW(data.subset(ids), InputError);
}

}  // namespace
}  // namespace fulcrum
