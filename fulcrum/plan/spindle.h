#ifndef FULCRUM_PLAN_SPINDLE_H_
#define FULCRUM_PLAN_SPINDLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/cost/cost_model.h"
#include "fulcrum/cost/training_state_memory.h"
#include "fulcrum/model/cluster_spec.h"
#include "fulcrum/model/task_graph.h"
#include "fulcrum/plan/level_allocation.h"
#include "fulcrum/plan/metaop_graph.h"
#include "fulcrum/plan/scalability_curve.h"
#include "fulcrum/plan/wavefront.h"

namespace fulcrum {

// Spindle end to end (reference/spindle.md): a multi-task model's MetaOps, their scalability curves, each level's
// devices allocated by the relaxation and the bi-point discretisation, the level's slices packed into waves (or,
// where that is faster, its MetaOps one after another on all the devices), the waves placed on devices, and the
// gradient synchronisation of shared parameters group by group.

struct MultitaskInputs {
  const TaskGraph* graph = nullptr;
  const ClusterSpec* cluster = nullptr;
  const CostModel* cost = nullptr;
  DeviceEfficiency efficiency;
  Dtype dtype = Dtype::kBf16;
  // The optimizer state the schedules keep: sharded over each layer's replicas (ZeRO-1, as DeepSpeed runs such
  // models) or whole on every device that holds the layer (ZeRO-0, a plain optimizer per device).
  StateSharding state_sharding = StateSharding::kZero1;
  // The least tensor parallelism of transformer blocks copied over several devices (CurveOptions::min_tp).
  int min_tp = 1;
  // Sync groups on the same devices that become ready one after another share an all-reduce while their
  // gradients fit in this many bytes per device, as DDP's buckets (bucket_cap_mb, 25 MiB) do: a few larger
  // all-reduces in place of many small ones, each started when its last group is ready. 0: one per group.
  double bucket_bytes = 25.0 * 1024 * 1024;
};

// A wave's slice on the cluster, with the MetaOp it belongs to.
struct PlacedSlice {
  int metaop = 0;
  int devices = 0;
  int64_t first_layer = 0;  // of the MetaOp's operators
  int64_t layers = 0;
  double seconds = 0;
  double gradient_sync_seconds = 0;  // of `seconds`: its operators' shares of their gradients' all-reduce
  double recompute_seconds = 0;      // of `seconds`: its operators' forward again, before their backward
  int dp = 1;  // how its devices are used
  int tp = 1;
  std::vector<int> device_ids;  // sorted
};

struct PlannedWave {
  int level = 0;
  double start_seconds = 0;
  double seconds = 0;
  std::vector<PlacedSlice> slices;
};

// The devices that hold copies of a set of parameters: their gradients are all-reduced over the group, as soon
// as the backward wave that completes them is over, while later backward waves run (as DeepSpeed and
// Megatron-LM overlap their gradient reduction with backward).
struct SyncGroup {
  // The forward wave whose backward completes the gradients (the earliest forward wave of a slice holding
  // them): the all-reduce follows that backward wave.
  int ready_wave = 0;
  int tp = 1;  // each device holds 1/tp of the layers; the shards are all-reduced over their copies
  std::vector<int> device_ids;
  std::vector<std::pair<int, int>> layers;  // (component, layer) it synchronises
  double gradient_bytes = 0;  // per device: its shard of the gradients, in the training dtype's element size
  double seconds = 0;         // the all-reduce
};

// The sync groups of `waves`' placement: the trained layers held on the same devices and completed by the same
// backward wave pooled, then groups on the same devices ready one after another pooled up to `in.bucket_bytes`;
// one all-reduce each (none for a group of one device); in the order they become ready (later forward waves
// first), then by shards and devices, which every device issues them in.
std::vector<SyncGroup> sync_groups_of(const MultitaskInputs& in, const MetaGraph& graph,
                                      const std::vector<PlannedWave>& waves);

struct LevelPlan {
  std::vector<int> metaops;   // of the MetaGraph
  Relaxation relaxation;      // n* per MetaOp in `metaops`' order, and C*
  std::vector<LevelPart> parts;
  // The level's MetaOps run one after another, each on one device group, because that beat its waves (curves
  // that scale about linearly leave the discretised waves nothing to gain).
  bool serial = false;
};

struct MultitaskPlan {
  MetaGraph graph;
  std::vector<ScalabilityCurve> curves;  // per MetaOp
  std::vector<LevelPlan> levels;
  std::vector<PlannedWave> waves;
  std::vector<SyncGroup> sync_groups;
  // The waves' makespan in the curves' terms (each operator's compute and its share of the gradient
  // all-reduce), and Σ over levels of C*, its relaxation bound.
  double makespan_seconds = 0;
  double lower_bound_seconds = 0;
  // The arrangement kept: "waves" (each level the faster of its waves and its MetaOps in turn, in the curves'
  // terms), or every level's MetaOps in turn at their "fastest" or "widest" counts, whichever the whole
  // estimate (iteration_seconds below) finds fastest; and the first one's makespan, which the bound is for.
  std::string arrangement;
  double wavefront_makespan_seconds = 0;
  double compute_seconds = 0;         // estimate_waves(): the waves' compute alone
  double transfer_seconds = 0;        // activations moved between waves, at the boundaries
  double gradient_sync_seconds = 0;   // of the group all-reduces, what outlasts the backward waves
  double iteration_seconds = 0;       // estimate_waves(): compute + transfers + gradient synchronisation
  double planner_seconds = 0;         // curves, levels, waves, placement (wall time)
  // The arrangements the estimate ranked below the kept one, placed but not cut for gradient overlap: the
  // estimate leaves out the recomputation that memory calls for only once an arrangement is simulated, so a
  // caller who can simulate them ranks them again.
  struct Alternative {
    std::string arrangement;
    std::vector<LevelPlan> levels;
    std::vector<PlannedWave> waves;
  };
  std::vector<Alternative> alternatives;
};

// InputError when an input is missing, the cluster has fewer devices than one, or a MetaOp has no valid count.
MultitaskPlan plan_multitask(const MultitaskInputs& in);

// Devices for each slice of each wave (`device_ids`, from its `devices`, `dp` and `tp`). One slice after another,
// each takes, of the blocks of consecutive free devices (starting on a node's first device for a slice wider than a
// node), the one with the fewest tensor-parallel groups across
// nodes, then the one its inputs reach soonest (reshard_cost.h: rows a device holds stay, a node's NVLink is faster
// than the network), then one inside a node, then the first; the first free devices when no block is free. Two
// orders are tried a wave and the better placement kept (fewer groups across nodes, then the slowest exchange into
// the wave): the slices that would lose most away from their inputs first (a MetaOp that shrinks onto part of its
// devices keeps them before a wider slice takes them), and the largest first.
void place_waves(const MultitaskInputs& in, const MetaGraph& graph, std::vector<PlannedWave>& waves);

// The waves of each arrangement the baselines below time, placed: `sequential` one MetaOp after another on all
// the devices (its widest valid count, the fastest DP × TP there), `per_task` each task's own planned waves in turn, `task_greedy` the
// tasks side by side on their own devices, each task's MetaOps in turn.
std::vector<PlannedWave> sequential_waves(const MultitaskInputs& in, const MultitaskPlan& plan);
std::vector<PlannedWave> per_task_waves(const MultitaskInputs& in, const MultitaskPlan& plan);
std::vector<PlannedWave> task_greedy_waves(const MultitaskInputs& in, const MultitaskPlan& plan);

// `waves` with long waves cut into consecutive waves on the same devices where the estimate (estimate_waves) finds
// the iteration shorter. A wave's gradients are all-reduced once its whole backward is over, so those of a long
// wave whose backward runs last wait with nothing left to hide under; cut, the all-reduces of its later parts'
// gradients run under the backward of its earlier parts, as DDP's buckets run under the rest of a backward pass.
// A cut wave's slices share out their operators in order over 2, 3, 4 or 6 parts (a slice of fewer operators
// fills the first parts). Tried on the four waves whose all-reduces end last after the backward and on the four
// longest; the best cut each round, at most four rounds, while the estimate falls by at least 0.1%. Waves holding
// two slices of one MetaOp stay whole. plan_multitask cuts the arrangement it keeps; the baselines' waves get the
// same treatment from their caller.
std::vector<PlannedWave> cut_for_gradient_overlap(const MultitaskInputs& in, const MetaGraph& graph,
                                                  std::vector<PlannedWave> waves);

// The systems Spindle is compared with, on the same curves and cost model (compute, plus the same estimates of
// transfers and gradient synchronisation as the plan's):
//   sequential   every MetaOp on all the devices, one after another (Megatron-LM and DeepSpeed running the
//                sub-models in turn), each at its widest valid count with the fastest DP × TP there
//   per_task     the tasks one after another, each planned alone as above on all the devices (DistMM applied
//                per task: the devices divided among one task's towers)
//   task_greedy  every task at once on its own devices, given one valid step at a time to the task with the
//                best marginal gain (T(n) − T(n')) / (n' − n); each task's MetaOps run in turn on its devices
//                (as many of them as is valid for every one of its MetaOps, so that nothing moves between them)
//                (with more tasks than devices, in rounds of as many tasks as devices)
struct BaselineTimes {
  double makespan_seconds = 0;  // in the curves' terms, as MultitaskPlan's
  double compute_seconds = 0;
  double transfer_seconds = 0;
  double gradient_sync_seconds = 0;
  double iteration_seconds = 0;
  double recompute_seconds = 0;  // of compute_seconds: the blocks' recomputation, where it is asked for
};
struct MultitaskBaselines {
  BaselineTimes sequential;
  BaselineTimes per_task;
  BaselineTimes task_greedy;
};
MultitaskBaselines multitask_baselines(const MultitaskInputs& in, const MultitaskPlan& plan);
// The planner's estimate of any arranged waves: each wave as long as its busiest device's slices' compute (a
// device runs its slices of a wave one after another), with the transfers and what of the sync groups'
// all-reduces outlasts the backward waves (each wave's backward taken as its recomputation and two thirds of the
// rest of its compute).
BaselineTimes estimate_waves(const MultitaskInputs& in, const MetaGraph& graph, const std::vector<PlannedWave>& waves);
// The same with the layers recomputed as `layer_recompute` says (a mode per flattened layer, as waves_schedule
// takes them): each slice's compute carries its layers' recomputation before their backward, priced by the cost
// model as the simulator prices it, so the estimate of an arrangement that memory makes recompute is not short by
// that. `makespan_seconds` stays in the curves' terms (the bound's); `recompute_seconds` is what was added to the
// compute. InputError when there is not one mode per layer.
BaselineTimes estimate_waves(const MultitaskInputs& in, const MetaGraph& graph, const std::vector<PlannedWave>& waves,
                             const std::vector<Recompute>& layer_recompute);

}  // namespace fulcrum

#endif  // FULCRUM_PLAN_SPINDLE_H_
