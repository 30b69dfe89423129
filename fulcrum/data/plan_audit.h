#ifndef FULCRUM_DATA_PLAN_AUDIT_H_
#define FULCRUM_DATA_PLAN_AUDIT_H_

#include <cstdint>

#include "fulcrum/core/batch_plan.h"
#include "fulcrum/core/dataset.h"

namespace fulcrum {

// Counts what a whole-epoch plan does with each sample, to check the batchers' promises independently of how
// they built it: every sample once (plus the counted repeats, minus the counted drops), no empty micro-batch.
struct PlanAudit {
  int64_t samples_out = 0;     // placements in the plan
  int64_t missing = 0;         // samples never placed (should equal plan.dropped)
  int64_t extra = 0;           // placements beyond a sample's first (should equal plan.repeated)
  int64_t duplicated = 0;      // extra placements not accounted as repeats: extra − repeated
  int64_t empty_micro_batches = 0;
  int64_t out_of_range = 0;    // ids not in the dataset

  bool ok(const BatchPlan& plan) const {
    return missing == plan.dropped && extra == plan.repeated && empty_micro_batches == 0 && out_of_range == 0;
  }
};

PlanAudit audit_plan(const BatchPlan& plan, const Dataset& data);

}  // namespace fulcrum

#endif  // FULCRUM_DATA_PLAN_AUDIT_H_
