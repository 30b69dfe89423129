#include "fulcrum/data/isf_search.h"

#include <gtest/gtest.h>

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
    if (t.candidate) EXPECT_LE(chosen->score, t.score);
  }
  EXPECT_EQ(r.best.text_full, r.best.token_cap - 128);
}

}  // namespace
}  // namespace fulcrum
