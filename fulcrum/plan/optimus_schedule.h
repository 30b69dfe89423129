#ifndef FULCRUM_PLAN_OPTIMUS_SCHEDULE_H_
#define FULCRUM_PLAN_OPTIMUS_SCHEDULE_H_

#include "fulcrum/plan/optimus.h"
#include "fulcrum/sched/schedule.h"

namespace fulcrum {

// An Optimus plan as one Schedule over the whole model, what the simulator and the runtime execute: the LLM's
// programs as planned, its stages over the layers after the encoders', and an encoder section with the plan, the
// encoder stages and the map from encoder micro-batches to the LLM micro-batches they feed (the fine
// schedule's). Each rank's program gains, in the order the bubble schedule placed them:
//   - its encoder pipelines' kernel ranges, one per layer pass and bubble: those the fine schedule put inside an
//     LLM pass follow that pass, flagged inside_pass; the others follow the pass they come after, before the
//     LLM's next wait;
//   - the transfers between encoder stages, from the last encoder stage to the LLM's first stage before each of
//     its forwards, and the gradients back after each of its backwards;
//   - the encoder stages' gradient collectives over the encoder's data-parallel group, at the end.
// Every layer pass of every micro-batch is there, those of micro-batches without images too (they cost nothing
// on this step but may not on another), so the schedule can be simulated on any step of the epoch: work that
// outgrows its bubble then delays what depends on it. The result passes validate().
// InputError when the encoder side's layers do not come before the LLM's in the model.
Schedule optimus_schedule(const OptimusInputs& in, const OptimusPlan& plan);

}  // namespace fulcrum

#endif  // FULCRUM_PLAN_OPTIMUS_SCHEDULE_H_
