#ifndef FULCRUM_PLAN_SPINDLE_SCHEDULE_H_
#define FULCRUM_PLAN_SPINDLE_SCHEDULE_H_

#include <vector>

#include "fulcrum/plan/spindle.h"
#include "fulcrum/sched/schedule.h"

namespace fulcrum {

// Placed waves as one Schedule with a multitask section (schedule.h), what the simulator times: one program
// per device. Each device runs, wave by wave, the forward of each of its slices (after receiving the inputs
// that were made on other devices, and then sending its output to the slices that take it on other devices),
// crosses the wave's boundary, then the backward waves in reverse, each slice's backward after the gradients
// of its output arrived and before sending its input's gradients back; then the all-reduce of each sync group
// it belongs to. A slice's input is the previous slice of its MetaOp, or the last slices of the MetaOp's inputs;
// between slices on the same devices nothing moves. The result passes validate().
// `recompute`: of every transformer block of every component (one mode for every task that runs it).
Schedule waves_schedule(const MultitaskInputs& in, const MetaGraph& graph, const std::vector<PlannedWave>& waves,
                        Recompute recompute = Recompute::kNone);
// The same with a recomputation mode per flattened layer of the model (first_blocks_full, block_recompute).
Schedule waves_schedule(const MultitaskInputs& in, const MetaGraph& graph, const std::vector<PlannedWave>& waves,
                        std::vector<Recompute> layer_recompute);

}  // namespace fulcrum

#endif  // FULCRUM_PLAN_SPINDLE_SCHEDULE_H_
