#include "fulcrum/data/random_batcher.h"

#include "fulcrum/data/epoch_stream.h"

namespace fulcrum {

BatchPlan RandomBatcher::plan(const Dataset& data, const BatchParams& params, const SampleCost&,
                              int64_t first_step) const {
  return plan_from_order(name(), shuffled_ids(data.size(), params.seed, params.epoch), params, data, !packed_,
                         first_step);
}

}  // namespace fulcrum
