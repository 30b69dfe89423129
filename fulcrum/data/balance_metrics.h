#ifndef FULCRUM_DATA_BALANCE_METRICS_H_
#define FULCRUM_DATA_BALANCE_METRICS_H_

#include <cstdint>
#include <span>

#include "fulcrum/core/batch_plan.h"
#include "fulcrum/core/dataset.h"
#include "fulcrum/core/sample_cost.h"

namespace fulcrum {

// OmniBal's Dist Ratio of one step's per-rank loads: Σ(max − x_i) / (max·N), the mean fraction of the slowest
// rank's work the others spend idle. The denominator is clamped to max(max, 1).
double dist_ratio(std::span<const int64_t> loads);

// The lowest Dist Ratio any split of the same items over the same ranks can reach: the max is replaced by
// max(⌈Σ loads / N⌉, largest item), whole units being indivisible.
double dist_ratio_floor(std::span<const int64_t> loads, int64_t largest_item);

// max / mean − 1 of per-rank times (0 when all are 0).
double time_imbalance(std::span<const double> seconds);

// Balance of one group of concurrent loads, averaged over the groups measured.
struct Balance {
  double dist_ratio_vit = 0;
  double dist_ratio_llm = 0;
  double dist_ratio_vit_floor = 0;
  double dist_ratio_llm_floor = 0;
  double time_imbalance = 0;
};

struct PlanMetrics {
  // Σ padding tokens / Σ (padded length × batch size) over every micro-batch: token-weighted, not averaged.
  double pad_ratio = 0;
  Balance per_step;         // rank loads summed over a step's micro-batches, averaged over steps
  Balance per_micro_batch;  // the i-th micro-batch of every rank, averaged over (step, i)
  double step_seconds_sum = 0;  // Σ over steps of the slowest rank's predicted time
  double ideal_seconds_sum = 0; // Σ over steps of the mean rank's predicted time
};

// The LLM sees a padded micro-batch as count × longest tokens; a packed one as Σ tokens.
MicroBatchLoad micro_batch_load(const Dataset& data, std::span<const uint32_t> ids, bool padded);

PlanMetrics measure_plan(const BatchPlan& plan, const Dataset& data, const SampleCost& cost);

}  // namespace fulcrum

#endif  // FULCRUM_DATA_BALANCE_METRICS_H_
