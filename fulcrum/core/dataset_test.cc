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

TEST(DatasetSubset, RejectsAnIdOutsideTheDataset) {
  Dataset data;
  data.add(1, 100, 1);
  const std::vector<uint32_t> ids{1};
  EXPECT_THROW(data.subset(ids), InputError);
}

}  // namespace
}  // namespace fulcrum
