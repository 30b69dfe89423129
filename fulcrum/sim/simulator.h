#ifndef FULCRUM_SIM_SIMULATOR_H_
#define FULCRUM_SIM_SIMULATOR_H_

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fulcrum/core/sample_cost.h"
#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/cost/cost_model.h"
#include "fulcrum/model/cluster_spec.h"
#include "fulcrum/model/model_spec.h"
#include "fulcrum/sched/schedule.h"

namespace fulcrum {

// What each micro-batch of each data-parallel replica carries: `per_replica[d][j]` is replica d's j-th
// micro-batch. One replica stands for all of them (every replica carries the same loads) and lets the
// simulator run one pipeline for the whole data-parallel group.
struct MicroBatchLoads {
  std::vector<std::vector<MicroBatchLoad>> per_replica;
};

// `micro_batches` micro-batches of `sequences` samples each with `tokens` LLM tokens and `vision` encoder load
// per sample (items, or patch tokens for a dynamic-resolution encoder: synthetic_vision_per_sample): the
// synthetic load of a benchmark configuration.
MicroBatchLoads uniform_loads(int micro_batches, int64_t sequences, int64_t tokens, int64_t vision);

// The tokens component `component` of `model` processes for a micro-batch: the LLM its tokens; an encoder its
// items' patch tokens (fixed per item, or dynamic: one image per sample); a projector the encoder's tokens after
// the merge.
TokenBatch component_batch(const ModelSpec& model, int component, const MicroBatchLoad& load);

// Parameters, gradients and optimizer state on one device of pipeline rank `rank` (all its chunks), as the
// simulator counts them.
double rank_state_bytes(const Schedule& schedule, const ModelSpec& model, int rank);

// In a multitask schedule: what a device keeps of each (component, layer) its slices run: its tensor-parallel
// share (the largest of its slices'), and over how many replicas of that share the layer is held (devices
// holding it / tensor parallelism), which a sharded optimizer state divides.
struct HeldParameters {
  int64_t parameters = 0;
  int tp = 1;
  int64_t replicas = 1;
};
std::map<std::pair<int, int>, HeldParameters> multitask_device_parameters(const Schedule& schedule,
                                                                          const ModelSpec& model, int device);
// The same for devices 0 .. devices − 1 at once, in one pass over the slices.
std::vector<std::map<std::pair<int, int>, HeldParameters>> multitask_parameters_by_device(const Schedule& schedule,
                                                                                          const ModelSpec& model,
                                                                                          int devices);
// Parameters, gradients and optimizer state of the layers `held` on one device of a multitask schedule.
double multitask_state_bytes(const std::map<std::pair<int, int>, HeldParameters>& held, const ModelSpec& model,
                             StateSharding sharding);

class PassPriceMemo;

struct SimOptions {
  // Keep the timeline (compute and communication intervals, memory) of one pipeline replica: the replica of
  // the critical device, or `timeline_replica` when it is one of the simulated replicas (SimResult's
  // timeline_replica says which was kept).
  bool timeline = false;
  int timeline_replica = -1;
  // Dropout masks in the activation memory (models trained without dropout, as most LLMs now are, keep none).
  bool dropout = false;
  // The number format every layer computes in (dtype.h): the LayerWork the cost model prices, the activation
  // bytes kept and sent between stages, and the element size of gradients and gathered parameters (4 bytes in
  // fp32, else 2). Parameters and optimizer state are counted as mixed-precision Adam in every dtype (16 bytes a
  // trained parameter, as pure fp32 Adam also takes).
  Dtype dtype = Dtype::kBf16;
  // Prices of layer passes kept for later simulations of the same step (PassPriceMemo), or none.
  PassPriceMemo* memo = nullptr;
  // A search's bar: when no run of the schedule can take this long or less, the simulation stops before
  // running it (SimResult::gave_up). Pipeline schedules only: with an encoder or multitask section it runs whole.
  double give_up_above_seconds = std::numeric_limits<double>::infinity();
};

// The layers' pass prices (times, activation bytes, FLOPs) simulations worked out per micro-batch, kept for later
// simulations of the same step: a planner simulates many configurations (schedules, virtual stages, partitions,
// recomputation) on each sampled step, and a pass's price depends only on the micro-batch, the layer, its
// sharding and the number format, not on the stage it lands in. Keyed by the addresses of the step, the model and
// the cost model, so they must stay alive and unchanged while the memo is in use. Holds the `max_tables` most
// recently used (step, sharding) tables, fewer when they would take more than `max_bytes` together (a table grows
// with the step's micro-batches: tens of MB each on tens of thousands of devices), always the last one put.
// Safe to share between threads: a simulation takes a table out while it runs and puts it back.
class PassPriceMemo {
 public:
  explicit PassPriceMemo(size_t max_tables = 64, size_t max_bytes = size_t{512} << 20);
  ~PassPriceMemo();
  PassPriceMemo(const PassPriceMemo&) = delete;
  PassPriceMemo& operator=(const PassPriceMemo&) = delete;

  struct Key;
  struct Table;
  // The table for `key` (empty when none is kept), no longer in the memo until put back.
  std::unique_ptr<Table> take(const Key& key);
  void put(const Key& key, std::unique_ptr<Table> table);
  // The tables held and their bytes.
  size_t tables() const;
  size_t bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Where a device's iteration went, in seconds. compute (kernels and the optimizer step) is the device's busy
// time; everything else is idle time by cause, and the fields sum to the iteration time:
//   pp_warmup    waiting for the first input from the previous stage
//   pp_cooldown  waiting for gradients after the device's last forward, and for the rest of its pipeline to
//                finish its last backward
//   pp_other     waiting for inputs or gradients in between (stage imbalance, dependencies),
//                and for slower stages' optimizer steps
//   tp_comm      tensor- and context-parallel collectives inside layers (they block the compute stream)
//   dp_comm      waiting for data-parallel collectives: parameter all-gathers before use, and the gradient
//                reductions left exposed after the slowest replica finished
//   dp_wait      waiting for slower data-parallel replicas to finish their backward passes
struct TimeBreakdown {
  double compute = 0;
  double pp_warmup = 0;
  double pp_cooldown = 0;
  double pp_other = 0;
  double tp_comm = 0;
  double dp_comm = 0;
  double dp_wait = 0;
  double total() const { return compute + pp_warmup + pp_cooldown + pp_other + tp_comm + dp_comm + dp_wait; }
  double idle() const { return total() - compute; }
};

// One interval of the timeline of a simulated device.
struct TimelineEvent {
  enum class Stream : uint8_t { kCompute, kP2p, kCollective };
  int32_t rank = 0;  // pipeline rank
  Stream stream = Stream::kCompute;
  // kCollective also names the optimizer step (stage -1). On cores shared with communication (the cpu kind), a
  // compute event of kSend or kCollective is the compute that transfer or collective takes.
  OpKind op = OpKind::kForward;
  int32_t stage = -1;
  int32_t micro_batch = -1;
  int32_t encoder_pipeline = -1;  // encoder instructions: their pipeline (stage and micro-batch are its own)
  double start_seconds = 0;
  double end_seconds = 0;
  double tp_comm_seconds = 0;  // of a compute interval, the part spent in layer collectives
};

// A compute-stream event that is the compute a transfer or data-parallel collective takes on cores shared with
// communication (the cpu kind), not a pass or the optimizer step.
inline bool is_communication_on_cores(const TimelineEvent& e) {
  return e.stream == TimelineEvent::Stream::kCompute &&
         (e.op == OpKind::kSend || (e.op == OpKind::kCollective && e.stage >= 0));
}

struct MemorySample {
  int32_t rank = 0;
  double seconds = 0;
  double bytes = 0;  // training state plus live activations
};

struct SimResult {
  double iteration_seconds = 0;
  double model_flops = 0;     // forward and backward of every micro-batch, no recomputation (Megatron's MFU)
  double hardware_flops = 0;  // recomputation included, and replicated components counted on every device
  double mfu = 0;             // model_flops / (iteration × devices × peak bf16 FLOP/s)
  double hfu = 0;
  double optimizer_seconds = 0;  // the longest optimizer step
  // Pipeline idle (warm-up, cool-down, other) of the critical device over the iteration.
  double bubble_fraction = 0;
  TimeBreakdown critical;  // the device whose last pass ends last (ties: lowest replica, then rank)
  TimeBreakdown mean;      // over every device
  int critical_replica = 0;
  int critical_rank = 0;
  std::vector<TimeBreakdown> per_device;  // simulated replica × pp + rank
  std::vector<double> peak_memory_bytes;   // per pipeline rank: max over its replicas (and tensor ranks)
  std::vector<double> state_memory_bytes;  // per pipeline rank: parameters, gradients and optimizer state
  double usable_memory_bytes = 0;
  bool oom = false;
  int64_t devices = 0;            // devices the iteration runs on (dp × tp × pp)
  int64_t simulated_devices = 0;  // pipelines simulated × pp: devices doing identical work are run once
  int64_t streams = 0;            // streams simulated (compute, point-to-point and collective per device)
  int64_t events = 0;             // instructions executed
  // Given up (SimOptions::give_up_above_seconds): the busiest device's own passes and the longest optimizer step
  // already take longer than the bar. iteration_seconds is then that lower bound; the memory fields (which follow
  // each program's order, not its times), devices and simulated_devices are exact, and the times, FLOPs and
  // timeline are left empty.
  bool gave_up = false;
  int timeline_replica = 0;
  // Per pipeline rank of the timeline's replica (SimOptions::timeline_replica, else the critical one): when its
  // collective stream is last free: its data-parallel collectives, and the encoders' or sync groups' where the
  // schedule has them (on shared cores too, where the timeline draws the LLM's and sync groups' collectives only
  // as the compute they take). Empty when given up.
  std::vector<double> collectives_end_seconds;
  std::vector<TimelineEvent> timeline;
  std::vector<MemorySample> memory_timeline;
};

// Executes `schedule` (validated) for one training iteration on `cluster`, with layer times from `cost` and the
// micro-batches of `loads`. Every device has a compute stream and two communication streams (point-to-point,
// and data-parallel collectives), which overlap compute except on devices whose communication shares the
// compute cores (the cpu kind), where they take the compute stream for communication_compute_slowdown × their
// seconds (all of them by default; cluster_spec.h), and each data-parallel collective also its
// collective_compute_seconds; their transfers still queue on the device's link. Layer collectives (tensor and context
// parallel) come from the cost model's kernels and block compute. Sends never block; receives wait for their
// data; a data-parallel collective starts when every replica has reached it. After the last backward, every
// device waits for the gradients of the whole model (the global gradient norm) and runs its optimizer step:
// memory-bound over its shard of the state. Deterministic: the same inputs give the same result.
//
// With an encoder section (Optimus), each tensor slice of a rank runs its encoder pipeline's kernels on a stream
// of its own between the LLM's passes, which take every slice. Kernels placed inside a pass fill its
// tensor-parallel gaps (spread evenly over the pass) and their collectives slow it by the section's
// collective_slowdown; compute that does not fit the gaps left runs after the pass and delays the LLM's next
// pass, as does encoder work after a pass that outlasts the bubble it was planned for. The breakdown of a rank
// is its first tensor slice's. Encoder activations are not counted in memory (Optimus leaves them out too);
// encoder state is. Encoder collectives run on the collective stream and never block a program, on any kind
// of device; the optimizer step waits for them.
//
// With a multitask section (Spindle), every program is one device's: each slice it runs takes the slice's layers'
// forward (or backward) over all its micro-batches on its share of the sequences; a slice's input is there when
// every device of the sending slice has sent the rows each receiving device takes from it and the busiest receiver
// has taken its own in, its links busy from the earliest send at the soonest (reshard_cost.h: rows a device holds in both slices are not sent; between slices on the
// same devices nothing is, and each device goes on from its own share, even where the two slices split the
// sequences differently); each sync group all-reduces its layers' whole gradients
// (a tensor-parallel share is less: an upper bound) on the collective stream once all its devices have
// reached it and finished the all-reduces they reached before it (where communication shares the compute
// cores, also taking slowdown × its seconds and collective_compute_seconds from each member's compute), and
// each device's optimizer step covers the parameters it keeps. A wave boundary orders a device's program and
// waits for no other device, as the runtime (fulcrum.runtime.WaveRuntime) runs it. `loads` are not used.
// Throws InputError when the loads do not fit the schedule or the model does not fit the stages.
SimResult simulate(const Schedule& schedule, const ModelSpec& model, const ClusterSpec& cluster,
                   const CostModel& cost, const DeviceEfficiency& efficiency, const MicroBatchLoads& loads,
                   const SimOptions& options = {});

// A lower bound of simulate()'s iteration, by what a pipeline schedule cannot run in less: the busiest device's
// passes back to back, then the longest optimizer step (less a billionth for rounding). What
// SimOptions::give_up_above_seconds is held against; 0 for a schedule with an encoder or multitask section, or
// one whose programs do not run each stage's passes once for every micro-batch. Far cheaper than simulate(): sums
// of pass prices per replica, kept in options.memo.
double iteration_lower_bound(const Schedule& schedule, const ModelSpec& model, const ClusterSpec& cluster,
                             const CostModel& cost, const DeviceEfficiency& efficiency, const MicroBatchLoads& loads,
                             const SimOptions& options = {});

}  // namespace fulcrum

#endif  // FULCRUM_SIM_SIMULATOR_H_
