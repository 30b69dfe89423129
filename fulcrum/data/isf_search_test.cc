#include "fulcrum/data/isf_search.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "fulcrum/core/rng.h"
#include "fulcrum/cost/flops_sample_cost.h"
#include "fulcrum/data/test_data.h"

namespace fulcrum {
namespace {

TEST(IsfSearch, TokensPerTileFollowsTheReferenceFormula) {
  // Two samples: tokens 300 → 512 and 700 → 768 after rounding up to 256: mean 640; tiles 1 and 3: mean 2.
  // ⌊640 / 2⌋ + 1 = 321 → ⌊321 / 16⌋ · 16 = 320.
  Dataset d;
  d.add(1, 300, 1);
  d.add(3, 700, 3);
  for (int i = 0; i < 200; ++i) {  // more copies of the same pair keep the means, and give ISF something to group
    d.add(1, 300, 1);
    d.add(3, 700, 3);
  }
  BatchParams params;
  params.dp = 2;
  params.samples_per_step = 2;  // b = 1 sample per group
  const IsfSearchResult r = isf_search(d, params, FlopsSampleCost(VisionUnit::kTiles));
  EXPECT_EQ(r.tokens_per_tile, 320);
  // The first trial starts at Q_t = 4096, Q_v = ⌊4096 / 320⌋ = 12.
  ASSERT_FALSE(r.trials.empty());
  EXPECT_EQ(r.trials[0].params.token_cap, 4096);
  EXPECT_EQ(r.trials[0].params.vision_cap, 12);
}

TEST(IsfSearch, ChoosesCapsGivingAboutBSamplesPerGroup) {
  const Dataset data = testing::bundled_dataset();
  BatchParams params;
  params.dp = 8;
  const IsfSearchResult r = isf_search(data, params, FlopsSampleCost(VisionUnit::kTiles));
  const IsfTrial* chosen = nullptr;
  for (const IsfTrial& t : r.trials) {
    if (t.params.vision_cap == r.best.vision_cap && t.params.token_cap == r.best.token_cap) chosen = &t;
  }
  ASSERT_NE(chosen, nullptr);
  EXPECT_TRUE(chosen->candidate);
  EXPECT_GE(chosen->mean_group_samples, 4.0);
  EXPECT_LE(chosen->mean_group_samples, 5.0);
  for (const IsfTrial& t : r.trials) {
    if (t.candidate) {
      EXPECT_LE(chosen->score, t.score);
    }
  }
  EXPECT_EQ(r.best.text_full, r.best.token_cap - 128);
}

// Patch-token data (Qwen2-VL's dynamic resolution): no default cap to start from, so the search starts at 4,096
// tokens' worth of patch tokens in the data's mix and steps by 256 tokens' worth, never below the largest sample.
TEST(IsfSearch, PatchTokenDataStepsByTokensWorthAndMeetsB) {
  Dataset d(VisionUnit::kPatchTokens);
  Rng rng({7});
  const uint32_t patches[] = {0, 256, 1024, 4096};
  for (int i = 0; i < 4000; ++i) {
    const uint32_t v = patches[rng.below(4)];
    d.add(v, static_cast<uint32_t>(100 + rng.below(2900)), v > 0 ? 1 : 0);
  }
  double tokens_rounded = 0, vision = 0;
  for (uint32_t id = 0; id < d.size(); ++id) {
    tokens_rounded += static_cast<double>((d.tokens(id) + 255) / 256 * 256);
    vision += d.vision(id);
  }
  const double tokens_per_patch = tokens_rounded / vision;
  BatchParams params;
  params.dp = 4;
  const IsfSearchResult r = isf_search(d, params, FlopsSampleCost(VisionUnit::kPatchTokens));
  EXPECT_EQ(r.token_step, 256);
  EXPECT_EQ(r.vision_step, std::llround(256 / tokens_per_patch));
  ASSERT_FALSE(r.trials.empty());
  // 4,096 tokens' worth is below the 4,096-patch sample here: the search starts at that sample instead.
  ASSERT_LT(4096 / tokens_per_patch, 4096);
  EXPECT_EQ(r.trials[0].params.vision_cap, 4096);
  EXPECT_EQ(r.trials[0].params.token_cap, 4096);
  for (size_t k = 1; k < r.trials.size(); ++k) {
    EXPECT_EQ(std::abs(r.trials[k].params.vision_cap - r.trials[k - 1].params.vision_cap), r.vision_step);
    EXPECT_EQ(std::abs(r.trials[k].params.token_cap - r.trials[k - 1].params.token_cap), 256);
  }
  bool found = false;
  for (const IsfTrial& t : r.trials) {
    if (t.params.vision_cap != r.best.vision_cap || t.params.token_cap != r.best.token_cap) continue;
    found = true;
    EXPECT_GE(t.mean_group_samples, 4.0);
    EXPECT_LE(t.mean_group_samples, 5.0);
  }
  EXPECT_TRUE(found);
}

// Runs that share b share their trials; searched together, each run still gets what it would get alone: its own
// scores at its own dp and micro-batches, and the best of them.
TEST(IsfSearch, RunsSharingBSearchedTogetherGetWhatEachGetsAlone) {
  const Dataset data = testing::bundled_dataset();
  std::vector<BatchParams> runs;
  for (const auto& [dp, micro_batches] : {std::pair{8, 1}, std::pair{2, 4}, std::pair{1, 8}, std::pair{4, 2}}) {
    BatchParams params;
    params.dp = dp;
    params.micro_batches = micro_batches;
    params.samples_per_step = 32;  // b = 4 in every run
    params.seed = 3;
    runs.push_back(params);
  }
  const FlopsSampleCost cost(VisionUnit::kTiles);
  const std::vector<IsfSearchResult> together = isf_search(data, runs, cost);
  ASSERT_EQ(together.size(), runs.size());
  bool scores_differ = false;
  for (size_t r = 0; r < runs.size(); ++r) {
    const IsfSearchResult alone = isf_search(data, runs[r], cost);
    ASSERT_EQ(together[r].trials.size(), alone.trials.size()) << "run " << r;
    for (size_t t = 0; t < alone.trials.size(); ++t) {
      EXPECT_EQ(together[r].trials[t].params.vision_cap, alone.trials[t].params.vision_cap);
      EXPECT_EQ(together[r].trials[t].params.token_cap, alone.trials[t].params.token_cap);
      EXPECT_EQ(together[r].trials[t].score, alone.trials[t].score) << "run " << r << " trial " << t;
      scores_differ = scores_differ || together[r].trials[t].score != together[0].trials[t].score;
    }
    EXPECT_EQ(together[r].best.vision_cap, alone.best.vision_cap);
    EXPECT_EQ(together[r].best.token_cap, alone.best.token_cap);
  }
  // The runs deal the same groups differently, so a search scoring every run alike would be caught above.
  EXPECT_TRUE(scores_differ);
}

TEST(IsfSearch, RunsWithDifferentBAreNotSearchedTogether) {
  const Dataset data = testing::bundled_dataset();
  std::vector<BatchParams> runs(2);
  runs[0].dp = 8;  // b = 4, the default
  runs[1].dp = 4;
  runs[1].samples_per_step = 64;  // b = 16
  EXPECT_THROW(isf_search(data, runs, FlopsSampleCost(VisionUnit::kTiles)), std::invalid_argument);
  runs[1].samples_per_step = 16;  // b = 4 again, but another seed
  runs[1].seed = 1;
  EXPECT_THROW(isf_search(data, runs, FlopsSampleCost(VisionUnit::kTiles)), std::invalid_argument);
}

}  // namespace
}  // namespace fulcrum
