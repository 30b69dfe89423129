#ifndef FULCRUM_SCHED_SCHEDULE_H_
#define FULCRUM_SCHED_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/cost/layer_flops.h"
#include "fulcrum/cost/training_state_memory.h"

namespace fulcrum {

// What one training iteration runs, as order and dependencies, never timestamps: the contract between the
// planners that write it and the simulator and runtime that execute it.
//
// SPMD: one program per pipeline rank. The `tp` devices of a tensor-parallel group run the same program, and
// the `dp` data-parallel replicas of the pipeline run it too, each on its own micro-batches (bound from a
// BatchPlan when the schedule is executed). So a schedule for 16,384 devices holds `pp` programs.
//
// The model's layers (ModelSpec's components in order, their layers in order, flattened) are cut into
// `pp × vpp` virtual stages of consecutive layers. Virtual stage s runs on pipeline rank s % pp as that rank's
// model chunk s / pp (Megatron's interleaving; vpp 1 is a plain pipeline). Instructions name virtual stages.

// How the devices are divided, and what every replica keeps.
struct ParallelLayout {
  int dp = 1;    // data-parallel replicas of the pipeline
  int tp = 1;    // tensor parallelism inside each stage
  int pp = 1;    // pipeline ranks
  int vpp = 1;   // model chunks per pipeline rank (interleaving)
  // Tensor parallelism of the encoders and projectors; 0 = tp. 1 replicates them on every tensor rank, for
  // encoders whose heads tp does not divide (InternViT-6B's 25).
  int encoder_tp = 0;
  bool sequence_parallel = false;
  StateSharding state_sharding = StateSharding::kMegatronDistributedOptimizer;

  int64_t devices() const { return static_cast<int64_t>(dp) * tp * pp; }
  int stages() const { return pp * vpp; }
  int component_tp(bool encoder_side) const { return encoder_side && encoder_tp > 0 ? encoder_tp : tp; }
  int rank_of_stage(int stage) const { return stage % pp; }
  int chunk_of_stage(int stage) const { return stage / pp; }
};

// The layers a virtual stage holds: [first_layer, end_layer) of the flattened model.
struct StageLayers {
  int32_t first_layer = 0;
  int32_t end_layer = 0;
  int32_t layers() const { return end_layer - first_layer; }
};

enum class OpKind : uint8_t {
  kForward,         // a stage's forward over one micro-batch
  kBackward,        // its whole backward (input and weight gradients)
  kBackwardInput,   // the input-gradient half: what the previous stage waits for
  kBackwardWeight,  // the weight-gradient half: may be deferred (zero-bubble schedules)
  kSend,            // an activation or gradient to the peer stage on another rank; does not block compute
  kRecv,            // waits for the matching send's data
  kCollective,      // a collective of the stage's parameters or gradients over a device group
  kEncoderKernels,  // kernels [kernel_begin, kernel_end) of one encoder layer's pass, placed in a bubble
  kWaveBoundary,    // the end of wave `wave` in this rank's order; it waits for no other rank
  kAllocate,        // a buffer of `bytes` held from here ...
  kFree,            // ... to here (buffer named by `buffer`)
};
std::string_view op_kind_name(OpKind kind);

enum class Payload : uint8_t { kActivation, kGradient };
std::string_view payload_name(Payload payload);

enum class CollectiveKind : uint8_t { kAllReduce, kReduceScatter, kAllGather };
std::string_view collective_kind_name(CollectiveKind kind);

// Who takes part in a collective: the stage's data-parallel replicas (gradients, sharded parameters), or for an
// encoder instruction the encoder stage's replicas (every encoder pipeline of every LLM pipeline).
// In a multitask schedule: the devices of one of its sync groups (`stage` names the group).
enum class DeviceGroup : uint8_t { kData, kEncoderData, kSync };
std::string_view device_group_name(DeviceGroup group);

// What a collective moves: the stage's gradients (after its last backward) or its parameters (before use).
enum class CollectiveTensor : uint8_t { kGradients, kParameters };
std::string_view collective_tensor_name(CollectiveTensor tensor);

// One step of a program. Fields a kind does not use keep their defaults (-1, 0).
struct Instruction {
  OpKind op = OpKind::kForward;
  int32_t stage = -1;        // the virtual stage this belongs to (a stage of this rank)
  int32_t micro_batch = -1;  // compute, send, recv, encoder kernels; -1 for whole-stage collectives
  // kSend: the stage receiving; kRecv: the stage sending.
  int32_t peer_stage = -1;
  Payload payload = Payload::kActivation;
  CollectiveKind collective = CollectiveKind::kAllReduce;
  DeviceGroup group = DeviceGroup::kData;
  CollectiveTensor tensor = CollectiveTensor::kGradients;
  // kEncoderKernels: a flattened layer index, the pass, and a range of that layer's kernels.
  int32_t layer = -1;
  Pass pass = Pass::kForward;
  int32_t kernel_begin = 0;
  int32_t kernel_end = 0;
  int32_t wave = -1;    // kWaveBoundary
  int32_t buffer = -1;  // kAllocate, kFree
  int64_t bytes = 0;    // kAllocate
  // Encoder instructions (Schedule::encoder): the rank's encoder pipeline they belong to, whose stage `stage` and
  // whose own micro-batch `micro_batch` they name (EncoderSection::llm_micro_batch maps it to the LLM's). -1: an
  // instruction of the LLM. Encoder instructions are kEncoderKernels, kSend, kRecv and kCollective.
  int32_t encoder_pipeline = -1;
  // kSend, kRecv: the peer's encoder pipeline, -1 for the LLM. The micro-batch is always the instruction's own
  // side's: the LLM's first stage receives micro-batch i from the encoder micro-batch k that feeds it.
  int32_t peer_encoder_pipeline = -1;
  // kEncoderKernels: the kernels run inside the LLM pass just before them in the program (its tensor-parallel
  // gaps take their compute; their collectives run beside its compute), not after it. What does not fit the
  // pass's gaps runs after the pass and delays what follows.
  bool inside_pass = false;
};

bool is_compute(OpKind kind);

struct Program {
  std::vector<Instruction> instructions;
};

// The pipeline schedules the generators write.
enum class PipelineKind : uint8_t { kGpipe, kOneFOneB, kInterleaved, kZeroBubbleH1, kCustom };
std::string_view pipeline_kind_name(PipelineKind kind);
// "gpipe", "1f1b", "interleaved", "zb-h1"; InputError otherwise.
PipelineKind parse_pipeline_kind(std::string_view name);

// Optimus (reference/optimus.md): the encoders' own DP × PP × TP plan over the same devices as the LLM. Each LLM
// pipeline's pp × tp devices host `pipelines` encoder pipelines of `pp` encoder stages; with g = layout.pp / pp
// and h = layout.tp / tp, encoder pipeline j = a·h + b runs its stage e on LLM pipeline rank e·g + a, on the
// tensor slice b (tensor ranks [b·tp, (b + 1)·tp)). Every device thus holds one encoder stage. The LLM's
// stages then cover the layers after the encoder side's, and the encoder stages the layers before.
struct EncoderSection {
  int dp = 1;         // encoder replicas of each stage over the whole job: pipelines × the LLM's dp
  int pp = 1;
  int tp = 1;
  int pipelines = 0;  // per LLM pipeline; 0: no encoder section (the encoders, if any, are in the LLM's stages)
  // [encoder stage]: its flattened layers, one range per encoder (the projectors in the last stage's).
  std::vector<std::vector<StageLayers>> stages;
  // [pipeline][k]: the LLM micro-batch that encoder micro-batch k of the pipeline feeds (whose images it
  // carries). Together a permutation of the LLM pipeline's micro-batches.
  std::vector<std::vector<int32_t>> llm_micro_batch;
  // LLM compute seconds lost per second of encoder collective running beside an LLM pass.
  double collective_slowdown = 0;

  bool present() const { return pipelines > 0; }
  int slices(const ParallelLayout& llm) const { return llm.tp / tp; }
  int rank_of(const ParallelLayout& llm, int pipeline, int stage) const {
    return stage * (llm.pp / pp) + pipeline / slices(llm);
  }
  int slice_of(const ParallelLayout& llm, int pipeline) const { return pipeline % slices(llm); }
  // The encoder stage every device of LLM rank `rank` holds.
  int stage_on_rank(const ParallelLayout& llm, int rank) const { return rank / (llm.pp / pp); }
  // The pipeline whose stage runs on (rank, slice).
  int pipeline_on(const ParallelLayout& llm, int rank, int slice) const {
    return (rank % (llm.pp / pp)) * slices(llm) + slice;
  }
  // Micro-batches of pipeline j.
  int micro_batches(int pipeline) const { return static_cast<int>(llm_micro_batch[pipeline].size()); }
};

// Spindle (reference/spindle.md): slices of tasks' operators on device groups, run in waves. A schedule with
// this section has one program per device (layout.pp devices, dp = tp = vpp = 1) and no pipeline stages; its
// instructions' `stage` names a slice (compute, send, receive: micro-batch 0) or a sync group (collectives).
// A slice runs `layers` consecutive layers of a component for one task's inputs, on its devices as dp × tp
// (`sequences` split dp ways), forward in its wave, backward in the mirrored backward wave. Activations move
// between slices at wave boundaries; the gradients of parameters held on several devices are all-reduced over
// each sync group at the end.
struct TaskSlice {
  int32_t task = 0;
  int32_t component = 0;    // of the model
  int32_t first_layer = 0;  // of the component
  int32_t layers = 0;
  int64_t sequences = 0;    // per micro-batch, over the slice's data-parallel ranks
  int64_t tokens = 0;       // per sequence
  int32_t micro_batches = 1;
  int32_t dp = 1;
  int32_t tp = 1;
  int32_t wave = 0;         // forward wave; its backward runs in wave 2 · waves − 1 − wave
  std::vector<int32_t> devices;  // dp × tp of them, sorted
  // Whether it has a backward: it trains, or a trained slice is upstream of it in its task and its backward passes
  // that gradient back. A frozen slice without it does no backward work and keeps no activations for one.
  bool input_gradient = true;
};
struct SyncGroupSpec {
  std::vector<int32_t> devices;  // sorted
  // Each device holds 1/tp of the layers (its slices' tensor-parallel shard): every shard is all-reduced over
  // the devices / tp copies of it.
  int32_t tp = 1;
  // The parameters it synchronises: (component, layer) pairs.
  std::vector<std::pair<int32_t, int32_t>> layers;
};
struct MultitaskSection {
  int32_t waves = 0;  // forward waves
  std::vector<TaskSlice> slices;
  std::vector<SyncGroupSpec> sync_groups;
  bool present() const { return !slices.empty(); }
};

struct Schedule {
  PipelineKind kind = PipelineKind::kCustom;
  ParallelLayout layout;
  int micro_batches = 0;           // per pipeline (per data-parallel replica) per iteration
  int64_t model_layers = 0;        // layers of the flattened model the stages cover
  std::vector<StageLayers> stages;     // layout.stages() entries, in order
  std::vector<Recompute> recompute;    // per flattened layer
  std::vector<Program> programs;       // layout.pp entries, one per pipeline rank
  EncoderSection encoder;              // Optimus's encoder plan, when present
  MultitaskSection tasks;              // Spindle's slices and waves, when present

  // Instructions over all programs.
  int64_t instruction_count() const;
  // The stage holding flattened layer `layer`, or -1.
  int stage_of_layer(int64_t layer) const;
};

// The first layer the LLM's stages cover: 0, or the layers of the encoder section before it.
int32_t first_llm_layer(const Schedule& schedule);

// Per stage, the most micro-batches whose activations it holds at once: forwards run minus backwards (whole, or
// the input-gradient half, after which a zero-bubble schedule's deferred weight gradient keeps only the
// matmul inputs), over its rank's program. 1F1B's first stage holds pp; GPipe's every stage holds all.
std::vector<int> max_micro_batches_in_flight(const Schedule& schedule);

}  // namespace fulcrum

#endif  // FULCRUM_SCHED_SCHEDULE_H_
