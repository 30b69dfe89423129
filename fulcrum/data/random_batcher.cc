#include "fulcrum/data/random_batcher.h"

#include "fulcrum/data/epoch_stream.h"

namespace fulcrum {

BatchPlan RandomBatcher::plan(const Dataset& data, const BatchParams& params, const SampleCost&,
                              int64_t first_step) const {
  StepStream stream = cut_into_steps(shuffled_ids(data.size(), params.seed, params.epoch),
                                     params.resolved_samples_per_step(), params.slots_per_step(), params.drop_last);
  BatchPlan plan(std::string(name()), params.dp, params.micro_batches, !packed_);
  plan.samples_in = static_cast<int64_t>(data.size());
  plan.repeated = stream.repeated;
  plan.dropped = stream.dropped;
  plan.seed = params.seed;
  plan.epoch = params.epoch;
  for (int64_t s = 0; s < stream.steps(); ++s) append_step_evenly(plan, stream.step(s));
  return first_step == 0 ? plan : plan.tail(first_step);
}

}  // namespace fulcrum
