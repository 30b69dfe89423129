#ifndef FULCRUM_PLAN_OPTIMUS_H_
#define FULCRUM_PLAN_OPTIMUS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/cost/cost_model.h"
#include "fulcrum/model/cluster_spec.h"
#include "fulcrum/model/model_spec.h"
#include "fulcrum/plan/bubble_scheduler.h"
#include "fulcrum/plan/dependency_points.h"
#include "fulcrum/plan/encoder_plan.h"
#include "fulcrum/sched/schedule.h"
#include "fulcrum/sim/simulator.h"

namespace fulcrum {

// Optimus end to end (reference/optimus.md): the LLM runs alone on its pipeline, its blocks split evenly with no
// encoder in its first stage; the encoders get their own plan over the same devices; their kernels go into the
// LLM's bubbles. What is searched: every encoder plan that fits, and for each the split of the micro-batches
// among its encoder pipelines; the schedule of each candidate is the fine bubble schedule.

// LLM compute a GPU loses per second of encoder collective running beside it. NCCL's kernels hold SMs (16–32
// channels of an H100's 132) and HBM bandwidth while they run, so an LLM kernel beside them runs slower; 0.15
// charges that as 15% of the collective's time. Devices whose communication shares the compute cores (the cpu
// kind) are charged their own communication_compute_slowdown instead.
inline constexpr double kGpuEncoderCollectiveSlowdown = 0.15;

// The slowdown the bubble scheduler charges per second of encoder collective beside LLM compute on `cluster`.
double encoder_collective_slowdown(const ClusterSpec& cluster);

// The model without its encoders and projectors: what the LLM pipeline runs. InputError without an LLM.
ModelSpec llm_only(const ModelSpec& model);

struct OptimusInputs {
  const ModelSpec* model = nullptr;  // encoders (and projectors) and the LLM
  const ClusterSpec* cluster = nullptr;
  const CostModel* cost = nullptr;
  DeviceEfficiency efficiency;
  ParallelLayout llm_layout;  // encoder_tp is not used: the encoders get their own plans
  PipelineKind llm_schedule = PipelineKind::kInterleaved;
  Recompute llm_recompute = Recompute::kFull;  // of the LLM's blocks, as Megatron-LM's baseline runs
  // The LLM's own schedule over llm_only(model)'s layers (its partition, recomputation and pipeline schedule
  // planned by another strategy) instead of the even split above; its layout must be llm_layout's.
  const Schedule* llm_schedule_given = nullptr;
  int micro_batches = 0;                       // per LLM pipeline
  int encoder_pp = 0;                          // only encoder plans of this many stages; 0: any
  Recompute encoder_recompute = Recompute::kNone;  // every encoder plan's (EncoderPlan::recompute)
  MicroBatchLoads loads;                       // one step's, as the simulator takes them
  Dtype dtype = Dtype::kBf16;
  // Splits of one encoder plan evaluated exhaustively up to this count; beyond, the descent of
  // search_micro_batch_split.
  int64_t exhaustive_split_limit = 64;
  // Beyond it, the descent evaluates at most this many splits per encoder plan.
  int64_t split_evaluation_budget = 128;
};

// The LLM pipeline simulated alone, with its timeline.
struct LlmAlone {
  ModelSpec model;
  Schedule schedule;
  SimResult result;
};
// `fewer_warmup_forwards`: taken off each rank's warm-up of interleaved 1F1B (make_pipeline_schedule).
LlmAlone simulate_llm_alone(const OptimusInputs& in, const std::vector<int>& fewer_warmup_forwards = {});

// Each LLM pipeline rank's device as the bubble scheduler sees it. A simulated pass is one interval with its
// tensor-parallel share; it is cut back into kernels by the cost model's kernel list of one of the stage's
// transformer blocks (with its recomputation, for a backward), repeated once per block and scaled so that the
// compute and the collectives add up to what the simulator gave the pass. The optimizer step is compute.
std::vector<LlmDeviceTimeline> llm_device_timelines(const OptimusInputs& in, const LlmAlone& llm);

// One encoder layer's pass as an encoder plan runs it: the forward; in the backward, the whole backward of a
// trained layer, or the input gradient alone of a frozen one with something trained before it in its chain,
// each just after the layer's recomputation when the plan recomputes.
struct EncoderLayerPass {
  int32_t layer = 0;  // flattened
  Pass pass = Pass::kForward;
};
struct EncoderStagePasses {
  std::vector<EncoderLayerPass> forward;   // downstream order
  std::vector<EncoderLayerPass> backward;  // upstream order; empty for a stage with nothing to train
};
// Per stage of `plan`, the layer passes its forward and backward run, in the order they run.
std::vector<EncoderStagePasses> encoder_stage_passes(const ModelSpec& model, const EncoderPlan& plan);

// The kernels of an encoder plan's passes, per stage and LLM micro-batch (whose load each encoder micro-batch
// carries) of data-parallel replica `replica` (the one whose LLM timeline is scheduled against), and what a
// stage does after its last backward.
struct EncoderWork {
  std::vector<std::vector<std::vector<Kernel>>> forward;   // [stage][LLM micro-batch]
  std::vector<std::vector<std::vector<Kernel>>> backward;  // [stage][LLM micro-batch]; empty when frozen
  std::vector<double> stage_tail_seconds;  // gradient reduce-scatter over the encoder's DP, parameter all-gather
  std::vector<double> stage_optimizer_seconds;
  double transfer_seconds = 0;             // largest activation between encoder stages or into the LLM
};
EncoderWork encoder_work(const OptimusInputs& in, const EncoderPlan& plan, int replica = 0);

// The bubble problem of `plan` with `split`. Encoder pipeline j's k-th micro-batch carries the images of LLM
// micro-batch feeds[j][k], which it then must feed (BubbleProblem::llm_micro_batch); without `feeds`, those of
// the LLM micro-batches [split[0] + … + split[j − 1], + split[j]) in order, and the i-th to finish feeds
// micro-batch i.
BubbleProblem encoder_bubble_problem(const OptimusInputs& in, const std::vector<LlmDeviceTimeline>& llm_ranks,
                                     const DependencyPoints& dependency, const EncoderPlan& plan,
                                     const EncoderWork& work, const MicroBatchSplit& split,
                                     const std::vector<std::vector<int>>* feeds = nullptr);

// A split scheduled so that every encoder micro-batch carries the images of the LLM micro-batch it feeds: placed
// once with Optimus's sorted check, then, unless that kept each pipeline's micro-batches in order, placed again
// with the map it found fixed and each micro-batch's kernels those of its LLM micro-batch (the data loader feeds
// each encoder pipeline accordingly).
struct PlacedEncoder {
  BubbleProblem problem;
  BubbleSchedule schedule;
};
PlacedEncoder schedule_with_their_images(const OptimusInputs& in, const std::vector<LlmDeviceTimeline>& llm_ranks,
                                         const DependencyPoints& dependency, const EncoderPlan& plan,
                                         const EncoderWork& work, const MicroBatchSplit& split, BubbleMode mode);

struct OptimusPlan {
  LlmAlone llm;
  EncoderPlan encoder_plan;
  MicroBatchSplit split;
  BubbleSchedule coarse;  // of the chosen plan and split
  BubbleSchedule fine;
  double iteration_seconds = 0;  // the fine schedule's
  // Optimus's warm-up adjustment: forwards taken off the first LLM rank's interleaved warm-up, deferring the
  // forward dependency points of its last warm-up micro-batches. Tried, one more at a time, while the encoder
  // makes the LLM start late and doing so helps; llm is then the adjusted pipeline.
  int fewer_warmup_forwards = 0;
  // The same plans with the encoder's work on its devices outside any bubble: the LLM alone plus the most
  // encoder work (forward, backward, tail) any device does. What stage rebalancing alone gives.
  double no_bubble_seconds = 0;
  int encoder_plans = 0;         // that fit, each searched
  int64_t splits_evaluated = 0;  // bubble schedules made in the search
  std::vector<std::string> rejected;  // encoder plans ruled out, and why
  double scheduler_seconds = 0;       // wall time of the encoder-plan × split search
};

// The best encoder plan and split by the fine schedule's iteration time (ties: the earlier plan, in
// encoder_plans' order). InputError when the model has no encoder or no encoder plan fits.
OptimusPlan plan_optimus(const OptimusInputs& in);

// `plan`'s encoder plan, split and warm-up on the step `in.loads` (another step of the same epoch): the LLM
// simulated on that step and the fine schedule of its bubbles, each encoder micro-batch carrying its LLM
// micro-batch's images. The coarse schedule and the search figures stay `plan`'s.
OptimusPlan plan_step(const OptimusInputs& in, const OptimusPlan& plan);

}  // namespace fulcrum

#endif  // FULCRUM_PLAN_OPTIMUS_H_
