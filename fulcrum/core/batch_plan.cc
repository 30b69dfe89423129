#include "fulcrum/core/batch_plan.h"

#include <algorithm>
#include <stdexcept>

namespace fulcrum {

BatchPlan::BatchPlan(std::string algo, int dp, int micro_batches_per_rank, bool padded)
    : algo_(std::move(algo)), dp_(dp), micro_batches_(micro_batches_per_rank), padded_(padded) {
  if (dp < 1 || micro_batches_per_rank < 1) throw std::invalid_argument("BatchPlan: dp and M must be >= 1");
}

int64_t BatchPlan::steps() const {
  return micro_batch_count() / (static_cast<int64_t>(dp_) * micro_batches_);
}

std::span<const uint32_t> BatchPlan::micro_batch(int64_t flat_index) const {
  return {ids_.data() + begin_[flat_index], ids_.data() + begin_[flat_index + 1]};
}

std::span<const uint32_t> BatchPlan::micro_batch(int64_t step, int rank, int micro_batch) const {
  return this->micro_batch((step * dp_ + rank) * micro_batches_ + micro_batch);
}

int64_t BatchPlan::samples_in_step(int64_t step) const {
  const int64_t per_step = static_cast<int64_t>(dp_) * micro_batches_;
  return static_cast<int64_t>(begin_[(step + 1) * per_step] - begin_[step * per_step]);
}

void BatchPlan::add_micro_batch(std::span<const uint32_t> ids) {
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  begin_.push_back(ids_.size());
}

void BatchPlan::reserve(size_t samples, size_t micro_batches) {
  ids_.reserve(samples);
  begin_.reserve(micro_batches + 1);
}

BatchPlan BatchPlan::tail(int64_t step) const {
  BatchPlan out(algo_, dp_, micro_batches_, padded_);
  out.samples_in = samples_in;
  out.repeated = repeated;
  out.dropped = dropped;
  out.seed = seed;
  out.epoch = epoch;
  out.first_step_ = first_step_ + step;
  const int64_t per_step = static_cast<int64_t>(dp_) * micro_batches_;
  const int64_t first = std::clamp<int64_t>(step, 0, steps()) * per_step;
  for (int64_t k = first; k < micro_batch_count(); ++k) out.add_micro_batch(micro_batch(k));
  return out;
}

bool same_batches(const BatchPlan& a, const BatchPlan& b) {
  if (a.dp() != b.dp() || a.micro_batches_per_rank() != b.micro_batches_per_rank() ||
      a.micro_batch_count() != b.micro_batch_count() || a.first_step() != b.first_step()) {
    return false;
  }
  for (int64_t k = 0; k < a.micro_batch_count(); ++k) {
    auto x = a.micro_batch(k), y = b.micro_batch(k);
    if (!std::equal(x.begin(), x.end(), y.begin(), y.end())) return false;
  }
  return true;
}

}  // namespace fulcrum
