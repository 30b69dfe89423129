#include "fulcrum/plan/test_levels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace fulcrum {

ScalabilityCurve doubling_curve(double t1, double e, int devices) {
  std::vector<CurvePoint> points{{1, t1, 1, 1}};
  for (int n = 2; n <= devices; n *= 2) points.push_back({n, points.back().seconds / (2 * e), n, 1});
  return ScalabilityCurve(points);
}

RandomLevel random_level(Rng& rng, int max_log2_devices, int max_ops) {
  RandomLevel level;
  level.devices = 1 << rng.below(max_log2_devices);
  const int count = 1 + static_cast<int>(rng.below(max_ops));
  for (int m = 0; m < count; ++m) {
    level.curves.push_back(doubling_curve(0.01 + 0.001 * static_cast<double>(rng.below(200)),
                                          0.55 + 0.45 * static_cast<double>(rng.below(1000)) / 1000.0,
                                          level.devices));
  }
  for (int m = 0; m < count; ++m) level.ops.push_back({&level.curves[m], 1 + static_cast<int64_t>(rng.below(50))});
  return level;
}

double expect_valid_waves(const RandomLevel& level, const std::vector<Wave>& waves, double start_seconds,
                          const std::string& what) {
  std::vector<int64_t> next(level.ops.size(), 0);
  double at = start_seconds;
  for (const Wave& w : waves) {
    EXPECT_DOUBLE_EQ(w.start_seconds, at) << what;
    int used = 0;
    std::set<int> ops_in_wave;
    double longest = 0;
    for (const WaveSlice& s : w.slices) {
      if (s.op < 0 || s.op >= static_cast<int>(level.ops.size())) {
        ADD_FAILURE() << what << ": a slice of op " << s.op;
        continue;
      }
      used += s.devices;
      EXPECT_TRUE(ops_in_wave.insert(s.op).second) << what << ": two slices of one op in a wave";
      const CurvePoint* point = level.curves[s.op].at(s.devices);
      EXPECT_NE(point, nullptr) << what << ": a slice on an invalid count";
      EXPECT_EQ(s.first_layer, next[s.op]) << what << ": operators out of order";
      EXPECT_GE(s.layers, 1) << what;
      if (point) {
        EXPECT_NEAR(s.seconds, static_cast<double>(s.layers) * point->seconds, 1e-12) << what;
      }
      next[s.op] += s.layers;
      longest = std::max(longest, s.seconds);
    }
    EXPECT_LE(used, level.devices) << what;
    EXPECT_DOUBLE_EQ(w.seconds, longest) << what;
    at += w.seconds;
  }
  for (size_t m = 0; m < level.ops.size(); ++m) EXPECT_EQ(next[m], level.ops[m].layers) << what << ", op " << m;
  return at;
}

}  // namespace fulcrum
