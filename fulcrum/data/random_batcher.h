#ifndef FULCRUM_DATA_RANDOM_BATCHER_H_
#define FULCRUM_DATA_RANDOM_BATCHER_H_

#include "fulcrum/data/batcher.h"

namespace fulcrum {

// The InternVL baseline: shuffle, then a fixed number of samples per micro-batch (samples_per_step / (dp·M)),
// each micro-batch padded to its longest sample. With `packed`, the same samples per rank are packed into one
// sequence per micro-batch instead (`random-packed`).
class RandomBatcher : public Batcher {
 public:
  explicit RandomBatcher(bool packed) : packed_(packed) {}
  std::string_view name() const override { return packed_ ? "random-packed" : "random"; }
  BatchPlan plan(const Dataset& data, const BatchParams& params, const SampleCost& cost,
                 int64_t first_step) const override;

 private:
  bool packed_;
};

}  // namespace fulcrum

#endif  // FULCRUM_DATA_RANDOM_BATCHER_H_
