#ifndef FULCRUM_PLAN_LEVEL_ALLOCATION_H_
#define FULCRUM_PLAN_LEVEL_ALLOCATION_H_

#include <cstdint>
#include <vector>

#include "fulcrum/plan/scalability_curve.h"

namespace fulcrum {

// Spindle's allocation of one MetaLevel's devices (reference/spindle.md §6–7).

// One MetaOp of the level: its curve and its operator count L_m.
struct LevelOp {
  const ScalabilityCurve* curve = nullptr;
  int64_t layers = 0;
};

// The continuous relaxation: every MetaOp on a real-valued device count n_m, all finishing together at C*, with
// Σ n_m = N (eq. 9), found by bisection on C with each n_m = T_m⁻¹(C / L_m) (ScalabilityCurve::devices_for).
// With speed interpolated over its concave envelope, no schedule of the level on N devices finishes before C*:
// it is the level's lower bound on compute makespan.
struct Relaxation {
  double makespan_seconds = 0;  // C*
  std::vector<double> devices;  // n*_m per op
  int iterations = 0;
};
// InputError when an op has no curve or no operators, or `devices` < 1.
Relaxation relax_level(const std::vector<LevelOp>& ops, int devices);

// An ASL-tuple without its start: `layers` consecutive operators of op `op` on `devices` devices.
struct LevelPart {
  int op = 0;  // into the level's ops
  int devices = 0;
  int64_t layers = 0;
};

// Bi-point discretisation (eqs. 10a/10b): each n*_m between the neighbouring valid counts on its curve's speed
// envelope, n_lo ≤ n* ≤ n_hi (n_lo 0 below the first: a dummy that only pads time), its L_m operators split so that it would still end at C*, rounded
// to whole operators with l_hi + l_lo = L_m exactly; parts with no operators or no devices are dropped. At most
// two parts per op, in (op, devices descending) order.
std::vector<LevelPart> bipoint(const std::vector<LevelOp>& ops, const Relaxation& relaxation);

}  // namespace fulcrum

#endif  // FULCRUM_PLAN_LEVEL_ALLOCATION_H_
