#include "fulcrum/plan/bubble_scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fulcrum/core/error.h"
#include "fulcrum/core/rng.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

Kernel compute(double seconds) { return Kernel{"gemm", Kernel::Kind::kCompute, 0, 0, 0, seconds}; }
Kernel collective(double seconds) { return Kernel{"tp_all_reduce", Kernel::Kind::kCommunication, 0, 0, 0, seconds}; }

// The efficiency's definition, counted from the inside: per device, the encoder compute in its LLM's head bubble
// up to that bubble's unshifted length, and all of it from the (shifted) first LLM compute to the LLM's last
// gradients (its end less the longest optimizer step); over all encoder compute. The scheduler counts what lies
// outside instead.
double efficiency_by_definition(const BubbleProblem& p, const BubbleSchedule& s) {
  double llm_end = 0, step = 0;
  for (const LlmDeviceTimeline& llm : p.llm_ranks) {
    llm_end = std::max(llm_end, llm.end_seconds);
    step = std::max(step, llm.optimizer_seconds);
  }
  const double gradients = llm_end - step;
  auto overlap = [](const PlacedKernel& k, double from, double to) {
    return std::max(0.0, std::min(k.end_seconds, to) - std::max(k.start_seconds, from));
  };
  double total = 0, inside = 0;
  std::map<std::pair<int, int>, std::pair<double, double>> head;  // device: (compute in its head, head length)
  for (const PlacedKernel& k : s.kernels) {
    const EncoderPipelineWork& w = p.pipelines[k.pipeline];
    const Kernel& kernel = (k.backward ? w.backward : w.forward)[k.stage][k.micro_batch][k.kernel];
    if (kernel.kind != Kernel::Kind::kCompute) continue;
    const LlmDeviceTimeline& llm = p.llm_ranks[w.stage_rank[k.stage]];
    // The head bubble ends at the first pass; compute before it (a shared core's gather) is not idle.
    const double first = llm.first_pass_start_seconds >= 0 ? llm.first_pass_start_seconds
                         : llm.compute.empty()              ? llm.end_seconds
                                                            : llm.compute.front().start_seconds;
    double busy_before = 0;
    for (const TimeInterval& t : llm.compute) busy_before += std::max(0.0, std::min(t.end_seconds, first) - t.start_seconds);
    total += k.end_seconds - k.start_seconds;
    inside += overlap(k, first + s.head_shift_seconds, gradients + s.head_shift_seconds);
    auto& [in_head, length] = head[{k.pipeline, k.stage}];
    in_head += overlap(k, -1e300, first + s.head_shift_seconds);
    length = first - busy_before;
  }
  for (const auto& [device, h] : head) inside += std::min(h.first, h.second);
  return total > 0 ? inside / total : 1.0;
}

LlmDeviceTimeline timeline(std::vector<TimeInterval> compute, double last_pass_end, double end,
                           std::vector<TimeInterval> tensor_comm = {}) {
  return LlmDeviceTimeline{std::move(compute), std::move(tensor_comm), last_pass_end, end};
}

// A pipeline whose every stage runs the same pass per micro-batch.
EncoderPipelineWork pipeline(std::vector<int> ranks, int micro_batches, std::vector<Kernel> forward,
                             std::vector<Kernel> backward) {
  EncoderPipelineWork w;
  w.stage_rank = ranks;
  for (size_t s = 0; s < ranks.size(); ++s) {
    w.forward.emplace_back(micro_batches, forward);
    w.backward.emplace_back(micro_batches, backward);
  }
  w.stage_tail_seconds.assign(ranks.size(), 0);
  return w;
}

const PlacedKernel& find(const BubbleSchedule& s, int pipeline, int stage, int micro_batch, bool backward,
                         int kernel = 0) {
  for (const PlacedKernel& k : s.kernels) {
    if (k.pipeline == pipeline && k.stage == stage && k.micro_batch == micro_batch && k.backward == backward &&
        k.kernel == kernel) {
      return k;
    }
  }
  throw std::runtime_error("kernel not placed");
}

// The paper's 8-GPU example (Fig. 5): LLM PP 4 (TP 2), encoder PP 2 (TP 2), so m = 2 encoder pipelines; by
// encoder_slot, pipeline 0 runs its stages on LLM ranks 0 and 2, pipeline 1 on ranks 1 and 3. The LLM runs 1F1B
// over 4 micro-batches with forward 1 s and backward 2 s per stage, worked out by hand:
//   rank 0: F0 F1 F2 F3 [0,4), B0 [10,12), B1 [13,15), B2 [16,18), B3 [19,21)
//   rank 1: F0 F1 F2 [1,4), B0 [8,10), F3 [10,11), B1 [11,13), B2 [14,16), B3 [17,19)
//   rank 2: F0 F1 [2,4), B0 [6,8), F2 [8,9), B1 [9,11), F3 [11,12), B2 [12,14), B3 [15,17)
//   rank 3: F0 [3,4), B0 [4,6), F1 [6,7), B1 [7,9), F2 [9,10), B2 [10,12), F3 [12,13), B3 [13,15)
// so F = {0, 1, 2, 3} and B = {12, 15, 18, 21}. An encoder stage takes 0.5 s forward and 1 s backward.
BubbleProblem papers_example() {
  BubbleProblem p;
  p.llm_ranks = {
      timeline({{0, 4}, {10, 12}, {13, 15}, {16, 18}, {19, 21}}, 21, 21),
      timeline({{1, 4}, {8, 13}, {14, 16}, {17, 19}}, 19, 21),
      timeline({{2, 4}, {6, 14}, {15, 17}}, 17, 21),
      timeline({{3, 15}}, 15, 21),
  };
  p.dependency = {{0, 1, 2, 3}, {12, 15, 18, 21}};
  p.pipelines = {pipeline({0, 2}, 2, {compute(0.5)}, {compute(1.0)}),
                 pipeline({1, 3}, 2, {compute(0.5)}, {compute(1.0)})};
  return p;
}

TEST(BubbleScheduler, ThePapersEightGpuExample) {
  const BubbleProblem p = papers_example();
  const BubbleSchedule s = schedule_encoder_bubbles(p, BubbleMode::kFine);
  EXPECT_THAT(check_bubble_schedule(p, s), ::testing::IsEmpty());
  // LLM micro-batch 0 needs its images at F_0 = 0, and two encoder stages take 1 s: the LLM starts 1 s late.
  EXPECT_NEAR(s.head_shift_seconds, 1.0, 1e-6);
  // Both pipelines run their forwards back to back in the head bubbles (rank 0's is the shift itself).
  EXPECT_NEAR(find(s, 0, 0, 1, false).start_seconds, 0.5, 1e-6);
  EXPECT_NEAR(find(s, 0, 1, 1, false).start_seconds, 1.0, 1e-6);
  EXPECT_NEAR(s.forward_ready_seconds[0][0], 1.0, 1e-6);
  EXPECT_NEAR(s.forward_ready_seconds[1][1], 1.5, 1e-6);
  // Finish order (ties to the lower pipeline) maps them: LLM 0 ← (0, 0), 1 ← (1, 0), 2 ← (0, 1), 3 ← (1, 1).
  EXPECT_EQ(s.llm_micro_batch, (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  // Backward, LLM shifted by 1 s. Pipeline 0's micro-batch 0 serves LLM 0: gradients at B_0 + 1 = 13; rank 2 is
  // busy until 15, then idle [15, 16). Its stage 0 on rank 0 then takes rank 0's gap [16, 17).
  EXPECT_NEAR(find(s, 0, 1, 0, true).start_seconds, 15.0, 1e-6);
  EXPECT_NEAR(find(s, 0, 0, 0, true).start_seconds, 16.0, 1e-6);
  EXPECT_NEAR(s.backward_start_seconds[0][0], 15.0, 1e-6);
  // LLM 2 (B_2 + 1 = 19): rank 2 is idle from 18, so [19, 20); rank 0 is busy [20, 22), so [22, 23).
  EXPECT_NEAR(find(s, 0, 1, 1, true).start_seconds, 19.0, 1e-6);
  EXPECT_NEAR(find(s, 0, 0, 1, true).start_seconds, 22.0, 1e-6);
  // Pipeline 1: LLM 1 at 16 on rank 3 (idle from 16), then rank 1's gap [17, 18); LLM 3 at 22, then 23.
  EXPECT_NEAR(find(s, 1, 1, 0, true).start_seconds, 16.0, 1e-6);
  EXPECT_NEAR(find(s, 1, 0, 0, true).start_seconds, 17.0, 1e-6);
  EXPECT_NEAR(find(s, 1, 0, 1, true).start_seconds, 23.0, 1e-6);
  EXPECT_NEAR(s.iteration_seconds, 24.0, 1e-6);
  EXPECT_NEAR(s.llm_seconds, 21.0, 1e-12);
  // Encoder compute 12 s; outside the LLM's bubbles: rank 0's 1 s in a head it did not have, and the 3 s past
  // the LLM's end at 22.
  EXPECT_NEAR(s.encoder_compute_seconds, 12.0, 1e-9);
  EXPECT_NEAR(s.efficiency, 8.0 / 12, 1e-6);
}

// The example with a 1 s LLM optimizer step on every rank after its gradients are reduced at 21, and each encoder
// stage reducing its gradients for 0.5 s, then stepping for 0.25 s (stage 0) or 0.5 s (stage 1). The placements
// do not move (the steps are not LLM compute to avoid). As in the simulator, every optimizer step starts once
// every gradient is reduced: pipeline 1's stage 0 ends its last backward at 24 (above), its gradients at 24.5,
// and the longest step, the LLM's on a rank hosting a stage 1, is 1.5 s.
TEST(BubbleScheduler, EveryOptimizerStepWaitsForTheEncodersGradients) {
  BubbleProblem p = papers_example();
  for (LlmDeviceTimeline& llm : p.llm_ranks) {
    llm.end_seconds = 22;
    llm.optimizer_seconds = 1;
  }
  for (EncoderPipelineWork& w : p.pipelines) {
    w.stage_tail_seconds = {0.5, 0.5};
    w.stage_optimizer_seconds = {0.25, 0.5};
  }
  const BubbleSchedule s = schedule_encoder_bubbles(p, BubbleMode::kFine);
  EXPECT_THAT(check_bubble_schedule(p, s), ::testing::IsEmpty());
  EXPECT_NEAR(find(s, 1, 0, 1, true).start_seconds, 23.0, 1e-6);
  EXPECT_NEAR(s.iteration_seconds, 26.0, 1e-6);
  // Pipeline 0's last gradients: its stage 0's backward [22, 23) on rank 0, reduced by 23.5.
  ASSERT_EQ(s.pipeline_end_seconds.size(), 2u);
  EXPECT_NEAR(s.pipeline_end_seconds[0], 25.0, 1e-6);
  EXPECT_NEAR(s.pipeline_end_seconds[1], 26.0, 1e-6);
  // The bubbles end with the LLM's gradients at 21 + 1, as before the steps were added.
  EXPECT_NEAR(s.efficiency, 8.0 / 12, 1e-6);
  EXPECT_NEAR(s.efficiency, efficiency_by_definition(p, s), 1e-9);

  BubbleSchedule early = s;
  early.iteration_seconds = 25.9;  // as if the steps ran beside the encoders' gradient reduction
  EXPECT_THAT(check_bubble_schedule(p, early), ::testing::Contains(HasSubstr(
                                                  "before the optimizer steps that follow pipeline 1 stage 0's "
                                                  "gradients at 24.5 s end at 26 s")));

  p.pipelines[0].stage_optimizer_seconds = {0.25};
  EXPECT_THROW(schedule_encoder_bubbles(p, BubbleMode::kFine), InputError);
}

// One LLM micro-batch, forward and backward in [1, 3) (F_0 = 1, B_0 = 3); its gradients all-reduced from 3 to 5,
// then its 1 s optimizer step. One encoder stage: 0.5 s forward in the head, 0.5 s backward from 3, then 1 s of
// gradient reduction, which waits on the device's one collective stream for the LLM's until 5, and a 0.5 s step.
// The last gradients are the encoder's at 6; the steps, 1 + 0.5 s on the one device, end at 7.5.
TEST(BubbleScheduler, AnEncodersGradientReductionQueuesBehindTheLlms) {
  BubbleProblem p;
  p.llm_ranks = {timeline({{1, 3}}, 3, 6)};
  p.llm_ranks[0].optimizer_seconds = 1;
  p.llm_ranks[0].collectives_end_seconds = 5;
  p.dependency = {{1}, {3}};
  p.pipelines = {pipeline({0}, 1, {compute(0.5)}, {compute(0.5)})};
  p.pipelines[0].stage_tail_seconds = {1};
  p.pipelines[0].stage_optimizer_seconds = {0.5};
  for (BubbleMode mode : {BubbleMode::kFine, BubbleMode::kCoarse}) {
    const BubbleSchedule s = schedule_encoder_bubbles(p, mode);
    EXPECT_THAT(check_bubble_schedule(p, s), ::testing::IsEmpty());
    EXPECT_NEAR(s.head_shift_seconds, 0, 1e-12);
    EXPECT_NEAR(find(s, 0, 0, 0, true).start_seconds, 3, 1e-12);
    EXPECT_NEAR(s.iteration_seconds, 7.5, 1e-12);
    EXPECT_NEAR(s.efficiency, 1.0, 1e-12);  // the head [0, 0.5) and [3, 3.5), before the LLM's gradients at 5
    BubbleSchedule early = s;
    early.iteration_seconds = 7.4;
    EXPECT_THAT(check_bubble_schedule(p, early),
                ::testing::Contains(HasSubstr("follow pipeline 0 stage 0's gradients at 6 s end at 7.5 s")));
  }
  // Without LLM collectives (data parallelism 1) the reduction runs at once: 3.5 to 4.5, before the LLM's
  // gradients at 5.
  p.llm_ranks[0].collectives_end_seconds = 0;
  EXPECT_NEAR(schedule_encoder_bubbles(p, BubbleMode::kFine).iteration_seconds, 6.5, 1e-12);
  p.llm_ranks[0].collectives_end_seconds = 6.5;  // past the iteration
  EXPECT_THROW(schedule_encoder_bubbles(p, BubbleMode::kFine), InputError);
}

// On shared cores a parameter gather takes the LLM's cores [0, 0.5) before its first pass at 3: the head bubble
// still ends at that pass, and the encoder's 2 s forward fits in [0.5, 3) without shifting the LLM.
TEST(BubbleScheduler, TheHeadBubbleEndsAtTheFirstPassNotAtTheComputeBeforeIt) {
  BubbleProblem p;
  LlmDeviceTimeline llm = timeline({{0, 0.5}, {3, 4}}, 4, 5);
  llm.first_pass_start_seconds = 3;
  p.llm_ranks = {llm};
  p.dependency = {{3}, {4}};
  p.pipelines = {pipeline({0}, 1, {compute(2)}, {compute(1)})};
  for (BubbleMode mode : {BubbleMode::kCoarse, BubbleMode::kFine}) {
    const BubbleSchedule s = schedule_encoder_bubbles(p, mode);
    EXPECT_THAT(check_bubble_schedule(p, s), ::testing::IsEmpty());
    EXPECT_NEAR(s.head_shift_seconds, 0, 1e-6);
    EXPECT_NEAR(find(s, 0, 0, 0, false).start_seconds, 0.5, 1e-6);
    EXPECT_NEAR(find(s, 0, 0, 0, true).start_seconds, 4, 1e-6);
    EXPECT_NEAR(s.iteration_seconds, 5, 1e-6);
    EXPECT_NEAR(s.efficiency, 1, 1e-9);
    EXPECT_NEAR(s.efficiency, efficiency_by_definition(p, s), 1e-9);
  }
  // One 2.6 s kernel: the 2.5 s after the gather are too short, and a kernel never straddles LLM work, so the
  // LLM (its gather with it) moves 2.6 s for the kernel to run before the gather.
  p.pipelines = {pipeline({0}, 1, {compute(2.6)}, {compute(1)})};
  const BubbleSchedule coarse = schedule_encoder_bubbles(p, BubbleMode::kCoarse);
  EXPECT_THAT(check_bubble_schedule(p, coarse), ::testing::IsEmpty());
  EXPECT_NEAR(coarse.head_shift_seconds, 2.6, 1e-6);
  EXPECT_NEAR(find(coarse, 0, 0, 0, false).start_seconds, 0, 1e-6);
  EXPECT_NEAR(coarse.efficiency, efficiency_by_definition(p, coarse), 1e-9);
}

// LLM compute [1, 2) and [3, 4), F = {1, 3}, B = {2, 4}; encoder: one stage, 1 s forward, 1 s backward.
BubbleProblem interior_gap_example() {
  BubbleProblem p;
  p.llm_ranks = {timeline({{1, 2}, {3, 4}}, 4, 5)};
  p.dependency = {{1, 3}, {2, 4}};
  p.pipelines = {pipeline({0}, 2, {compute(1)}, {compute(1)})};
  return p;
}

TEST(BubbleScheduler, TheFineStepUsesTheGapsTheCoarseStepLeavesIdle) {
  const BubbleProblem p = interior_gap_example();
  const BubbleSchedule fine = schedule_encoder_bubbles(p, BubbleMode::kFine);
  EXPECT_THAT(check_bubble_schedule(p, fine), ::testing::IsEmpty());
  // Forward 1 in the gap [2, 3), just in time for F_1 = 3; backward 0 at B_0 = 2 finds [2, 3) taken and goes to
  // the tail at 4, backward 1 follows at 5.
  EXPECT_NEAR(fine.head_shift_seconds, 0, 1e-12);
  EXPECT_NEAR(find(fine, 0, 0, 1, false).start_seconds, 2, 1e-12);
  EXPECT_NEAR(find(fine, 0, 0, 0, true).start_seconds, 4, 1e-12);
  EXPECT_NEAR(fine.iteration_seconds, 6, 1e-12);
  EXPECT_NEAR(fine.efficiency, 0.75, 1e-12);  // [5, 6) is past the LLM's end

  const BubbleSchedule coarse = schedule_encoder_bubbles(p, BubbleMode::kCoarse);
  EXPECT_THAT(check_bubble_schedule(p, coarse), ::testing::IsEmpty());
  // Both forwards in the head: it must grow by 1 s. Backwards from the shifted tail at 5.
  EXPECT_NEAR(coarse.head_shift_seconds, 1, 1e-6);
  EXPECT_NEAR(find(coarse, 0, 0, 1, false).start_seconds, 1, 1e-6);
  EXPECT_NEAR(find(coarse, 0, 0, 0, true).start_seconds, 5, 1e-6);
  EXPECT_NEAR(coarse.iteration_seconds, 7, 1e-6);
  EXPECT_NEAR(coarse.efficiency, 0.5, 1e-6);  // 1 s in the head's growth, 1 s past the end
}

TEST(BubbleScheduler, AKernelNeverStraddlesLlmWork) {
  // Forward 1 is two kernels, 0.5 s and 1.5 s. After forward 0 in [0, 1) the head has [1, 2): the 0.5 s kernel
  // fits, the 1.5 s one fits neither the rest of the head nor the 1 s gap [4, 5); the head must grow by 1 s.
  BubbleProblem p;
  p.llm_ranks = {timeline({{2, 4}, {5, 6}}, 6, 8)};
  p.dependency = {{2, 5}, {6, 7}};
  p.pipelines = {pipeline({0}, 2, {compute(1)}, {compute(1)})};
  p.pipelines[0].forward[0][1] = {compute(0.5), compute(1.5)};
  const BubbleSchedule s = schedule_encoder_bubbles(p, BubbleMode::kFine);
  EXPECT_THAT(check_bubble_schedule(p, s), ::testing::IsEmpty());
  EXPECT_NEAR(s.head_shift_seconds, 1, 1e-6);
  EXPECT_NEAR(find(s, 0, 0, 1, false, 1).start_seconds, 1.5, 1e-6);
  EXPECT_NEAR(s.forward_ready_seconds[0][1], 3, 1e-6);
}

TEST(BubbleScheduler, EncoderCollectivesAvoidTheLlmsAndSlowItsCompute) {
  // Compute 0.2 s, a collective of 0.5 s, compute 0.2 s. The collective cannot start at 0.2 (the LLM's
  // collective runs [0.5, 1)); it runs [1, 1.5) beside LLM compute, which loses 0.4 × 0.5 s. The last kernel
  // goes back to the idle [0.2, 1)? No: it follows the collective, so it waits for the gap after [1, 2).
  BubbleProblem p;
  p.llm_ranks = {timeline({{1, 2}}, 2, 3, {{0.5, 1}})};
  p.dependency = {{3}, {3}};
  p.pipelines = {pipeline({0}, 1, {compute(0.2), collective(0.5), compute(0.2)}, {})};
  p.communication_slowdown = 0.4;
  const BubbleSchedule s = schedule_encoder_bubbles(p, BubbleMode::kFine);
  EXPECT_THAT(check_bubble_schedule(p, s), ::testing::IsEmpty());
  EXPECT_NEAR(find(s, 0, 0, 0, false, 1).start_seconds, 1.0, 1e-12);
  EXPECT_NEAR(find(s, 0, 0, 0, false, 2).start_seconds, 2.0, 1e-12);
  EXPECT_NEAR(s.contention_seconds, 0.2, 1e-12);
  EXPECT_NEAR(s.iteration_seconds, 3.2, 1e-12);
}

TEST(BubbleScheduler, AFrozenEncoderRunsForwardOnly) {
  BubbleProblem p = interior_gap_example();
  p.pipelines[0].backward[0] = {{}, {}};
  const BubbleSchedule s = schedule_encoder_bubbles(p, BubbleMode::kFine);
  EXPECT_THAT(check_bubble_schedule(p, s), ::testing::IsEmpty());
  EXPECT_EQ(s.kernels.size(), 2u);
  EXPECT_NEAR(s.iteration_seconds, 5, 1e-12);
  EXPECT_NEAR(s.efficiency, 1, 1e-12);
}

// The checker on schedules broken one rule at a time.
TEST(BubbleScheduler, TheCheckerRejectsEveryBrokenRule) {
  const BubbleProblem p = papers_example();
  const BubbleSchedule good = schedule_encoder_bubbles(p, BubbleMode::kFine);
  ASSERT_THAT(check_bubble_schedule(p, good), ::testing::IsEmpty());
  auto errors_after = [&](auto&& edit) {
    BubbleSchedule bad = good;
    edit(bad);
    const std::vector<std::string> errors = check_bubble_schedule(p, bad);
    std::string all;
    for (const std::string& e : errors) all += e + "\n";
    return all;
  };
  auto kernel = [&](BubbleSchedule& s, int pipeline, int stage, int micro_batch, bool backward) -> PlacedKernel& {
    return const_cast<PlacedKernel&>(find(s, pipeline, stage, micro_batch, backward));
  };
  // EF_i ≤ F_i: without the shift, micro-batch 0 arrives after F_0 = 0.
  EXPECT_THAT(errors_after([](BubbleSchedule& s) { s.head_shift_seconds = 0; }), HasSubstr("after F_0"));
  // EB_i ≥ B_i: a backward moved before its gradients arrive (into rank 2's idle [4, 6)).
  EXPECT_THAT(errors_after([&](BubbleSchedule& s) {
    PlacedKernel& k = kernel(s, 0, 1, 0, true);
    k.start_seconds = 5;
    k.end_seconds = 6;
  }), HasSubstr("before B_0"));
  // Stage order: stage 1's forward of micro-batch 0 before stage 0's ends.
  EXPECT_THAT(errors_after([&](BubbleSchedule& s) {
    PlacedKernel& k = kernel(s, 0, 1, 0, false);
    k.start_seconds = 0.25;
    k.end_seconds = 0.75;
  }), HasSubstr("before stage 0's output arrives"));
  // A compute kernel on the LLM's compute: rank 0 runs [1, 5) after the shift.
  EXPECT_THAT(errors_after([&](BubbleSchedule& s) {
    PlacedKernel& k = kernel(s, 0, 0, 0, true);
    k.start_seconds = 2;
    k.end_seconds = 3;
  }), HasSubstr("meets the LLM's compute"));
  // Two encoder kernels on one device at once.
  EXPECT_THAT(errors_after([&](BubbleSchedule& s) {
    PlacedKernel& k = kernel(s, 1, 0, 1, false);
    k.start_seconds = 0.25;
    k.end_seconds = 0.75;
  }), HasSubstr("overlap"));
  // A kernel missing, a kernel twice, a kernel shortened.
  EXPECT_THAT(errors_after([](BubbleSchedule& s) { s.kernels.pop_back(); }), HasSubstr("is not placed"));
  EXPECT_THAT(errors_after([](BubbleSchedule& s) { s.kernels.push_back(s.kernels.front()); }),
              HasSubstr("placed twice"));
  EXPECT_THAT(errors_after([](BubbleSchedule& s) { s.kernels.front().end_seconds -= 0.1; }), HasSubstr("its cost"));
  // Two encoder micro-batches feeding one LLM micro-batch.
  EXPECT_THAT(errors_after([](BubbleSchedule& s) { s.llm_micro_batch[1][0] = 0; }), HasSubstr("nobody else"));
  // An iteration that ends before the work does.
  EXPECT_THAT(errors_after([](BubbleSchedule& s) { s.iteration_seconds = 22; }),
              HasSubstr("before the optimizer steps that follow pipeline"));
}

TEST(BubbleScheduler, TheCheckerRejectsAnLlmCollectiveUnderAnEncoderOne) {
  BubbleProblem p;
  p.llm_ranks = {timeline({{1, 2}}, 2, 3, {{0.5, 1}})};
  p.dependency = {{3}, {3}};
  p.pipelines = {pipeline({0}, 1, {collective(0.5)}, {})};
  BubbleSchedule s = schedule_encoder_bubbles(p, BubbleMode::kFine);
  ASSERT_THAT(check_bubble_schedule(p, s), ::testing::IsEmpty());
  s.kernels[0].start_seconds = 0.25;
  s.kernels[0].end_seconds = 0.75;
  EXPECT_THAT(check_bubble_schedule(p, s), ::testing::Contains(HasSubstr("tensor-parallel collectives")));
}

TEST(BubbleScheduler, MalformedProblemsAreRefused) {
  BubbleProblem p = papers_example();
  p.pipelines[1] = pipeline({1, 3}, 3, {compute(0.5)}, {compute(1.0)});
  EXPECT_THROW(schedule_encoder_bubbles(p, BubbleMode::kFine), InputError);  // 5 micro-batches for 4
  p = papers_example();
  p.pipelines[0].stage_rank[1] = 4;
  EXPECT_THROW(schedule_encoder_bubbles(p, BubbleMode::kFine), InputError);
  p = papers_example();
  p.pipelines[0].backward.pop_back();
  EXPECT_THROW(schedule_encoder_bubbles(p, BubbleMode::kFine), InputError);
}

// Random LLM timelines and encoder work: every schedule keeps every rule, the fine step never needs a larger
// head shift than the coarse one, and the shift is the least that works.
TEST(BubbleScheduler, RandomInstancesAlwaysValidate) {
  Rng rng(7);
  auto uniform = [&](double lo, double hi) { return lo + (hi - lo) * (rng.below(1 << 20) / double(1 << 20)); };
  for (int trial = 0; trial < 200; ++trial) {
    const int llm_pp = 1 + static_cast<int>(rng.below(4));
    const int micro_batches = 1 + static_cast<int>(rng.below(6));
    BubbleProblem p;
    double llm_end = 0;
    for (int r = 0; r < llm_pp; ++r) {
      LlmDeviceTimeline t;
      double clock = uniform(0, 3);
      const int busy = 1 + static_cast<int>(rng.below(12));
      for (int b = 0; b < busy; ++b) {
        const double length = uniform(0.05, 2);
        t.compute.push_back({clock, clock + length});
        if (rng.below(2)) t.tensor_comm.push_back({clock + length, clock + length + uniform(0.01, 0.3)});
        clock += length + (rng.below(3) ? uniform(0.01, 0.5) : 0.3);
      }
      t.last_pass_end_seconds = t.compute.back().end_seconds;
      // A third of the ranks: compute before the first pass (a parameter gather's on shared cores).
      if (rng.below(3) == 0 && t.compute.front().start_seconds > 0.2) {
        t.first_pass_start_seconds = t.compute.front().start_seconds;
        const double at = uniform(0, t.first_pass_start_seconds - 0.2);
        t.compute.insert(t.compute.begin(), {at, at + uniform(0.01, 0.1)});
      }
      t.end_seconds = clock + uniform(0, 1);
      llm_end = std::max(llm_end, t.end_seconds);
      p.llm_ranks.push_back(t);
    }
    // Half the instances with optimizer steps after the gradients at llm_end, and collectives that end in the tail.
    const bool steps = rng.below(2) == 0;
    double step_max = 0;
    for (LlmDeviceTimeline& t : p.llm_ranks) {
      t.optimizer_seconds = steps ? uniform(0, 0.5) : 0;
      step_max = std::max(step_max, t.optimizer_seconds);
      t.collectives_end_seconds = steps ? uniform(t.last_pass_end_seconds, llm_end) : 0;
    }
    for (LlmDeviceTimeline& t : p.llm_ranks) t.end_seconds = llm_end + step_max;
    double f = uniform(0, 2);
    for (int i = 0; i < micro_batches; ++i) {
      p.dependency.forward_seconds.push_back(f);
      p.dependency.backward_seconds.push_back(f + uniform(0.5, 5));
      f += uniform(0, 2);
    }
    std::sort(p.dependency.backward_seconds.begin(), p.dependency.backward_seconds.end());
    const int pipelines = 1 + static_cast<int>(rng.below(std::min(3, micro_batches)));
    int left = micro_batches;
    for (int j = 0; j < pipelines; ++j) {
      const int n = j + 1 == pipelines ? left : 1 + static_cast<int>(rng.below(left - (pipelines - j - 1)));
      left -= n;
      const int stages = 1 + static_cast<int>(rng.below(llm_pp));
      EncoderPipelineWork w;
      for (int s = 0; s < stages; ++s) {
        w.stage_rank.push_back(static_cast<int>(rng.below(llm_pp)));
        w.forward.emplace_back();
        w.backward.emplace_back();
        for (int k = 0; k < n; ++k) {
          std::vector<Kernel> fwd, bwd;
          const int kernels = 1 + static_cast<int>(rng.below(4));
          for (int q = 0; q < kernels; ++q) {
            fwd.push_back(rng.below(4) ? compute(uniform(0.01, 0.6)) : collective(uniform(0.01, 0.2)));
            bwd.push_back(rng.below(4) ? compute(uniform(0.01, 1.2)) : collective(uniform(0.01, 0.2)));
          }
          w.forward[s].push_back(fwd);
          w.backward[s].push_back(rng.below(5) ? bwd : std::vector<Kernel>{});
        }
        w.stage_tail_seconds.push_back(uniform(0, 0.3));
        if (steps) w.stage_optimizer_seconds.push_back(uniform(0, 0.2));
      }
      p.pipelines.push_back(w);
    }
    p.transfer_seconds = rng.below(2) ? uniform(0, 0.1) : 0;
    p.communication_slowdown = uniform(0, 0.5);
    const BubbleSchedule fine = schedule_encoder_bubbles(p, BubbleMode::kFine);
    const BubbleSchedule coarse = schedule_encoder_bubbles(p, BubbleMode::kCoarse);
    EXPECT_THAT(check_bubble_schedule(p, fine), ::testing::IsEmpty()) << "trial " << trial;
    EXPECT_THAT(check_bubble_schedule(p, coarse), ::testing::IsEmpty()) << "trial " << trial;
    EXPECT_LE(fine.head_shift_seconds, coarse.head_shift_seconds + 1e-6) << "trial " << trial;
    EXPECT_NEAR(fine.efficiency, efficiency_by_definition(p, fine), 1e-9) << "trial " << trial;
    EXPECT_NEAR(coarse.efficiency, efficiency_by_definition(p, coarse), 1e-9) << "trial " << trial;
    // The step's end, worked out apart: every optimizer step (a device's LLM step and its encoder stage's) starts
    // at the last gradients, the LLM's at llm_end or an encoder stage's reduction after its last kernel and the
    // LLM's collectives there; contention adds at most its largest charge.
    for (const BubbleSchedule* sched : {&fine, &coarse}) {
      const double shift = sched->head_shift_seconds;
      double gradients = llm_end + shift, longest_step = step_max;
      std::map<std::pair<int, int>, double> last_kernel;
      for (const PlacedKernel& k : sched->kernels) {
        double& end = last_kernel[{k.pipeline, k.stage}];
        end = std::max(end, k.end_seconds);
      }
      for (const auto& [device, end] : last_kernel) {
        const EncoderPipelineWork& w = p.pipelines[device.first];
        const LlmDeviceTimeline& host = p.llm_ranks[w.stage_rank[device.second]];
        const double tail = w.stage_tail_seconds[device.second];
        const double queue = host.collectives_end_seconds > 0 ? host.collectives_end_seconds + shift : 0;
        gradients = std::max(gradients, tail > 0 ? std::max(end, queue) + tail : end);
        longest_step = std::max(longest_step, host.optimizer_seconds +
                                                  (steps ? w.stage_optimizer_seconds[device.second] : 0.0));
      }
      EXPECT_GE(sched->iteration_seconds, gradients + longest_step - 1e-9) << "trial " << trial;
      EXPECT_LE(sched->iteration_seconds, gradients + longest_step + sched->contention_seconds + 1e-9)
          << "trial " << trial;
    }
    // The shift is the least that works: a little less does not.
    for (const BubbleSchedule* sched : {&fine, &coarse}) {
      EXPECT_TRUE(forward_fits(p, sched->mode, sched->head_shift_seconds)) << "trial " << trial;
      if (sched->head_shift_seconds > 1e-6) {
        const double less = sched->head_shift_seconds - std::max(1e-6, 1e-3 * sched->head_shift_seconds);
        EXPECT_FALSE(forward_fits(p, sched->mode, less)) << "trial " << trial;
      }
    }
  }
}

// Small cases against exhaustive search: one encoder stage, compute kernels only, every left-justified placement
// of every kernel enumerated (a kernel starts where its predecessor ends or where an idle stretch begins; starting
// later never helps). List scheduling must reach the exhaustive optimum of the last forward's end: gap 0.
TEST(BubbleScheduler, ListSchedulingMatchesExhaustiveSearchOnSmallCases) {
  Rng rng(11);
  auto uniform = [&](double lo, double hi) { return lo + (hi - lo) * (rng.below(1 << 20) / double(1 << 20)); };
  double worst_gap = 0;
  for (int trial = 0; trial < 100; ++trial) {
    LlmDeviceTimeline t;
    double clock = uniform(0, 1);
    for (int b = 0; b < 6; ++b) {
      const double length = uniform(0.1, 1);
      t.compute.push_back({clock, clock + length});
      clock += length + uniform(0.05, 0.8);
    }
    t.last_pass_end_seconds = t.end_seconds = t.compute.back().end_seconds;
    const int micro_batches = 1 + static_cast<int>(rng.below(3));
    std::vector<Kernel> kernels;
    EncoderPipelineWork w = pipeline({0}, micro_batches, {}, {});
    for (int k = 0; k < micro_batches; ++k) {
      w.forward[0][k].clear();
      for (int q = 0; q < 1 + static_cast<int>(rng.below(3)); ++q) w.forward[0][k].push_back(compute(uniform(0.05, 0.7)));
      for (const Kernel& kernel : w.forward[0][k]) kernels.push_back(kernel);
    }
    BubbleProblem p;
    p.llm_ranks = {t};
    p.dependency = {std::vector<double>(micro_batches, 100.0), std::vector<double>(micro_batches, 100.0)};
    p.pipelines = {w};
    const BubbleSchedule s = schedule_encoder_bubbles(p, BubbleMode::kFine);
    ASSERT_NEAR(s.head_shift_seconds, 0, 1e-12);
    double listed = 0;
    for (const std::vector<double>& ready : s.forward_ready_seconds) listed = std::max(listed, ready.back());
    // Idle stretches: before, between and after the LLM's compute.
    std::vector<TimeInterval> idle;
    double from = 0;
    for (const TimeInterval& busy : t.compute) {
      if (busy.start_seconds > from) idle.push_back({from, busy.start_seconds});
      from = busy.end_seconds;
    }
    idle.push_back({from, 1e9});
    double best = 1e18;
    std::function<void(size_t, double)> search = [&](size_t q, double cursor) {
      if (q == kernels.size()) {
        best = std::min(best, cursor);
        return;
      }
      for (const TimeInterval& stretch : idle) {
        const double start = std::max(cursor, stretch.start_seconds);
        if (start + kernels[q].seconds <= stretch.end_seconds + 1e-12) search(q + 1, start + kernels[q].seconds);
      }
    };
    search(0, 0);
    worst_gap = std::max(worst_gap, listed - best);
    EXPECT_NEAR(listed, best, 1e-9) << "trial " << trial;
  }
  RecordProperty("worst_gap_seconds", std::to_string(worst_gap));
}

}  // namespace
}  // namespace fulcrum
