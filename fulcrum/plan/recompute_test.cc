#include "fulcrum/plan/recompute.h"

#include <gtest/gtest.h>

#include <random>

namespace fulcrum {
namespace {

// The best choice by trying every (none, selective, full) count of every class.
struct Best {
  double seconds = 1e300;
  double bytes = 1e300;
  bool fits = false;
  double least_bytes = 1e300;
};
void enumerate(const std::vector<RecomputeClass>& classes, size_t k, double bytes, double seconds, double budget,
               Best& best) {
  if (k == classes.size()) {
    best.least_bytes = std::min(best.least_bytes, bytes);
    if (bytes <= budget && (seconds < best.seconds || (seconds == best.seconds && bytes < best.bytes))) {
      best = {seconds, bytes, true, best.least_bytes};
    }
    return;
  }
  const RecomputeClass& c = classes[k];
  for (int64_t none = 0; none <= c.layers; ++none) {
    for (int64_t sel = 0; none + sel <= c.layers; ++sel) {
      const int64_t full = c.layers - none - sel;
      enumerate(classes, k + 1, bytes + none * c.kept_bytes[0] + sel * c.kept_bytes[1] + full * c.kept_bytes[2],
                seconds + sel * c.recompute_seconds[1] + full * c.recompute_seconds[2], budget, best);
    }
  }
}

TEST(ChooseRecompute, OptimalAndWithinTheCapOnRandomSmallCases) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<> u(0, 1);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<RecomputeClass> classes(1 + rng() % 3);
    double most = 0;
    for (RecomputeClass& c : classes) {
      c.layers = static_cast<int64_t>(rng() % 6);
      const double full = 1 + 2 * u(rng), selective = full + 5 * u(rng), none = selective + 5 * u(rng);
      c.kept_bytes = {none, selective, full};
      c.recompute_seconds = {0, 0.1 + u(rng), 1 + 2 * u(rng)};
      most += c.layers * none;
    }
    const double budget = most * u(rng) * 1.1;
    Best best;
    enumerate(classes, 0, 0, 0, budget, best);
    const RecomputeChoice choice = choose_recompute(classes, budget);
    ASSERT_EQ(choice.fits, best.fits) << "trial " << trial;
    if (best.fits) {
      EXPECT_NEAR(choice.recompute_seconds, best.seconds, 1e-9) << "trial " << trial;
      EXPECT_LE(choice.kept_bytes, budget);
    } else {
      EXPECT_NEAR(choice.shortfall_bytes, best.least_bytes - budget, 1e-9) << "trial " << trial;
    }
    // The counts describe the same bytes and seconds, and every layer has a mode.
    double bytes = 0, seconds = 0;
    for (size_t k = 0; k < classes.size(); ++k) {
      const auto& n = choice.layers[k];
      EXPECT_EQ(n[0] + n[1] + n[2], classes[k].layers);
      for (int m = 0; m < 3; ++m) {
        bytes += n[m] * classes[k].kept_bytes[m];
        seconds += n[m] * classes[k].recompute_seconds[m];
      }
    }
    EXPECT_NEAR(bytes, choice.kept_bytes, 1e-9);
    EXPECT_NEAR(seconds, choice.recompute_seconds, 1e-9);
  }
}

TEST(ChooseRecompute, StagesWithMoreRoomRecomputeLess) {
  // Two classes: ViT blocks (cheap to recompute, big activations) and LLM blocks.
  const std::vector<RecomputeClass> classes{{10, {8, 3, 1}, {0, 0.1, 1.0}}, {10, {4, 2, 1}, {0, 0.2, 2.0}}};
  const RecomputeChoice tight = choose_recompute(classes, 20);
  const RecomputeChoice roomy = choose_recompute(classes, 100);
  const RecomputeChoice everything = choose_recompute(classes, 1e9);
  ASSERT_TRUE(tight.fits && roomy.fits && everything.fits);
  EXPECT_GT(tight.recompute_seconds, roomy.recompute_seconds);
  EXPECT_EQ(everything.recompute_seconds, 0);
  EXPECT_EQ(everything.layers[0][0], 10);
  // All full: 20 bytes exactly.
  EXPECT_EQ(tight.layers[0][2], 10);
  EXPECT_EQ(tight.layers[1][2], 10);
  const RecomputeChoice impossible = choose_recompute(classes, 15);
  EXPECT_FALSE(impossible.fits);
  EXPECT_DOUBLE_EQ(impossible.shortfall_bytes, 5);
}

}  // namespace
}  // namespace fulcrum
