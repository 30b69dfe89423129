#ifndef FULCRUM_SCHED_VALIDATE_H_
#define FULCRUM_SCHED_VALIDATE_H_

#include <string>

#include "fulcrum/sched/schedule.h"

namespace fulcrum {

// Checks that a schedule can run, and throws InputError with one line naming `where` and the first fault:
//   - the layout: positive degrees, pp × vpp stages of consecutive layers covering the model, none empty,
//     one program per pipeline rank and none empty, a recompute mode per layer;
//   - every instruction names a stage of its own rank (and micro-batches, peers, layers that exist);
//   - every micro-batch runs each stage's forward exactly once and its backward exactly once (whole, or its
//     input half before its weight half), the backward after the forward;
//   - data dependencies in program order: a forward after its input arrived (received from another rank, or
//     computed earlier on this one), a backward after the next stage's input gradient; a send after what it
//     sends was computed; gradient collectives after the stage's last backward;
//   - sends and receives match one to one, buffers are allocated once and freed once, every rank crosses the
//     same wave boundaries in the same order;
//   - freedom from deadlock: executing the programs with sends that never block, receives that wait and wave
//     boundaries that do not, every rank reaches its end (otherwise the message names the waiting ranks).
// Linear in the number of instructions. A schedule with a multitask section is checked by validate_multitask.
void validate(const Schedule& schedule, const std::string& where = "schedule");

// validate() for a schedule Fulcrum planned itself from inputs that passed their checks: a fault there is
// Fulcrum's, not the input's, so it throws InternalError (the same one line) instead of InputError.
void validate_planned(const Schedule& schedule, const std::string& where);

}  // namespace fulcrum

#endif  // FULCRUM_SCHED_VALIDATE_H_
