#ifndef FULCRUM_PLAN_TEST_LEVELS_H_
#define FULCRUM_PLAN_TEST_LEVELS_H_

#include <string>
#include <vector>

#include "fulcrum/core/rng.h"
#include "fulcrum/plan/level_allocation.h"
#include "fulcrum/plan/wavefront.h"

namespace fulcrum {

// Levels the planner's tests draw at random, and the checks every packing of one must pass.

// A curve on the valid counts 1, 2, 4, 8, … up to `devices`, scaling with efficiency `e` per doubling.
ScalabilityCurve doubling_curve(double t1, double e, int devices);

// 1 to `max_ops` ops of 1 to 50 operators on 2^0 … 2^(max_log2_devices − 1) devices, each on a doubling curve of
// its own (ops point into `curves`: move the level, never copy it).
struct RandomLevel {
  int devices = 1;
  std::vector<ScalabilityCurve> curves;
  std::vector<LevelOp> ops;
};
RandomLevel random_level(Rng& rng, int max_log2_devices, int max_ops);

// Expects (gtest) that `waves` follow each other from `start_seconds`, fit the level's devices, run at most one
// slice of an op each, on valid counts, priced on the op's curve, each as long as its longest slice, and cover
// every op's operators once and in order. `what` names the case in failures. Returns the last wave's end.
double expect_valid_waves(const RandomLevel& level, const std::vector<Wave>& waves, double start_seconds,
                          const std::string& what);

}  // namespace fulcrum

#endif  // FULCRUM_PLAN_TEST_LEVELS_H_
