#include "fulcrum/data/epoch_stream.h"

#include <fmt/format.h>

#include <numeric>

#include "fulcrum/core/error.h"
#include "fulcrum/core/rng.h"

namespace fulcrum {

namespace {
constexpr uint64_t kStreamPurpose = 0x73747265616dULL;  // "stream"
}

std::vector<uint32_t> shuffled_ids(size_t n, uint64_t seed, int64_t epoch) {
  std::vector<uint32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0u);
  Rng rng({seed, static_cast<uint64_t>(epoch), kStreamPurpose});
  rng.shuffle(std::span<uint32_t>(ids));
  return ids;
}

StepStream cut_into_steps(std::vector<uint32_t> order, int64_t samples_per_step, int64_t min_per_step,
                          bool drop_last) {
  StepStream out;
  const int64_t n = static_cast<int64_t>(order.size());
  const int64_t full = n / samples_per_step;
  int64_t tail = n - full * samples_per_step;
  if (drop_last) {
    out.dropped = tail;
    order.resize(static_cast<size_t>(full * samples_per_step));
    tail = 0;
    if (full == 0) {
      throw InputError(fmt::format("dropping the short last step leaves no step: {} samples, {} per step", n, samples_per_step));
    }
  } else if (tail > 0 && tail < min_per_step) {
    // Repeat the fewest samples that give every micro-batch of the last step one sample.
    const int64_t need = min_per_step - tail;
    for (int64_t k = 0; k < need; ++k) order.push_back(order[static_cast<size_t>(k % n)]);
    out.repeated = need;
  }
  out.step_begin.reserve(static_cast<size_t>(full + 2));
  for (int64_t s = 0; s <= full; ++s) out.step_begin.push_back(static_cast<uint64_t>(s * samples_per_step));
  if (tail > 0) out.step_begin.push_back(order.size());
  out.order = std::move(order);
  return out;
}

int64_t even_part_size(int64_t total, int64_t parts, int64_t index) {
  return total / parts + (index < total % parts ? 1 : 0);
}

BatchPlan plan_from_order(std::string_view algo, std::vector<uint32_t> order, const BatchParams& params,
                          const Dataset& data, bool padded, int64_t first_step) {
  const StepStream stream = cut_into_steps(std::move(order), params.resolved_samples_per_step(),
                                           params.slots_per_step(), params.drop_last);
  BatchPlan plan = new_plan(algo, params, data, padded);
  plan.repeated = stream.repeated;
  plan.dropped = stream.dropped;
  plan.reserve(stream.order.size(), static_cast<size_t>(stream.steps() * params.slots_per_step()));
  for (int64_t s = 0; s < stream.steps(); ++s) append_step_evenly(plan, stream.step(s));
  return first_step == 0 ? plan : plan.tail(first_step);
}

void append_step_evenly(BatchPlan& plan, std::span<const uint32_t> samples) {
  const int64_t slots = static_cast<int64_t>(plan.dp()) * plan.micro_batches_per_rank();
  const int64_t total = static_cast<int64_t>(samples.size());
  size_t offset = 0;
  for (int64_t q = 0; q < slots; ++q) {
    const auto size = static_cast<size_t>(even_part_size(total, slots, q));
    plan.add_micro_batch(samples.subspan(offset, size));
    offset += size;
  }
}

}  // namespace fulcrum
