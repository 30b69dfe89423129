#ifndef FULCRUM_PLAN_EXPORT_H_
#define FULCRUM_PLAN_EXPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "fulcrum/model/model_spec.h"
#include "fulcrum/plan/planner.h"

namespace fulcrum {

// Megatron-LM's --pipeline-model-parallel-layout for the LLM layers of a plan's stages (reference:
// landscape.md §3.1): per virtual stage, 'E' for the token embedding, 't' per transformer block, 'L' for the
// loss (final norm and LM head); stages joined by '|', runs of equal stages written as "(…|)*n" and runs of a
// symbol as "t*n". Stage k runs on pipeline rank k mod PP, as Megatron maps it. Encoder and projector layers
// have no symbol: a stage holding only them would be empty in the layout, which Megatron-LM deadlocks on
// (Megatron-LM#1852), so such a plan throws InputError saying so.
std::string megatron_pipeline_layout(const ModelSpec& model, const Schedule& schedule);

// The expansion of a layout string into its stages, by the grammar of landscape.md §3.1: X*n repeats a symbol
// or a parenthesised group n times, ',' is cosmetic, '|' separates stages. InputError for anything else.
std::vector<std::string> expand_pipeline_layout(const std::string& layout);

// Megatron-LM arguments that run `plan`: parallel sizes, batch sizes, sequence parallelism, state sharding (the
// distributed optimizer, or Megatron-FSDP for ZeRO-2 and ZeRO-3), the layout, and the recomputation of the LLM's
// blocks. Megatron recomputes the same number of blocks in every stage (--recompute-method block); an adaptive
// plan's per-stage choice is given as the most any stage recomputes (memory-safe), with the per-stage counts in a
// comment line for a hook to apply. Comment lines also give what the arguments cannot: the encoders' recomputation
// and a pipeline schedule other than 1F1B or interleaved.
std::string megatron_arguments(const ModelSpec& model, const TrainingPlan& plan, int64_t gbs);

// DeepSpeed PipelineModule: the boundary array parts[0..PP] over the flattened layer list (stage s holds
// layers [parts[s], parts[s + 1])), as a Python snippet that installs it as the module's partition. DeepSpeed
// has no interleaving: InputError for a plan with vpp > 1.
std::string deepspeed_partition(const TrainingPlan& plan);

}  // namespace fulcrum

#endif  // FULCRUM_PLAN_EXPORT_H_
