#ifndef FULCRUM_PLAN_RECOMPUTE_H_
#define FULCRUM_PLAN_RECOMPUTE_H_

#include <array>
#include <cstdint>
#include <vector>

namespace fulcrum {

// Adaptive recomputation (OmniBal §5, exact): on one device, choose for each layer whether its activations are
// kept (no recomputation), partly recomputed (selective: the attention core) or recomputed whole (full), so
// that the activations held for the micro-batches in flight fit the device's free memory with the least
// recomputation time.
//
// Layers of one shape on the device form a class; what a layer keeps and what its recomputation costs depend
// only on its class, so a choice is a count per class and mode.
struct RecomputeClass {
  int64_t layers = 0;
  // Per mode (index: Recompute none, selective, full): activation bytes one layer keeps for the micro-batches in
  // flight on its stage, and the seconds recomputation adds per iteration. Usually decreasing bytes and
  // increasing seconds from none to full; nothing here relies on it.
  std::array<double, 3> kept_bytes{};
  std::array<double, 3> recompute_seconds{};
};

struct RecomputeChoice {
  std::vector<std::array<int64_t, 3>> layers;  // per class: layers with none, selective, full
  double kept_bytes = 0;
  double recompute_seconds = 0;
  bool fits = false;
  // When nothing fits: bytes over the budget of the choice keeping the least (the smallest shortfall).
  double shortfall_bytes = 0;
};

// The choice with the least recompute_seconds among those with kept_bytes ≤ budget_bytes (ties: fewer kept
// bytes, then a fixed order). Exact: the Pareto frontier (bytes, seconds) of each class over its (none,
// selective, full) counts, folded class by class with dominated points dropped. A class of n layers has
// (n + 1)(n + 2)/2 choices before pruning.
RecomputeChoice choose_recompute(const std::vector<RecomputeClass>& classes, double budget_bytes);

}  // namespace fulcrum

#endif  // FULCRUM_PLAN_RECOMPUTE_H_
