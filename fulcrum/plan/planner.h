#ifndef FULCRUM_PLAN_PLANNER_H_
#define FULCRUM_PLAN_PLANNER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/core/dataset.h"
#include "fulcrum/core/error.h"
#include "fulcrum/cost/dtype.h"
#include "fulcrum/cost/profiled_cost.h"
#include "fulcrum/data/isf.h"
#include "fulcrum/model/cluster_spec.h"
#include "fulcrum/model/model_spec.h"
#include "fulcrum/plan/optimus.h"
#include "fulcrum/sched/schedule.h"
#include "fulcrum/sim/simulator.h"

namespace fulcrum {

// How a plan is made, from what users run today to Fulcrum's own:
//   zero3     InternVL's released recipe: pure data parallelism with ZeRO-3, 4 samples per device, random padded
//             batches, full recomputation
//   megatron  Megatron-LM's rules, searched over configurations: the encoders in the first stage, LLM blocks split
//             evenly, full recomputation everywhere, random padded batches
//   balanced  megatron with an even-cost partition of the whole layer chain ("Megatron-LM balanced")
//   omnibal   ISF batches, OmniBal's anchored partition search, adaptive recomputation
//   optimus   Optimus (reference/optimus.md): megatron's LLM plan with the LLM alone on its pipeline (its blocks
//             split evenly), the encoders on their own plan over the same devices, their kernels scheduled into
//             the LLM's bubbles (optimus.h) once, on the first step, and that static schedule run on every step
//   fulcrum   Fulcrum's batches, the exact min-max partition (boundary transfers included), adaptive
//             recomputation, and the full search (zero-bubble schedules, ZeRO-3 without a pipeline); then the
//             encoders in the LLM's bubbles where that is faster, their schedule made for each step's batches
// Every searched configuration uses sequence parallelism with tensor parallelism, and the distributed optimizer
// with data parallelism.
enum class Strategy { kZero3, kMegatron, kBalanced, kOmnibal, kOptimus, kFulcrum };
std::string_view strategy_name(Strategy strategy);
Strategy parse_strategy(std::string_view name);  // InputError for an unknown name

// What a strategy is made of: its batches, its partition, its recomputation. The ablation combines them freely.
enum class PartitionMethod {
  kMegatronEven,  // encoders in the first stage, LLM blocks split evenly (partition_layers)
  kMinMax,        // the min-max partition of stage time over the whole chain, recomputation of every block full
  kOmnibal,       // OmniBal's anchored neighbourhood, the best three simulated
  kExact,         // the min-max partition with boundary transfers, cut again for the recomputation it allows
};
enum class EncoderSite : uint8_t { kBest, kStages, kBubbles };
// "best", "stages", "bubbles"; InputError otherwise.
EncoderSite parse_encoder_site(std::string_view name);

struct Recipe {
  std::string name;
  std::string batcher = "random";  // random, isf or fulcrum
  PartitionMethod partition = PartitionMethod::kMegatronEven;
  bool adaptive_recompute = false;  // else full recomputation of every block
  bool zero_bubble = false;         // ZB-H1 among the schedules
  bool zero3_data_parallel = false; // the zero3 recipe: no search, pure data parallelism with ZeRO-3
  // The best plan's encoders then move out of its pipeline onto their own plan, their work into the LLM's
  // bubbles (plan_optimus); the LLM plan itself stays as searched.
  bool encoder_in_bubbles = false;
  // After the search: the same configuration planned again for the LLM alone (this recipe's batches, partition,
  // recomputation and schedules, memory kept back for the encoders' state), the encoders on their own plan in
  // its bubbles; kept when that epoch is faster.
  bool try_encoder_bubbles = false;
};
Recipe recipe_of(Strategy strategy);

// The ablation from Megatron-LM's rules to Fulcrum's plan, one change at a time: megatron, + Fulcrum's batches,
// + the exact partition, + adaptive recomputation, + zero-bubble schedules (= fulcrum).
std::vector<Recipe> ablation_recipes();

// One point of the configuration space.
struct ParallelConfig {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int vpp = 1;
  int64_t mbs = 1;  // samples per micro-batch (random batches); Fulcrum's and ISF's micro-batches vary around it
  int encoder_tp = 0;
  bool sequence_parallel = false;
  StateSharding sharding = StateSharding::kMegatronDistributedOptimizer;
  PipelineKind schedule = PipelineKind::kOneFOneB;
  bool operator==(const ParallelConfig&) const = default;
};

struct PlanRequest {
  ModelSpec model;
  ClusterSpec cluster;
  int64_t gbs = 0;  // samples per iteration over all replicas
  // The data the epoch runs over. Without it, `synthetic_steps` steps of identical samples of `seq` tokens
  // and `images_per_sample` encoder items, of `image_tokens` patch tokens each for a dynamic-resolution encoder
  // (synthetic_vision_per_sample; an encoder of fixed tokens per item has them in its ModelSpec).
  const Dataset* data = nullptr;
  std::string data_name;  // how errors about `data` as a whole name it (its file)
  int64_t seq = 2048;
  int64_t images_per_sample = 1;
  int64_t image_tokens = 0;
  int synthetic_steps = 8;
  uint64_t seed = 0;
  // The number format every layer computes in (SimOptions::dtype). fp8 on devices without it is an InputError.
  Dtype dtype = Dtype::kBf16;
  // Measured layer times: the passes the table covers take them, scaled over the analytic model of `cluster`
  // (ProfiledCost), in the balancer's costs, the partition and recomputation searches and every simulation.
  std::optional<ProfileTable> profile;
  // The strategy's own configuration instead of a search: its batches, partition and recomputation are planned
  // on exactly this DP, TP, PP, VPP and micro-batch size (encoder TP, sequence parallelism and state sharding as
  // the search sets them). The schedule is still chosen among what the recipe allows: 1F1B (interleaved with
  // VPP > 1), ZB-H1 for zero-bubble recipes, and ZeRO-3 without a pipeline for adaptive recomputation. Not for
  // zero3, whose configuration is fixed. InputError for a configuration the devices, batch or model rule out.
  std::optional<ParallelConfig> config;
  // megatron and balanced: this configuration instead of a search (reproductions of published baselines).
  std::optional<ParallelConfig> pinned;
  // Every stage holds at least one LLM layer (what Megatron-LM's pipeline layout can express: encoders then go
  // in the first stage with LLM layers).
  bool llm_in_every_stage = false;
  // Where recipes with try_encoder_bubbles put the encoders: kBest moves them into the LLM's bubbles where that
  // is faster; kStages keeps them in the pipeline's stages (where the plan must be one pipeline over the whole
  // model: an exporter, Megatron-LM's layout); kBubbles moves them whatever it costs (to run or measure that
  // arrangement), InputError when no encoder plan fits.
  EncoderSite encoders = EncoderSite::kBest;
  int encoder_pp = 0;  // encoders in bubbles: only encoder plans of this many pipeline stages; 0: any
  // Encoders in bubbles: their layers' recomputation. Unset: none, or full where the images' activations held
  // from each forward to its backward would not fit beside the LLM's.
  std::optional<Recompute> encoder_recompute;
  int sampled_steps = 8;  // steps of the epoch simulated per candidate, spread evenly; their mean is used
  int threads = 2;
  // Stop simulating a candidate once a lower bound of its time (iteration_lower_bound) shows it slower than the
  // candidates it would have to beat. The plan is the same either way; only the search is faster.
  bool give_up_early = true;
  bool progress = true;  // a progress bar on stderr when it is a terminal
};

struct TrainingPlan {
  std::string recipe;  // the strategy's name, or an ablation step's
  ParallelConfig config;
  std::string batcher;
  Schedule schedule;  // stages and per-layer recomputation included
  int micro_batches = 0;
  int64_t steps_per_epoch = 0;
  double samples_per_step = 0;
  // The caps ISF's cap search chose for these batches (patch-token data has no default caps): with the request's
  // data, seed and batch they make the same batches again.
  std::optional<IsfParams> batch_caps;
  double iteration_seconds = 0;  // mean over the simulated steps
  double epoch_seconds = 0;      // iteration_seconds × steps_per_epoch
  double model_flops = 0;        // mean over the simulated steps: with iteration_seconds, the epoch's MFU
  SimResult detail;              // the first simulated step
  MicroBatchLoads detail_loads;  // its micro-batches, per data-parallel replica
  int candidates = 0;            // configurations evaluated
  int feasible = 0;              // of which fit in memory
  // Configurations left out, not evaluated, because their batches could not be made (ISF's cap search on
  // patch-token data finding no caps for their samples per micro-batch): one reason per (DP, micro-batches).
  std::vector<std::string> left_out;
  // Evaluations (screening and final) stopped at the search bar (PlanRequest::give_up_early). Which ones depends
  // on how the threads happened to run; the plan does not.
  int given_up = 0;
  // The configurations screening kept to evaluate on every sampled step, by their screening time, fastest first.
  std::vector<ParallelConfig> finalists;
  // With the encoders in bubbles: the encoder plan, split and bubble schedules (of the first simulated step).
  // `schedule` is then the whole model's with its encoder section (optimus_schedule.h) and `detail` its
  // simulation on the first step.
  std::shared_ptr<const OptimusPlan> optimus;
};

// make_plan's refusal when the strategy has no plan for a well-formed request: no valid factorisation of the
// devices for the model, or no configuration that fits in memory. A baseline refused so is shown as such; any other
// InputError (a pinned configuration the request does not allow, say) is the request's fault.
class NoPlanFits : public InputError {
 public:
  using InputError::InputError;
};

// The fastest plan of `strategy` that fits in memory, by epoch time. Candidates are evaluated in parallel
// threads and reduced in a fixed order, so the answer does not depend on the thread count. Throws NoPlanFits
// when the device count has no valid factorisation for the model, or when no configuration fits (naming the
// smallest shortfall and where); InputError for a request it cannot take.
TrainingPlan make_plan(Strategy strategy, const PlanRequest& request);
TrainingPlan make_plan(const Recipe& recipe, const PlanRequest& request);

}  // namespace fulcrum

#endif  // FULCRUM_PLAN_PLANNER_H_
