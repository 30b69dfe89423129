#ifndef FULCRUM_CORE_BATCH_PLAN_H_
#define FULCRUM_CORE_BATCH_PLAN_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fulcrum {

// One epoch of training data cut into optimizer steps: for every step, every data-parallel rank gets the same
// number of micro-batches, each a group of sample ids that is fed as one batch (packed into one sequence, or
// padded to its longest sample). Stored flat, in step → rank → micro-batch order.
class BatchPlan {
 public:
  BatchPlan(std::string algo, int dp, int micro_batches_per_rank, bool padded);

  const std::string& algo() const { return algo_; }
  int dp() const { return dp_; }
  int micro_batches_per_rank() const { return micro_batches_; }
  // True when a micro-batch is padded to its longest sample instead of packed.
  bool padded() const { return padded_; }

  // Steps held; the first one is `first_step()` of the epoch (non-zero for a resumed tail).
  int64_t steps() const;
  int64_t first_step() const { return first_step_; }
  int64_t micro_batch_count() const { return static_cast<int64_t>(begin_.size()) - 1; }
  std::span<const uint32_t> micro_batch(int64_t step, int rank, int micro_batch) const;
  std::span<const uint32_t> micro_batch(int64_t flat_index) const;
  int64_t samples_in_step(int64_t step) const;
  const std::vector<uint32_t>& sample_ids() const { return ids_; }
  // Micro-batch i holds sample_ids()[begins[i], begins[i + 1]); micro_batch_count() + 1 entries.
  const std::vector<uint64_t>& micro_batch_begins() const { return begin_; }

  // Builds the plan micro-batch by micro-batch, in step → rank → micro-batch order.
  void add_micro_batch(std::span<const uint32_t> ids);
  void reserve(size_t samples, size_t micro_batches);
  // Numbers the held steps from `step` of the epoch (a plan built from a later window).
  void set_first_step(int64_t step) { first_step_ = step; }

  // Epoch accounting, the same for a whole plan and for its tails.
  int64_t samples_in = 0;  // samples in the dataset
  int64_t repeated = 0;    // placements that repeat a sample to complete the last step
  int64_t dropped = 0;     // samples left out by drop_last
  uint64_t seed = 0;
  int64_t epoch = 0;

  // The plan from `step` on, as a resumed run would compute it.
  BatchPlan tail(int64_t step) const;

 private:
  std::string algo_;
  int dp_;
  int micro_batches_;
  bool padded_;
  int64_t first_step_ = 0;
  std::vector<uint32_t> ids_;
  std::vector<uint64_t> begin_{0};
};

// Equal when every step, rank and micro-batch holds the same ids in the same order.
bool same_batches(const BatchPlan& a, const BatchPlan& b);

}  // namespace fulcrum

#endif  // FULCRUM_CORE_BATCH_PLAN_H_
