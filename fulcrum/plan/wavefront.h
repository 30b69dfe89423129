#ifndef FULCRUM_PLAN_WAVEFRONT_H_
#define FULCRUM_PLAN_WAVEFRONT_H_

#include <cstdint>
#include <vector>

#include "fulcrum/plan/level_allocation.h"

namespace fulcrum {

// Spindle's wavefront scheduling of one level (reference/spindle.md §8, Algorithm 1). A wave runs slices of
// MetaOps at once on disjoint device groups, with no change of allocation inside it; data moves only between
// waves.

struct WaveSlice {
  int op = 0;              // into the level's ops
  int devices = 0;
  int64_t first_layer = 0; // of the op's operators, counted from its first
  int64_t layers = 0;
  double seconds = 0;      // layers × T_op(devices)
  int first_device = -1;   // where it runs, [first_device, first_device + devices), once placed
};

struct Wave {
  double start_seconds = 0;
  double seconds = 0;  // its longest slice
  std::vector<WaveSlice> slices;
};

// Builds waves from `parts` (bipoint's) starting at `start_seconds`, each in four steps:
//   propose  the parts still holding operators, at most one per op (parts of one op run one after another),
//            largest device count first, while they fit in the `devices` devices;
//   extend   devices left idle raise a proposed part to its op's next valid count, the part whose op has the
//            most time left first, while any fits;
//   align    the wave lasts as long as one of its parts needs for all its operators: that part runs them all,
//            each other part as many whole operators as fit in that time (rounded to the nearest); a part that
//            fits none runs one and sets the wave's length (kRunOne), or leaves the wave (kLeave). Spindle's
//            part is the shortest (kShortestPart); kBusiestWave takes the part whose time keeps the wave's
//            devices busiest (busy device-seconds over devices × the wave's length; ties: the shorter), which
//            cuts fewer, longer waves where the shortest part would leave rounding gaps in every one;
//   commit   the slices start at the wave's start; the next wave starts at its end.
// Every wave finishes at least one part, so there are at most as many waves as parts. Slices of an op cover its
// operators in order, each once.
enum class PartThatFitsNone { kRunOne, kLeave };
enum class WaveLength { kShortestPart, kBusiestWave };
std::vector<Wave> wavefront(const std::vector<LevelOp>& ops, const std::vector<LevelPart>& parts, int devices,
                            double start_seconds, PartThatFitsNone fits_none = PartThatFitsNone::kRunOne,
                            WaveLength length = WaveLength::kShortestPart);

}  // namespace fulcrum

#endif  // FULCRUM_PLAN_WAVEFRONT_H_
