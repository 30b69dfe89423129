#include "fulcrum/plan/configuration_program.h"

#include <gtest/gtest.h>

#include "fulcrum/core/error.h"
#include "fulcrum/core/rng.h"
#include "fulcrum/plan/test_levels.h"

namespace fulcrum {
namespace {

// Two ops that gain only 10% from a second device, 10 operators each, on 2 devices: side by side on one device
// each they take 10 s; one after another on both, 18 s.
TEST(ConfigurationProgram, OpsThatScalePoorlyRunSideBySide) {
  const ScalabilityCurve curve({{1, 1.0, 1, 1}, {2, 0.9, 2, 1}});
  const std::vector<LevelOp> ops{{&curve, 10}, {&curve, 10}};
  const ConfigurationProgram p = configuration_program(ops, 2, 0.0);
  EXPECT_NEAR(p.makespan_seconds, 10.0, 1e-9);
  ASSERT_EQ(p.waves.size(), 1u);
  ASSERT_EQ(p.waves[0].slices.size(), 2u);
  for (const WaveSlice& s : p.waves[0].slices) {
    EXPECT_EQ(s.devices, 1);
    EXPECT_EQ(s.layers, 10);
  }
  EXPECT_DOUBLE_EQ(p.waves[0].seconds, 10.0);
}

// A level of more ops than the program is solved for is left to the wavefront's packings (empty waves, no pivot),
// as one it cannot solve is; at the limit the simplex runs.
TEST(ConfigurationProgram, ALevelOfTooManyOpsIsNotSolved) {
  const ScalabilityCurve curve({{1, 1.0, 1, 1}, {2, 0.9, 2, 1}});
  std::vector<LevelOp> most;
  for (size_t m = 0; m < kMostConfigurationProgramOps; ++m) most.push_back({&curve, 10 + static_cast<int64_t>(m)});
  const ConfigurationProgram solved = configuration_program(most, static_cast<int>(most.size()), 0.0);
  EXPECT_FALSE(solved.waves.empty());
  EXPECT_GT(solved.iterations, 0);
  std::vector<LevelOp> more = most;
  more.push_back({&curve, 10});
  const ConfigurationProgram skipped = configuration_program(more, static_cast<int>(more.size()), 0.0);
  EXPECT_TRUE(skipped.waves.empty());
  EXPECT_EQ(skipped.iterations, 0);
}

// QWen-VAL's fifth level on 32 A800s, in its curves' terms: the audio-language LLM (A) and the
// vision-audio-language LLM (B), 32 blocks each, whose 16-device counts cross two nodes and lie under the
// envelope from 8 to 32, and no count between 16 and 32 is valid. Solved by hand: running A and B side by side on
// 16 devices each saves (1 − T_A(16)⁻¹ T_A(32) − T_B(16)⁻¹ T_B(32)) = 0.138 s of every second against each alone on
// 32, so B runs all its blocks beside A (t₁ = 32 × 0.02427 = 0.77664 s, in which A gets through 20.78 blocks) and A
// its other 11.22 alone on 32 (0.23514 s): 1.01178 s, where the relaxation's bound lets counts be fractional.
// The duals y_A = T_A(32) = 0.02095625 and y_B = T_B(16) (1 − y_A / T_A(16)) = 0.0106617 price every
// configuration at most 1, so no other is better. Whole blocks: A's 20.78 and 11.22 round to 21 and 11.
TEST(ConfigurationProgram, MatchesTheHandSolvedLevel) {
  const ScalabilityCurve a({{1, 0.6, 1, 1}, {16, 0.037375, 2, 8}, {32, 0.02095625, 4, 8}});
  const ScalabilityCurve b({{1, 0.4, 1, 1}, {16, 0.02427, 2, 8}, {32, 0.0140125, 4, 8}});
  const std::vector<LevelOp> ops{{&a, 32}, {&b, 32}};
  const ConfigurationProgram p = configuration_program(ops, 32, 2.0);
  EXPECT_NEAR(p.makespan_seconds, 32 * 0.02095625 + 32 * 0.0106617, 1e-5);
  ASSERT_EQ(p.waves.size(), 2u);
  const Wave& side_by_side = p.waves[0];
  ASSERT_EQ(side_by_side.slices.size(), 2u);
  EXPECT_EQ(side_by_side.slices[0].op, 0);
  EXPECT_EQ(side_by_side.slices[0].devices, 16);
  EXPECT_EQ(side_by_side.slices[0].layers, 21);
  EXPECT_EQ(side_by_side.slices[1].op, 1);
  EXPECT_EQ(side_by_side.slices[1].devices, 16);
  EXPECT_EQ(side_by_side.slices[1].layers, 32);
  EXPECT_DOUBLE_EQ(side_by_side.start_seconds, 2.0);
  EXPECT_DOUBLE_EQ(side_by_side.seconds, 21 * 0.037375);
  const Wave& alone = p.waves[1];
  ASSERT_EQ(alone.slices.size(), 1u);
  EXPECT_EQ(alone.slices[0].op, 0);
  EXPECT_EQ(alone.slices[0].devices, 32);
  EXPECT_EQ(alone.slices[0].first_layer, 21);
  EXPECT_EQ(alone.slices[0].layers, 11);
  EXPECT_DOUBLE_EQ(alone.start_seconds, 2.0 + 21 * 0.037375);
  EXPECT_DOUBLE_EQ(alone.seconds, 11 * 0.02095625);
}

// On random levels: the optimum lies between the relaxation's bound (a relaxation of the program) and every op in
// turn on its fastest count (a feasible point of it); the waves cover every op's operators once and in order, fit
// the devices, price each slice on its curve, take at most one wave per op and, being whole operators, end no
// sooner than the optimum.
TEST(ConfigurationProgram, OptimumLiesBetweenTheBoundAndOpsInTurnAndTheWavesAreValid) {
  Rng rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const RandomLevel level = random_level(rng, 7, 6);
    double in_turn = 0;
    for (const LevelOp& op : level.ops) {
      in_turn += static_cast<double>(op.layers) * op.curve->largest_within(level.devices)->seconds;
    }
    const ConfigurationProgram p = configuration_program(level.ops, level.devices, 1.0);
    const std::string what = "trial " + std::to_string(trial);
    ASSERT_FALSE(p.waves.empty()) << what;
    EXPECT_GE(p.makespan_seconds, relax_level(level.ops, level.devices).makespan_seconds * (1 - 1e-9)) << what;
    EXPECT_LE(p.makespan_seconds, in_turn * (1 + 1e-9)) << what;
    EXPECT_LE(p.waves.size(), level.ops.size()) << what;
    const double end = expect_valid_waves(level, p.waves, 1.0, what);
    EXPECT_GE(end - 1.0, p.makespan_seconds * (1 - 1e-9)) << what;
  }
}

TEST(ConfigurationProgram, RefusesALevelWithoutOpsOrDevices) {
  const ScalabilityCurve curve({{1, 1.0, 1, 1}});
  EXPECT_THROW(configuration_program({}, 4, 0.0), InputError);
  EXPECT_THROW(configuration_program({{&curve, 1}}, 0, 0.0), InputError);
  EXPECT_THROW(configuration_program({{nullptr, 1}}, 4, 0.0), InputError);
  EXPECT_THROW(configuration_program({{&curve, 0}}, 4, 0.0), InputError);
}

}  // namespace
}  // namespace fulcrum
