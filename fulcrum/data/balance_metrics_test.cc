#include "fulcrum/data/balance_metrics.h"

#include <gtest/gtest.h>

#include <vector>

#include "fulcrum/cost/flops_sample_cost.h"

namespace fulcrum {
namespace {

TEST(DistRatio, HandComputed) {
  // max 10: (0 + 5 + 10 + 5) / (10·4) = 0.5
  std::vector<int64_t> loads{10, 5, 0, 5};
  EXPECT_DOUBLE_EQ(dist_ratio(loads), 0.5);
  std::vector<int64_t> equal{7, 7, 7};
  EXPECT_DOUBLE_EQ(dist_ratio(equal), 0.0);
  std::vector<int64_t> zeros{0, 0};  // denominator clamped to 1
  EXPECT_DOUBLE_EQ(dist_ratio(zeros), 0.0);
}

TEST(DistRatioFloor, WholeUnitsAndLargestItem) {
  // Σ = 13 tiles over 4 ranks: with items of one tile the lowest max is ⌈13/4⌉ = 4: (16 − 13) / 16.
  std::vector<int64_t> tiles{5, 5, 3, 0};
  EXPECT_DOUBLE_EQ(dist_ratio_floor(tiles, 1), (16.0 - 13.0) / 16.0);
  // ... but an item of 5 tiles cannot be split: the max is at least 5: (20 − 13) / 20.
  EXPECT_DOUBLE_EQ(dist_ratio_floor(tiles, 5), (20.0 - 13.0) / 20.0);
  std::vector<int64_t> small{4, 4, 4, 1};
  EXPECT_DOUBLE_EQ(dist_ratio_floor(small, 1), 3.0 / 16.0);
  EXPECT_DOUBLE_EQ(dist_ratio_floor(small, 5), 7.0 / 20.0);
  // The floor never exceeds the ratio itself.
  EXPECT_LE(dist_ratio_floor(tiles, 5), dist_ratio(tiles));
}

TEST(TimeImbalance, MaxOverMeanMinusOne) {
  std::vector<double> t{1.0, 2.0, 3.0};
  EXPECT_DOUBLE_EQ(time_imbalance(t), 3.0 / 2.0 - 1.0);
  std::vector<double> zero{0.0, 0.0};
  EXPECT_DOUBLE_EQ(time_imbalance(zero), 0.0);
}

// Two ranks, one step, two micro-batches each; every number below is worked out by hand.
Dataset tiny() {
  Dataset d;
  d.add(1, 100, 1);  // 0
  d.add(3, 300, 3);  // 1
  d.add(5, 500, 5);  // 2
  d.add(1, 200, 1);  // 3
  d.add(4, 400, 4);  // 4
  return d;
}

TEST(MeasurePlan, PaddedPlanPadRatioAndLoads) {
  const Dataset d = tiny();
  BatchPlan plan("t", 2, 2, /*padded=*/true);
  const std::vector<std::vector<uint32_t>> mbs{{0, 1}, {2}, {3}, {4}};  // rank 0: {0,1},{2}; rank 1: {3},{4}
  for (const auto& mb : mbs) plan.add_micro_batch(mb);
  FlopsCoefficients c;
  c.vit_tile_flops = 1;
  c.llm_token_flops = 0;
  c.llm_attention_flops_per_token_squared = 0;
  c.device_flops_per_second = 1;
  const PlanMetrics m = measure_plan(plan, d, FlopsSampleCost(VisionUnit::kTiles, c));
  // Padded tokens: {0,1} → 2·300 = 600 (pad 200); others unpadded: 500, 200, 400. Pad = 200 / 1700.
  EXPECT_DOUBLE_EQ(m.pad_ratio, 200.0 / 1700.0);
  // Rank LLM loads 600 + 500 = 1100 and 200 + 400 = 600: DR = 500 / (1100·2).
  EXPECT_DOUBLE_EQ(m.per_step.dist_ratio_llm, 500.0 / 2200.0);
  // Rank tiles 9 and 5: DR = 4 / 18; floor: ⌈14/2⌉ = 7 ≥ largest 5: (14 − 14) / 14 = 0.
  EXPECT_DOUBLE_EQ(m.per_step.dist_ratio_vit, 4.0 / 18.0);
  EXPECT_DOUBLE_EQ(m.per_step.dist_ratio_vit_floor, 0.0);
  // Time = tiles here: 9 vs 5 → 9 / 7 − 1.
  EXPECT_DOUBLE_EQ(m.per_step.time_imbalance, 9.0 / 7.0 - 1.0);
  // Micro-batch 0: tiles 4 vs 1; micro-batch 1: 5 vs 4. Time imbalance (4/2.5 − 1 + 5/4.5 − 1) / 2.
  EXPECT_DOUBLE_EQ(m.per_micro_batch.time_imbalance, (4.0 / 2.5 - 1.0 + 5.0 / 4.5 - 1.0) / 2.0);
  // Micro-batch 0 tile floor: ⌈5/2⌉ = 3 ≥ largest 3 → (6 − 5)/6; micro-batch 1: ⌈9/2⌉ = 5 → (10 − 9)/10.
  EXPECT_DOUBLE_EQ(m.per_micro_batch.dist_ratio_vit_floor, (1.0 / 6.0 + 1.0 / 10.0) / 2.0);
}

TEST(MeasurePlan, PackedPlanHasNoPadding) {
  const Dataset d = tiny();
  BatchPlan plan("t", 2, 1, /*padded=*/false);
  std::vector<uint32_t> a{0, 1, 3}, b{2, 4};
  plan.add_micro_batch(a);
  plan.add_micro_batch(b);
  const PlanMetrics m = measure_plan(plan, d, FlopsSampleCost(VisionUnit::kTiles));
  EXPECT_DOUBLE_EQ(m.pad_ratio, 0.0);
  // LLM loads 600 and 900: DR = 300 / 1800.
  EXPECT_DOUBLE_EQ(m.per_step.dist_ratio_llm, 300.0 / 1800.0);
}

}  // namespace
}  // namespace fulcrum
