#include "fulcrum/data/isf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "fulcrum/core/error.h"
#include "fulcrum/core/rng.h"
#include "fulcrum/cost/flops_sample_cost.h"
#include "fulcrum/data/plan_audit.h"
#include "fulcrum/data/test_data.h"

namespace fulcrum {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::vector<uint32_t>> as_lists(const Groups& g) {
  std::vector<std::vector<uint32_t>> out;
  for (size_t i = 0; i < g.size(); ++i) out.emplace_back(g.group(i).begin(), g.group(i).end());
  return out;
}

// Samples (tiles, tokens): 0 (5,40) 1 (3,30) 2 (2,40) 3 (1,50) 4 (1,20)
Dataset five() {
  Dataset d;
  d.add(5, 40, 5);
  d.add(3, 30, 3);
  d.add(2, 40, 2);
  d.add(1, 50, 1);
  d.add(1, 20, 1);
  return d;
}

IsfParams caps(int64_t vision_cap, int64_t token_cap, int64_t vision_full, int64_t text_full, int passes) {
  IsfParams p;
  p.vision_cap = vision_cap;
  p.token_cap = token_cap;
  p.vision_full = vision_full;
  p.text_full = text_full;
  p.passes = passes;
  return p;
}

TEST(IsfFill, ClosesOnEitherCapAndFlushesTheLastGroup) {
  const Dataset d = five();
  Groups g;
  const std::vector<uint32_t> order{0, 1, 2, 3, 4};
  isf_fill(d, order, caps(9, 100, 9, 90, 1), g);
  // 0+1: 8 tiles, 70 tokens. 2 would make 10 tiles > 9: close. 2+3: 3 tiles, 90 tokens. 4 would make 110 tokens
  // > 100: close. 4 alone is the open group at the end, and is kept (the reference loses it, Q2).
  EXPECT_THAT(as_lists(g), ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3), ElementsAre(4)));
}

TEST(IsfFull, EitherThresholdAtOrAbove) {
  const Dataset d = five();
  const IsfParams p = caps(9, 100, 8, 90, 1);
  const std::vector<uint32_t> vision_full{0, 1};  // 8 tiles ≥ 8
  const std::vector<uint32_t> text_full{2, 3};    // 90 tokens ≥ 90
  const std::vector<uint32_t> neither{4};
  EXPECT_TRUE(isf_full(d, vision_full, p));
  EXPECT_TRUE(isf_full(d, text_full, p));
  EXPECT_FALSE(isf_full(d, neither, p));
}

TEST(Isf, OnePassKeepsEveryGroupUnfiltered) {
  const Dataset d = five();
  const Groups g = isf_groups(d, caps(9, 100, 9, 90, 1), OversizePolicy::kError);
  size_t samples = 0;
  for (size_t i = 0; i < g.size(); ++i) samples += g.group(i).size();
  EXPECT_EQ(samples, 5u);
}

TEST(Isf, FullGroupsFirstThenTheUnfilteredRemainder) {
  // Any order gives the same result: a 9-tile sample fills a group by itself (a smaller one before it closes
  // the group first), and the three 1-tile samples (3 tiles, 30 tokens together) are never full, so they are
  // recycled each pass and end as the last pass's remainder: one group, accepted without filtering.
  Dataset d;
  d.add(1, 10, 1);  // 0
  d.add(9, 50, 9);  // 1
  d.add(1, 10, 1);  // 2
  d.add(9, 60, 9);  // 3
  d.add(1, 10, 1);  // 4
  for (uint64_t seed = 0; seed < 10; ++seed) {
    IsfParams p = caps(9, 100, 9, 90, 3);
    p.seed = seed;
    auto groups = as_lists(isf_groups(d, p, OversizePolicy::kError));
    ASSERT_EQ(groups.size(), 3u);
    std::sort(groups.begin(), groups.begin() + 2);
    EXPECT_THAT(groups[0], ElementsAre(1));
    EXPECT_THAT(groups[1], ElementsAre(3));
    std::sort(groups[2].begin(), groups[2].end());
    EXPECT_THAT(groups[2], ElementsAre(0, 2, 4));
  }
}

TEST(Isf, InvariantsOnRandomData) {
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const Dataset data = testing::random_dataset(2000 + 37 * seed, seed);
    IsfParams p = caps(9 + seed % 4, 4096, 9 + seed % 4, 3968, 10);
    p.seed = seed;
    const Groups g = isf_groups(data, p, OversizePolicy::kError);
    std::vector<int> seen(data.size(), 0);
    for (size_t i = 0; i < g.size(); ++i) {
      int64_t v = 0, t = 0;
      ASSERT_FALSE(g.group(i).empty());
      for (uint32_t id : g.group(i)) {
        ++seen[id];
        v += data.vision(id);
        t += data.tokens(id);
      }
      ASSERT_LE(v, p.vision_cap);
      ASSERT_LE(t, p.token_cap);
    }
    for (int count : seen) ASSERT_EQ(count, 1);
    // Same inputs and seed: the same groups.
    EXPECT_EQ(as_lists(isf_groups(data, p, OversizePolicy::kError)), as_lists(g));
  }
}

// ISF as §3.3 writes it, built from the public steps: shuffle the pool, FILL, keep the full groups (all in the
// last pass), return the rest to the pool. The fast path must give exactly these groups.
Groups spec_isf(const Dataset& data, const IsfParams& p) {
  std::vector<uint32_t> pool(data.size());
  for (uint32_t id = 0; id < data.size(); ++id) pool[id] = id;
  Groups out;
  for (int pass = 0; pass < p.passes && !pool.empty(); ++pass) {
    Rng rng({p.seed, static_cast<uint64_t>(p.epoch), 0x697366ULL, static_cast<uint64_t>(pass)});
    rng.shuffle(std::span<uint32_t>(pool));
    Groups filled;
    isf_fill(data, pool, p, filled);
    pool.clear();
    for (size_t g = 0; g < filled.size(); ++g) {
      if (pass + 1 == p.passes || isf_full(data, filled.group(g), p)) {
        out.add(filled.group(g));
      } else {
        pool.insert(pool.end(), filled.group(g).begin(), filled.group(g).end());
      }
    }
  }
  return out;
}

TEST(Isf, EqualsTheSpecificationOnSmallAndLargePools) {
  // 3,000 samples shuffle by plain Fisher–Yates; 150,000 by buckets (pools of 64K and more), down to below 64K.
  for (size_t n : {size_t{3000}, size_t{150000}}) {
    const Dataset data = testing::random_dataset(n, n);
    IsfParams p = caps(16, 6000, 16, 5500, 8);
    p.seed = 5;
    p.epoch = 2;
    EXPECT_EQ(as_lists(isf_groups(data, p, OversizePolicy::kError)), as_lists(spec_isf(data, p))) << n;
  }
}

TEST(Isf, LoadsWiderThan16BitsGiveTheSameGroups) {
  // Tokens and token caps scaled by 32 compare exactly as before, but no longer fit the compact records.
  const Dataset data = testing::random_dataset(100000, 3);
  Dataset wide;
  for (uint32_t id = 0; id < data.size(); ++id) wide.add(data.vision(id), data.tokens(id) * 32, data.images(id));
  const IsfParams p = caps(12, 4096, 12, 3968, 6);
  IsfParams q = p;
  q.token_cap *= 32;
  q.text_full *= 32;
  EXPECT_EQ(as_lists(isf_groups(wide, q, OversizePolicy::kError)), as_lists(isf_groups(data, p, OversizePolicy::kError)));
}

TEST(Isf, OversizeSampleIsAnErrorOrItsOwnGroup) {
  Dataset d = five();
  d.add(12, 60, 12);  // id 5: 12 tiles > 9
  try {
    isf_groups(d, caps(9, 100, 9, 90, 3), OversizePolicy::kError);
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("sample 5 (12 tiles, 60 tokens) exceeds"));
  }
  const Groups g = isf_groups(d, caps(9, 100, 9, 90, 3), OversizePolicy::kOwnGroup);
  EXPECT_THAT(as_lists(g).back(), ElementsAre(5));
}

TEST(IsfBatcher, PatchTokensNeedAVisionCapOrTheSearch) {
  Dataset d(VisionUnit::kPatchTokens);
  d.add(1024, 300, 1);
  d.add(0, 200, 0);
  BatchParams params;
  params.dp = 1;
  const FlopsSampleCost cost(VisionUnit::kPatchTokens);
  try {
    check_isf_caps(params, d, BatchParamNames{.vision_cap = "vision_cap", .search = "search=True"});
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("needs a vision cap: give vision_cap (patch tokens a micro-batch may hold) or "
                                    "search=True"));
  }
  EXPECT_THROW(IsfBatcher().plan(d, params, cost, 0), InputError);  // never the 9-tile default read as 9 tokens
  params.search = true;
  EXPECT_NO_THROW(check_isf_caps(params, d));
  params.search = false;
  params.vision_cap = 2048;
  EXPECT_NO_THROW(check_isf_caps(params, d));
  const BatchPlan plan = IsfBatcher().plan(d, params, cost, 0);
  EXPECT_TRUE(audit_plan(plan, d).ok(plan));
  // Tiles keep their default.
  Dataset tiles = five();
  params.vision_cap = 0;
  EXPECT_NO_THROW(check_isf_caps(params, tiles));
}

TEST(IsfBatcher, DealsGroupsEvenlyAndCompletesTheLastStep) {
  const Dataset data = testing::random_dataset(3001, 5);
  BatchParams params;
  params.dp = 8;
  params.micro_batches = 2;
  const FlopsSampleCost cost(VisionUnit::kTiles);
  const BatchPlan plan = IsfBatcher().plan(data, params, cost, 0);
  const PlanAudit audit = audit_plan(plan, data);
  EXPECT_TRUE(audit.ok(plan));
  EXPECT_EQ(plan.dropped, 0);
  EXPECT_EQ(audit.duplicated, 0);
  // Enough samples in the last step to split groups: nothing repeated.
  EXPECT_EQ(plan.repeated, 0);
}

TEST(IsfBatcher, RemainderGroupsDoNotPileOntoTheLastRanks) {
  // Q5: with contiguous buckets the unfiltered remainder would all land on the last rank(s).
  const Dataset data = testing::bundled_dataset();
  BatchParams params;
  params.dp = 8;
  const BatchPlan plan = IsfBatcher().plan(data, params, FlopsSampleCost(VisionUnit::kTiles), 0);
  const IsfParams p = isf_params(params, data);
  std::vector<int64_t> not_full(params.dp, 0);
  for (int64_t s = 0; s < plan.steps(); ++s) {
    for (int r = 0; r < params.dp; ++r) not_full[r] += !isf_full(data, plan.micro_batch(s, r, 0), p);
  }
  const auto [lo, hi] = std::minmax_element(not_full.begin(), not_full.end());
  EXPECT_GT(*lo, 0);
  EXPECT_LT(static_cast<double>(*hi), 1.3 * static_cast<double>(*lo));
}

}  // namespace
}  // namespace fulcrum
