#include "fulcrum/plan/optimus.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "fulcrum/core/error.h"
#include "fulcrum/model/model_presets.h"
#include "fulcrum/plan/eight_gpu_example.h"

namespace fulcrum {
namespace {

double kernel_seconds(const std::vector<Kernel>& kernels) {
  double s = 0;
  for (const Kernel& k : kernels) s += k.seconds;
  return s;
}

using EightGpus = EightGpuExample;

TEST(Optimus, TheLlmAloneKeepsOnlyTheLlm) {
  const ModelSpec model = model_preset("vit-3b+gpt-11b");
  const ModelSpec llm = llm_only(model);
  ASSERT_EQ(llm.components.size(), 1u);
  EXPECT_EQ(llm.components[0].role, ComponentRole::kLlm);
  EXPECT_EQ(llm.components[0], model.components.back());
  ModelSpec encoders_only = model;
  encoders_only.components.pop_back();
  EXPECT_THROW(llm_only(encoders_only), InputError);
}

// Each rank's compute and tensor-parallel stretches are what the simulator gave its passes, cut up: the same
// totals, in order, never overlapping.
TEST(Optimus, LlmTimelinesAddUpToTheSimulatedPasses) {
  EightGpus g;
  const LlmAlone llm = simulate_llm_alone(g.in);
  EXPECT_EQ(llm.schedule.stages.front().first_layer, 0);  // no encoder in the LLM's first stage
  const std::vector<LlmDeviceTimeline> ranks = llm_device_timelines(g.in, llm);
  ASSERT_EQ(ranks.size(), 4u);
  for (int r = 0; r < 4; ++r) {
    double busy = 0, tensor = 0, last_pass = 0, step = 0, first_pass = 1e300;
    for (const TimelineEvent& e : llm.result.timeline) {
      if (e.rank != r || e.stream != TimelineEvent::Stream::kCompute) continue;
      if (e.op == OpKind::kCollective && e.stage < 0) {
        step += e.end_seconds - e.start_seconds;  // the optimizer step: apart, it waits for the encoders
        continue;
      }
      busy += e.end_seconds - e.start_seconds;
      tensor += e.tp_comm_seconds;
      if (e.op != OpKind::kCollective) last_pass = std::max(last_pass, e.end_seconds);
      if (e.op != OpKind::kCollective) first_pass = std::min(first_pass, e.start_seconds);
    }
    ASSERT_GT(tensor, 0) << "rank " << r << ": TP 2 with sequence parallelism has layer collectives";
    double compute = 0, comm = 0;
    for (size_t i = 0; i < ranks[r].compute.size(); ++i) {
      const TimeInterval& t = ranks[r].compute[i];
      ASSERT_LT(t.start_seconds, t.end_seconds);
      if (i > 0) {
        ASSERT_GT(t.start_seconds, ranks[r].compute[i - 1].end_seconds);
      }
      compute += t.end_seconds - t.start_seconds;
    }
    for (const TimeInterval& t : ranks[r].tensor_comm) {
      comm += t.end_seconds - t.start_seconds;
      // Off the compute stretches.
      for (const TimeInterval& c : ranks[r].compute) {
        ASSERT_GE(std::max(t.start_seconds, c.start_seconds), std::min(t.end_seconds, c.end_seconds) - 1e-12);
      }
    }
    EXPECT_NEAR(comm, tensor, 1e-9 * busy) << "rank " << r;
    EXPECT_NEAR(compute + comm, busy, 1e-9 * busy) << "rank " << r;
    EXPECT_DOUBLE_EQ(ranks[r].last_pass_end_seconds, last_pass);
    EXPECT_DOUBLE_EQ(ranks[r].first_pass_start_seconds, first_pass);
    EXPECT_DOUBLE_EQ(ranks[r].end_seconds, llm.result.iteration_seconds);
    EXPECT_GT(step, 0);
    EXPECT_DOUBLE_EQ(ranks[r].optimizer_seconds, step);
  }
}

// On cores shared with communication (the cpu kind) the LLM's transfers take compute: slowdown × their seconds
// on the point-to-point stream. The timelines the bubble scheduler fills keep it, so no encoder kernel goes there.
TEST(Optimus, OnSharedCoresTheLlmsTransfersKeepTheComputeTheyTake) {
  EightGpus g;
  const double slowdown = 0.5;
  g.cluster.device.communication_shares_compute = true;
  g.cluster.device.communication_compute_slowdown = slowdown;
  const LlmAlone llm = simulate_llm_alone(g.in);
  const std::vector<LlmDeviceTimeline> ranks = llm_device_timelines(g.in, llm);
  for (int r = 0; r < 4; ++r) {
    double passes = 0, transfers = 0;
    for (const TimelineEvent& e : llm.result.timeline) {
      if (e.rank != r) continue;
      const bool pass = e.op == OpKind::kForward || e.op == OpKind::kBackward || e.op == OpKind::kBackwardInput ||
                        e.op == OpKind::kBackwardWeight;
      if (e.stream == TimelineEvent::Stream::kCompute && pass) passes += e.end_seconds - e.start_seconds;
      if (e.stream == TimelineEvent::Stream::kP2p) transfers += e.end_seconds - e.start_seconds;
    }
    ASSERT_GT(transfers, 0) << "rank " << r << " sends to its neighbours";
    double covered = 0;
    for (const TimeInterval& t : ranks[r].compute) covered += t.end_seconds - t.start_seconds;
    for (const TimeInterval& t : ranks[r].tensor_comm) covered += t.end_seconds - t.start_seconds;
    // DP 1: no data-parallel collective takes any compute.
    EXPECT_NEAR(covered, passes + slowdown * transfers, 1e-9 * covered) << "rank " << r;
  }
}

// Each encoder micro-batch carries its LLM micro-batch's images: twice the images, twice the encoder tokens.
TEST(Optimus, EncoderWorkFollowsEachMicroBatchsImages) {
  EightGpus g;
  g.in.loads.per_replica[0][3].vision *= 2;
  EncoderPlan plan;
  for (const EncoderPlan& p : encoder_plans(g.model, g.in.llm_layout, {{0, 0, 0, 0}, 1e18})) {
    if (p.pp == 2 && p.tp == 2) plan = p;
  }
  ASSERT_EQ(plan.pipelines, 2);
  const EncoderWork work = encoder_work(g.in, plan);
  ASSERT_EQ(work.forward.size(), 2u);
  ASSERT_EQ(work.forward[0].size(), 8u);
  // Items of a fixed size: every layer's work is per item, so twice the items is exactly twice the FLOPs (and
  // more time, though less than twice: per-kernel latencies do not grow).
  auto flops = [](const std::vector<Kernel>& kernels) {
    double f = 0;
    for (const Kernel& k : kernels) f += k.flops;
    return f;
  };
  EXPECT_NEAR(flops(work.forward[0][3]), 2 * flops(work.forward[0][0]), 1e-9 * flops(work.forward[0][3]));
  EXPECT_GT(kernel_seconds(work.forward[0][3]), kernel_seconds(work.forward[0][0]));
  EXPECT_DOUBLE_EQ(kernel_seconds(work.forward[1][0]), kernel_seconds(work.forward[1][7]));
  EXPECT_GT(kernel_seconds(work.backward[0][0]), kernel_seconds(work.forward[0][0]));
  EXPECT_GT(work.transfer_seconds, 0);
  ASSERT_EQ(work.stage_tail_seconds.size(), 2u);
  EXPECT_GT(work.stage_tail_seconds[0], 0);
}

// A frozen encoder under a trained projector: no backward on the encoder's own stage, only the projector's in
// the last; everything frozen: no backward at all, and no gradient tail.
TEST(Optimus, FrozenEncoderRunsForwardOnly) {
  EightGpus g;
  ModelSpec frozen = g.model;
  for (ComponentSpec& c : frozen.components) {
    if (c.role == ComponentRole::kEncoder) c.trainable = false;
  }
  g.in.model = &frozen;
  EncoderPlan plan;
  for (const EncoderPlan& p : encoder_plans(frozen, g.in.llm_layout, {{0, 0, 0, 0}, 1e18})) {
    if (p.pp == 2 && p.tp == 1) plan = p;
  }
  ASSERT_EQ(plan.pp, 2);
  EncoderWork work = encoder_work(g.in, plan);
  EXPECT_TRUE(work.backward[0][0].empty());
  EXPECT_FALSE(work.backward[1][0].empty());
  EXPECT_LT(kernel_seconds(work.backward[1][0]), kernel_seconds(work.forward[1][0]));
  for (ComponentSpec& c : frozen.components) {
    if (c.role == ComponentRole::kProjector) c.trainable = false;
  }
  work = encoder_work(g.in, plan);
  for (const auto& stage : work.backward) {
    for (const auto& pass : stage) EXPECT_TRUE(pass.empty());
  }
  EXPECT_DOUBLE_EQ(work.stage_tail_seconds[0], 0);
  EXPECT_DOUBLE_EQ(work.stage_tail_seconds[1], 0);
  // The schedule then holds forward kernels only, and still meets every F_i.
  g.in.exhaustive_split_limit = 16;
  const OptimusPlan best = plan_optimus(g.in);
  for (const PlacedKernel& k : best.fine.kernels) EXPECT_FALSE(k.backward);
  const BubbleProblem problem = encoder_bubble_problem(
      g.in, llm_device_timelines(g.in, best.llm), dependency_points(best.llm.result, 8), best.encoder_plan,
      encoder_work(g.in, best.encoder_plan), best.split);
  EXPECT_TRUE(check_bubble_schedule(problem, best.fine).empty());
}

// The search returns the best of every plan and every split (all evaluated here), and what it returns holds.
TEST(Optimus, SearchFindsTheBestPlanAndSplitOfTheEightGpuExample) {
  EightGpus g;
  g.in.exhaustive_split_limit = 1 << 20;
  const OptimusPlan best = plan_optimus(g.in);
  const std::vector<LlmDeviceTimeline> ranks = llm_device_timelines(g.in, best.llm);
  const DependencyPoints dep = dependency_points(best.llm.result, 8);
  EncoderMemory memory{best.llm.result.peak_memory_bytes, g.cluster.usable_memory_bytes()};
  double brute = INFINITY;
  int plans = 0;
  int64_t splits = 0;
  for (const EncoderPlan& plan : encoder_plans(g.model, g.in.llm_layout, memory)) {
    if (plan.pipelines > 8) continue;
    ++plans;
    const EncoderWork work = encoder_work(g.in, plan);
    for (const MicroBatchSplit& split :
         micro_batch_splits(8, pipeline_classes(g.in.llm_layout, plan), 1 << 20)) {
      ++splits;
      const BubbleSchedule s =
          schedule_encoder_bubbles(encoder_bubble_problem(g.in, ranks, dep, plan, work, split), BubbleMode::kFine);
      brute = std::min(brute, s.iteration_seconds);
    }
  }
  EXPECT_EQ(best.encoder_plans, plans);
  EXPECT_EQ(best.splits_evaluated, splits);
  EXPECT_DOUBLE_EQ(best.iteration_seconds, brute);

  const BubbleProblem problem = encoder_bubble_problem(g.in, ranks, dep, best.encoder_plan,
                                                       encoder_work(g.in, best.encoder_plan), best.split);
  EXPECT_TRUE(check_bubble_schedule(problem, best.fine).empty());
  EXPECT_TRUE(check_bubble_schedule(problem, best.coarse).empty());
  // The encoder costs something, bubbles hide some of it, and the fine step hides no less than the coarse.
  EXPECT_GE(best.iteration_seconds, best.llm.result.iteration_seconds);
  EXPECT_LE(best.iteration_seconds, best.coarse.iteration_seconds + 1e-12);
  EXPECT_LT(best.iteration_seconds, best.no_bubble_seconds);
  EXPECT_GE(best.fine.efficiency, best.coarse.efficiency - 1e-12);
  EXPECT_GT(best.scheduler_seconds, 0);
}

// The warm-up adjustment (paper Fig. 12): interleaved 1F1B over PP 4 with 2 chunks runs (4 − 1)·2 + 4 = 10
// warm-up forwards on the first rank (micro-batches 0–3 on chunk 0, 0–3 on chunk 1, then 4 and 5 on chunk 0),
// and its steady state opens with one more forward. Two fewer: 8 warm-up forwards, micro-batch 4's chunk 0
// opens the steady state, and micro-batch 5's chunk 0 waits for the first backward: F_5 comes later, F_0 … F_4
// stay. Whether the pipeline's latency pays for it depends on the pass times, so plan_optimus keeps a step only
// when its schedule is faster.
TEST(Optimus, FewerWarmupForwardsDeferTheLastWarmupMicroBatches) {
  EightGpus g;
  g.in.llm_layout.vpp = 2;
  g.in.llm_schedule = PipelineKind::kInterleaved;
  const LlmAlone standard = simulate_llm_alone(g.in);
  const LlmAlone adjusted = simulate_llm_alone(g.in, {2, 0, 0, 0});
  auto forwards_before_first_backward = [](const Schedule& s) {
    int n = 0;
    for (const Instruction& in : s.programs[0].instructions) {
      if (in.op == OpKind::kBackward) break;
      if (in.op == OpKind::kForward) ++n;
    }
    return n;
  };
  EXPECT_EQ(forwards_before_first_backward(standard.schedule), 11);
  EXPECT_EQ(forwards_before_first_backward(adjusted.schedule), 9);
  const DependencyPoints a = dependency_points(standard.result, 8);
  const DependencyPoints b = dependency_points(adjusted.result, 8);
  for (int i = 0; i < 5; ++i) EXPECT_DOUBLE_EQ(b.forward_seconds[i], a.forward_seconds[i]) << i;
  EXPECT_GT(b.forward_seconds[5], a.forward_seconds[5]);
  // The first rank keeps at least the second rank's 8 warm-up forwards: three fewer would deadlock (it would
  // wait for rank 1's first backward, which needs rank 0's ninth forward); the other schedules have no such knob.
  EXPECT_THROW(simulate_llm_alone(g.in, {3, 0, 0, 0}), InputError);
  EXPECT_THROW(simulate_llm_alone(g.in, {6, 0, 0, 0}), InputError);
  g.in.llm_layout.vpp = 1;
  g.in.llm_schedule = PipelineKind::kOneFOneB;
  EXPECT_THROW(simulate_llm_alone(g.in, {1, 0, 0, 0}), InputError);
}

// Each encoder micro-batch carries the images of the LLM micro-batch it feeds: with uneven image counts the
// placement that Optimus's sorted check finds is placed again with its map fixed, each micro-batch's kernels
// then its LLM micro-batch's.
TEST(Optimus, EveryEncoderMicroBatchCarriesTheImagesOfTheOneItFeeds) {
  EightGpus g;
  for (int i = 0; i < 8; ++i) g.in.loads.per_replica[0][i].vision = 2 * (1 + i % 3);  // 2, 4 or 6 images
  EncoderPlan plan;
  for (const EncoderPlan& p : encoder_plans(g.model, g.in.llm_layout, {{0, 0, 0, 0}, 1e18})) {
    if (p.pp == 2 && p.tp == 2) plan = p;
  }
  ASSERT_EQ(plan.pipelines, 2);
  const LlmAlone llm = simulate_llm_alone(g.in);
  const std::vector<LlmDeviceTimeline> ranks = llm_device_timelines(g.in, llm);
  const DependencyPoints dep = dependency_points(llm.result, 8);
  const EncoderWork work = encoder_work(g.in, plan);
  const PlacedEncoder placed = schedule_with_their_images(g.in, ranks, dep, plan, work, {4, 4}, BubbleMode::kFine);
  EXPECT_TRUE(check_bubble_schedule(placed.problem, placed.schedule).empty());
  std::vector<int> fed(8, 0);
  for (int j = 0; j < 2; ++j) {
    for (int k = 0; k < 4; ++k) {
      const int i = placed.schedule.llm_micro_batch[j][k];
      ++fed.at(i);
      EXPECT_DOUBLE_EQ(kernel_seconds(placed.problem.pipelines[j].forward[0][k]), kernel_seconds(work.forward[0][i]));
    }
  }
  EXPECT_EQ(fed, std::vector<int>(8, 1));
  // A map given in advance is kept, and a map that feeds a micro-batch twice is refused.
  BubbleProblem wrong = placed.problem;
  wrong.llm_micro_batch = {{0, 1, 2, 3}, {3, 4, 5, 6}};
  EXPECT_THROW(schedule_encoder_bubbles(wrong, BubbleMode::kFine), InputError);
  BubbleProblem given = placed.problem;
  given.llm_micro_batch = {{0, 2, 4, 6}, {1, 3, 5, 7}};
  const BubbleSchedule kept = schedule_encoder_bubbles(given, BubbleMode::kFine);
  EXPECT_EQ(kept.llm_micro_batch, given.llm_micro_batch);
  EXPECT_TRUE(check_bubble_schedule(given, kept).empty());
  BubbleSchedule moved = kept;
  std::swap(moved.llm_micro_batch[0][0], moved.llm_micro_batch[1][0]);
  EXPECT_FALSE(check_bubble_schedule(given, moved).empty());
}

TEST(Optimus, RefusesAModelWithoutEncoder) {
  EightGpus g;
  const ModelSpec llm = llm_only(g.model);
  g.in.model = &llm;
  EXPECT_THROW(plan_optimus(g.in), InputError);
}

}  // namespace
}  // namespace fulcrum
