#include "fulcrum/plan/dependency_points.h"

#include <gtest/gtest.h>

#include "fulcrum/core/error.h"
#include "fulcrum/sched/pipeline_schedules.h"
#include "fulcrum/sim/test_pipelines.h"

namespace fulcrum {
namespace {

SimResult simulated(PipelineKind kind, int pp, int m, const CostModel& cost, bool timeline = true) {
  const Schedule s = test_schedule(kind, pp, 1, m, pp);
  SimOptions options;
  options.timeline = timeline;
  return simulate(s, blocks_only_model(pp), instant_cluster(s.layout.devices()), cost, instant_efficiency(),
                  uniform_loads(m, 1, 1, 0), options);
}

// 1F1B over 2 stages, 4 micro-batches, forward 1 s and backward 2 s per stage. By hand, rank 0 runs F0 [0, 1],
// F1 [1, 2], B0 [4, 6] (rank 1's F0 [1, 2] and B0 [2, 4] come first), F2 [6, 7], B1 [7, 9], F3 [9, 10],
// B2 [10, 12], B3 [13, 15].
TEST(DependencyPoints, OneFOneBByHand) {
  const DependencyPoints d = dependency_points(simulated(PipelineKind::kOneFOneB, 2, 4, PerTokenCost(1, 2, 0)), 4);
  EXPECT_EQ(d.forward_seconds, (std::vector<double>{0, 1, 6, 9}));
  EXPECT_EQ(d.backward_seconds, (std::vector<double>{6, 9, 12, 15}));
}

// In a split schedule B_i is the end of the input-gradient half: ZB-H1 with F = BI = W = 1 on one stage runs
// F0 BI0 W0 F1 BI1 W1 … (its weight passes deferred by one micro-batch: F0 BI0 F1 W0 BI1 …).
TEST(DependencyPoints, ASplitBackwardGivesTheInputGradientsEnd) {
  const SimResult r = simulated(PipelineKind::kZeroBubbleH1, 1, 3, PerTokenCost(1, 1, 1));
  const DependencyPoints d = dependency_points(r, 3);
  for (int i = 0; i < 3; ++i) {
    // Every input-gradient half ends one second after its forward and before the next forward starts.
    EXPECT_GE(d.backward_seconds[i], d.forward_seconds[i] + 2 - 1e-12) << i;
    if (i + 1 < 3) {
      EXPECT_LE(d.backward_seconds[i], d.forward_seconds[i + 1] + 1e-12) << i;
    }
  }
  EXPECT_LT(d.backward_seconds[2], r.iteration_seconds);  // the last weight pass still follows
}

TEST(DependencyPoints, ATimelineIsNeeded) {
  EXPECT_THROW(dependency_points(simulated(PipelineKind::kOneFOneB, 2, 4, PerTokenCost(1, 2, 0), false), 4),
               InputError);
}

}  // namespace
}  // namespace fulcrum
