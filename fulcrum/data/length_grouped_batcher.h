#ifndef FULCRUM_DATA_LENGTH_GROUPED_BATCHER_H_
#define FULCRUM_DATA_LENGTH_GROUPED_BATCHER_H_

#include <span>
#include <vector>

#include "fulcrum/data/batcher.h"

namespace fulcrum {

// LLaVA's `group_by_modality_length` baseline. Multimodal and text-only samples are shuffled apart and cut into
// megabatches of one step; each megabatch is sorted by length, longest first, and dealt to the ranks by
// `split_to_even_chunks` (each sample to the rank with the fewest tokens that still has room). Megabatches of
// both kinds are shuffled together; the two leftover megabatches are merged, sorted by id, and go last.
// Micro-batches are padded to their longest sample, as LLaVA's collator does.
class LengthGroupedBatcher : public Batcher {
 public:
  std::string_view name() const override { return "length-grouped"; }
  BatchPlan plan(const Dataset& data, const BatchParams& params, const SampleCost& cost,
                 int64_t first_step) const override;
};

// LLaVA's split_to_even_chunks: `ids` sorted by length (longest first) into `chunks` lists of equal size;
// when the size does not divide, a strided split instead.
std::vector<std::vector<uint32_t>> split_to_even_chunks(std::span<const uint32_t> ids,
                                                        std::span<const uint32_t> tokens, int chunks);

// The whole epoch's sample order as LLaVA's LengthGroupedSampler yields it.
std::vector<uint32_t> modality_length_grouped_order(const Dataset& data, int64_t megabatch, int dp,
                                                    uint64_t seed, int64_t epoch);

}  // namespace fulcrum

#endif  // FULCRUM_DATA_LENGTH_GROUPED_BATCHER_H_
