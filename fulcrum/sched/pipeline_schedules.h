#ifndef FULCRUM_SCHED_PIPELINE_SCHEDULES_H_
#define FULCRUM_SCHED_PIPELINE_SCHEDULES_H_

#include <vector>

#include "fulcrum/model/model_spec.h"
#include "fulcrum/sched/schedule.h"

namespace fulcrum {

// Where the encoders (and projectors) go when a multimodal model is cut into pipeline stages.
enum class EncoderPlacement {
  kFirstStage,  // Megatron-LM: the encoders run in the first stage's pre-processing, before its LLM layers
  kSpread,      // encoder blocks are spread over the stages like the LLM's
};

// The model's layers flattened (components in order) and cut into `stages` stages of consecutive layers with as
// equal a number of transformer blocks as possible (later stages take the remainder, since the first holds the
// embedding and, with kFirstStage, the encoders). Layers that are not blocks go with the block after them, and
// the final norm and LM head with the last block. Layers the model does not use stay in their stage (they hold
// parameters). InputError when there are fewer blocks to spread than stages.
std::vector<StageLayers> partition_layers(const ModelSpec& model, int stages, EncoderPlacement placement);

// Number of layers of the flattened model.
int64_t flattened_layers(const ModelSpec& model);

// A recomputation mode per flattened layer: `mode` for every transformer block, none for the rest (embeddings,
// norms, projectors and heads keep what they need, as in Megatron-LM, which recomputes transformer layers only).
std::vector<Recompute> block_recompute(const ModelSpec& model, Recompute mode);

// Every transformer block recomputed selectively, except the first ⌈full_share × n⌉ of each component's n blocks,
// recomputed fully: Megatron-LM's --recompute-num-layers, component by component, for memory between selective
// and full recomputation. full_share in [0, 1].
std::vector<Recompute> first_blocks_full(const ModelSpec& model, double full_share);

// Writes a pipeline schedule over `stages` (layout.pp × layout.vpp of them) for `micro_batches` micro-batches:
//   gpipe        every forward, then every backward (vpp 1)
//   1f1b         PipeDream-flush: rank r runs pp − r − 1 forwards, then alternates one forward and one backward,
//                then drains its backwards (vpp 1)
//   interleaved  Megatron-LM's interleaved 1F1B: vpp model chunks per rank, micro-batches in groups of pp,
//                (pp − r − 1)·2 + (vpp − 1)·pp warm-up forwards (all of them when micro-batches = pp);
//                micro-batches must be divisible by pp
//   zb-h1        zero-bubble H1 (Qi et al. 2024): 1F1B with the backward split into input and weight gradients
//                and rank r's weight gradients deferred by r + 1 micro-batches, so at most pp micro-batches
//                hold activations (1F1B's peak) and the weight gradients fill the cool-down: with equal pass
//                times, (pp − 1)(F + B − W) of bubble instead of 1F1B's (pp − 1)(F + B + W) (vpp 1)
// Receives go right before the compute that needs them and sends right after the compute that produces them.
// With dp > 1 the data-parallel collectives follow layout.state_sharding: gradients all-reduced (ZeRO-0) or
// reduce-scattered (otherwise) after each stage's last backward; parameters all-gathered before each stage's
// first forward (ZeRO-1/2, distributed optimizer: the gather of the updated parameters), or before every pass
// of the stage, one compute ahead (ZeRO-3). InputError when the combination is not possible.
//
// `fewer_warmup_forwards` (interleaved only; one entry per rank) takes forwards off each rank's warm-up, so they
// run in the steady state instead: Optimus's warm-up adjustment, which defers the first rank's last warm-up
// forwards of chunk 0 and with them the forward dependency points of their micro-batches, where the encoder
// feeding them needs the time. The last rank keeps the (vpp − 1)·pp + 1 forwards its first backward needs, and
// every other rank at least as many as the rank after it (it waits for that rank's first backward).
Schedule make_pipeline_schedule(PipelineKind kind, const ParallelLayout& layout, int micro_batches,
                                std::vector<StageLayers> stages, std::vector<Recompute> recompute,
                                const std::vector<int>& fewer_warmup_forwards = {});

}  // namespace fulcrum

#endif  // FULCRUM_SCHED_PIPELINE_SCHEDULES_H_
