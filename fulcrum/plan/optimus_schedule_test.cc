#include "fulcrum/plan/optimus_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "fulcrum/core/error.h"
#include "fulcrum/core/rng.h"
#include "fulcrum/model/model_presets.h"
#include "fulcrum/plan/eight_gpu_example.h"
#include "fulcrum/sched/pipeline_schedules.h"
#include "fulcrum/sched/schedule_json.h"
#include "fulcrum/sched/validate.h"
#include "fulcrum/sim/chrome_trace.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

// The paper's 8-GPU example, and the simulator on it.
struct EightGpus : EightGpuExample {
  using EightGpuExample::EightGpuExample;

  SimResult simulate_on(const Schedule& s, const MicroBatchLoads& loads) const {
    SimOptions options;
    options.timeline = true;
    return simulate(s, model, cluster, cost, in.efficiency, loads, options);
  }
};

int count_ops(const Schedule& s, OpKind op, bool encoder) {
  int n = 0;
  for (const Program& p : s.programs) {
    for (const Instruction& in : p.instructions) n += in.op == op && (in.encoder_pipeline >= 0) == encoder;
  }
  return n;
}

TEST(OptimusSchedule, TheEightGpuPlanBecomesOneValidSchedule) {
  EightGpus g;
  const OptimusPlan plan = plan_optimus(g.in);
  const Schedule s = optimus_schedule(g.in, plan);
  EXPECT_NO_THROW(validate(s));
  const EncoderSection& e = s.encoder;
  ASSERT_TRUE(e.present());
  EXPECT_EQ(e.pp, plan.encoder_plan.pp);
  EXPECT_EQ(e.tp, plan.encoder_plan.tp);
  EXPECT_EQ(e.pipelines, (4 / e.pp) * (2 / e.tp));
  EXPECT_EQ(s.layout.encoder_tp, e.tp);
  // The LLM's stages start after the encoder side's layers (ViT blocks and the projector).
  int32_t encoder_layers = 0;
  for (const ComponentSpec& c : g.model.components) {
    if (c.role != ComponentRole::kLlm) encoder_layers += static_cast<int32_t>(c.layers.size());
  }
  EXPECT_EQ(s.stages.front().first_layer, encoder_layers);
  EXPECT_EQ(s.model_layers, encoder_layers + plan.llm.schedule.model_layers);
  // The map is the fine schedule's, and every LLM micro-batch is fed once.
  std::multiset<int> fed;
  for (int j = 0; j < e.pipelines; ++j) {
    EXPECT_EQ(e.micro_batches(j), plan.split[j]);
    for (int k = 0; k < e.micro_batches(j); ++k) {
      EXPECT_EQ(e.llm_micro_batch[j][k], plan.fine.llm_micro_batch[j][k]);
      fed.insert(e.llm_micro_batch[j][k]);
    }
  }
  EXPECT_EQ(fed, (std::multiset<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  // The LLM's first stage receives each micro-batch's input from the encoder and sends its gradient back; each
  // encoder micro-batch leaves its last stage once.
  int from_encoder = 0, to_encoder = 0;
  for (const Instruction& in : s.programs[0].instructions) {
    if (in.encoder_pipeline < 0 && in.peer_encoder_pipeline >= 0) (in.op == OpKind::kRecv ? from_encoder : to_encoder)++;
  }
  EXPECT_EQ(from_encoder, 8);
  EXPECT_EQ(to_encoder, 8);
  // The LLM's own instructions are all still there.
  EXPECT_EQ(count_ops(s, OpKind::kForward, false), count_ops(plan.llm.schedule, OpKind::kForward, false));
  EXPECT_EQ(count_ops(s, OpKind::kBackward, false), count_ops(plan.llm.schedule, OpKind::kBackward, false));
  EXPECT_GT(count_ops(s, OpKind::kEncoderKernels, true), 0);
  // The fine schedule put some kernels in the LLM passes' tensor-parallel gaps.
  int inside = 0;
  for (const Program& p : s.programs) {
    for (const Instruction& in : p.instructions) inside += in.op == OpKind::kEncoderKernels && in.inside_pass;
  }
  EXPECT_GT(inside, 0);
}

// On the step it was planned for, the simulator runs the schedule within 0.1% of the time the bubble scheduler
// gave it. The two models differ in small ways: the simulator spreads a pass's tensor-parallel gaps evenly over
// it, where the scheduler packs kernels into each gap.
TEST(OptimusSchedule, OnThePlannedStepItTakesWhatTheBubbleScheduleSaid) {
  for (int images : {1, 4}) {
    EightGpus g(images);
    const OptimusPlan plan = plan_optimus(g.in);
    const Schedule s = optimus_schedule(g.in, plan);
    const SimResult r = g.simulate_on(s, g.in.loads);
    EXPECT_NEAR(r.iteration_seconds, plan.fine.iteration_seconds, 0.001 * plan.fine.iteration_seconds)
        << images << " images per sample";
    // Never faster than the LLM alone, whose passes it keeps.
    EXPECT_GE(r.iteration_seconds, plan.llm.result.iteration_seconds * (1 - 1e-9));
  }
}

// The schedule is static; the data is not. Bound to a step whose samples carry more images than the planned one,
// the encoder's kernels outgrow the bubbles they were placed in and delay the LLM; with no images they cost
// nothing and the step takes what the LLM alone takes.
TEST(OptimusSchedule, WorkThatOutgrowsItsBubbleDelaysWhatDependsOnIt) {
  EightGpus g(1);
  const OptimusPlan plan = plan_optimus(g.in);
  const Schedule s = optimus_schedule(g.in, plan);
  const double planned = g.simulate_on(s, g.in.loads).iteration_seconds;
  const double heavier = g.simulate_on(s, uniform_loads(8, 2, 2048, 8)).iteration_seconds;
  const double none = g.simulate_on(s, uniform_loads(8, 2, 2048, 0)).iteration_seconds;
  EXPECT_GT(heavier, planned * 1.01);
  // Without images the encoder still updates its weights (its gradient collectives and optimizer step).
  EXPECT_LT(none, planned);
  EXPECT_GE(none, plan.llm.result.iteration_seconds);
  // Planned for eight images, the same step runs faster than the schedule planned for one.
  EightGpus g8(8);
  const OptimusPlan plan8 = plan_optimus(g8.in);
  const double replanned = g8.simulate_on(optimus_schedule(g8.in, plan8), g8.in.loads).iteration_seconds;
  EXPECT_LT(replanned, heavier);
}

// One micro-batch heavier than planned delays only what depends on it: the LLM's first forward of that
// micro-batch starts later than on the planned step.
TEST(OptimusSchedule, AHeavierMicroBatchDelaysItsOwnLlmForward) {
  EightGpus g(1);
  const OptimusPlan plan = plan_optimus(g.in);
  const Schedule s = optimus_schedule(g.in, plan);
  MicroBatchLoads loads = g.in.loads;
  const int last = 7;
  loads.per_replica[0][last].vision *= 16;
  auto first_stage_forward = [&](const SimResult& r, int i) {
    for (const TimelineEvent& e : r.timeline) {
      if (e.rank == 0 && e.op == OpKind::kForward && e.stage == 0 && e.micro_batch == i) return e.start_seconds;
    }
    return -1.0;
  };
  const SimResult planned = g.simulate_on(s, g.in.loads);
  const SimResult heavy = g.simulate_on(s, loads);
  EXPECT_GT(first_stage_forward(heavy, last), first_stage_forward(planned, last) + 1e-6);
  EXPECT_NEAR(first_stage_forward(heavy, 0), first_stage_forward(planned, 0), 1e-9);
}

// Other pipeline shapes: interleaving, a frozen encoder (forward only), a frozen encoder under a trained
// projector, and random image counts per micro-batch, some without images; each validates and simulates. Every
// shape also with passes bounded by the host's time to issue their operators (H100's own, 15 µs): kernels that
// take no time (the host keeps up) and passes that wait for the host.
TEST(OptimusSchedule, OtherShapesValidateAndSimulate) {
  Rng rng(7);
  for (int trial = 0; trial < 12; ++trial) {
    const bool interleaved = trial % 2 == 1;
    const double launch_seconds = trial >= 6 ? -1 : 0;  // below 0: the kind's own
    EightGpus g(1, interleaved ? PipelineKind::kInterleaved : PipelineKind::kOneFOneB, interleaved ? 2 : 1,
                launch_seconds);
    for (ComponentSpec& c : g.model.components) {
      if (trial % 6 >= 2 && c.role == ComponentRole::kEncoder) c.trainable = false;
      if (trial % 6 >= 4 && c.role == ComponentRole::kProjector) c.trainable = false;
    }
    for (MicroBatchLoad& l : g.in.loads.per_replica[0]) l.vision = static_cast<int64_t>(rng.below(5));
    const OptimusPlan plan = plan_optimus(g.in);
    const Schedule s = optimus_schedule(g.in, plan);
    ASSERT_NO_THROW(validate(s)) << "trial " << trial;
    const SimResult r = g.simulate_on(s, g.in.loads);
    EXPECT_NEAR(r.iteration_seconds, plan.fine.iteration_seconds, 0.05 * plan.fine.iteration_seconds) << "trial " << trial;
    const bool backward = count_ops(s, OpKind::kEncoderKernels, true) > 0 &&
                          std::any_of(s.programs.begin(), s.programs.end(), [](const Program& p) {
                            return std::any_of(p.instructions.begin(), p.instructions.end(), [](const Instruction& in) {
                              return in.op == OpKind::kEncoderKernels && in.pass != Pass::kForward;
                            });
                          });
    EXPECT_EQ(backward, trial % 6 < 4) << "trial " << trial;
  }
}

// Written and read back, the schedule is the same: it validates and simulates to the same time.
TEST(OptimusSchedule, ItsJsonReadsBackToTheSameRun) {
  EightGpus g(2, PipelineKind::kInterleaved, 2);
  const OptimusPlan plan = plan_optimus(g.in);
  const Schedule s = optimus_schedule(g.in, plan);
  const std::string text = schedule_to_json(s);
  const Schedule back = schedule_from_json(text, "optimus.json");
  EXPECT_EQ(schedule_to_json(back), text);
  ASSERT_NO_THROW(validate(back));
  EXPECT_EQ(g.simulate_on(back, g.in.loads).iteration_seconds, g.simulate_on(s, g.in.loads).iteration_seconds);
}

// In the Chrome trace, encoder kernels that run beside an LLM pass (in its gaps, on their tensor slice) are on a
// thread of their encoder pipeline, named so: no two events of one thread overlap, as trace viewers require.
TEST(OptimusSchedule, ItsTraceGivesEachEncoderPipelineItsOwnThread) {
  EightGpus g;
  const OptimusPlan plan = plan_optimus(g.in);
  const SimResult r = g.simulate_on(optimus_schedule(g.in, plan), g.in.loads);
  const nlohmann::json trace = nlohmann::json::parse(chrome_trace(r, "optimus"));
  std::map<std::pair<int, int>, std::vector<std::pair<double, double>>> spans;
  std::map<std::pair<int, int>, std::string> names;
  int encoder_events = 0;
  for (const auto& e : trace["traceEvents"]) {
    const std::pair<int, int> thread{e["pid"].get<int>(), e.value("tid", -1)};
    if (e["ph"] == "M" && e["name"] == "thread_name") names[thread] = e["args"]["name"].get<std::string>();
    if (e["ph"] != "X") continue;
    spans[thread].push_back({e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()});
    if (e["args"].contains("encoder_pipeline") && e["cat"] == "encoder_kernels") {
      ++encoder_events;
      EXPECT_EQ(names[thread], fmt::format("encoder pipeline {} kernels", e["args"]["encoder_pipeline"].get<int>()));
    }
  }
  EXPECT_GT(encoder_events, 0);
  for (auto& [thread, list] : spans) {
    std::sort(list.begin(), list.end());
    for (size_t i = 1; i < list.size(); ++i) {
      EXPECT_GE(list[i].first, list[i - 1].second - 1e-3) << "rank " << thread.first << " thread " << thread.second;
    }
  }
}

// The encoder's FLOPs count in the MFU as they do with the encoders in the LLM's first stage.
TEST(OptimusSchedule, TheEncodersFlopsCount) {
  EightGpus g;
  const OptimusPlan plan = plan_optimus(g.in);
  const SimResult whole = g.simulate_on(optimus_schedule(g.in, plan), g.in.loads);
  ParallelLayout layout = g.in.llm_layout;
  const Schedule together = make_pipeline_schedule(PipelineKind::kOneFOneB, layout, 8,
                                                   partition_layers(g.model, 4, EncoderPlacement::kFirstStage),
                                                   block_recompute(g.model, Recompute::kFull));
  const SimResult first_stage = g.simulate_on(together, g.in.loads);
  EXPECT_NEAR(whole.model_flops, first_stage.model_flops, 1e-9 * first_stage.model_flops);
  EXPECT_GT(whole.model_flops, plan.llm.result.model_flops);
}

// validate() holds an encoder schedule to the rules the bubble scheduler keeps.
class BrokenSchedule : public ::testing::Test {
 protected:
  void SetUp() override {
    plan_ = plan_optimus(g_.in);
    schedule_ = optimus_schedule(g_.in, plan_);
  }
  std::string error_of(const Schedule& s) {
    try {
      validate(s);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }
  // The index in `rank`'s program of the first instruction matching `pred`.
  template <typename Pred>
  size_t find(const Schedule& s, int rank, Pred pred) {
    const auto& p = s.programs[rank].instructions;
    return static_cast<size_t>(std::find_if(p.begin(), p.end(), pred) - p.begin());
  }
  EightGpus g_;
  OptimusPlan plan_;
  Schedule schedule_;
};

// EF_i ≤ F_i: the LLM's first forward of a micro-batch after the encoder's output has arrived.
TEST_F(BrokenSchedule, AnLlmForwardBeforeItsEncoderInput) {
  Schedule s = schedule_;
  auto& p = s.programs[0].instructions;
  const size_t recv = find(s, 0, [](const Instruction& in) {
    return in.op == OpKind::kRecv && in.encoder_pipeline < 0 && in.peer_encoder_pipeline >= 0;
  });
  ASSERT_LT(recv, p.size());
  ASSERT_EQ(p[recv + 1].op, OpKind::kForward);
  std::swap(p[recv], p[recv + 1]);
  EXPECT_THAT(error_of(s), HasSubstr("runs before its input is received from the encoder"));
}

// EB_i ≥ B_i: an encoder backward before the LLM's gradient has come back.
TEST_F(BrokenSchedule, AnEncoderBackwardBeforeItsGradient) {
  Schedule s = schedule_;
  for (int r = 0; r < s.layout.pp; ++r) {
    auto& p = s.programs[r].instructions;
    const size_t recv = find(s, r, [](const Instruction& in) {
      return in.op == OpKind::kRecv && in.encoder_pipeline >= 0 && in.payload == Payload::kGradient;
    });
    if (recv == p.size()) continue;
    p.erase(p.begin() + static_cast<std::ptrdiff_t>(recv));
    EXPECT_THAT(error_of(s), HasSubstr("runs before its output gradient is received"));
    return;
  }
  FAIL() << "no encoder gradient receive";
}

// An encoder layer's recompute mode and its passes agree: a mode whose recomputation the program never runs
// would be timed as one and run as the other.
TEST_F(BrokenSchedule, AnEncoderLayerWhoseModeAsksARecomputationItNeverRuns) {
  Schedule s = schedule_;
  const int32_t layer = s.encoder.stages.front().front().first_layer + 1;
  ASSERT_EQ(s.recompute.at(layer), Recompute::kNone);
  s.recompute[layer] = Recompute::kFull;
  EXPECT_THAT(error_of(s), HasSubstr("backward runs before its recomputation"));
}

// With the encoders recomputing, each trained layer's backward in the bubbles is preceded by its forward run
// again: the schedule validates, loads back, keeps less of the images' activations and takes the forward's
// kernels more.
TEST(OptimusSchedule, RecomputingEncodersKeepLessAndRunTheirForwardAgain) {
  EightGpus g;
  const OptimusPlan plain = plan_optimus(g.in);
  OptimusInputs in = g.in;
  in.encoder_recompute = Recompute::kFull;
  const OptimusPlan plan = plan_optimus(in);
  EXPECT_EQ(plan.encoder_plan.recompute, Recompute::kFull);
  const Schedule s = optimus_schedule(in, plan);
  ASSERT_NO_THROW(validate(s));
  const Schedule back = schedule_from_json(schedule_to_json(s), "optimus.json");
  EXPECT_EQ(schedule_to_json(back), schedule_to_json(s));
  // Every transformer block of the encoder runs a recomputation of every micro-batch right before its backward;
  // the other layers (the patch embedding, the projector) keep nothing worth it and run none.
  const std::vector<FlatLayer> layers = flat_layers(g.model);
  int recomputes = 0, block_backwards = 0, other_backwards = 0;
  for (const Program& p : s.programs) {
    const Instruction* last_begun = nullptr;
    for (const Instruction& ins : p.instructions) {
      if (ins.op != OpKind::kEncoderKernels || ins.kernel_begin != 0) continue;
      if (ins.pass == Pass::kRecompute) ++recomputes;
      if (ins.pass == Pass::kBackward) {
        const bool block = layers.at(ins.layer).spec->kind == LayerKind::kTransformerBlock;
        ++(block ? block_backwards : other_backwards);
        EXPECT_EQ(s.recompute.at(ins.layer), block ? Recompute::kFull : Recompute::kNone) << "layer " << ins.layer;
        if (block) {
          ASSERT_NE(last_begun, nullptr);
          EXPECT_EQ(last_begun->pass, Pass::kRecompute);
          EXPECT_EQ(last_begun->layer, ins.layer);
          EXPECT_EQ(last_begun->micro_batch, ins.micro_batch);
        }
      }
      last_begun = &ins;
    }
  }
  EXPECT_GT(block_backwards, 0);
  EXPECT_GT(other_backwards, 0);
  EXPECT_EQ(recomputes, block_backwards);
  // The backward's kernel lists grow by the blocks' forwards: more kernels on every stage (each holds blocks),
  // the whole forward's on a stage of blocks alone, and less over all (the patch embedding and the projector).
  const EncoderWork work = encoder_work(in, plan.encoder_plan);
  EncoderPlan without = plan.encoder_plan;
  without.recompute = Recompute::kNone;
  const EncoderWork plain_work = encoder_work(g.in, without);
  size_t grown = 0, whole_forward = 0;
  for (size_t e = 0; e < work.backward.size(); ++e) {
    for (size_t i = 0; i < work.backward[e].size(); ++i) {
      EXPECT_GT(work.backward[e][i].size(), plain_work.backward[e][i].size());
      EXPECT_LE(work.backward[e][i].size(), plain_work.backward[e][i].size() + plain_work.forward[e][i].size());
      grown += work.backward[e][i].size() - plain_work.backward[e][i].size();
      whole_forward += plain_work.forward[e][i].size();
    }
  }
  EXPECT_LT(grown, whole_forward);
  const Schedule plain_schedule = optimus_schedule(g.in, plain);
  const SimResult kept = g.simulate_on(plain_schedule, g.in.loads);
  const SimResult recomputed = g.simulate_on(s, g.in.loads);
  EXPECT_FALSE(recomputed.oom);
  EXPECT_LT(*std::max_element(recomputed.peak_memory_bytes.begin(), recomputed.peak_memory_bytes.end()),
            *std::max_element(kept.peak_memory_bytes.begin(), kept.peak_memory_bytes.end()));
  EXPECT_GT(recomputed.hardware_flops, kept.hardware_flops);
  EXPECT_NEAR(recomputed.model_flops, kept.model_flops, 1e-9 * kept.model_flops);
}

// The recomputation runs before the backward it serves, and only where the layer's mode asks for one.
TEST(OptimusSchedule, AnEncoderRecomputationOutOfPlaceIsRefused) {
  EightGpus g;
  OptimusInputs in = g.in;
  in.encoder_recompute = Recompute::kFull;
  const Schedule s = optimus_schedule(in, plan_optimus(in));
  auto error_of = [](const Schedule& broken) {
    try {
      validate(broken);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  for (int r = 0; r < s.layout.pp; ++r) {
    const auto& p = s.programs[r].instructions;
    const auto first = std::find_if(p.begin(), p.end(), [](const Instruction& ins) {
      return ins.op == OpKind::kEncoderKernels && ins.pass == Pass::kRecompute;
    });
    if (first == p.end()) continue;
    // Dropped: the backward runs on what the forward did not keep.
    Schedule dropped = s;
    auto& d = dropped.programs[r].instructions;
    const Instruction pass = *first;
    std::erase_if(d, [&](const Instruction& ins) {
      return ins.op == OpKind::kEncoderKernels && ins.pass == Pass::kRecompute && ins.layer == pass.layer &&
             ins.micro_batch == pass.micro_batch && ins.encoder_pipeline == pass.encoder_pipeline;
    });
    EXPECT_THAT(error_of(dropped), HasSubstr("backward runs before its recomputation"));
    // Asked of a layer whose mode is none.
    Schedule unasked = s;
    unasked.recompute.at(first->layer) = Recompute::kNone;
    EXPECT_THAT(error_of(unasked), HasSubstr("recomputes, but its recompute mode is none"));
    return;
  }
  FAIL() << "no encoder recomputation in the schedule";
}

// The layout's encoder tensor parallelism (what the simulator prices the encoder layers at) is the encoder
// plan's (what places them on tensor slices).
TEST_F(BrokenSchedule, AnEncoderTensorParallelismTheLayoutAndThePlanDisagreeOn) {
  Schedule s = schedule_;
  ASSERT_EQ(s.layout.encoder_tp, s.encoder.tp);
  s.layout.encoder_tp = s.encoder.tp == s.layout.tp ? 1 : s.layout.tp;
  EXPECT_THAT(error_of(s), HasSubstr("is not the encoder plan's tp"));
}

// Stage order: a downstream encoder stage's forward needs the upstream stage's activation.
TEST_F(BrokenSchedule, AnEncoderStageBeforeTheOneUpstream) {
  Schedule s = schedule_;
  if (s.encoder.pp < 2) GTEST_SKIP() << "the chosen encoder plan has one stage";
  for (int r = 0; r < s.layout.pp; ++r) {
    auto& p = s.programs[r].instructions;
    const size_t recv = find(s, r, [](const Instruction& in) {
      return in.op == OpKind::kRecv && in.encoder_pipeline >= 0 && in.payload == Payload::kActivation;
    });
    if (recv == p.size()) continue;
    p.erase(p.begin() + static_cast<std::ptrdiff_t>(recv));
    EXPECT_THAT(error_of(s), HasSubstr("runs before its input is received"));
    return;
  }
  FAIL() << "no encoder activation receive";
}

// Every kernel of a layer's pass, in order from the first: a range dropped is found.
TEST_F(BrokenSchedule, AKernelRangeLeftOut) {
  Schedule s = schedule_;
  auto& p = s.programs[0].instructions;
  const size_t range = find(s, 0, [](const Instruction& in) {
    return in.op == OpKind::kEncoderKernels && in.kernel_begin == 0 && in.pass == Pass::kForward;
  });
  ASSERT_LT(range, p.size());
  p.erase(p.begin() + static_cast<std::ptrdiff_t>(range));
  EXPECT_FALSE(error_of(s).empty());
}

// Stream overlap: an encoder range inside an LLM pass must follow that pass with nothing that waits between.
TEST_F(BrokenSchedule, InsideAPassWithoutThePass) {
  Schedule s = schedule_;
  for (int r = 0; r < s.layout.pp; ++r) {
    auto& p = s.programs[r].instructions;
    const size_t range = find(s, r, [](const Instruction& in) { return in.op == OpKind::kEncoderKernels; });
    if (range == p.size()) continue;
    Instruction moved = p[range];
    moved.inside_pass = true;
    p.erase(p.begin() + static_cast<std::ptrdiff_t>(range));
    p.insert(p.begin(), moved);
    EXPECT_THAT(error_of(s), HasSubstr("runs inside an LLM pass, but follows none"));
    return;
  }
  FAIL() << "no encoder kernels";
}

// A pass is over once its output has left: a kernel range of it after its send is refused.
TEST_F(BrokenSchedule, AnEncoderPassThatGoesOnAfterItsOutputLeft) {
  Schedule s = schedule_;
  for (int r = 0; r < s.layout.pp; ++r) {
    auto& p = s.programs[r].instructions;
    for (size_t i = 1; i < p.size(); ++i) {
      if (p[i].op != OpKind::kSend || p[i].encoder_pipeline < 0 || p[i].payload != Payload::kActivation) continue;
      size_t last = i;
      while (last-- > 0 && !(p[last].op == OpKind::kEncoderKernels && p[last].micro_batch == p[i].micro_batch &&
                             p[last].encoder_pipeline == p[i].encoder_pipeline && p[last].pass == Pass::kForward)) {
      }
      if (last >= i || p[last].layer == p.front().layer) continue;
      std::swap(p[last], p[i]);  // the send before the pass's last range
      EXPECT_THAT(error_of(s), HasSubstr("runs after its pass's result was sent"));
      return;
    }
  }
  FAIL() << "no encoder activation send";
}

// What validate() cannot see without the model, the simulator refuses: a layer of an encoder stage that never
// runs, and an encoder collective that not every replica of its stage reaches.
TEST_F(BrokenSchedule, AnEncoderLayerLeftOutOrACollectiveMissing) {
  Schedule without_layer = schedule_;
  int32_t layer = -1;
  for (const Program& p : schedule_.programs) {
    for (const Instruction& in : p.instructions) {
      if (in.op == OpKind::kEncoderKernels && layer < 0) layer = in.layer;
    }
  }
  for (Program& p : without_layer.programs) {
    std::erase_if(p.instructions, [&](const Instruction& in) { return in.op == OpKind::kEncoderKernels && in.layer == layer; });
  }
  try {
    g_.simulate_on(without_layer, g_.in.loads);
    ADD_FAILURE() << "a layer left out ran";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("never runs"));
  }
  if (schedule_.encoder.dp < 2) return;  // no encoder collectives to lose
  Schedule without_collective = schedule_;
  for (Program& p : without_collective.programs) {
    const auto it = std::find_if(p.instructions.begin(), p.instructions.end(), [](const Instruction& in) {
      return in.op == OpKind::kCollective && in.encoder_pipeline >= 0;
    });
    if (it == p.instructions.end()) continue;
    p.instructions.erase(it);
    break;
  }
  EXPECT_THROW(g_.simulate_on(without_collective, g_.in.loads), InputError);
}

// The copies of an encoder stage pair their collectives by position (as the simulator and NCCL do): copies that
// run other ones, gradients gathered instead of reduced, or a stage that trains without reducing its gradients over
// its copies once are refused before anything runs.
TEST_F(BrokenSchedule, EncoderCopiesRunTheSameCollectivesAndReduceTheirGradientsOnce) {
  // Encoder pipelines of 2 stages over the LLM's 4: at least two copies of each encoder stage.
  EightGpus g;
  g.in.encoder_pp = 2;
  const Schedule copies = optimus_schedule(g.in, plan_optimus(g.in));
  ASSERT_GE(copies.encoder.dp, 2);
  ASSERT_EQ(error_of(copies), "");
  const auto encoder_gradients = [](const Instruction& in) {
    return in.op == OpKind::kCollective && in.encoder_pipeline >= 0 && in.tensor == CollectiveTensor::kGradients;
  };
  int rank = -1;
  for (int r = 0; r < static_cast<int>(copies.programs.size()) && rank < 0; ++r) {
    if (find(copies, r, encoder_gradients) < copies.programs[r].instructions.size()) rank = r;
  }
  ASSERT_GE(rank, 0);
  Schedule gathered = copies;
  gathered.programs[rank].instructions[find(gathered, rank, encoder_gradients)].collective = CollectiveKind::kAllGather;
  EXPECT_THAT(error_of(gathered), HasSubstr("gathers gradients, which a step must reduce"));
  Schedule one_copy_without = copies;
  auto& ins = one_copy_without.programs[rank].instructions;
  ins.erase(ins.begin() + static_cast<std::ptrdiff_t>(find(one_copy_without, rank, encoder_gradients)));
  EXPECT_THAT(error_of(one_copy_without), HasSubstr("copies pair their collectives in order"));
  Schedule none = copies;
  for (Program& p : none.programs) std::erase_if(p.instructions, encoder_gradients);
  EXPECT_THAT(error_of(none), ::testing::ContainsRegex("reduces its gradients over its [0-9]+ copies 0 times a step"));
}

TEST_F(BrokenSchedule, AMapThatFeedsAMicroBatchTwice) {
  Schedule s = schedule_;
  ASSERT_GE(s.encoder.micro_batches(0), 2);
  s.encoder.llm_micro_batch[0][1] = s.encoder.llm_micro_batch[0][0];
  EXPECT_THAT(error_of(s), HasSubstr("fed by two encoder micro-batches"));
}

TEST_F(BrokenSchedule, AnEncoderStageOnTheWrongRank) {
  Schedule s = schedule_;
  const size_t range = find(s, 0, [](const Instruction& in) { return in.op == OpKind::kEncoderKernels; });
  ASSERT_LT(range, s.programs[0].instructions.size());
  Instruction moved = s.programs[0].instructions[range];
  s.programs[1].instructions.push_back(moved);
  EXPECT_THAT(error_of(s), HasSubstr("the encoder stage runs on rank"));
}

TEST_F(BrokenSchedule, EncoderKernelsWithoutASection) {
  Schedule s = schedule_;
  s.encoder = EncoderSection{};
  EXPECT_FALSE(error_of(s).empty());
}

}  // namespace
}  // namespace fulcrum
