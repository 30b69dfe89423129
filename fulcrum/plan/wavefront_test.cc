#include "fulcrum/plan/wavefront.h"

#include <gtest/gtest.h>

#include "fulcrum/core/rng.h"
#include "fulcrum/plan/test_levels.h"

namespace fulcrum {
namespace {

// Every wave fits the devices and keeps its slices apart; every op's operators run once, in order, one slice of
// an op per wave; waves follow each other; the number of waves is at most the number of parts.
TEST(Wavefront, EveryWaveRespectsCapacityAndEveryOperatorRunsOnce) {
  Rng rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const RandomLevel level = random_level(rng, 6, 7);
    const std::vector<LevelPart> parts = bipoint(level.ops, relax_level(level.ops, level.devices));
    const PartThatFitsNone mode = trial % 2 == 0 ? PartThatFitsNone::kRunOne : PartThatFitsNone::kLeave;
    const WaveLength length = trial % 4 < 2 ? WaveLength::kShortestPart : WaveLength::kBusiestWave;
    const std::vector<Wave> waves = wavefront(level.ops, parts, level.devices, 0.25, mode, length);
    ASSERT_LE(waves.size(), parts.size()) << "trial " << trial;
    expect_valid_waves(level, waves, 0.25, "trial " + std::to_string(trial));
  }
}

// A part that fits no whole operator in the wave its partner's last operator sets: run anyway, it stretches the
// wave to its operator's length; left out, the wave is its partner's and it runs next on all the devices.
// Linear curves: op 0 takes 0.1 s an operator on 4 devices, op 1 1.0 s on 4 and 0.5 s on 8.
TEST(Wavefront, APartThatFitsNoOperatorRunsOneOrLeaves) {
  const ScalabilityCurve light = doubling_curve(0.4, 1.0, 8);
  const ScalabilityCurve heavy = doubling_curve(4.0, 1.0, 8);
  const std::vector<LevelOp> ops{{&light, 1}, {&heavy, 3}};
  const std::vector<LevelPart> parts{{0, 4, 1}, {1, 4, 3}};
  auto end = [](const std::vector<Wave>& w) { return w.back().start_seconds + w.back().seconds; };
  // Wave 1: op 0's operator (0.1 s) beside one of op 1's (1.0 s); wave 2: op 1's other two on 8 devices (1.0 s).
  const std::vector<Wave> run_one = wavefront(ops, parts, 8, 0, PartThatFitsNone::kRunOne);
  ASSERT_EQ(run_one.size(), 2u);
  EXPECT_NEAR(run_one[0].seconds, 1.0, 1e-12);
  EXPECT_NEAR(end(run_one), 2.0, 1e-12);
  // Wave 1: op 0 alone (0.1 s); wave 2: op 1's three operators on 8 devices (1.5 s).
  const std::vector<Wave> leave = wavefront(ops, parts, 8, 0, PartThatFitsNone::kLeave);
  ASSERT_EQ(leave.size(), 2u);
  ASSERT_EQ(leave[0].slices.size(), 1u);
  EXPECT_NEAR(leave[0].seconds, 0.1, 1e-12);
  EXPECT_EQ(leave[1].slices[0].devices, 8);
  EXPECT_NEAR(end(leave), 1.6, 1e-12);
}

// The busiest wave: op 0's operator (0.1 s on 4 devices) beside op 1's three (1.0 s each on 4). A wave of 0.1 s
// leaves op 1 out and keeps 4 of 8 devices busy, 0.4 / 0.8 device-seconds; a wave of op 1's 3.0 s holds both,
// 0.4 + 12 of 24 (0.517): one wave of 3.0 s. Running op 1's part anyway, a wave of 0.1 s stretches to 1.0 s
// (0.4 + 4 of 8, 0.55) and beats 3.0 s: the shortest part's wave, as Spindle's alignment makes it.
TEST(Wavefront, TheBusiestWaveTakesThePartThatKeepsTheDevicesBusiest) {
  const ScalabilityCurve light = doubling_curve(0.4, 1.0, 8);
  const ScalabilityCurve heavy = doubling_curve(4.0, 1.0, 8);
  const std::vector<LevelOp> ops{{&light, 1}, {&heavy, 3}};
  const std::vector<LevelPart> parts{{0, 4, 1}, {1, 4, 3}};
  const std::vector<Wave> leave = wavefront(ops, parts, 8, 0, PartThatFitsNone::kLeave, WaveLength::kBusiestWave);
  ASSERT_EQ(leave.size(), 1u);
  ASSERT_EQ(leave[0].slices.size(), 2u);
  EXPECT_NEAR(leave[0].seconds, 3.0, 1e-12);
  for (const WaveSlice& slice : leave[0].slices) EXPECT_EQ(slice.layers, slice.op == 1 ? 3 : 1);
  const std::vector<Wave> run_one = wavefront(ops, parts, 8, 0, PartThatFitsNone::kRunOne, WaveLength::kBusiestWave);
  const std::vector<Wave> shortest = wavefront(ops, parts, 8, 0, PartThatFitsNone::kRunOne);
  ASSERT_EQ(run_one.size(), shortest.size());
  EXPECT_NEAR(run_one[0].seconds, 1.0, 1e-12);
  EXPECT_NEAR(run_one.back().start_seconds + run_one.back().seconds, 2.0, 1e-12);
}

// Two ops that each want half the devices share every wave: the level takes its relaxed makespan.
TEST(Wavefront, TwoEqualOpsShareTheDevices) {
  const ScalabilityCurve c = doubling_curve(1.0, 1.0, 8);  // linear: T(4) = 0.25
  const std::vector<LevelOp> ops{{&c, 10}, {&c, 10}};
  const Relaxation r = relax_level(ops, 8);
  EXPECT_NEAR(r.makespan_seconds, 2.5, 1e-9);
  const std::vector<Wave> waves = wavefront(ops, bipoint(ops, r), 8, 0);
  ASSERT_EQ(waves.size(), 1u);
  ASSERT_EQ(waves[0].slices.size(), 2u);
  EXPECT_EQ(waves[0].slices[0].devices, 4);
  EXPECT_EQ(waves[0].slices[1].devices, 4);
  EXPECT_DOUBLE_EQ(waves[0].seconds, 2.5);
}

// Devices left idle by the proposal go to the op with the most time left (the extend step): one op alone on
// a level whose bi-point part uses 2 of 4 devices runs on 4.
TEST(Wavefront, IdleDevicesExtendTheLongestOp) {
  const ScalabilityCurve c = doubling_curve(1.0, 0.9, 4);
  const std::vector<LevelOp> ops{{&c, 6}};
  const std::vector<LevelPart> parts{{0, 2, 6}};
  const std::vector<Wave> waves = wavefront(ops, parts, 4, 0);
  ASSERT_EQ(waves.size(), 1u);
  EXPECT_EQ(waves[0].slices[0].devices, 4);
  EXPECT_EQ(waves[0].slices[0].layers, 6);
}

}  // namespace
}  // namespace fulcrum
