#include "fulcrum/plan/planner.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/data/meta_index.h"
#include "fulcrum/model/model_presets.h"
#include "fulcrum/sched/validate.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

const Dataset& bundled() {
  static const Dataset data = load_dataset(std::string(FULCRUM_SOURCE_DIR) + "/data/internvl_sft_1.2M.json",
                                           {FULCRUM_SOURCE_DIR, false, nullptr})
                                  .dataset;
  return data;
}

PlanRequest small_request() {
  PlanRequest r;
  r.model = model_preset("vit-3b+gpt-11b");
  r.cluster = cluster_preset("a100:16");
  r.gbs = 64;
  r.data = &bundled();
  r.sampled_steps = 3;
  r.progress = false;
  return r;
}

TEST(MakePlan, TheSameAnswerOnAnyNumberOfThreads) {
  PlanRequest one = small_request();
  one.threads = 1;
  PlanRequest two = small_request();
  two.threads = 2;
  const TrainingPlan a = make_plan(Strategy::kFulcrum, one);
  const TrainingPlan b = make_plan(Strategy::kFulcrum, two);
  EXPECT_EQ(a.epoch_seconds, b.epoch_seconds);
  EXPECT_EQ(a.config.dp, b.config.dp);
  EXPECT_EQ(a.config.pp, b.config.pp);
  EXPECT_EQ(a.schedule.recompute, b.schedule.recompute);
  EXPECT_EQ(a.candidates, b.candidates);
}

// Giving up on candidates the search bar shows cannot win leaves every plan as it was: the finalists screening
// keeps, the chosen configuration, its schedule and times, and the count of candidates that fit (whose memory is
// still worked out exactly).
TEST(MakePlan, GivingUpEarlyChangesNoPlan) {
  for (Strategy strategy : {Strategy::kFulcrum, Strategy::kMegatron, Strategy::kBalanced}) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(fmt::format("{} on {} threads", strategy_name(strategy), threads));
      PlanRequest whole = small_request();
      whole.cluster = cluster_preset("a100:64");
      whole.gbs = 256;
      whole.threads = threads;
      whole.give_up_early = false;
      PlanRequest early = whole;
      early.give_up_early = true;
      const TrainingPlan a = make_plan(strategy, whole);
      const TrainingPlan b = make_plan(strategy, early);
      EXPECT_EQ(a.given_up, 0);
      if (threads == 1) {
        EXPECT_GT(b.given_up, 0);
      }
      EXPECT_EQ(a.epoch_seconds, b.epoch_seconds);
      EXPECT_EQ(a.iteration_seconds, b.iteration_seconds);
      EXPECT_EQ(a.config.dp, b.config.dp);
      EXPECT_EQ(a.config.tp, b.config.tp);
      EXPECT_EQ(a.config.pp, b.config.pp);
      EXPECT_EQ(a.config.vpp, b.config.vpp);
      EXPECT_EQ(a.config.mbs, b.config.mbs);
      EXPECT_EQ(a.schedule.recompute, b.schedule.recompute);
      EXPECT_EQ(a.detail.peak_memory_bytes, b.detail.peak_memory_bytes);
      EXPECT_EQ(a.candidates, b.candidates);
      EXPECT_EQ(a.feasible, b.feasible);
      EXPECT_EQ(a.finalists.size(), 12u);
      EXPECT_TRUE(a.finalists == b.finalists);
    }
  }
}

TEST(MakePlan, FulcrumIsAtLeastAsFastAsTheBaselinesAndFits) {
  const PlanRequest r = small_request();
  const TrainingPlan fulcrum = make_plan(Strategy::kFulcrum, r);
  for (Strategy s : {Strategy::kMegatron, Strategy::kBalanced, Strategy::kZero3}) {
    const TrainingPlan other = make_plan(s, r);
    EXPECT_LE(fulcrum.epoch_seconds, other.epoch_seconds) << strategy_name(s);
    EXPECT_FALSE(other.detail.oom) << strategy_name(s);
  }
  // Every stage within its device's memory on the simulated steps; the schedule covers the model.
  EXPECT_FALSE(fulcrum.detail.oom);
  for (double peak : fulcrum.detail.peak_memory_bytes) EXPECT_LE(peak, r.cluster.usable_memory_bytes());
  EXPECT_EQ(fulcrum.schedule.stages.back().end_layer, fulcrum.schedule.model_layers);
  EXPECT_GT(fulcrum.steps_per_epoch, 0);
  EXPECT_NEAR(fulcrum.epoch_seconds, fulcrum.iteration_seconds * static_cast<double>(fulcrum.steps_per_epoch), 1e-9);
}

TEST(MakePlan, PinnedBaselineConfiguration) {
  PlanRequest r = small_request();
  ParallelConfig c;
  c.dp = 2;
  c.tp = 2;
  c.pp = 4;
  c.vpp = 2;
  c.mbs = 2;
  r.pinned = c;
  const TrainingPlan p = make_plan(Strategy::kMegatron, r);
  EXPECT_EQ(p.candidates, 1);
  EXPECT_EQ(p.config.pp, 4);
  EXPECT_EQ(p.config.schedule, PipelineKind::kInterleaved);
  EXPECT_EQ(p.micro_batches, 16);
  // Megatron's rule: the encoder and its projector in the first stage.
  const int64_t encoder_layers = static_cast<int64_t>(r.model.components[0].layers.size() + r.model.components[1].layers.size());
  EXPECT_GT(p.schedule.stages[0].end_layer, encoder_layers);
  c.dp = 3;
  r.pinned = c;
  EXPECT_THAT([&] { make_plan(Strategy::kMegatron, r); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("is not the cluster's 16 devices")));
}

// --config plans Fulcrum's batches, partition and recomputation on exactly the configuration given; only the
// schedule is still chosen (1F1B or ZB-H1 here: two candidates).
TEST(MakePlan, ConfigPinsTheStrategysOwnConfiguration) {
  PlanRequest r = small_request();
  const ParallelConfig c{.dp = 4, .tp = 2, .pp = 2, .vpp = 1, .mbs = 2};
  r.config = c;
  const TrainingPlan p = make_plan(Strategy::kFulcrum, r);
  EXPECT_EQ(p.candidates, 2);
  EXPECT_EQ(p.batcher, "fulcrum");
  EXPECT_EQ(p.config.dp, 4);
  EXPECT_EQ(p.config.tp, 2);
  EXPECT_EQ(p.config.pp, 2);
  EXPECT_EQ(p.config.vpp, 1);
  EXPECT_EQ(p.config.mbs, 2);
  EXPECT_EQ(p.micro_batches, 8);  // 64 / (2 × 4)
  EXPECT_TRUE(p.config.schedule == PipelineKind::kOneFOneB || p.config.schedule == PipelineKind::kZeroBubbleH1);
  EXPECT_EQ(p.schedule.layout.dp, 4);
  EXPECT_EQ(p.schedule.stages.size(), 2u);

  const auto fails = [&](ParallelConfig bad, Strategy strategy, const char* message) {
    PlanRequest q = small_request();
    q.config = bad;
    EXPECT_THAT([&] { make_plan(strategy, q); }, ::testing::ThrowsMessage<InputError>(HasSubstr(message))) << message;
  };
  ParallelConfig bad = c;
  bad.dp = 2;
  fails(bad, Strategy::kFulcrum, "--config DP 2 × TP 2 × PP 2 is not the cluster's 16 devices");
  ParallelConfig chunks = c;
  chunks.vpp = 2;
  chunks.mbs = 4;  // 4 micro-batches, divisible by PP 2: interleaved
  PlanRequest interleaved = small_request();
  interleaved.config = chunks;
  const TrainingPlan q = make_plan(Strategy::kFulcrum, interleaved);
  EXPECT_EQ(q.config.vpp, 2);
  EXPECT_EQ(q.config.schedule, PipelineKind::kInterleaved);
  bad = chunks;
  bad.mbs = 16;  // 1 micro-batch: not divisible by PP 2
  fails(bad, Strategy::kFulcrum, "--config: VPP 2 needs a pipeline and micro-batches (1) divisible by PP 2");
  fails(c, Strategy::kZero3, "the zero3 strategy is pure data parallelism");
}

// A profile that measures the LLM's block forward at twice the analytic time lengthens the planned iteration on
// the same configuration: every forward of those blocks doubles and nothing else changes, so the iteration grows,
// by less than twice. A profile measured in bf16 does not price fp32 work: there the plan is the analytic one.
TEST(MakePlan, AProfileDoublingTheLlmForwardLengthensThePlan) {
  PlanRequest r = small_request();
  r.config = ParallelConfig{.dp = 8, .tp = 1, .pp = 2, .mbs = 1};
  const LayerSpec* block = nullptr;
  for (const ComponentSpec& comp : r.model.components) {
    if (comp.role != ComponentRole::kLlm) continue;
    for (const LayerSpec& l : comp.layers) {
      if (l.kind == LayerKind::kTransformerBlock) block = &l;
    }
  }
  ASSERT_NE(block, nullptr);
  const AnalyticCost analytic(r.cluster);
  const int64_t t = 2048;
  ProfileEntry entry;
  entry.kind = LayerKind::kTransformerBlock;
  entry.hidden = block->hidden;
  entry.ffn = block->ffn;
  entry.heads = block->heads;
  entry.kv_heads = block->kv_heads;
  entry.head_dim = block->head_dim;
  entry.mlp = block->mlp;
  entry.window_tokens = block->window_tokens;
  entry.pass = Pass::kForward;
  entry.tokens = {static_cast<double>(t)};
  entry.seconds = {2 * analytic.layer_cost({block, Pass::kForward, {1, t, t * t}, {1, false}}).seconds};
  const double analytic_seconds = make_plan(Strategy::kFulcrum, r).iteration_seconds;
  PlanRequest profiled = r;
  profiled.profile = ProfileTable{"a100", {entry}};
  const double profiled_seconds = make_plan(Strategy::kFulcrum, profiled).iteration_seconds;
  EXPECT_GT(profiled_seconds, 1.05 * analytic_seconds);
  EXPECT_LT(profiled_seconds, 2 * analytic_seconds);

  r.dtype = profiled.dtype = Dtype::kFp32;
  EXPECT_EQ(make_plan(Strategy::kFulcrum, profiled).iteration_seconds,
            make_plan(Strategy::kFulcrum, r).iteration_seconds);
  // fp8 on A100s, which have no fp8 tensor cores, is refused before any search.
  r.dtype = Dtype::kFp8;
  EXPECT_THAT([&] { make_plan(Strategy::kFulcrum, r); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("dtype fp8 needs fp8 tensor cores")));
}

// Optimus on the paper's 8-GPU example (Fig. 5): megatron's LLM plan, pinned alike, with the encoder out of its
// first stage and in its bubbles. The ViT-3B in megatron's first stage makes that stage the slowest, so taking it
// out must pay.
TEST(MakePlan, OptimusMovesTheEncoderIntoTheLlmsBubbles) {
  PlanRequest r;
  r.model = model_preset("vit-3b+gpt-11b");
  r.cluster = cluster_preset("h100:8");
  r.gbs = 16;
  r.seq = 2048;
  r.progress = false;
  ParallelConfig pinned;
  pinned.dp = 1;
  pinned.tp = 2;
  pinned.pp = 4;
  pinned.mbs = 2;
  r.pinned = pinned;
  const TrainingPlan megatron = make_plan(Strategy::kMegatron, r);
  const TrainingPlan optimus = make_plan(Strategy::kOptimus, r);
  EXPECT_EQ(megatron.optimus, nullptr);
  ASSERT_NE(optimus.optimus, nullptr);
  EXPECT_EQ(optimus.config.pp, 4);
  EXPECT_EQ(optimus.config.tp, 2);
  // The configuration states the encoders' tensor parallelism as their own plan runs it.
  EXPECT_EQ(optimus.config.encoder_tp, optimus.optimus->encoder_plan.tp);
  EXPECT_EQ(optimus.config.encoder_tp, optimus.schedule.layout.encoder_tp);
  EXPECT_LT(optimus.iteration_seconds, megatron.iteration_seconds);
  // The schedule is the whole model's: the encoder section over the ViT and projector (50 layers), the LLM's
  // stages over the 83 after them (embedding, 80 blocks, final norm, LM head), its blocks split evenly.
  EXPECT_EQ(optimus.schedule.model_layers, 50 + 83);
  ASSERT_TRUE(optimus.schedule.encoder.present());
  EXPECT_EQ(optimus.schedule.stages.front().first_layer, 50);
  EXPECT_NO_THROW(validate(optimus.schedule));
  EXPECT_GT(optimus.detail.mfu, megatron.detail.mfu);
  EXPECT_NEAR(optimus.detail.mfu / megatron.detail.mfu, megatron.iteration_seconds / optimus.iteration_seconds, 1e-9);
  EXPECT_GT(optimus.optimus->fine.encoder_compute_seconds, 0);
  // fulcrum on the same synthetic samples: if it moves the encoders out, they still carry their images.
  r.pinned.reset();
  const TrainingPlan fulcrum = make_plan(Strategy::kFulcrum, r);
  if (fulcrum.optimus) {
    EXPECT_GT(fulcrum.optimus->fine.encoder_compute_seconds, 0);
    EXPECT_EQ(fulcrum.schedule.layout.pp, fulcrum.config.pp);
    EXPECT_EQ(fulcrum.detail.peak_memory_bytes.size(), static_cast<size_t>(fulcrum.config.pp));
    EXPECT_TRUE(fulcrum.schedule.encoder.present());
    EXPECT_NO_THROW(validate(fulcrum.schedule));
  }
}

// fulcrum keeps the encoders in bubbles only where that is faster, and never where the request rules it out.
TEST(MakePlan, FulcrumKeepsEncodersInBubblesOnlyWhereTheyWin) {
  PlanRequest r = small_request();
  r.encoders = EncoderSite::kStages;
  const TrainingPlan whole = make_plan(Strategy::kFulcrum, r);
  EXPECT_EQ(whole.optimus, nullptr);
  r.encoders = EncoderSite::kBest;
  const TrainingPlan best = make_plan(Strategy::kFulcrum, r);
  EXPECT_LE(best.epoch_seconds, whole.epoch_seconds);
  if (best.optimus) {
    EXPECT_LT(best.epoch_seconds, whole.epoch_seconds);
    EXPECT_EQ(best.schedule.layout.pp, best.config.pp);
    EXPECT_EQ(best.schedule.micro_batches, best.micro_batches);
  } else {
    EXPECT_EQ(best.epoch_seconds, whole.epoch_seconds);
  }
  // Asked for, the encoders go into bubbles whether or not that wins, and no faster than the best choice.
  r.encoders = EncoderSite::kBubbles;
  const TrainingPlan forced = make_plan(Strategy::kFulcrum, r);
  ASSERT_NE(forced.optimus, nullptr);
  EXPECT_TRUE(forced.schedule.encoder.present());
  EXPECT_NO_THROW(validate(forced.schedule));
  EXPECT_GE(forced.epoch_seconds, best.epoch_seconds * (1 - 1e-12));
  if (best.optimus) {
    EXPECT_DOUBLE_EQ(forced.epoch_seconds, best.epoch_seconds);
  }
  // An LLM alone has no encoder to move.
  r.encoders = EncoderSite::kBest;
  r.model = llm_only(r.model);
  EXPECT_EQ(make_plan(Strategy::kFulcrum, r).optimus, nullptr);
}

TEST(MakePlan, ImpossibleRequestsSayWhy) {
  PlanRequest r = small_request();
  r.model = model_preset("gpt-175b");
  r.cluster = cluster_preset("a100:8");
  r.data = nullptr;
  r.gbs = 8;
  EXPECT_THAT([&] { make_plan(Strategy::kFulcrum, r); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("fits in memory")));
  PlanRequest odd = small_request();
  odd.gbs = 7;  // no micro-batch × DP divides 7 on 16 devices... except DP 1
  odd.cluster = cluster_preset("a100:3");
  odd.model = model_preset("gpt-11b");
  odd.data = nullptr;
  EXPECT_THAT([&] { make_plan(Strategy::kMegatron, odd); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("no parallel configuration of 3 devices")));
}

}  // namespace
}  // namespace fulcrum
