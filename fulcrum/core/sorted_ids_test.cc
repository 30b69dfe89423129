#include "fulcrum/core/sorted_ids.h"

#include <gtest/gtest.h>

#include <vector>

namespace fulcrum {
namespace {

TEST(SortedIds, MergesIntoTheSortedUnionWithoutRepeats) {
  std::vector<int> ids;
  merge_sorted_ids(ids, {2, 5, 9});
  EXPECT_EQ(ids, (std::vector<int>{2, 5, 9}));
  merge_sorted_ids(ids, {2, 5, 9});
  EXPECT_EQ(ids, (std::vector<int>{2, 5, 9}));
  merge_sorted_ids(ids, {1, 5, 6, 10});
  EXPECT_EQ(ids, (std::vector<int>{1, 2, 5, 6, 9, 10}));
  merge_sorted_ids(ids, {});
  EXPECT_EQ(ids, (std::vector<int>{1, 2, 5, 6, 9, 10}));
}

}  // namespace
}  // namespace fulcrum
