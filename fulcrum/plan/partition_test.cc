#include "fulcrum/plan/partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "fulcrum/core/error.h"

namespace fulcrum {
namespace {

// Every way to cut `layers` into `stages` non-empty stages.
void compositions(int layers, int stages, std::vector<int32_t>& ends, std::vector<std::vector<int32_t>>& out) {
  const int s = static_cast<int>(ends.size());
  if (s == stages - 1) {
    ends.push_back(layers);
    out.push_back(ends);
    ends.pop_back();
    return;
  }
  const int32_t from = ends.empty() ? 1 : ends.back() + 1;
  for (int32_t e = from; e <= layers - (stages - 1 - s); ++e) {
    ends.push_back(e);
    compositions(layers, stages, ends, out);
    ends.pop_back();
  }
}

double slowest(const LayerChain& chain, const std::vector<int32_t>& ends) {
  const std::vector<double> s = stage_seconds(chain, ends);
  return *std::max_element(s.begin(), s.end());
}

TEST(MinMaxPartition, MatchesBruteForceOnRandomChains) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    const int layers = 1 + static_cast<int>(rng() % 10);
    const int stages = 1 + static_cast<int>(rng() % std::min(layers, 5));
    LayerChain chain;
    // Encoder-like cheap layers then LLM-like dear ones, with noise, and sometimes transfer costs.
    for (int i = 0; i < layers; ++i) {
      chain.layer_seconds.push_back((i < layers / 2 ? 1.0 : 3.0) * std::uniform_real_distribution<>(0.5, 1.5)(rng));
    }
    if (rng() % 2) {
      for (int i = 0; i + 1 < layers; ++i) chain.boundary_seconds.push_back(std::uniform_real_distribution<>(0, 2)(rng));
    }
    std::vector<std::vector<int32_t>> all;
    std::vector<int32_t> ends;
    compositions(layers, stages, ends, all);
    double best = 1e300;
    for (const auto& e : all) best = std::min(best, slowest(chain, e));
    const Partition p = min_max_partition(chain, stages);
    ASSERT_EQ(p.ends.size(), static_cast<size_t>(stages));
    EXPECT_EQ(p.ends.back(), layers);
    EXPECT_DOUBLE_EQ(p.max_stage_seconds, best) << "trial " << trial;
    EXPECT_DOUBLE_EQ(slowest(chain, p.ends), best) << "trial " << trial;
  }
}

TEST(MinMaxPartition, EveryStageHoldsARequiredLayerWhenAsked) {
  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 200; ++trial) {
    const int layers = 2 + static_cast<int>(rng() % 9);
    LayerChain chain;
    for (int i = 0; i < layers; ++i) {
      chain.layer_seconds.push_back(std::uniform_real_distribution<>(0.5, 3)(rng));
      chain.required.push_back(i >= layers / 3);  // the first third: encoder layers
    }
    const int required = static_cast<int>(std::count(chain.required.begin(), chain.required.end(), true));
    const int stages = 1 + static_cast<int>(rng() % std::min(required, 4));
    std::vector<std::vector<int32_t>> all;
    std::vector<int32_t> ends;
    compositions(layers, stages, ends, all);
    double best = 1e300;
    for (const auto& e : all) {
      bool ok = true;
      int32_t begin = 0;
      for (int32_t end : e) {
        ok = ok && std::count(chain.required.begin() + begin, chain.required.begin() + end, true) > 0;
        begin = end;
      }
      if (ok) best = std::min(best, slowest(chain, e));
    }
    const Partition p = min_max_partition(chain, stages);
    EXPECT_DOUBLE_EQ(p.max_stage_seconds, best) << "trial " << trial;
    int32_t begin = 0;
    for (int32_t end : p.ends) {
      EXPECT_GT(std::count(chain.required.begin() + begin, chain.required.begin() + end, true), 0);
      begin = end;
    }
  }
}

TEST(MinMaxPartition, EncoderInOneStageWhenItsLayersAreCheap) {
  // 6 encoder layers of 1 s, 6 LLM layers of 2 s, 3 stages: 18 s of work, 6 s per stage is reachable.
  LayerChain chain{{1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2}, {}};
  const Partition p = min_max_partition(chain, 3);
  EXPECT_EQ(p.ends, (std::vector<int32_t>{6, 9, 12}));
  EXPECT_DOUBLE_EQ(p.max_stage_seconds, 6);
  // A costly transfer after layer 5 moves the cut.
  chain.boundary_seconds.assign(11, 0);
  chain.boundary_seconds[5] = 10;
  EXPECT_NE(min_max_partition(chain, 3).ends[0], 6);
  EXPECT_THROW(min_max_partition(chain, 13), InputError);
}

TEST(OmnibalPartitions, NeighbourhoodOfTheAnchorRankedByVarianceAndBytes) {
  const std::vector<double> forward{1, 1, 1, 1, 2, 2, 2, 2};
  const std::vector<double> bytes{5, 5, 5, 1, 5, 5, 5};
  // The anchor for 2 stages cuts after layer 4 ([0, 5) and [5, 8), 6 s each); ±1 gives cuts 4, 5 and 6.
  const auto c = omnibal_partitions(forward, bytes, 2, 1, 10);
  ASSERT_EQ(c.size(), 3u);
  std::vector<int32_t> firsts;
  for (const auto& x : c) firsts.push_back(x.ends[0]);
  std::sort(firsts.begin(), firsts.end());
  EXPECT_EQ(firsts, (std::vector<int32_t>{4, 5, 6}));
  // Cutting at 4 sends 1 unit of bytes, [0, 4) = 4 s and [4, 8) = 8 s: variance 4.
  // Cutting at 5: 6 s and 6 s, variance 0, 5 units. Cutting at 6: 8 and 4, variance 4, 5 units.
  EXPECT_EQ(c[0].ends[0], 5);  // ranks: variance 0th, bytes 1st (tie) → sum 1
  EXPECT_DOUBLE_EQ(c[0].forward_variance, 0);
  EXPECT_EQ(c[1].ends[0], 4);  // variance 1st, bytes 0th → sum 1, larger variance than the first
  EXPECT_DOUBLE_EQ(c[1].boundary_bytes, 1);
  EXPECT_EQ(omnibal_partitions(forward, bytes, 2, 1, 1).size(), 1u);
  // With 4 stages and radius 1: at most 3³ = 27 candidates.
  EXPECT_LE(omnibal_partitions(forward, bytes, 4, 1, 100).size(), 27u);
  // 32 stages: 3³¹ combinations are too many; the anchor and each boundary moved alone instead.
  const std::vector<double> long_forward(96, 1.0);
  const std::vector<double> long_bytes(95, 1.0);
  const auto many = omnibal_partitions(long_forward, long_bytes, 32, 1, 1000);
  EXPECT_EQ(many.size(), 1u + 2 * 31);
  EXPECT_DOUBLE_EQ(many[0].forward_variance, 0);  // the even anchor: 3 layers per stage
}

}  // namespace
}  // namespace fulcrum
