#include "fulcrum/plan/level_allocation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "fulcrum/core/error.h"
#include "fulcrum/core/rng.h"

namespace fulcrum {
namespace {

// T = w / n on every count 1 … N: linear scaling.
ScalabilityCurve linear(double w, int devices) {
  std::vector<CurvePoint> points;
  for (int n = 1; n <= devices; ++n) points.push_back({n, w / n, n, 1});
  return ScalabilityCurve(points);
}

// On linear curves the relaxation has a closed form: every op finishes at C* = Σ w_m L_m / N, op m on
// n_m = N · w_m L_m / Σ w L devices (eq. 8 with T = w / n).
TEST(RelaxLevel, LinearCurvesMatchTheClosedForm) {
  Rng rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    const int devices = 1 + static_cast<int>(rng.below(64));
    const int count = 1 + static_cast<int>(rng.below(6));
    std::vector<ScalabilityCurve> curves;
    std::vector<LevelOp> ops;
    std::vector<double> work;
    for (int m = 0; m < count; ++m) {
      const double w = 0.001 * static_cast<double>(1 + rng.below(1000));
      curves.push_back(linear(w, devices));
      work.push_back(w);
    }
    double total = 0;
    for (int m = 0; m < count; ++m) {
      const int64_t layers = 1 + static_cast<int64_t>(rng.below(40));
      ops.push_back({&curves[m], layers});
      total += work[m] * static_cast<double>(layers);
    }
    const Relaxation r = relax_level(ops, devices);
    const double makespan = total / devices;
    EXPECT_NEAR(r.makespan_seconds, makespan, 1e-9 * makespan) << "trial " << trial;
    double sum = 0;
    for (int m = 0; m < count; ++m) {
      const double n = devices * work[m] * static_cast<double>(ops[m].layers) / total;
      EXPECT_NEAR(r.devices[m], n, 1e-6 * std::max(1.0, n)) << "trial " << trial << " op " << m;
      sum += r.devices[m];
    }
    EXPECT_NEAR(sum, devices, 1e-6 * devices);
  }
}

// The paper's worked example (Fig. 5a): 4 devices, 3 invalid; three ops of 8, 12 and 6 operators whose
// relaxed counts are 1.9, 1.5 and 0.6. The curves are built so: with C* = 1 s, op 1 needs a speed of 8
// operators/s, op 2 of 12, op 3 of 6. Between 1 and 2 devices the speed is linear in n (the relaxation's
// interpolation), so op 1's v(1) = 4.5, v(2) = 8.3889 put speed 8 at n = 1.9; op 2's v(1) = 8.5, v(2) = 15.5
// put 12 at 1.5; op 3's v(1) = 10 puts 6 at 0.6 (a share of one device). Every speed is concave in n.
TEST(RelaxLevel, ThePapersWorkedExample) {
  const double v2 = 4.5 + 3.5 / 0.9;
  const ScalabilityCurve op1({{1, 1 / 4.5, 1, 1}, {2, 1 / v2, 2, 1}, {4, 1 / 12.0, 4, 1}});
  const ScalabilityCurve op2({{1, 1 / 8.5, 1, 1}, {2, 1 / 15.5, 2, 1}, {4, 1 / 20.0, 4, 1}});
  const ScalabilityCurve op3({{1, 1 / 10.0, 1, 1}, {2, 1 / 15.0, 2, 1}, {4, 1 / 20.0, 4, 1}});
  ASSERT_EQ(op1.at(3), nullptr);  // 3 devices are not a valid count
  const std::vector<LevelOp> ops{{&op1, 8}, {&op2, 12}, {&op3, 6}};
  const Relaxation r = relax_level(ops, 4);
  EXPECT_NEAR(r.makespan_seconds, 1.0, 1e-9);
  ASSERT_EQ(r.devices.size(), 3u);
  EXPECT_NEAR(r.devices[0], 1.9, 1e-9);
  EXPECT_NEAR(r.devices[1], 1.5, 1e-9);
  EXPECT_NEAR(r.devices[2], 0.6, 1e-9);
  // Bi-point: op 1 between 1 and 2 devices, l_hi = (C* − T(1)·8) / (T(2) − T(1)) = 7.55 (the paper's figure:
  // 7.6), rounded to 8, and the empty ⟨1, 0⟩ dropped, as in the figure; op 2: l_hi = 7.75, so 8 on 2 devices and
  // 4 on 1 (the figure's ⟨2, 8⟩ + ⟨1, 4⟩); op 3 all 6 on 1 device beside the dummy.
  const std::vector<LevelPart> parts = bipoint(ops, r);
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_EQ(parts[0].op, 0);
  EXPECT_EQ(parts[0].devices, 2);
  EXPECT_EQ(parts[0].layers, 8);
  EXPECT_EQ(parts[1].op, 1);
  EXPECT_EQ(parts[1].devices, 2);
  EXPECT_EQ(parts[1].layers, 8);
  EXPECT_EQ(parts[2].op, 1);
  EXPECT_EQ(parts[2].devices, 1);
  EXPECT_EQ(parts[2].layers, 4);
  EXPECT_EQ(parts[3].op, 2);
  EXPECT_EQ(parts[3].devices, 1);
  EXPECT_EQ(parts[3].layers, 6);
}

// Bi-point keeps every op's operator count exact, whatever the curves and rounding.
TEST(Bipoint, KeepsLayerCountsExact) {
  Rng rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int devices = 1 + static_cast<int>(rng.below(32));
    const int count = 1 + static_cast<int>(rng.below(8));
    std::vector<ScalabilityCurve> curves;
    for (int m = 0; m < count; ++m) {
      // Valid counts: powers of two and a few others, falling by a random factor each (sublinear or linear).
      std::vector<CurvePoint> points{{1, 0.01 + 0.001 * static_cast<double>(rng.below(100)), 1, 1}};
      for (int n = 2; n <= devices; ++n) {
        if (rng.below(3) == 0 && (n & (n - 1)) != 0) continue;
        const double gain = 0.3 + 0.7 * static_cast<double>(rng.below(1000)) / 1000.0;  // of the ideal n/(n−1)
        const double ideal = points.back().seconds * points.back().devices / n;
        points.push_back({n, points.back().seconds - gain * (points.back().seconds - ideal), n, 1});
      }
      curves.emplace_back(points);
    }
    std::vector<LevelOp> ops;
    for (int m = 0; m < count; ++m) ops.push_back({&curves[m], 1 + static_cast<int64_t>(rng.below(60))});
    const Relaxation r = relax_level(ops, devices);
    double sum = 0;
    for (double n : r.devices) sum += n;
    EXPECT_LE(sum, devices * (1 + 1e-9)) << "trial " << trial;
    std::vector<int64_t> layers(count, 0);
    std::vector<int> parts_of(count, 0);
    for (const LevelPart& p : bipoint(ops, r)) {
      EXPECT_GE(p.layers, 1);
      EXPECT_NE(curves[p.op].at(p.devices), nullptr) << "a part on an invalid count";
      layers[p.op] += p.layers;
      ++parts_of[p.op];
    }
    for (int m = 0; m < count; ++m) {
      EXPECT_EQ(layers[m], ops[m].layers) << "trial " << trial << " op " << m;
      EXPECT_LE(parts_of[m], 2);
    }
  }
}

TEST(RelaxLevel, RefusesWhatCannotBeAllocated) {
  const ScalabilityCurve c = linear(1, 4);
  EXPECT_THROW(relax_level({{&c, 3}}, 0), InputError);
  EXPECT_THROW(relax_level({}, 4), InputError);
  EXPECT_THROW(relax_level({{&c, 0}}, 4), InputError);
  EXPECT_THROW(ScalabilityCurve({{1, 1.0, 1, 1}, {2, 1.0, 2, 1}}), InputError);  // not falling
  EXPECT_THROW(ScalabilityCurve({{2, 1.0, 2, 1}}), InputError);                  // not from one device
}

}  // namespace
}  // namespace fulcrum
