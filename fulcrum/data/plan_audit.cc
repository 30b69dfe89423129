#include "fulcrum/data/plan_audit.h"

#include <vector>

namespace fulcrum {

PlanAudit audit_plan(const BatchPlan& plan, const Dataset& data) {
  PlanAudit a;
  std::vector<uint32_t> seen(data.size(), 0);
  for (int64_t k = 0; k < plan.micro_batch_count(); ++k) {
    auto mb = plan.micro_batch(k);
    if (mb.empty()) ++a.empty_micro_batches;
    for (uint32_t id : mb) {
      ++a.samples_out;
      if (id >= data.size()) {
        ++a.out_of_range;
        continue;
      }
      if (seen[id]++ > 0) ++a.extra;
    }
  }
  for (uint32_t count : seen) a.missing += count == 0;
  a.duplicated = a.extra - plan.repeated;
  return a;
}

}  // namespace fulcrum
