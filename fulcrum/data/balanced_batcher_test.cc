#include "fulcrum/data/balanced_batcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/flops_sample_cost.h"
#include "fulcrum/data/balance_metrics.h"
#include "fulcrum/data/epoch_stream.h"
#include "fulcrum/data/isf.h"
#include "fulcrum/data/isf_search.h"
#include "fulcrum/data/plan_audit.h"
#include "fulcrum/data/test_data.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

const FlopsSampleCost kCost(VisionUnit::kTiles);

TEST(BalancedBatcher, SamplesMoveOnlyWithinTheirWindow) {
  const Dataset data = testing::random_dataset(5000, 8);
  BatchParams params;
  params.dp = 4;
  params.samples_per_step = 24;
  params.window_steps = 3;
  params.seed = 5;
  const BatchPlan plan = BalancedBatcher().plan(data, params, kCost, 0);
  // The stream the batcher cuts into windows, recomputed independently.
  const std::vector<uint32_t> stream = shuffled_ids(data.size(), params.seed, params.epoch);
  const int64_t window_samples = params.window_steps * params.samples_per_step;
  std::vector<int64_t> window_of(data.size());
  for (size_t pos = 0; pos < stream.size(); ++pos) window_of[stream[pos]] = static_cast<int64_t>(pos) / window_samples;
  for (int64_t s = 0; s < plan.steps(); ++s) {
    std::set<uint32_t> step_ids;
    for (int r = 0; r < params.dp; ++r) {
      for (uint32_t id : plan.micro_batch(s, r, 0)) {
        ASSERT_EQ(window_of[id], s / params.window_steps) << "sample " << id << " in step " << s;
      }
    }
  }
}

TEST(BalancedBatcher, WindowOfOneStepKeepsEachStepsSamples) {
  const Dataset data = testing::random_dataset(1000, 2);
  BatchParams params;
  params.dp = 4;
  params.samples_per_step = 20;
  params.window_steps = 1;
  const BatchPlan plan = BalancedBatcher().plan(data, params, kCost, 0);
  const std::vector<uint32_t> stream = shuffled_ids(data.size(), params.seed, params.epoch);
  for (int64_t s = 0; s < plan.steps(); ++s) {
    std::vector<uint32_t> got;
    for (int r = 0; r < params.dp; ++r) {
      for (uint32_t id : plan.micro_batch(s, r, 0)) got.push_back(id);
    }
    std::vector<uint32_t> want(stream.begin() + s * 20, stream.begin() + std::min<int64_t>((s + 1) * 20, 1000));
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(got, want) << "step " << s;
  }
}

// The targets on the bundled data at 4 samples per rank per step.
class BundledBalance : public ::testing::TestWithParam<int> {};

TEST_P(BundledBalance, MeetsTheBalanceTargets) {
  const Dataset data = testing::bundled_dataset();
  BatchParams params;
  params.dp = GetParam();
  params.samples_per_step = 4 * params.dp;
  const BatchPlan plan = BalancedBatcher().plan(data, params, kCost, 0);
  const PlanMetrics m = measure_plan(plan, data, kCost);
  EXPECT_LE(m.per_step.time_imbalance, 0.02);
  EXPECT_LE(m.per_step.dist_ratio_vit, std::max(0.02, m.per_step.dist_ratio_vit_floor + 0.01));
  EXPECT_LE(m.per_step.dist_ratio_llm, std::max(0.02, m.per_step.dist_ratio_llm_floor + 0.01));
  EXPECT_EQ(m.pad_ratio, 0.0);
  const PlanAudit audit = audit_plan(plan, data);
  EXPECT_EQ(audit.missing, 0);
  EXPECT_EQ(audit.duplicated, 0);
}

TEST_P(BundledBalance, BeatsIsfAtTheSameSamplesPerStep) {
  const Dataset data = testing::bundled_dataset();
  BatchParams params;
  params.dp = GetParam();
  const IsfSearchResult search = isf_search(data, params, kCost);
  BatchParams isf_params_found = params;
  take_caps(search.best, isf_params_found);
  const BatchPlan isf = IsfBatcher().plan(data, isf_params_found, kCost, 0);
  const double isf_per_step = static_cast<double>(isf.sample_ids().size()) / static_cast<double>(isf.steps());
  BatchParams ours = params;
  ours.samples_per_step = std::llround(isf_per_step);
  const BatchPlan plan = BalancedBatcher().plan(data, ours, kCost, 0);
  const double ours_per_step = static_cast<double>(plan.sample_ids().size()) / static_cast<double>(plan.steps());
  EXPECT_NEAR(ours_per_step, isf_per_step, 0.05 * isf_per_step);
  EXPECT_LT(measure_plan(plan, data, kCost).per_step.time_imbalance,
            measure_plan(isf, data, kCost).per_step.time_imbalance);
}

INSTANTIATE_TEST_SUITE_P(Dp, BundledBalance, ::testing::Values(8, 64));

TEST(BalancedBatcher, BalancesMicroBatchesToo) {
  const Dataset data = testing::bundled_dataset();
  BatchParams params;
  params.dp = 16;
  params.micro_batches = 4;
  params.samples_per_step = 2 * params.slots_per_step();
  const BatchPlan plan = BalancedBatcher().plan(data, params, kCost, 0);
  const PlanMetrics m = measure_plan(plan, data, kCost);
  EXPECT_LE(m.per_micro_batch.time_imbalance, 0.03);
  EXPECT_LE(m.per_step.time_imbalance, 0.02);
}

TEST(BalancedBatcher, RespectsCaps) {
  const Dataset data = testing::random_dataset(4000, 6);
  BatchParams params;
  params.dp = 8;
  params.samples_per_step = 24;
  params.token_cap = 8192;
  params.vision_cap = 16;
  const BatchPlan plan = BalancedBatcher().plan(data, params, kCost, 0);
  for (int64_t k = 0; k < plan.micro_batch_count(); ++k) {
    const MicroBatchLoad load = micro_batch_load(data, plan.micro_batch(k), false);
    ASSERT_LE(load.llm_tokens, 8192);
    ASSERT_LE(load.vision, 16);
  }
  // Caps too small for a window's samples: one clear error, not a plan over the caps.
  params.token_cap = 3000;
  try {
    BalancedBatcher().plan(data, params, kCost, 0);
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("fits in none of its"));
  }
}

TEST(BalancedBatcher, OversizeSampleErrorOrAlone) {
  Dataset data = testing::random_dataset(200, 1);
  data.add(20, 9000, 20);  // id 200
  BatchParams params;
  params.dp = 2;
  params.samples_per_step = 8;
  params.token_cap = 8192;
  try {
    BalancedBatcher().plan(data, params, kCost, 0);
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("sample 200 (20 tiles, 9000 tokens) exceeds"));
  }
  params.oversize = OversizePolicy::kOwnGroup;
  const BatchPlan plan = BalancedBatcher().plan(data, params, kCost, 0);
  bool found_alone = false;
  for (int64_t k = 0; k < plan.micro_batch_count(); ++k) {
    auto mb = plan.micro_batch(k);
    if (std::find(mb.begin(), mb.end(), 200u) != mb.end()) found_alone = mb.size() == 1;
  }
  EXPECT_TRUE(found_alone);
}

}  // namespace
}  // namespace fulcrum
