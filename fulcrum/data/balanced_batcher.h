#ifndef FULCRUM_DATA_BALANCED_BATCHER_H_
#define FULCRUM_DATA_BALANCED_BATCHER_H_

#include <span>
#include <vector>

#include "fulcrum/data/batcher.h"

namespace fulcrum {

// Fulcrum's balanced batcher (`fulcrum`): every rank of every step, and every micro-batch, gets the same
// predicted compute time, and the same vision and LLM loads, while the data order stays close to random.
//
// The seeded shuffled stream is cut into steps of `samples_per_step` and the steps into windows of
// `window_steps`. A sample may move only between steps of its own window, and a window holds exactly its
// stream samples, so the order is random at the scale of windows. Inside a window of S samples and
// B = steps·dp·M micro-batches (bins):
//   1. Deal: samples in decreasing predicted time, each to the bin whose predicted time is lowest (LPT);
//      with caps, the lowest bin that can still take it. The first B samples open the B bins, so none is empty.
//   2. Swap: bins sorted by time are paired lightest with heaviest; in each pair the single move or swap of
//      samples that most lowers the heavier bin is applied, for a few rounds. This removes most of LPT's
//      residual spread, which is of the order of the smallest sample.
//   3. Group: bins are sorted by (vision units, tokens) and consecutive runs of dp bins form one micro-batch slot
//      of a step. Since only bins in the same step must match, sorting makes nearly every step hold bins with
//      the same whole number of tiles and almost the same time: the ViT Dist Ratio falls to its floor, and
//      the residual time spread inside a step is a fraction of the window's.
//   4. Order: rank r takes the r-th bin of even micro-batch slots and the (dp−1−r)-th of odd ones, so rank sums
//      stay even; the window's steps are then put in a seeded random order, so no light-to-heavy drift shows.
// Cost: O(S log B) per window, windows independent (resuming at step k recomputes from k's window only). With
// two cores the windows are shared between two threads and the plan is assembled in window order, so it is the
// same as from one thread; the SampleCost is then asked from both threads at once (its implementations are pure).
class BalancedBatcher : public Batcher {
 public:
  std::string_view name() const override { return "fulcrum"; }
  BatchPlan plan(const Dataset& data, const BatchParams& params, const SampleCost& cost,
                 int64_t first_step) const override;
};

}  // namespace fulcrum

#endif  // FULCRUM_DATA_BALANCED_BATCHER_H_
