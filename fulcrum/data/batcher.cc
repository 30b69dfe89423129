#include "fulcrum/data/batcher.h"

#include <fmt/format.h>

#include "fulcrum/core/error.h"
#include "fulcrum/data/balanced_batcher.h"
#include "fulcrum/data/isf.h"
#include "fulcrum/data/length_grouped_batcher.h"
#include "fulcrum/data/random_batcher.h"

namespace fulcrum {

const std::vector<std::string>& batcher_names() {
  static const std::vector<std::string> names{"random", "random-packed", "length-grouped", "isf", "fulcrum"};
  return names;
}

std::unique_ptr<Batcher> make_batcher(std::string_view algo) {
  if (algo == "random") return std::make_unique<RandomBatcher>(false);
  if (algo == "random-packed") return std::make_unique<RandomBatcher>(true);
  if (algo == "length-grouped") return std::make_unique<LengthGroupedBatcher>();
  if (algo == "isf") return std::make_unique<IsfBatcher>();
  if (algo == "fulcrum") return std::make_unique<BalancedBatcher>();
  throw InputError(fmt::format("unknown batcher '{}' (one of: {})", algo, fmt::join(batcher_names(), ", ")));
}

BatchPlan new_plan(std::string_view algo, const BatchParams& params, const Dataset& data, bool padded) {
  BatchPlan plan(std::string(algo), params.dp, params.micro_batches, padded);
  plan.samples_in = static_cast<int64_t>(data.size());
  plan.seed = params.seed;
  plan.epoch = params.epoch;
  return plan;
}

void check_params(const BatchParams& p, const Dataset& data, const BatchParamNames& names) {
  const auto check = [](const char* name, int64_t value, int64_t most) {
    if (value < 1) throw InputError(fmt::format("{} must be at least 1, got {}", name, value));
    if (value > most) throw InputError(fmt::format("{} must be at most {}, got {}", name, most, value));
  };
  check(names.dp, p.dp, kMostRanks);
  check(names.micro_batches, p.micro_batches, kMostMicroBatches);
  if (p.samples_per_step < 0) throw InputError(fmt::format("{} must be positive", names.samples_per_step));
  check(names.window, p.window_steps, kMostWindowSteps);
  check(names.passes, p.passes, kMostPasses);
  if (p.slots_per_step() > kMostMicroBatchesPerStep) {
    throw InputError(fmt::format("{} × {} = {} micro-batches a step: at most {}", names.dp, names.micro_batches,
                                 p.slots_per_step(), kMostMicroBatchesPerStep));
  }
  if (p.vision_cap < 0 || p.token_cap < 0 || p.text_full < 0 || p.vision_full < 0) {
    throw InputError(fmt::format("{} must not be negative", names.caps));
  }
  if (p.resolved_samples_per_step() < p.slots_per_step()) {
    throw InputError(fmt::format("{} {} is less than {} × {} = {}: a micro-batch would be empty",
                                 names.samples_per_step, p.resolved_samples_per_step(), names.dp, names.micro_batches,
                                 p.slots_per_step()));
  }
  if (data.empty()) throw InputError("the dataset has no samples");
  // A step far larger than the data is its samples repeated over and over: memory and time for nothing a run
  // would train on (2^20 ranks × 64 micro-batches over 1.2M samples took minutes and more than 11 GB).
  constexpr int64_t kMostRepeats = 16, kAlwaysAllowed = int64_t{1} << 20;
  const int64_t most = std::max(kAlwaysAllowed, kMostRepeats * static_cast<int64_t>(data.size()));
  if (p.resolved_samples_per_step() > most) {
    throw InputError(fmt::format("{} samples a step over a dataset of {}: each sample would repeat more than {} "
                                 "times in one step (at most {} samples a step)", p.resolved_samples_per_step(),
                                 data.size(), kMostRepeats, most));
  }
}

int64_t first_oversize_sample(const Dataset& data, int64_t vision_cap, int64_t token_cap) {
  for (uint32_t id = 0; id < data.size(); ++id) {
    if ((vision_cap > 0 && data.vision(id) > vision_cap) || (token_cap > 0 && data.tokens(id) > token_cap)) return id;
  }
  return -1;
}

void throw_oversize(const Dataset& data, uint32_t id, int64_t vision_cap, int64_t token_cap) {
  const char* unit = data.vision_unit() == VisionUnit::kTiles ? "tiles" : "vision tokens";
  throw SampleError(fmt::format("{} ({} {}, {} tokens) exceeds the micro-batch caps ({} {}, {} tokens); raise the "
                               "caps or give such samples micro-batches of their own (--oversize own-group; in "
                               "Python, oversize=\"own-group\")",
                               data.describe_sample(id), data.vision(id), unit, data.tokens(id),
                               vision_cap > 0 ? fmt::to_string(vision_cap) : "no cap", unit,
                               token_cap > 0 ? fmt::to_string(token_cap) : "no cap"));
}

}  // namespace fulcrum
