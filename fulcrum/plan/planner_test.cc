#include "fulcrum/plan/planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fulcrum/core/error.h"
#include "fulcrum/data/meta_index.h"
#include "fulcrum/model/model_presets.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

const Dataset& bundled() {
  static const Dataset data = load_dataset(std::string(FULCRUM_SOURCE_DIR) + "/data/internvl_sft_1.2M.json",
                                           {FULCRUM_SOURCE_DIR, false, nullptr})
                                  .dataset;
  return data;
}

PlanRequest small_request() {
  PlanRequest r;
  r.model = model_preset("vit-3b+gpt-11b");
  r.cluster = cluster_preset("a100:16");
  r.gbs = 64;
  r.data = &bundled();
  r.sampled_steps = 3;
  r.progress = false;
  return r;
}

TEST(MakePlan, TheSameAnswerOnAnyNumberOfThreads) {
  PlanRequest one = small_request();
  one.threads = 1;
  PlanRequest two = small_request();
  two.threads = 2;
  const TrainingPlan a = make_plan(Strategy::kFulcrum, one);
  const TrainingPlan b = make_plan(Strategy::kFulcrum, two);
  EXPECT_EQ(a.epoch_seconds, b.epoch_seconds);
  EXPECT_EQ(a.config.dp, b.config.dp);
  EXPECT_EQ(a.config.pp, b.config.pp);
  EXPECT_EQ(a.schedule.recompute, b.schedule.recompute);
  EXPECT_EQ(a.candidates, b.candidates);
}

TEST(MakePlan, FulcrumIsAtLeastAsFastAsTheBaselinesAndFits) {
  const PlanRequest r = small_request();
  const TrainingPlan fulcrum = make_plan(Strategy::kFulcrum, r);
  for (Strategy s : {Strategy::kMegatron, Strategy::kBalanced, Strategy::kZero3}) {
    const TrainingPlan other = make_plan(s, r);
    EXPECT_LE(fulcrum.epoch_seconds, other.epoch_seconds) << strategy_name(s);
    EXPECT_FALSE(other.detail.oom) << strategy_name(s);
  }
  // Every stage within its device's memory on the simulated steps; the schedule covers the model.
  EXPECT_FALSE(fulcrum.detail.oom);
  for (double peak : fulcrum.detail.peak_memory_bytes) EXPECT_LE(peak, r.cluster.usable_memory_bytes());
  EXPECT_EQ(fulcrum.schedule.stages.back().end_layer, fulcrum.schedule.model_layers);
  EXPECT_GT(fulcrum.steps_per_epoch, 0);
  EXPECT_NEAR(fulcrum.epoch_seconds, fulcrum.iteration_seconds * static_cast<double>(fulcrum.steps_per_epoch), 1e-9);
}

TEST(MakePlan, PinnedBaselineConfiguration) {
  PlanRequest r = small_request();
  ParallelConfig c;
  c.dp = 2;
  c.tp = 2;
  c.pp = 4;
  c.vpp = 2;
  c.mbs = 2;
  r.pinned = c;
  const TrainingPlan p = make_plan(Strategy::kMegatron, r);
  EXPECT_EQ(p.candidates, 1);
  EXPECT_EQ(p.config.pp, 4);
  EXPECT_EQ(p.config.schedule, PipelineKind::kInterleaved);
  EXPECT_EQ(p.micro_batches, 16);
  // Megatron's rule: the encoder and its projector in the first stage.
  const int64_t encoder_layers = static_cast<int64_t>(r.model.components[0].layers.size() + r.model.components[1].layers.size());
  EXPECT_GT(p.schedule.stages[0].end_layer, encoder_layers);
  c.dp = 3;
  r.pinned = c;
  EXPECT_THAT([&] { make_plan(Strategy::kMegatron, r); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("is not the cluster's 16 devices")));
}

TEST(MakePlan, ImpossibleRequestsSayWhy) {
  PlanRequest r = small_request();
  r.model = model_preset("gpt-175b");
  r.cluster = cluster_preset("a100:8");
  r.data = nullptr;
  r.gbs = 8;
  EXPECT_THAT([&] { make_plan(Strategy::kFulcrum, r); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("fits in memory")));
  PlanRequest odd = small_request();
  odd.gbs = 7;  // no micro-batch × DP divides 7 on 16 devices... except DP 1
  odd.cluster = cluster_preset("a100:3");
  odd.model = model_preset("gpt-11b");
  odd.data = nullptr;
  EXPECT_THAT([&] { make_plan(Strategy::kMegatron, odd); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("no parallel configuration of 3 devices")));
}

}  // namespace
}  // namespace fulcrum
