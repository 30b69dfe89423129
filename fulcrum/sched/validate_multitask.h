#ifndef FULCRUM_SCHED_VALIDATE_MULTITASK_H_
#define FULCRUM_SCHED_VALIDATE_MULTITASK_H_

#include <string>

#include "fulcrum/sched/schedule.h"

namespace fulcrum {

// validate() for a schedule with a multitask section (Schedule::tasks), which it calls: throws InputError with
// one line naming `where` and the first fault of
//   - the layout: one program per device (dp = tp = vpp = 1), no pipeline stages, one micro-batch, a recompute
//     mode per layer, no encoder section;
//   - the section: every slice on dp × tp distinct devices of the cluster, sorted, in a forward wave that
//     exists, with whole data-parallel shares of its sequences; every sync group on distinct devices;
//   - the programs: each slice's forward on each of its devices exactly once, in its wave (as many wave
//     boundaries crossed before it), and its backward once after it, in the mirrored backward wave; boundaries
//     0 … 2 · waves − 1 in order on every device; a slice's inputs received before its forward and its output
//     gradients before its backward; sends after what they send is computed; a sync collective on each of its
//     group's devices, after every backward there; nothing else;
//   - transfers: every device of a sending slice sends to each slice it sends to, and every device of the
//     receiving slice receives it, once;
//   - freedom from deadlock, receives waiting for every sending device.
// Linear in the instructions (times log of the slices).
void validate_multitask(const Schedule& schedule, const std::string& where);

}  // namespace fulcrum

#endif  // FULCRUM_SCHED_VALIDATE_MULTITASK_H_
