#ifndef FULCRUM_DATA_ISF_SEARCH_H_
#define FULCRUM_DATA_ISF_SEARCH_H_

#include <span>
#include <vector>

#include "fulcrum/core/error.h"
#include "fulcrum/core/sample_cost.h"
#include "fulcrum/data/batcher.h"
#include "fulcrum/data/isf.h"

namespace fulcrum {

// OmniBal's search for ISF caps (reference/omnibal.md §3.5): start from Q_t = 4,096 and Q_v = ⌊4096 / tpt⌋
// (tpt = tokens per tile of the data), each raised to the largest sample's load where it is below (OmniBal's search
// would end there before its first trial), grow both caps while the mean group stays at most b + 1 samples, shrink
// them after an overshoot with no hit, and among caps giving b ≤ mean samples per group ≤ b + 1 keep the one with
// the lowest Pad + Dist_vit + Dist_llm at the run's dp and micro-batches. b is samples_per_step / (dp·M), 4 by
// default. Each trial runs ISF with 50 passes; the search stops after 64 trials or when a cap would fall below the
// largest sample's load (1 with own-group oversize). On patch-token data it starts at Q_v = 4,096 LLM tokens' worth
// of patch tokens in the data's mix and steps by 256 tokens' worth.
struct IsfTrial {
  IsfParams params;
  double mean_group_samples = 0;
  double score = 0;
  bool candidate = false;
};

struct IsfSearchResult {
  IsfParams best;
  std::vector<IsfTrial> trials;
  int64_t tokens_per_tile = 0;  // tpt
  // Each trial's change of the caps: 1 and tpt on tile data; on patch-token data, 256 tokens and the patch
  // tokens that come with them in the data's mix.
  int64_t vision_step = 1;
  int64_t token_step = 0;
};

// The search found no caps giving b to b + 1 samples a group: the data cannot be batched so for these parameters.
class IsfSearchFailed : public InputError {
 public:
  using InputError::InputError;
};

IsfSearchResult isf_search(const Dataset& data, const BatchParams& params, const SampleCost& cost);

// The search for several runs that differ only in dp and micro-batches and share b (and seed, epoch and oversize
// policy): their trials are the same caps and the same groups, so ISF runs once a trial and each run scores the
// trial at its own dp and micro-batches. The results are in `runs`' order, each what isf_search would give that
// run alone. Whether caps give b to b + 1 samples a group depends on b alone, so one IsfSearchFailed covers them
// all. Throws std::invalid_argument when the runs do not share those parameters.
std::vector<IsfSearchResult> isf_search(const Dataset& data, std::span<const BatchParams> runs,
                                        const SampleCost& cost);

}  // namespace fulcrum

#endif  // FULCRUM_DATA_ISF_SEARCH_H_
