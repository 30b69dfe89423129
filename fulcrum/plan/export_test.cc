#include "fulcrum/plan/export.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "fulcrum/core/error.h"
#include "fulcrum/model/model_presets.h"
#include "fulcrum/sched/pipeline_schedules.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

TEST(PipelineLayout, TheDocumentedExamplesExpand) {
  // Megatron-LM's DeepSeek-V3 example: [Ettt] [tt]×29 [m] [L].
  const auto v3 = expand_pipeline_layout("Et*3|(tt|)*29,m|L");
  ASSERT_EQ(v3.size(), 32u);
  EXPECT_EQ(v3[0], "Ettt");
  EXPECT_EQ(v3[1], "tt");
  EXPECT_EQ(v3[29], "tt");
  EXPECT_EQ(v3[30], "m");
  EXPECT_EQ(v3[31], "L");
  // Llama-3 70B: [Ett] [tt]×34 [ttt] [tt]×3 [tL]: 40 stages, 80 decoder layers.
  const auto llama = expand_pipeline_layout("Et*2|(t*2|)*34,t*3|(t*2|)*3,tL");
  ASSERT_EQ(llama.size(), 40u);
  int64_t t = 0;
  for (const std::string& s : llama) t += std::count(s.begin(), s.end(), 't');
  EXPECT_EQ(t, 80);
  for (const char* bad : {"E(t", "t*", "(tt|)", "x", "t)"}) {
    EXPECT_THROW(expand_pipeline_layout(bad), InputError) << bad;
  }
}

// A plan of `model` cut by `stages` into pp × vpp stages.
TrainingPlan plan_of(const ModelSpec& model, int pp, int vpp, std::vector<StageLayers> stages,
                     Recompute recompute = Recompute::kFull) {
  TrainingPlan p;
  p.config.pp = pp;
  p.config.vpp = vpp;
  p.config.tp = 8;
  p.config.dp = 4;
  p.config.mbs = 2;
  p.config.sequence_parallel = true;
  p.config.encoder_tp = 1;
  ParallelLayout layout;
  layout.pp = pp;
  layout.vpp = vpp;
  layout.dp = 4;
  layout.tp = 8;
  p.schedule = make_pipeline_schedule(vpp > 1 ? PipelineKind::kInterleaved : PipelineKind::kOneFOneB, layout, pp * 2,
                                      std::move(stages), std::vector<Recompute>(flattened_layers(model), recompute));
  return p;
}

TEST(PipelineLayout, AMegatronPlanExportsAndParsesBack) {
  const ModelSpec model = model_preset("internvl-chat-1.5");
  const int pp = 4, vpp = 2;
  const TrainingPlan p = plan_of(model, pp, vpp, partition_layers(model, pp * vpp, EncoderPlacement::kFirstStage));
  const std::string layout = megatron_pipeline_layout(model, p.schedule);
  const auto stages = expand_pipeline_layout(layout);
  // The exporter's checks (landscape.md §3.1): a 't' per LLM block, E first, L last, no empty stage, S = PP × VPP.
  ASSERT_EQ(stages.size(), static_cast<size_t>(pp * vpp)) << layout;
  int64_t t = 0;
  for (const std::string& s : stages) {
    EXPECT_FALSE(s.empty()) << layout;
    t += std::count(s.begin(), s.end(), 't');
  }
  EXPECT_EQ(t, model.find("llm")->transformer_blocks());
  EXPECT_EQ(stages.front().front(), 'E');
  EXPECT_EQ(stages.back().back(), 'L');
  // The arguments carry the layout, the sizes and Megatron's uniform full recomputation.
  const std::string args = megatron_arguments(model, p, 1024);
  EXPECT_THAT(args, HasSubstr("--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4"));
  EXPECT_THAT(args, HasSubstr("--micro-batch-size 2 --global-batch-size 1024 --sequence-parallel"));
  EXPECT_THAT(args, HasSubstr("--pipeline-model-parallel-layout \"" + layout + "\""));
  EXPECT_THAT(args, HasSubstr("--recompute-granularity full --recompute-method uniform"));
  EXPECT_THAT(args, HasSubstr("encoder tensor parallelism: 1"));
}

TEST(PipelineLayout, EncoderOnlyStagesCannotBeExpressed) {
  const ModelSpec model = model_preset("internvl-chat-1.5");
  const TrainingPlan p = plan_of(model, 8, 1, partition_layers(model, 8, EncoderPlacement::kSpread));
  EXPECT_THAT([&] { megatron_pipeline_layout(model, p.schedule); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("stage 0 holds only encoder layers")));
}

// ZeRO-2 and ZeRO-3 shard what Megatron's distributed optimizer does not: they take Megatron-FSDP's flags.
TEST(MegatronArguments, StateShardingTakesItsOwnFlags) {
  const ModelSpec model = model_preset("gpt-11b");
  TrainingPlan p = plan_of(model, 1, 1, partition_layers(model, 1, EncoderPlacement::kFirstStage));
  p.config.sharding = StateSharding::kZero3;
  std::string args = megatron_arguments(model, p, 256);
  EXPECT_THAT(args, HasSubstr("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params"));
  p.config.sharding = StateSharding::kZero2;
  args = megatron_arguments(model, p, 256);
  EXPECT_THAT(args, HasSubstr("--data-parallel-sharding-strategy optim_grads "));
  p.config.sharding = StateSharding::kMegatronDistributedOptimizer;
  args = megatron_arguments(model, p, 256);
  EXPECT_THAT(args, HasSubstr("--use-distributed-optimizer"));
  EXPECT_THAT(args, ::testing::Not(HasSubstr("fsdp")));
  p.config.sharding = StateSharding::kZero0;
  EXPECT_THAT(megatron_arguments(model, p, 256), ::testing::Not(HasSubstr("--use-distributed-optimizer")));
}

// Megatron's recomputation flags count the layout's 't', the LLM's blocks: the encoder's blocks, which run in the
// first stage beside them, neither add to a rank's count nor turn the LLM's selective recomputation into full.
TEST(MegatronArguments, RecomputationCountsTheLlmBlocksAlone) {
  const ModelSpec model = model_preset("internvl-chat-1.5");
  const int pp = 4;
  TrainingPlan p = plan_of(model, pp, 1, partition_layers(model, pp, EncoderPlacement::kFirstStage));
  const int64_t encoder_layers = flattened_layers(model) - static_cast<int64_t>(model.find("llm")->layers.size());
  // Every LLM block selective, every encoder block not recomputed.
  for (int64_t i = 0; i < flattened_layers(model); ++i) {
    p.schedule.recompute[i] = i < encoder_layers ? Recompute::kNone : Recompute::kSelective;
  }
  std::string args = megatron_arguments(model, p, 1024);
  EXPECT_THAT(args, HasSubstr("--recompute-granularity selective"));
  EXPECT_THAT(args, ::testing::Not(HasSubstr("--recompute-method")));
  // The first stage's LLM blocks fully recomputed, the encoders' too; the other ranks' LLM blocks not at all.
  int64_t first_stage_llm_blocks = 0, encoder_blocks = 0;
  int64_t flat = 0;
  for (const ComponentSpec& comp : model.components) {
    for (const LayerSpec& l : comp.layers) {
      const bool in_first = flat < p.schedule.stages[0].end_layer;
      const bool block = l.kind == LayerKind::kTransformerBlock;
      p.schedule.recompute[flat] = in_first ? Recompute::kFull : Recompute::kNone;
      if (block && comp.role == ComponentRole::kLlm && in_first) ++first_stage_llm_blocks;
      if (block && comp.role != ComponentRole::kLlm) ++encoder_blocks;
      ++flat;
    }
  }
  ASSERT_GT(first_stage_llm_blocks, 0);
  ASSERT_GT(encoder_blocks, 0);
  args = megatron_arguments(model, p, 1024);
  EXPECT_THAT(args, HasSubstr(fmt::format("--recompute-method block --recompute-num-layers {}\n",
                                          first_stage_llm_blocks)));
  EXPECT_THAT(args, HasSubstr(fmt::format("per pipeline rank: {},0,0,0;", first_stage_llm_blocks)));
  EXPECT_THAT(args, HasSubstr(fmt::format("encoder blocks recomputed: {} fully and 0 selectively of {}",
                                          encoder_blocks, encoder_blocks)));
}

// Megatron takes one recomputation for every block: a plan mixing selective and none exports selective (block
// recomputation would recompute its selective blocks fully), and one mixing full and selective says which of its
// selective blocks are recomputed fully.
TEST(MegatronArguments, MixedRecomputationTakesTheNearestMegatronCanRunAndSaysWhatChanges) {
  const ModelSpec model = model_preset("gpt-11b");
  TrainingPlan p = plan_of(model, 4, 1, partition_layers(model, 4, EncoderPlacement::kFirstStage), Recompute::kNone);
  std::vector<int64_t> blocks;
  for (int64_t i = 0; i < flattened_layers(model); ++i) {
    if (model.components[0].layers[i].kind == LayerKind::kTransformerBlock) blocks.push_back(i);
  }
  ASSERT_GE(blocks.size(), 10u);
  for (size_t b = 0; b < 10; ++b) p.schedule.recompute[blocks[b]] = Recompute::kSelective;
  std::string args = megatron_arguments(model, p, 256);
  EXPECT_THAT(args, HasSubstr("--recompute-granularity selective"));
  EXPECT_THAT(args, ::testing::Not(HasSubstr("--recompute-method")));
  EXPECT_THAT(args, HasSubstr(fmt::format("# {} LLM blocks the plan does not recompute are recomputed selectively",
                                          blocks.size() - 10)));
  p.schedule.recompute[blocks.back()] = Recompute::kFull;
  args = megatron_arguments(model, p, 256);
  EXPECT_THAT(args, HasSubstr("--recompute-method block"));
  EXPECT_THAT(args, HasSubstr("# 10 LLM blocks the plan recomputes selectively are counted as fully recomputed"));
}

// Megatron checks the layout's blocks against --num-layers and ties the LM head to the embedding unless told not to.
TEST(MegatronArguments, TheLayerCountAndAnUntiedHeadAreGiven) {
  ModelSpec model = model_preset("gpt-11b");
  const TrainingPlan p = plan_of(model, 4, 1, partition_layers(model, 4, EncoderPlacement::kFirstStage));
  int64_t blocks = 0;
  LayerSpec* head = nullptr;
  for (LayerSpec& l : model.components[0].layers) {
    blocks += l.kind == LayerKind::kTransformerBlock;
    if (l.kind == LayerKind::kLmHead) head = &l;
  }
  ASSERT_NE(head, nullptr);
  head->tied_to_embedding = false;
  std::string args = megatron_arguments(model, p, 256);
  EXPECT_THAT(args, HasSubstr(fmt::format(" --num-layers {} ", blocks)));
  EXPECT_THAT(args, HasSubstr("--untie-embeddings-and-output-weights"));
  head->tied_to_embedding = true;
  EXPECT_THAT(megatron_arguments(model, p, 256), ::testing::Not(HasSubstr("--untie-embeddings-and-output-weights")));
}

// Megatron-LM has no zero-bubble schedule: the arguments say the plan's schedule is not the one it runs.
TEST(MegatronArguments, AScheduleMegatronDoesNotRunIsNamed) {
  const ModelSpec model = model_preset("gpt-11b");
  TrainingPlan p = plan_of(model, 4, 1, partition_layers(model, 4, EncoderPlacement::kFirstStage));
  EXPECT_THAT(megatron_arguments(model, p, 256), ::testing::Not(HasSubstr("pipeline schedule")));
  p.config.schedule = PipelineKind::kZeroBubbleH1;
  EXPECT_THAT(megatron_arguments(model, p, 256), HasSubstr("# the plan's pipeline schedule is zb-h1;"));
}

TEST(DeepspeedPartition, BoundariesAsAPartitionHook) {
  const ModelSpec model = model_preset("gpt-11b");
  const TrainingPlan p = plan_of(model, 4, 1, partition_layers(model, 4, EncoderPlacement::kFirstStage));
  const std::string code = deepspeed_partition(p);
  std::string parts = "0";
  for (const StageLayers& s : p.schedule.stages) parts += ", " + std::to_string(s.end_layer);
  EXPECT_THAT(code, HasSubstr("FULCRUM_PARTS = [" + parts + "]"));
  EXPECT_THAT(code, HasSubstr("def _partition_layers(self"));
  const TrainingPlan interleaved = plan_of(model, 4, 2, partition_layers(model, 8, EncoderPlacement::kFirstStage));
  EXPECT_THROW(deepspeed_partition(interleaved), InputError);
}

// The export carries the engine's configuration and says what DeepSpeed cannot run as planned; a sharding its
// pipeline engine refuses is refused here, and one stage needs no PipelineModule.
TEST(DeepspeedPartition, SaysWhatTheEngineRunsAndRefusesWhatItCannot) {
  const ModelSpec model = model_preset("gpt-11b");
  TrainingPlan p = plan_of(model, 4, 1, partition_layers(model, 4, EncoderPlacement::kFirstStage));
  p.micro_batches = 8;
  p.batcher = "random";
  p.config.sharding = StateSharding::kZero1;
  std::string code = deepspeed_partition(p);
  EXPECT_THAT(code, HasSubstr("\"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 8, "
                              "\"zero_optimization\": {\"stage\": 1}"));
  EXPECT_THAT(code, HasSubstr("# tensor parallelism 8 with sequence parallelism: DeepSpeed takes it from a "
                              "PipeModelDataParallelTopology(num_pp=4, num_mp=8, num_dp=4)"));
  EXPECT_THAT(code, HasSubstr("(interval 1: as planned)"));
  EXPECT_THAT(code, ::testing::Not(HasSubstr("pipeline schedule")));
  p.config.schedule = PipelineKind::kZeroBubbleH1;
  p.schedule.recompute.front() = Recompute::kSelective;
  p.batcher = "fulcrum";
  code = deepspeed_partition(p);
  EXPECT_THAT(code, HasSubstr("# the plan's pipeline schedule is zb-h1; DeepSpeed runs its own 1F1B"));
  EXPECT_THAT(code, HasSubstr("needs the layers' own checkpointing"));
  EXPECT_THAT(code, HasSubstr("# the plan's fulcrum batches vary the samples of a micro-batch around 2"));
  p.config.sharding = StateSharding::kZero3;
  try {
    deepspeed_partition(p);
    ADD_FAILURE() << "ZeRO-3 over pipeline stages exported for DeepSpeed";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("DeepSpeed's pipeline engine runs ZeRO stage 0 or 1"));
  }
  TrainingPlan one = plan_of(model, 1, 1, partition_layers(model, 1, EncoderPlacement::kFirstStage));
  one.config.sharding = StateSharding::kZero3;
  code = deepspeed_partition(one);
  EXPECT_THAT(code, HasSubstr("\"zero_optimization\": {\"stage\": 3}"));
  EXPECT_THAT(code, HasSubstr("# one pipeline stage: no PipelineModule"));
  EXPECT_THAT(code, ::testing::Not(HasSubstr("FULCRUM_PARTS")));
}

}  // namespace
}  // namespace fulcrum
