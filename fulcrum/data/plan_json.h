#ifndef FULCRUM_DATA_PLAN_JSON_H_
#define FULCRUM_DATA_PLAN_JSON_H_

#include <string>
#include <string_view>

#include "fulcrum/core/batch_plan.h"

namespace fulcrum {

// The plan as versioned JSON:
//   {"fulcrum": 1, "kind": "batch_plan", "algo": "...", "dp": N, "micro_batches_per_rank": M,
//    "packing": "packed" | "padded", "seed": S, "epoch": E, "first_step": k, "samples_in": n,
//    "repeated": r, "dropped": d, "steps": [[[id, ...] × M] × N] × steps}
// steps[s][r][j] lists the sample ids of rank r's j-th micro-batch in step s (ids: positions in the dataset).
std::string plan_to_json(const BatchPlan& plan);

// Reads plan_to_json's output back; throws InputError naming `file` on a malformed plan.
BatchPlan plan_from_json(std::string_view text, const std::string& file);

}  // namespace fulcrum

#endif  // FULCRUM_DATA_PLAN_JSON_H_
