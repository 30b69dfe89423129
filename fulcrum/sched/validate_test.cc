#include "fulcrum/sched/validate.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/training_state_memory.h"
#include "fulcrum/sched/pipeline_schedules.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

// A generated schedule over `pp × vpp` one-layer stages.
Schedule schedule(PipelineKind kind, int pp, int vpp, int m, int dp = 1,
                  StateSharding sharding = StateSharding::kZero0) {
  ParallelLayout layout;
  layout.pp = pp;
  layout.vpp = vpp;
  layout.dp = dp;
  layout.state_sharding = sharding;
  std::vector<StageLayers> stages;
  for (int s = 0; s < pp * vpp; ++s) stages.push_back({s, s + 1});
  return make_pipeline_schedule(kind, layout, m, stages, std::vector<Recompute>(pp * vpp, Recompute::kNone));
}

std::string error_of(const Schedule& s) {
  try {
    validate(s, "plan.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Index of the first instruction of `rank` matching op, stage and micro-batch.
size_t find(const Schedule& s, int rank, OpKind op, int micro_batch, Payload payload = Payload::kActivation) {
  const auto& p = s.programs[rank].instructions;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i].op == op && p[i].micro_batch == micro_batch &&
        ((op != OpKind::kSend && op != OpKind::kRecv) || p[i].payload == payload)) {
      return i;
    }
  }
  ADD_FAILURE() << "no such instruction";
  return 0;
}

TEST(Validate, EveryGeneratedScheduleIsValid) {
  for (int pp : {1, 2, 3, 4, 8}) {
    for (int m : {1, 2, 4, 8, 16}) {
      for (int dp : {1, 2}) {
        for (PipelineKind k : {PipelineKind::kGpipe, PipelineKind::kOneFOneB, PipelineKind::kZeroBubbleH1}) {
          EXPECT_EQ(error_of(schedule(k, pp, 1, m, dp)), "") << pipeline_kind_name(k) << " pp " << pp << " m " << m;
        }
        if (m % pp == 0) {
          for (int v : {1, 2, 3, 4}) {
            EXPECT_EQ(error_of(schedule(PipelineKind::kInterleaved, pp, v, m, dp)), "")
                << "interleaved pp " << pp << " v " << v << " m " << m;
          }
        }
      }
    }
  }
}

TEST(Validate, RejectsAMissingBackward) {
  Schedule s = schedule(PipelineKind::kOneFOneB, 2, 1, 4);
  auto& p = s.programs[0].instructions;
  p.erase(p.begin() + static_cast<std::ptrdiff_t>(find(s, 0, OpKind::kBackward, 3)));
  EXPECT_THAT(error_of(s), HasSubstr("plan.json: rank 0: stage 0 has no backward of micro-batch 3"));
}

// A schedule Fulcrum planned itself that fails validation is Fulcrum's fault, not the input's: the same line, as
// an InternalError (exit status 3 on the command line) rather than an InputError (2).
TEST(Validate, APlannedScheduleThatFailsIsAnInternalError) {
  Schedule s = schedule(PipelineKind::kOneFOneB, 2, 1, 4);
  EXPECT_NO_THROW(validate_planned(s, "the plan's schedule"));
  auto& p = s.programs[0].instructions;
  p.erase(p.begin() + static_cast<std::ptrdiff_t>(find(s, 0, OpKind::kBackward, 3)));
  try {
    validate_planned(s, "the plan's schedule");
    ADD_FAILURE() << "accepted";
  } catch (const InternalError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the plan's schedule: rank 0: stage 0 has no backward of micro-batch 3"));
  } catch (const InputError&) {
    ADD_FAILURE() << "reported as bad input";
  }
}

TEST(Validate, RejectsAnUnmatchedSend) {
  Schedule s = schedule(PipelineKind::kOneFOneB, 2, 1, 4);
  auto& p = s.programs[1].instructions;
  // Rank 1 never receives micro-batch 2's activation: its forward runs without input.
  p.erase(p.begin() + static_cast<std::ptrdiff_t>(find(s, 1, OpKind::kRecv, 2)));
  EXPECT_THAT(error_of(s), HasSubstr("(forward stage 1 micro-batch 2): runs before its input is received"));
  // A receive whose send is missing.
  Schedule t = schedule(PipelineKind::kGpipe, 2, 1, 2);
  auto& q = t.programs[0].instructions;
  q.erase(q.begin() + static_cast<std::ptrdiff_t>(find(t, 0, OpKind::kSend, 1)));
  EXPECT_THAT(error_of(t), HasSubstr("micro-batch 1: the activation to stage 1 is received but never sent"));
  // The same send twice.
  Schedule u = schedule(PipelineKind::kGpipe, 2, 1, 2);
  auto& w = u.programs[0].instructions;
  const size_t send = find(u, 0, OpKind::kSend, 1);
  w.insert(w.begin() + static_cast<std::ptrdiff_t>(send), w[send]);
  EXPECT_THAT(error_of(u), HasSubstr("sent twice"));
}

TEST(Validate, RejectsACyclicWait) {
  // Rank 0 waits for micro-batch 0's gradient before sending micro-batch 1's activation, and rank 1 needs
  // micro-batch 1's activation before it will send that gradient: GPipe on rank 1, 1F1B-like on rank 0.
  Schedule s = schedule(PipelineKind::kGpipe, 2, 1, 2);
  auto& p = s.programs[0].instructions;
  // Move rank 0's backward of micro-batch 0 (with its gradient receive) before its forward of micro-batch 1.
  const size_t recv = find(s, 0, OpKind::kRecv, 0, Payload::kGradient);
  const Instruction recv_gradient = p[recv];
  const Instruction backward = p[recv + 1];
  p.erase(p.begin() + static_cast<std::ptrdiff_t>(recv), p.begin() + static_cast<std::ptrdiff_t>(recv) + 2);
  const size_t forward1 = find(s, 0, OpKind::kForward, 1);
  p.insert(p.begin() + static_cast<std::ptrdiff_t>(forward1), {recv_gradient, backward});
  EXPECT_THAT(error_of(s), HasSubstr("plan.json: deadlock: 2 rank(s) wait forever: rank 0 instruction"));
}

TEST(Validate, RejectsAnEmptyStageAndAnEmptyProgram) {
  Schedule s = schedule(PipelineKind::kOneFOneB, 2, 1, 2);
  s.stages[0].end_layer = 2;  // the first stage takes both layers
  s.stages[1] = {2, 2};
  EXPECT_THAT(error_of(s), HasSubstr("plan.json: stage 1 is empty"));
  Schedule t = schedule(PipelineKind::kOneFOneB, 2, 1, 2);
  t.programs[1].instructions.clear();
  EXPECT_THAT(error_of(t), HasSubstr("pipeline rank 1 has an empty program"));
}

TEST(Validate, RejectsComputeOutOfOrderAndTwice) {
  Schedule s = schedule(PipelineKind::kGpipe, 1, 1, 2);
  auto& p = s.programs[0].instructions;
  std::swap(p[0], p[2]);  // the backward of micro-batch 0 before its forward
  EXPECT_THAT(error_of(s), HasSubstr("runs before the forward"));
  Schedule t = schedule(PipelineKind::kGpipe, 1, 1, 2);
  t.programs[0].instructions[1].micro_batch = 0;
  EXPECT_THAT(error_of(t), HasSubstr("the forward runs twice"));
  Schedule u = schedule(PipelineKind::kGpipe, 2, 1, 2);
  u.programs[0].instructions[0].stage = 1;
  EXPECT_THAT(error_of(u), HasSubstr("the stage runs on rank 1"));
}

TEST(Validate, RejectsGradientReductionBeforeTheLastBackward) {
  Schedule s = schedule(PipelineKind::kOneFOneB, 1, 1, 2, 2);
  auto& p = s.programs[0].instructions;
  ASSERT_EQ(p.back().op, OpKind::kCollective);
  std::rotate(p.begin(), p.end() - 1, p.end());
  EXPECT_THAT(error_of(s), HasSubstr("reduces gradients before the stage's last backward"));
}

// Without its gradient reduction a stage's data-parallel replicas drift apart; reduced twice, its gradients count
// twice.
TEST(Validate, RejectsAStageWhoseGradientsAreNotReducedOnceOverItsReplicas) {
  for (const bool twice : {false, true}) {
    Schedule s = schedule(PipelineKind::kOneFOneB, 2, 1, 4, 4);
    auto& p = s.programs[1].instructions;
    const auto last = std::find_if(p.rbegin(), p.rend(), [](const Instruction& in) {
      return in.op == OpKind::kCollective && in.tensor == CollectiveTensor::kGradients;
    });
    ASSERT_NE(last, p.rend());
    if (twice) {
      p.push_back(*last);
    } else {
      p.erase(std::next(last).base());
    }
    EXPECT_THAT(error_of(s), HasSubstr(fmt::format("rank 1: stage 1 reduces its gradients over its 4 data-parallel "
                                                   "replicas {} times a step, not once", twice ? 2 : 0)));
  }
  EXPECT_EQ(error_of(schedule(PipelineKind::kOneFOneB, 2, 1, 4, 1)), "");  // one replica: nothing to reduce
}

// Gathering gradients leaves each replica its own: it is no reduction, whatever the count of collectives says.
TEST(Validate, RejectsGradientsGatheredInsteadOfReduced) {
  Schedule s = schedule(PipelineKind::kOneFOneB, 2, 1, 4, 4);
  int changed = 0;
  for (Program& p : s.programs) {
    for (Instruction& in : p.instructions) {
      if (in.op == OpKind::kCollective && in.tensor == CollectiveTensor::kGradients) {
        in.collective = CollectiveKind::kAllGather;
        ++changed;
      }
    }
  }
  ASSERT_GT(changed, 0);
  EXPECT_THAT(error_of(s), HasSubstr("gathers gradients, which a step must reduce (all_reduce or reduce_scatter)"));
}

// The collectives must be those of the state's sharding: sharded parameters gathered before a stage computes
// (ZeRO-3: before each pass), and gradients reduced to the whole under zero-0, where every replica updates the
// whole state. Each generated schedule passes; with a gather taken out, or a zero-0 reduce-scatter, it does not.
TEST(Validate, CollectivesFollowTheStateSharding) {
  for (StateSharding sharding : {StateSharding::kZero0, StateSharding::kZero1, StateSharding::kZero2,
                                 StateSharding::kZero3}) {
    for (PipelineKind k : {PipelineKind::kOneFOneB, PipelineKind::kZeroBubbleH1}) {
      EXPECT_EQ(error_of(schedule(k, 2, 1, 4, 2, sharding)), "") << state_sharding_name(sharding);
    }
  }
  for (StateSharding sharding : {StateSharding::kZero1, StateSharding::kZero3}) {
    Schedule s = schedule(PipelineKind::kOneFOneB, 2, 1, 4, 2, sharding);
    auto& p = s.programs[1].instructions;
    const auto gather = std::find_if(p.begin(), p.end(), [](const Instruction& in) {
      return in.op == OpKind::kCollective && in.tensor == CollectiveTensor::kParameters;
    });
    ASSERT_NE(gather, p.end()) << state_sharding_name(sharding);
    p.erase(gather);
    EXPECT_THAT(error_of(s), HasSubstr("runs before the stage's parameters are gathered")) << state_sharding_name(sharding);
  }
  Schedule sharded = schedule(PipelineKind::kOneFOneB, 2, 1, 4, 2, StateSharding::kZero1);
  sharded.layout.state_sharding = StateSharding::kZero0;
  EXPECT_THAT(error_of(sharded), HasSubstr("gathers parameters that every data-parallel replica holds whole"));
  for (Program& p : sharded.programs) {
    p.instructions.erase(std::remove_if(p.instructions.begin(), p.instructions.end(), [](const Instruction& in) {
                           return in.op == OpKind::kCollective && in.tensor == CollectiveTensor::kParameters;
                         }),
                         p.instructions.end());
  }
  EXPECT_THAT(error_of(sharded), HasSubstr("reduce-scatters gradients, but under zero-0"));
}

TEST(Validate, WaveBoundariesMustMatchAcrossRanks) {
  Schedule s = schedule(PipelineKind::kOneFOneB, 2, 1, 2);
  Instruction wave;
  wave.op = OpKind::kWaveBoundary;
  wave.wave = 0;
  s.programs[0].instructions.push_back(wave);
  EXPECT_THAT(error_of(s), HasSubstr("wave boundaries"));
  s.programs[1].instructions.push_back(wave);
  EXPECT_EQ(error_of(s), "");
}

TEST(PipelineSchedules, MicroBatchesInFlight) {
  // 1F1B: stage r holds pp − r; GPipe: all m; ZB-H1: as 1F1B until the input gradients.
  EXPECT_EQ(max_micro_batches_in_flight(schedule(PipelineKind::kOneFOneB, 4, 1, 8)), (std::vector<int>{4, 3, 2, 1}));
  EXPECT_EQ(max_micro_batches_in_flight(schedule(PipelineKind::kGpipe, 3, 1, 5)), (std::vector<int>{5, 5, 5}));
  EXPECT_EQ(max_micro_batches_in_flight(schedule(PipelineKind::kZeroBubbleH1, 4, 1, 8)),
            (std::vector<int>{4, 3, 2, 1}));
  // Fewer micro-batches than stages: no more than there are.
  EXPECT_EQ(max_micro_batches_in_flight(schedule(PipelineKind::kOneFOneB, 4, 1, 2)), (std::vector<int>{2, 2, 2, 1}));
}

TEST(PipelineSchedules, RefuseImpossibleCombinations) {
  EXPECT_THROW(schedule(PipelineKind::kInterleaved, 4, 2, 6), InputError);  // 6 micro-batches, pp 4
  EXPECT_THROW(schedule(PipelineKind::kOneFOneB, 2, 2, 4), InputError);     // 1F1B has no chunks
  EXPECT_THROW(schedule(PipelineKind::kGpipe, 2, 1, 0), InputError);
}

TEST(PartitionLayers, MegatronPutsTheEncoderInTheFirstStage) {
  ModelSpec m;
  ComponentSpec vision;
  vision.name = "vision";
  vision.role = ComponentRole::kEncoder;
  LayerSpec block;
  block.hidden = 8;
  block.heads = 2;
  block.kv_heads = 2;
  block.head_dim = 4;
  block.ffn = 16;
  LayerSpec embed = block;
  embed.kind = LayerKind::kTokenEmbedding;
  embed.vocab = 10;
  LayerSpec head = embed;
  head.kind = LayerKind::kLmHead;
  vision.layers = transformer_blocks(3, block);
  ComponentSpec llm;
  llm.name = "llm";
  llm.role = ComponentRole::kLlm;
  llm.layers.push_back(embed);
  for (const LayerSpec& l : transformer_blocks(6, block)) llm.layers.push_back(l);
  llm.layers.push_back(head);
  m.components = {vision, llm};
  // Flattened: 3 encoder blocks (0-2), embedding 3, LLM blocks 4-9, head 10.
  const auto first = partition_layers(m, 4, EncoderPlacement::kFirstStage);
  ASSERT_EQ(first.size(), 4u);
  // 6 LLM blocks over 4 stages: 1, 1, 2, 2; the encoder and embedding ride in the first.
  EXPECT_EQ(first[0].first_layer, 0);
  EXPECT_EQ(first[0].end_layer, 5);
  EXPECT_EQ(first[1].end_layer, 6);
  EXPECT_EQ(first[2].end_layer, 8);
  EXPECT_EQ(first[3].end_layer, 11);
  // Spread: 9 blocks over 4 stages: 2, 2, 2, 3.
  const auto spread = partition_layers(m, 4, EncoderPlacement::kSpread);
  EXPECT_EQ(spread[0].end_layer, 2);
  EXPECT_EQ(spread[1].end_layer, 5);  // block 2, embedding 3, block 4
  EXPECT_EQ(spread[2].end_layer, 7);
  EXPECT_EQ(spread[3].end_layer, 11);
  EXPECT_THROW(partition_layers(m, 7, EncoderPlacement::kFirstStage), InputError);
}

}  // namespace
}  // namespace fulcrum
