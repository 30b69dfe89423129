#ifndef FULCRUM_PLAN_ENCODER_PLAN_H_
#define FULCRUM_PLAN_ENCODER_PLAN_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "fulcrum/model/model_spec.h"
#include "fulcrum/sched/schedule.h"

namespace fulcrum {

// Optimus's separate encoder plans (reference/optimus.md §4): the encoders (with their projectors, which count
// as an encoder's last layers) get their own DP × PP × TP over the same devices as the LLM, colocated, with
// PP_enc dividing PP_llm and TP_enc dividing TP_llm and the encoders' heads. Each LLM pipeline's
// PP_llm × TP_llm devices then host m = (PP_llm · TP_llm) / (PP_enc · TP_enc) encoder pipelines.
//
// Placement inside an LLM pipeline, with g = PP_llm / PP_enc and h = TP_llm / TP_enc: encoder pipeline
// j = a·h + b (a < g, b < h) runs its stage e on LLM pipeline rank e·g + a, on tensor ranks
// [b·TP_enc, (b + 1)·TP_enc). Encoder stage e thus sits on the e-th block of g consecutive LLM ranks, so a later
// encoder stage runs on later LLM ranks, whose warm-up bubbles come later too; pipelines that differ only in b
// share their LLM ranks and see the same bubbles.

// One encoder stage: a range of flattened layers per encoder component (its layers cut into PP_enc stages by
// transformer blocks), the projectors in the last stage.
struct EncoderStage {
  std::vector<StageLayers> ranges;
};

struct EncoderPlan {
  int dp = 1;
  int pp = 1;
  int tp = 1;
  int pipelines = 1;  // m: encoder pipelines per LLM pipeline
  std::vector<EncoderStage> stages;  // pp of them
  // Parameters, gradients and optimizer state of the encoder side on a device of each encoder stage.
  std::vector<double> stage_state_bytes;
  // Largest over the LLM pipeline's ranks: the LLM's bytes there plus the encoder stage's state.
  double peak_bytes = 0;
  // Of the encoders' transformer blocks with a backward: kFull keeps each block's input from its forward and runs
  // the forward again just before its backward (Pass::kRecompute), for steps whose images' activations would
  // not fit.
  Recompute recompute = Recompute::kNone;
};

// Where encoder pipeline `pipeline`'s stage `stage` runs inside its LLM pipeline.
struct EncoderPlacementSlot {
  int llm_rank = 0;             // LLM pipeline rank
  int first_tensor_rank = 0;    // of the LLM's tensor-parallel group; the stage spans plan.tp ranks from here
  int equivalence_class = 0;    // a: pipelines of one class share their LLM ranks and bubbles
};
EncoderPlacementSlot encoder_slot(const ParallelLayout& llm, const EncoderPlan& plan, int pipeline, int stage);

// What limits encoder plans: the LLM's bytes per pipeline rank (state and activation peak, from its simulation)
// and a device's usable memory. Encoder activations are left out, as Optimus leaves them (§4: a few GB against
// the LLM's tens), so a plan accepted here still has to fit when simulated.
struct EncoderMemory {
  std::vector<double> llm_bytes_per_rank;
  double usable_bytes = 0;
};

// Every encoder plan for the LLM layout `llm` that divides it as above and fits `memory`, in increasing
// (PP_enc, TP_enc). `rejected` (optional) receives one line per plan ruled out and why. InputError when the
// model has no encoder, or memory.llm_bytes_per_rank does not have llm.pp entries.
std::vector<EncoderPlan> encoder_plans(const ModelSpec& model, const ParallelLayout& llm, const EncoderMemory& memory,
                                       std::vector<std::string>* rejected = nullptr);

// The class of each of a plan's encoder pipelines (encoder_slot's equivalence_class).
std::vector<int> pipeline_classes(const ParallelLayout& llm, const EncoderPlan& plan);

// How a step's micro-batches are divided among the encoder pipelines: split[j] micro-batches to pipeline j, each
// at least 1, summing to the LLM pipeline's micro-batches. Pipelines of one class are interchangeable, so only
// splits whose counts do not increase inside a class are kept: permuting them gives the same schedule.
using MicroBatchSplit = std::vector<int>;

// Number of such splits (saturating at INT64_MAX).
int64_t count_micro_batch_splits(int micro_batches, const std::vector<int>& classes);

// All of them, in lexicographic order; InputError when there are more than `limit`.
std::vector<MicroBatchSplit> micro_batch_splits(int micro_batches, const std::vector<int>& classes, int64_t limit);

// A split's time on each of its pipelines: the pipelines run on disjoint ranks, so the step takes the longest.
using PipelineSeconds = std::vector<double>;

struct SplitSearchResult {
  MicroBatchSplit split;
  double seconds = 0;         // the longest of its pipelines' times
  PipelineSeconds pipelines;  // what `evaluate` gave it
  int64_t evaluated = 0;      // splits evaluated
  bool exhaustive = false;    // every split was evaluated
};

// The split whose longest pipeline is shortest. Ties go to the one whose second-longest is shortest, and so on
// (the pipelines' times sorted, compared longest first), then to the lexicographically first split. With at
// most `exhaustive_limit` splits, all are evaluated. Beyond that, a descent from the even split moves one
// micro-batch from one pipeline to another while that helps, so the search never enumerates C(N − 1, m − 1)
// splits when that is large; comparing every pipeline and not only the longest is what lets one move help when
// several pipelines tie for the longest. The descent stops once `evaluation_budget` splits have been evaluated
// (the best so far is the answer). InputError when there are fewer micro-batches than pipelines, or when
// `evaluate` does not give one time per pipeline.
SplitSearchResult search_micro_batch_split(int micro_batches, const std::vector<int>& classes,
                                           const std::function<PipelineSeconds(const MicroBatchSplit&)>& evaluate,
                                           int64_t exhaustive_limit = 4096,
                                           int64_t evaluation_budget = std::numeric_limits<int64_t>::max());

}  // namespace fulcrum

#endif  // FULCRUM_PLAN_ENCODER_PLAN_H_
