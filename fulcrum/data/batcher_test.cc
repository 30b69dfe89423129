// The promises every batcher makes, checked the same way for all of them.
#include "fulcrum/data/batcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/flops_sample_cost.h"
#include "fulcrum/data/plan_audit.h"
#include "fulcrum/data/test_data.h"

namespace fulcrum {
namespace {

const FlopsSampleCost kCost(VisionUnit::kTiles);

// Every step has dp·M micro-batches, none empty, and the epoch covers each sample once, up to counted repeats
// and drops.
void expect_guarantees(const BatchPlan& plan, const Dataset& data, const BatchParams& params, const std::string& what) {
  ASSERT_EQ(plan.micro_batch_count(), plan.steps() * params.slots_per_step()) << what;
  const PlanAudit audit = audit_plan(plan, data);
  EXPECT_EQ(audit.empty_micro_batches, 0) << what;
  EXPECT_EQ(audit.out_of_range, 0) << what;
  EXPECT_EQ(audit.missing, plan.dropped) << what;
  EXPECT_EQ(audit.extra, plan.repeated) << what;
  EXPECT_EQ(audit.duplicated, 0) << what;
  if (!params.drop_last) EXPECT_EQ(plan.dropped, 0) << what;
  // Repeats only ever complete the last step to one sample per micro-batch.
  EXPECT_LT(plan.repeated, params.slots_per_step()) << what;
}

class EveryBatcher : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryBatcher, GuaranteesOnRandomDatasets) {
  const auto batcher = make_batcher(GetParam());
  for (uint64_t seed = 0; seed < 24; ++seed) {
    const Dataset data = testing::random_dataset(700 + 131 * seed, seed);
    BatchParams params;
    params.dp = 1 + static_cast<int>(seed % 7);
    params.micro_batches = 1 + static_cast<int>(seed % 3);
    params.samples_per_step = params.slots_per_step() * (1 + static_cast<int64_t>(seed % 5));
    params.window_steps = 1 + static_cast<int>(seed % 9);
    params.seed = seed;
    params.epoch = static_cast<int64_t>(seed % 2);
    params.drop_last = seed % 4 == 3;
    const std::string what = GetParam() + " seed " + std::to_string(seed);
    const BatchPlan plan = batcher->plan(data, params, kCost, 0);
    expect_guarantees(plan, data, params, what);
  }
}

TEST_P(EveryBatcher, GuaranteesOnTheBundledData) {
  const Dataset data = testing::bundled_dataset();
  for (int dp : {8, 64}) {
    BatchParams params;
    params.dp = dp;
    const BatchPlan plan = make_batcher(GetParam())->plan(data, params, kCost, 0);
    expect_guarantees(plan, data, params, GetParam() + " dp " + std::to_string(dp));
  }
}

TEST_P(EveryBatcher, TinyDatasetsRepeatTheFewestSamples) {
  // 5 samples for 8 micro-batches: the only step needs 3 repeats; 13 samples at 8 per step: the tail of 5 needs 3.
  for (size_t n : {5u, 13u}) {
    const Dataset data = testing::random_dataset(n, 9);
    BatchParams params;
    params.dp = 4;
    params.micro_batches = 2;
    params.samples_per_step = 8;
    params.vision_cap = 0;
    const BatchPlan plan = make_batcher(GetParam())->plan(data, params, kCost, 0);
    expect_guarantees(plan, data, params, GetParam());
    if (GetParam() != "isf") {
      EXPECT_EQ(plan.repeated, 3) << GetParam() << " n " << n;
    } else {
      EXPECT_LE(plan.repeated, 3) << GetParam() << " n " << n;
    }
  }
}

TEST_P(EveryBatcher, DropLastDropsOnlyTheTail) {
  const Dataset data = testing::random_dataset(1003, 4);
  BatchParams params;
  params.dp = 4;
  params.samples_per_step = 16;
  params.drop_last = true;
  const BatchPlan plan = make_batcher(GetParam())->plan(data, params, kCost, 0);
  expect_guarantees(plan, data, params, GetParam());
  EXPECT_EQ(plan.repeated, 0);
  if (GetParam() != "isf") EXPECT_EQ(plan.dropped, 1003 % 16);
}

TEST_P(EveryBatcher, DeterministicForSameInputsAndSeed) {
  const Dataset data = testing::random_dataset(4000, 1);
  BatchParams params;
  params.dp = 8;
  params.seed = 77;
  const auto batcher = make_batcher(GetParam());
  const BatchPlan a = batcher->plan(data, params, kCost, 0);
  const BatchPlan b = batcher->plan(data, params, kCost, 0);
  EXPECT_TRUE(same_batches(a, b));
  params.seed = 78;
  EXPECT_FALSE(same_batches(a, batcher->plan(data, params, kCost, 0)));
  params.seed = 77;
  params.epoch = 1;
  EXPECT_FALSE(same_batches(a, batcher->plan(data, params, kCost, 0)));
}

TEST_P(EveryBatcher, ResumedPlanEqualsTheTail) {
  const Dataset data = testing::random_dataset(3000, 2);
  BatchParams params;
  params.dp = 4;
  params.micro_batches = 2;
  params.window_steps = 5;
  const auto batcher = make_batcher(GetParam());
  const BatchPlan full = batcher->plan(data, params, kCost, 0);
  for (int64_t k : {int64_t{1}, int64_t{5}, int64_t{7}, full.steps() - 1, full.steps()}) {
    const BatchPlan resumed = batcher->plan(data, params, kCost, k);
    EXPECT_EQ(resumed.first_step(), k);
    EXPECT_TRUE(same_batches(resumed, full.tail(k))) << GetParam() << " from step " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(All, EveryBatcher, ::testing::ValuesIn(batcher_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) c = c == '-' ? '_' : c;
                           return name;
                         });

TEST(Batcher, UnknownNameAndBadParameters) {
  EXPECT_THROW(make_batcher("best"), InputError);
  const Dataset data = testing::random_dataset(10, 1);
  BatchParams p;
  p.dp = 0;
  EXPECT_THROW(check_params(p, data), InputError);
  p.dp = 4;
  p.samples_per_step = 3;  // fewer samples than micro-batches
  EXPECT_THROW(check_params(p, data), InputError);
  p.samples_per_step = 0;
  p.window_steps = 0;
  EXPECT_THROW(check_params(p, data), InputError);
  p.window_steps = 8;
  EXPECT_NO_THROW(check_params(p, data));
  // Steps of repeats: up to 2^20 samples a step over any dataset, and past it up to 16 repeats of each sample.
  p.samples_per_step = int64_t{1} << 20;
  EXPECT_NO_THROW(check_params(p, data));
  p.samples_per_step += 1;
  EXPECT_THAT([&] { check_params(p, data); },
              ::testing::ThrowsMessage<InputError>(::testing::HasSubstr(
                  "1048577 samples a step over a dataset of 10: each sample would repeat more than 16 times")));
  const Dataset large = testing::random_dataset(100000, 1);
  p.samples_per_step = 1600000;
  EXPECT_NO_THROW(check_params(p, large));
  p.samples_per_step = 1600001;
  EXPECT_THROW(check_params(p, large), InputError);
}

}  // namespace
}  // namespace fulcrum
