#include "fulcrum/core/batch_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace fulcrum {
namespace {

BatchPlan two_step_plan() {
  // dp 2, two micro-batches per rank, two steps: ids 0..15 two per micro-batch.
  BatchPlan plan("test", 2, 2, false);
  for (uint32_t k = 0; k < 8; ++k) {
    std::vector<uint32_t> ids{2 * k, 2 * k + 1};
    plan.add_micro_batch(ids);
  }
  return plan;
}

TEST(BatchPlan, IndexesStepRankMicroBatch) {
  BatchPlan plan = two_step_plan();
  EXPECT_EQ(plan.steps(), 2);
  // step 1, rank 0, micro-batch 1 is flat index (1*2+0)*2+1 = 5 -> ids 10, 11.
  auto mb = plan.micro_batch(1, 0, 1);
  ASSERT_EQ(mb.size(), 2u);
  EXPECT_EQ(mb[0], 10u);
  EXPECT_EQ(mb[1], 11u);
  EXPECT_EQ(plan.samples_in_step(0), 8);
}

TEST(BatchPlan, TailKeepsLaterStepsAndNumbersThem) {
  BatchPlan plan = two_step_plan();
  BatchPlan tail = plan.tail(1);
  EXPECT_EQ(tail.steps(), 1);
  EXPECT_EQ(tail.first_step(), 1);
  EXPECT_EQ(tail.micro_batch(0, 0, 0)[0], 8u);
  EXPECT_FALSE(same_batches(plan, tail));
  EXPECT_TRUE(same_batches(plan.tail(1), tail));
  EXPECT_EQ(plan.tail(5).steps(), 0);
}

}  // namespace
}  // namespace fulcrum
