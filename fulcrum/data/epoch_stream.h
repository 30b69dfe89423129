#ifndef FULCRUM_DATA_EPOCH_STREAM_H_
#define FULCRUM_DATA_EPOCH_STREAM_H_

#include <cstdint>
#include <span>
#include <vector>

#include "fulcrum/core/batch_plan.h"
#include "fulcrum/data/batcher.h"

namespace fulcrum {

// The epoch's samples in seeded random order, cut into steps of `samples_per_step`. The last step, if short,
// is completed to `min_per_step` samples by repeating samples from the start of the stream (as PyTorch's
// DistributedSampler pads), or dropped when `drop_last` is set.
struct StepStream {
  std::vector<uint32_t> order;       // the shuffled ids, then any repeated ones
  std::vector<uint64_t> step_begin;  // step s holds order[step_begin[s], step_begin[s + 1])
  int64_t repeated = 0;
  int64_t dropped = 0;

  int64_t steps() const { return static_cast<int64_t>(step_begin.size()) - 1; }
  std::span<const uint32_t> step(int64_t s) const {
    return {order.data() + step_begin[s], order.data() + step_begin[s + 1]};
  }
};

// A seeded permutation of 0..n-1, fixed by (seed, epoch).
std::vector<uint32_t> shuffled_ids(size_t n, uint64_t seed, int64_t epoch);

// Cuts `order` into steps. Throws InputError when drop_last leaves no step.
StepStream cut_into_steps(std::vector<uint32_t> order, int64_t samples_per_step, int64_t min_per_step,
                          bool drop_last);

// Sizes of `parts` contiguous pieces of `total` items that differ by at most one, larger ones first.
int64_t even_part_size(int64_t total, int64_t parts, int64_t index);

// A plan that cuts `order` into steps of samples_per_step and lays each step out evenly (append_step_evenly):
// the shape of the random and length-grouped baselines. Returns the steps from `first_step` on.
BatchPlan plan_from_order(std::string_view algo, std::vector<uint32_t> order, const BatchParams& params,
                          const Dataset& data, bool padded, int64_t first_step);

// Appends one step: rank r's micro-batch j takes the (r·M + j)-th of dp·M contiguous, near-equal pieces.
void append_step_evenly(BatchPlan& plan, std::span<const uint32_t> samples);

}  // namespace fulcrum

#endif  // FULCRUM_DATA_EPOCH_STREAM_H_
