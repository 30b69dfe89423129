#ifndef FULCRUM_DATA_BATCHER_H_
#define FULCRUM_DATA_BATCHER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/core/batch_plan.h"
#include "fulcrum/core/dataset.h"
#include "fulcrum/core/sample_cost.h"

namespace fulcrum {

// What to do with a sample larger than a micro-batch cap.
enum class OversizePolicy { kError, kOwnGroup };

struct BatchParams {
  int dp = 1;                    // data-parallel ranks
  int micro_batches = 1;         // micro-batches per rank per step (gradient accumulation)
  int64_t samples_per_step = 0;  // samples per optimizer step over all ranks; 0 = 4 per micro-batch
  int window_steps = 8;          // `fulcrum`: samples move between steps only inside windows this long
  // Per-micro-batch caps (0 = none; `isf` defaults to 9 tiles and 4,096 tokens).
  int64_t vision_cap = 0;
  int64_t token_cap = 0;
  int64_t text_full = 0;    // `isf`: a group with this many tokens is full (0 = token_cap − 128)
  int64_t vision_full = 0;  // `isf`: a group with this many vision units is full (0 = vision_cap)
  int passes = 50;          // `isf`: sampling passes
  bool search = false;      // `isf`: choose the caps by OmniBal's parameter search
  OversizePolicy oversize = OversizePolicy::kError;
  bool drop_last = false;
  uint64_t seed = 0;
  int64_t epoch = 0;

  int64_t slots_per_step() const { return static_cast<int64_t>(dp) * micro_batches; }
  int64_t resolved_samples_per_step() const { return samples_per_step > 0 ? samples_per_step : 4 * slots_per_step(); }
};

// Turns a dataset into one epoch's BatchPlan. Every batcher guarantees: each sample appears exactly once (the
// last step completed by repeating as few samples as possible, or dropped with drop_last, both counted); every
// rank gets the same number of micro-batches in every step, none empty; the plan is a pure function of
// (data, parameters, seed, epoch); and plan(first_step = k) equals the full plan's tail from step k.
class Batcher {
 public:
  virtual ~Batcher() = default;
  virtual std::string_view name() const = 0;
  virtual BatchPlan plan(const Dataset& data, const BatchParams& params, const SampleCost& cost,
                         int64_t first_step = 0) const = 0;
};

// "random", "random-packed", "length-grouped", "isf", "fulcrum"; throws InputError for another name.
std::unique_ptr<Batcher> make_batcher(std::string_view algo);
const std::vector<std::string>& batcher_names();

// An empty plan carrying the run's identity (algo, dp, M, seed, epoch, samples in).
BatchPlan new_plan(std::string_view algo, const BatchParams& params, const Dataset& data, bool padded);

// Ceilings of the batchers' parameters: far past any run, short of plans that would exhaust memory or never finish
// (2^26 micro-batches a step is 16,384 ranks × 4,096 accumulation steps).
inline constexpr int64_t kMostRanks = int64_t{1} << 20;
inline constexpr int64_t kMostMicroBatches = int64_t{1} << 20;
inline constexpr int64_t kMostMicroBatchesPerStep = int64_t{1} << 26;
inline constexpr int64_t kMostWindowSteps = int64_t{1} << 24;
inline constexpr int64_t kMostPasses = 100000;

// What the caller's interface calls the parameters check_params names in its messages.
struct BatchParamNames {
  const char* dp = "--dp";
  const char* micro_batches = "--microbatches";
  const char* samples_per_step = "--samples-per-step";
  const char* window = "--window";
  const char* passes = "--passes";
  const char* caps = "caps and thresholds";
  const char* vision_cap = "--vit-cap";
  const char* search = "--search";  // nullptr where the caller offers no cap search
};

// Checks parameters that every batcher shares; throws InputError with a one-line reason in `names`' terms.
void check_params(const BatchParams& params, const Dataset& data, const BatchParamNames& names = {});

// The id of the first sample over a cap, or -1. Caps of 0 are not checked.
int64_t first_oversize_sample(const Dataset& data, int64_t vision_cap, int64_t token_cap);
// Throws the SampleError for a sample over the caps, naming it.
[[noreturn]] void throw_oversize(const Dataset& data, uint32_t id, int64_t vision_cap, int64_t token_cap);

}  // namespace fulcrum

#endif  // FULCRUM_DATA_BATCHER_H_
