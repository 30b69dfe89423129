#include "fulcrum/plan/encoder_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "fulcrum/core/error.h"
#include "fulcrum/model/model_presets.h"

namespace fulcrum {
namespace {

constexpr double GiB = 1024.0 * 1024 * 1024;

ParallelLayout llm_layout(int dp, int pp, int tp) {
  ParallelLayout l;
  l.dp = dp;
  l.pp = pp;
  l.tp = tp;
  return l;
}

const EncoderPlan* find_plan(const std::vector<EncoderPlan>& plans, int pp, int tp) {
  for (const EncoderPlan& p : plans) {
    if (p.pp == pp && p.tp == tp) return &p;
  }
  return nullptr;
}

// The paper's 8-GPU example (Fig. 5): LLM DP 1, PP 4, TP 2; the encoder plan DP 2, PP 2, TP 2 gives m = 2
// encoder pipelines per LLM pipeline. Every divisor pair is a plan: PP_enc ∈ {1, 2, 4}, TP_enc ∈ {1, 2}.
TEST(EncoderPlans, ThePapersEightGpuExample) {
  const ModelSpec model = model_preset("vit-3b+gpt-11b");
  const ParallelLayout llm = llm_layout(1, 4, 2);
  const std::vector<EncoderPlan> plans = encoder_plans(model, llm, {{0, 0, 0, 0}, 1e18});
  ASSERT_EQ(plans.size(), 6u);
  const EncoderPlan* paper = find_plan(plans, 2, 2);
  ASSERT_NE(paper, nullptr);
  EXPECT_EQ(paper->dp, 2);
  EXPECT_EQ(paper->pipelines, 2);
  // m = PP_llm·TP_llm / (PP_enc·TP_enc) for every plan, and DP_enc·PP_enc·TP_enc covers the 8 devices.
  for (const EncoderPlan& p : plans) {
    EXPECT_EQ(p.pipelines, 8 / (p.pp * p.tp)) << p.pp << "," << p.tp;
    EXPECT_EQ(static_cast<int64_t>(p.dp) * p.pp * p.tp, llm.devices());
  }
  // g = 2 LLM ranks per encoder stage, h = 1: pipeline 0 runs its stages on LLM ranks 0 and 2, pipeline 1 on 1
  // and 3, both on tensor ranks 0–1; the two see different bubbles (classes 0 and 1).
  EXPECT_EQ(encoder_slot(llm, *paper, 0, 0).llm_rank, 0);
  EXPECT_EQ(encoder_slot(llm, *paper, 0, 1).llm_rank, 2);
  EXPECT_EQ(encoder_slot(llm, *paper, 1, 0).llm_rank, 1);
  EXPECT_EQ(encoder_slot(llm, *paper, 1, 1).llm_rank, 3);
  EXPECT_EQ(encoder_slot(llm, *paper, 1, 1).first_tensor_rank, 0);
  EXPECT_EQ(pipeline_classes(llm, *paper), (std::vector<int>{0, 1}));
  // TP_enc 1 under TP_llm 2 and PP_enc 2: four pipelines, two per class (a pair shares its LLM ranks).
  const EncoderPlan* narrow = find_plan(plans, 2, 1);
  ASSERT_NE(narrow, nullptr);
  EXPECT_EQ(pipeline_classes(llm, *narrow), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(encoder_slot(llm, *narrow, 1, 1).llm_rank, 2);
  EXPECT_EQ(encoder_slot(llm, *narrow, 1, 1).first_tensor_rank, 1);
}

// Each stage holds its share of the 48 ViT blocks, the patch embedding first, the projector last; every
// encoder layer is in exactly one stage.
TEST(EncoderPlans, StagesCoverTheEncoderSideOnce) {
  const ModelSpec model = model_preset("vit-3b+gpt-11b");
  const std::vector<EncoderPlan> plans = encoder_plans(model, llm_layout(1, 4, 2), {{0, 0, 0, 0}, 1e18});
  const int64_t encoder_layers =
      static_cast<int64_t>(model.components[0].layers.size() + model.components[1].layers.size());
  for (const EncoderPlan& p : plans) {
    ASSERT_EQ(static_cast<int>(p.stages.size()), p.pp);
    std::vector<int> seen(encoder_layers, 0);
    for (const EncoderStage& s : p.stages) {
      for (const StageLayers& r : s.ranges) {
        for (int32_t i = r.first_layer; i < r.end_layer; ++i) ++seen[i];
      }
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; })) << "PP " << p.pp;
    EXPECT_EQ(p.stages.back().ranges.back().end_layer, encoder_layers);  // the projector, last
  }
}

// The encoder's state per device shrinks with PP_enc × TP_enc, and a plan that overflows a rank is rejected with
// the rank and the sizes. ViT-3B ≈ 3.0B parameters, distributed optimizer over DP_enc: 6 + 12/DP_enc bytes each.
TEST(EncoderPlans, MemoryPrunesPlansThatOverflowARank) {
  const ModelSpec model = model_preset("vit-3b+gpt-11b");
  const ParallelLayout llm = llm_layout(1, 4, 2);
  const double llm_bytes = 40 * GiB;
  std::vector<std::string> rejected;
  const std::vector<EncoderPlan> all = encoder_plans(model, llm, {{llm_bytes, llm_bytes, llm_bytes, llm_bytes}, 1e18});
  const EncoderPlan* whole = find_plan(all, 1, 1);
  ASSERT_NE(whole, nullptr);
  const double encoder_params =
      static_cast<double>(model.components[0].parameters() + model.components[1].parameters());
  EXPECT_NEAR(whole->stage_state_bytes[0], encoder_params * (6 + 12.0 / 8), encoder_params * 0.01);
  EXPECT_DOUBLE_EQ(whole->peak_bytes, llm_bytes + whole->stage_state_bytes[0]);
  // 60 GiB usable: 40 of LLM leaves 20, less than PP 1 TP 1's ~22 GB but more than the others need.
  const std::vector<EncoderPlan> fit =
      encoder_plans(model, llm, {{llm_bytes, llm_bytes, llm_bytes, llm_bytes}, 60 * GiB}, &rejected);
  EXPECT_EQ(fit.size(), 5u);
  EXPECT_EQ(find_plan(fit, 1, 1), nullptr);
  ASSERT_EQ(rejected.size(), 1u);
  EXPECT_THAT(rejected[0], ::testing::HasSubstr("encoder PP 1 TP 1: needs"));
  EXPECT_THAT(rejected[0], ::testing::HasSubstr("60.0 GiB usable"));
}

TEST(EncoderPlans, TensorParallelismMustDivideTheEncodersHeads) {
  // InternViT-6B has 25 heads: only TP_enc 1 divides them.
  const ModelSpec model = model_preset("internvl-chat-1.5");
  std::vector<std::string> rejected;
  const std::vector<EncoderPlan> plans = encoder_plans(model, llm_layout(1, 2, 4), {{0, 0}, 1e18}, &rejected);
  for (const EncoderPlan& p : plans) EXPECT_EQ(p.tp, 1);
  EXPECT_EQ(plans.size(), 2u);
  EXPECT_EQ(rejected.size(), 4u);
  EXPECT_THAT(rejected[0], ::testing::HasSubstr("does not divide encoder 'vision''s 25 heads"));
  EXPECT_THROW(encoder_plans(model_preset("gpt-11b"), llm_layout(1, 2, 1), {{0, 0}, 1e18}), InputError);
  EXPECT_THROW(encoder_plans(model, llm_layout(1, 2, 1), {{0}, 1e18}), InputError);
}

// The splits, checked against a brute force over every composition of N into m positive parts.
TEST(MicroBatchSplits, MatchEveryCompositionWithPermutationsInsideAClassRemoved) {
  const std::vector<std::vector<int>> class_sets = {{0}, {0, 1}, {0, 0}, {0, 1, 2}, {0, 0, 1, 1}, {0, 0, 0}};
  for (const std::vector<int>& classes : class_sets) {
    const int m = static_cast<int>(classes.size());
    for (int n = m; n <= 10; ++n) {
      std::set<MicroBatchSplit> brute;
      MicroBatchSplit c(m, 1);
      std::function<void(int, int)> all = [&](int j, int left) {
        if (j == m - 1) {
          c[j] = left;
          MicroBatchSplit sorted = c;
          // Canonical form: non-increasing inside each class.
          for (int a = 0; a < m; ++a) {
            for (int b = a + 1; b < m; ++b) {
              if (classes[a] == classes[b] && sorted[b] > sorted[a]) std::swap(sorted[a], sorted[b]);
            }
          }
          brute.insert(sorted);
          return;
        }
        for (int t = 1; t <= left - (m - 1 - j); ++t) {
          c[j] = t;
          all(j + 1, left - t);
        }
      };
      all(0, n);
      const std::vector<MicroBatchSplit> got = micro_batch_splits(n, classes, 1 << 20);
      EXPECT_EQ(std::set<MicroBatchSplit>(got.begin(), got.end()), brute) << "n " << n << " m " << m;
      EXPECT_EQ(got.size(), brute.size());
      EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
      EXPECT_EQ(count_micro_batch_splits(n, classes), static_cast<int64_t>(brute.size()));
    }
  }
  // The paper's count for distinct pipelines: C(N − 1, m − 1); N = 8, m = 2 gives 7, [1, 7] … [7, 1].
  EXPECT_EQ(count_micro_batch_splits(8, {0, 1}), 7);
  EXPECT_EQ(count_micro_batch_splits(8, {0, 0}), 4);  // [4,4] [5,3] [6,2] [7,1]
  EXPECT_EQ(count_micro_batch_splits(32, {0, 1, 2, 3, 4, 5, 6, 7}), 2629575);  // C(31, 7)
  EXPECT_THROW(micro_batch_splits(32, {0, 1, 2, 3, 4, 5, 6, 7}, 1000), InputError);
  EXPECT_THROW(count_micro_batch_splits(3, {0, 1, 2, 3}), InputError);
}

// A cost with plateaus, as a makespan has: pipeline j runs w_j micro-batches per second, and the time is the most
// loaded pipeline's N_j / w_j.
// Pipeline j runs weights[j] micro-batches a second.
PipelineSeconds weighted_times(const MicroBatchSplit& split, const std::vector<double>& weights) {
  PipelineSeconds out(split.size());
  for (size_t j = 0; j < split.size(); ++j) out[j] = split[j] / weights[j];
  return out;
}

TEST(MicroBatchSplits, TheDescentFindsWhatTheExhaustiveSearchFinds) {
  const std::vector<std::vector<double>> weight_sets = {{1, 1}, {3, 1}, {1, 2, 4}, {2, 2, 1, 1}, {1, 1, 1, 5}};
  for (const std::vector<double>& w : weight_sets) {
    std::vector<int> classes(w.size());
    for (size_t j = 0; j < w.size(); ++j) classes[j] = static_cast<int>(j);
    for (int n : {8, 13, 16}) {
      const auto cost = [&](const MicroBatchSplit& s) { return weighted_times(s, w); };
      const SplitSearchResult exhaustive = search_micro_batch_split(n, classes, cost);
      const SplitSearchResult descent = search_micro_batch_split(n, classes, cost, /*exhaustive_limit=*/0);
      EXPECT_TRUE(exhaustive.exhaustive);
      EXPECT_FALSE(descent.exhaustive);
      EXPECT_EQ(exhaustive.evaluated, count_micro_batch_splits(n, classes));
      // On these the local search reaches the optimum, across the makespan's plateaus.
      EXPECT_DOUBLE_EQ(descent.seconds, exhaustive.seconds) << "n " << n << " m " << w.size();
    }
  }
  // 32 micro-batches over 8 pipelines: 2.6M splits, the descent evaluates a few hundred.
  std::vector<double> w = {1, 2, 3, 4, 1, 2, 3, 4};
  const SplitSearchResult big = search_micro_batch_split(
      32, {0, 1, 2, 3, 4, 5, 6, 7}, [&](const MicroBatchSplit& s) { return weighted_times(s, w); });
  EXPECT_FALSE(big.exhaustive);
  EXPECT_LT(big.evaluated, 5000);
  // The optimum by hand: a makespan t holds Σ floor(t·w_j) micro-batches; t = 7/4 holds
  // 1+3+5+7+1+3+5+7 = 32, and the next value below, 5/3, holds 30.
  EXPECT_DOUBLE_EQ(big.seconds, 7.0 / 4);
  int total = 0;
  for (int k : big.split) total += k;
  EXPECT_EQ(total, 32);
  EXPECT_EQ(big.pipelines, weighted_times(big.split, w));
}

TEST(MicroBatchSplits, TiesGoToTheShorterSecondLongestPipeline) {
  // Pipeline 0 takes 3 s whatever it holds; 1 and 2 take 1 s a micro-batch. With 5 micro-batches most splits
  // tie at 3 s, and the lexicographically first of them, {1, 2, 2}, leaves 2 s on the others; {3, 1, 1}, 1 s.
  const auto times = [](const MicroBatchSplit& s) { return PipelineSeconds{3.0, double(s[1]), double(s[2])}; };
  for (int64_t limit : {int64_t{4096}, int64_t{0}}) {
    const SplitSearchResult r = search_micro_batch_split(5, {0, 1, 2}, times, limit);
    EXPECT_DOUBLE_EQ(r.seconds, 3.0);
    EXPECT_EQ(r.split, (MicroBatchSplit{3, 1, 1})) << "limit " << limit;
  }
}

TEST(MicroBatchSplits, AnEvaluationMustTimeEveryPipeline) {
  const auto short_answer = [](const MicroBatchSplit&) { return PipelineSeconds{1.0}; };
  EXPECT_THROW(search_micro_batch_split(4, {0, 1}, short_answer), InputError);
}

}  // namespace
}  // namespace fulcrum
