#ifndef FULCRUM_PLAN_BUBBLE_SCHEDULER_H_
#define FULCRUM_PLAN_BUBBLE_SCHEDULER_H_

#include <string>
#include <vector>

#include "fulcrum/cost/cost_model.h"
#include "fulcrum/plan/dependency_points.h"

namespace fulcrum {

// Optimus's bubble scheduler (reference/optimus.md §5–6): encoder kernels placed in the idle time of the LLM's
// own timeline, on the devices the encoder plan colocates them on, without breaking the dependencies between
// encoder and LLM micro-batches.
//
// The model of time. The LLM's timeline, simulated alone, is fixed up to one shift: when the encoder cannot have
// micro-batch i's activations ready by F_i, the whole LLM starts `head_shift_seconds` later on every device (its
// bubbles move with it; the head bubble grows). Encoder compute kernels run only where the device's LLM compute
// stream is idle, whole (a kernel never straddles LLM work), in order within a pass. Encoder collectives run on
// the communication stream: never during an LLM tensor-parallel collective (they would share the links); during
// LLM compute they slow it by `communication_slowdown` × the overlap, charged to that device's end. Passes of one
// encoder stage run in micro-batch order; forward goes stage by stage downstream and backward upstream, one
// point-to-point transfer apart, and the last stage's output reaches the LLM one transfer later (its gradients
// come back the same way). The step ends as the simulator's does: a stage's gradient reduction follows its last
// kernel and the LLM's last data-parallel collective on the device, and every optimizer step starts once every
// gradient is reduced.
//
// The placement is list scheduling: each kernel at the earliest time its predecessors and the device allow.
// With a fixed pass order this gives every pass its earliest finish, so the i-th encoder micro-batch to finish
// forward feeds LLM micro-batch i (the sorted check EF_i ≤ F_i), and the least head shift is found by bisection
// over a feasibility that only grows with the shift. Backward passes then take what is left, from B_i on.

struct TimeInterval {
  double start_seconds = 0;
  double end_seconds = 0;
};

// One LLM pipeline rank's device over an iteration of the LLM alone.
struct LlmDeviceTimeline {
  // Its compute kernels but the optimizer step, sorted, disjoint; on cores that communication shares (the cpu
  // kind), also the compute its transfers and data-parallel collectives take.
  std::vector<TimeInterval> compute;
  std::vector<TimeInterval> tensor_comm;  // its tensor-parallel collectives
  double last_pass_end_seconds = 0;       // end of its last forward or backward: the tail bubble starts here
  double end_seconds = 0;                 // end of its iteration
  // Its optimizer step, which ends its iteration. Every device's step starts once all gradients are reduced (the
  // global gradient norm), so the LLM's are ready the longest step before its end; work that ends later,
  // encoder gradients included, delays every step.
  double optimizer_seconds = 0;
  // End of its last data-parallel collective: the encoders' gradient reduction queues behind it on the device's
  // one collective stream.
  double collectives_end_seconds = 0;
  // Start of its first forward: the head bubble ends here. Below 0: at its first compute (on shared cores a
  // parameter gather's compute may come before the first pass).
  double first_pass_start_seconds = -1;
};

// The work of one encoder pipeline: stage s runs on LLM rank stage_rank[s]; kernels of micro-batch k's pass.
// A stage without backward kernels (a frozen encoder) is skipped in the backward.
struct EncoderPipelineWork {
  std::vector<int> stage_rank;
  std::vector<std::vector<std::vector<Kernel>>> forward;   // [stage][micro-batch]
  std::vector<std::vector<std::vector<Kernel>>> backward;  // [stage][micro-batch]
  // After its last backward, on each stage's device: the encoder's gradient reduction (and parameter gather),
  // once the LLM's collectives there are done.
  std::vector<double> stage_tail_seconds;
  // Each stage's optimizer step (empty: none), run on its device with the LLM's once every gradient is reduced.
  std::vector<double> stage_optimizer_seconds;
};

struct BubbleProblem {
  std::vector<LlmDeviceTimeline> llm_ranks;  // per LLM pipeline rank
  DependencyPoints dependency;               // F_i and B_i of the LLM's micro-batches
  std::vector<EncoderPipelineWork> pipelines;
  double transfer_seconds = 0;        // one point-to-point transfer of a micro-batch's activations or gradients
  double communication_slowdown = 0;  // LLM compute seconds lost per second of encoder collective beside it
  // [pipeline][micro-batch]: the LLM micro-batch each encoder micro-batch feeds, fixed in advance (its images are
  // that micro-batch's); empty: the i-th to finish its forward feeds micro-batch i (Optimus's sorted check).
  std::vector<std::vector<int>> llm_micro_batch;
};

enum class BubbleMode {
  kCoarse,  // forward only in the head bubble, backward only in the tail (Optimus's InitSchedule)
  kFine,    // every bubble: head, tail, pipeline and tensor-parallel gaps
};

struct PlacedKernel {
  int pipeline = 0;
  int stage = 0;
  int micro_batch = 0;  // of its encoder pipeline
  bool backward = false;
  int kernel = 0;       // index in its pass
  double start_seconds = 0;
  double end_seconds = 0;
};

struct BubbleSchedule {
  BubbleMode mode = BubbleMode::kFine;
  double llm_seconds = 0;           // the LLM's iteration alone
  double iteration_seconds = 0;     // with the encoder placed
  double head_shift_seconds = 0;    // how much later the LLM starts
  double contention_seconds = 0;    // the largest slowdown charged to a device by encoder collectives
  double encoder_compute_seconds = 0;
  // Share of encoder compute inside the LLM's own bubbles, head and tail included: all of it but what runs in
  // the head's growth or past the LLM's last gradients.
  double efficiency = 0;
  // [pipeline][micro-batch]: the LLM micro-batch it feeds, its forward's arrival at the LLM (EF), and when its
  // backward starts (EB; its arrival from the LLM, for a pipeline without backward work).
  std::vector<std::vector<int>> llm_micro_batch;
  std::vector<std::vector<double>> forward_ready_seconds;
  std::vector<std::vector<double>> backward_start_seconds;
  // [pipeline]: when the last of its devices is done: the latest of the LLM's shifted gradients and its own tails,
  // with the contention it caused, then the longest optimizer step; the iteration is the longest.
  std::vector<double> pipeline_end_seconds;
  std::vector<PlacedKernel> kernels;
};

// Places every encoder kernel of `problem` in `mode`. InputError when the problem is malformed: micro-batch
// counts that do not add up to the LLM's, a stage on a rank that does not exist, passes missing.
BubbleSchedule schedule_encoder_bubbles(const BubbleProblem& problem, BubbleMode mode);

// Whether the forward passes, placed with the LLM `head_shift_seconds` late, meet every F_i (the test that
// schedule_encoder_bubbles bisects on).
bool forward_fits(const BubbleProblem& problem, BubbleMode mode, double head_shift_seconds);

// Every rule a schedule must keep, checked from scratch: each kernel placed once and as long as its cost; compute
// kernels off the (shifted) LLM compute and off each other on a device; collectives off the LLM's
// tensor-parallel ones; kernel order inside a pass; stage order, downstream forward and upstream backward, a
// transfer apart; micro-batch order on a stage; the sorted EF_i ≤ F_i and EB_i ≥ B_i against the shifted LLM;
// the iteration time covering every device's work. One line per violation; empty when the schedule holds.
std::vector<std::string> check_bubble_schedule(const BubbleProblem& problem, const BubbleSchedule& schedule);

}  // namespace fulcrum

#endif  // FULCRUM_PLAN_BUBBLE_SCHEDULER_H_
