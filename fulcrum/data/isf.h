#ifndef FULCRUM_DATA_ISF_H_
#define FULCRUM_DATA_ISF_H_

#include <cstdint>
#include <span>
#include <vector>

#include "fulcrum/data/batcher.h"

namespace fulcrum {

// OmniBal's Iterative Sampling and Filtering (reference/omnibal.md §3.3). A pass walks the pool in a random
// order and closes the open group whenever the next sample would exceed the vision cap or the token cap. A group
// is full when it reaches the vision-full or the text-full threshold (either one, ≥); full groups are kept and the
// rest go back to the pool for the next pass. The last pass's groups are kept as they are.
// Fixed quirks of the reference: oversize samples are an error or a group of their own, never dropped (Q1); the
// open group is always flushed (Q2); ≥ instead of = for vision-full (Q4); passes stop early on an empty pool (Q3).
struct IsfParams {
  int64_t vision_cap = 9;      // Q_v
  int64_t token_cap = 4096;    // Q_t
  int64_t vision_full = 9;     // Q'_v
  int64_t text_full = 3968;    // Q'_t
  int passes = 50;             // T
  uint64_t seed = 0;
  int64_t epoch = 0;
};

// Groups in CSR form: group g holds ids[begin[g], begin[g + 1]).
struct Groups {
  std::vector<uint32_t> ids;
  std::vector<uint64_t> begin{0};

  size_t size() const { return begin.size() - 1; }
  std::span<const uint32_t> group(size_t g) const { return {ids.data() + begin[g], ids.data() + begin[g + 1]}; }
  void add(std::span<const uint32_t> group) {
    ids.insert(ids.end(), group.begin(), group.end());
    begin.push_back(ids.size());
  }
};

// One pass in the given order (FILL without its shuffle): the open group closes when the next sample would
// exceed a cap; the open group is flushed at the end.
void isf_fill(const Dataset& data, std::span<const uint32_t> order, const IsfParams& params, Groups& out);
// FULL: the group reaches the vision-full or the text-full threshold.
bool isf_full(const Dataset& data, std::span<const uint32_t> group, const IsfParams& params);

// Groups every sample of `data`, in OmniBal's output order: groups accepted in pass 1, then later passes, then
// the last pass's remainder, then oversize samples alone (with kOwnGroup; kError throws naming the sample).
Groups isf_groups(const Dataset& data, const IsfParams& params, OversizePolicy oversize);

// ISF as a batcher: the groups are shuffled over the whole list before they are dealt (fixing the reference's
// habit of piling the unfiltered remainder onto the last ranks, Q5), then dealt dp·M to a step; rank r's j-th
// micro-batch is the step's (r·M + j)-th group. A short last step is completed by splitting its largest groups,
// or, with fewer samples than micro-batches, by repeating samples; drop_last drops it.
class IsfBatcher : public Batcher {
 public:
  std::string_view name() const override { return "isf"; }
  BatchPlan plan(const Dataset& data, const BatchParams& params, const SampleCost& cost,
                 int64_t first_step) const override;
};

// Patch tokens have no default cap (tiles have 9): on such data isf needs a vision cap or the cap search.
// Throws InputError in `names`' terms.
void check_isf_caps(const BatchParams& params, const Dataset& data, const BatchParamNames& names = {});

// The ISF parameters a BatchParams asks for, defaults filled in (9 tiles, 4,096 tokens, text-full 4,096 − 128).
IsfParams isf_params(const BatchParams& params, const Dataset& data);

// `params` asking for the caps and full thresholds of `caps` (what a cap search found).
void take_caps(const IsfParams& caps, BatchParams& params);

// Deals groups into a plan as IsfBatcher does.
BatchPlan deal_groups(const Groups& groups, const Dataset& data, const BatchParams& params);

}  // namespace fulcrum

#endif  // FULCRUM_DATA_ISF_H_
