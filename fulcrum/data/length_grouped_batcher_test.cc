#include "fulcrum/data/length_grouped_batcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "fulcrum/data/test_data.h"

namespace fulcrum {
namespace {

using ::testing::ElementsAre;

TEST(SplitToEvenChunks, GreedyToTheShortestChunkWithRoom) {
  // ids sorted longest first: lengths 9, 7, 5, 3, 2, 1 into 2 chunks of 3.
  // 9→A(9) 7→B(7) 5→B(12) 3→A(12) 2→A(14, full) 1→B(13, full).
  const std::vector<uint32_t> tokens{9, 7, 5, 3, 2, 1};
  const std::vector<uint32_t> ids{0, 1, 2, 3, 4, 5};
  auto chunks = split_to_even_chunks(ids, tokens, 2);
  EXPECT_THAT(chunks[0], ElementsAre(0, 3, 4));
  EXPECT_THAT(chunks[1], ElementsAre(1, 2, 5));
}

TEST(SplitToEvenChunks, StridedWhenSizesDoNotDivide) {
  const std::vector<uint32_t> tokens{1, 1, 1, 1, 1};
  const std::vector<uint32_t> ids{0, 1, 2, 3, 4};
  auto chunks = split_to_even_chunks(ids, tokens, 2);
  EXPECT_THAT(chunks[0], ElementsAre(0, 2, 4));
  EXPECT_THAT(chunks[1], ElementsAre(1, 3));
}

TEST(ModalityLengthGrouped, MegabatchesHoldOneModalityUntilTheMergedLeftovers) {
  const Dataset data = testing::random_dataset(1000, 3);  // about a tenth text-only
  const int64_t megabatch = 16;
  int64_t multimodal = 0;
  for (uint32_t id = 0; id < data.size(); ++id) multimodal += data.images(id) > 0;
  const int64_t text = static_cast<int64_t>(data.size()) - multimodal;
  ASSERT_GT(text, 0);
  // LLaVA merges the last megabatch of each modality into one at the end; all others are pure.
  const int64_t pure = (multimodal + megabatch - 1) / megabatch - 1 + (text + megabatch - 1) / megabatch - 1;
  const std::vector<uint32_t> order = modality_length_grouped_order(data, megabatch, 4, 0, 0);
  ASSERT_EQ(order.size(), data.size());
  for (int64_t m = 0; m < pure; ++m) {
    int images = 0;
    for (int64_t i = m * megabatch; i < (m + 1) * megabatch; ++i) images += data.images(order[i]) > 0;
    EXPECT_TRUE(images == 0 || images == megabatch) << "megabatch " << m;
  }
  // The merged leftovers are sorted by id.
  EXPECT_TRUE(std::is_sorted(order.begin() + pure * megabatch, order.end()));
}

}  // namespace
}  // namespace fulcrum
