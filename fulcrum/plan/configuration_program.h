#ifndef FULCRUM_PLAN_CONFIGURATION_PROGRAM_H_
#define FULCRUM_PLAN_CONFIGURATION_PROGRAM_H_

#include <cstddef>
#include <vector>

#include "fulcrum/plan/level_allocation.h"
#include "fulcrum/plan/wavefront.h"

namespace fulcrum {

// A level packed by the linear program over device configurations, where the wavefront packs the bi-point parts.
// A configuration runs some of the level's ops at once, each on one valid count of its curve, on at most
// `devices` devices together; the program finds how long each configuration runs so that every op gets through
// its operators, with the least total time:
//   minimise Σ_c t_c   subject to   Σ_c t_c / T_m(n_mc) ≥ L_m for every op m,   t ≥ 0.
// Its optimum is the level's least makespan on valid counts when an op's operators may be split anywhere between
// configurations (so no schedule of whole operators is shorter, and it is at least the relaxation's C*, which
// also lets counts be fractional). It is solved by the revised simplex method with column generation: the column
// that would improve the optimum most is found by a knapsack over the devices (each op at most one count), so the
// configurations are never enumerated. A basic optimum runs at most one configuration per op.
struct ConfigurationProgram {
  double makespan_seconds = 0;  // the optimum, operators split freely
  // The optimum's configurations as waves from `start_seconds`, each op's operators rounded to whole ones (its
  // total exact, each configuration's share to the nearest), each wave as long as its longest slice. Empty when
  // the program was not solved (an op with no point on `devices` or fewer, more than
  // kMostConfigurationProgramOps ops, or the iteration limit).
  std::vector<Wave> waves;
  int iterations = 0;  // simplex pivots
};

// The most ops a level's program is solved for: its dense solves grow with the cube of the ops, each pivot.
inline constexpr size_t kMostConfigurationProgramOps = 48;

// InputError when an op has no curve or no operators, or `devices` < 1.
ConfigurationProgram configuration_program(const std::vector<LevelOp>& ops, int devices, double start_seconds);

}  // namespace fulcrum

#endif  // FULCRUM_PLAN_CONFIGURATION_PROGRAM_H_
