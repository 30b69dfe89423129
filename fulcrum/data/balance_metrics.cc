#include "fulcrum/data/balance_metrics.h"

#include <algorithm>
#include <numeric>
#include <vector>

namespace fulcrum {

double dist_ratio(std::span<const int64_t> loads) {
  if (loads.empty()) return 0;
  const int64_t max = *std::max_element(loads.begin(), loads.end());
  const double total = static_cast<double>(std::accumulate(loads.begin(), loads.end(), int64_t{0}));
  const double n = static_cast<double>(loads.size());
  return (static_cast<double>(max) * n - total) / (static_cast<double>(std::max<int64_t>(max, 1)) * n);
}

double dist_ratio_floor(std::span<const int64_t> loads, int64_t largest_item) {
  if (loads.empty()) return 0;
  const int64_t total = std::accumulate(loads.begin(), loads.end(), int64_t{0});
  const int64_t n = static_cast<int64_t>(loads.size());
  const int64_t lowest_max = std::max((total + n - 1) / n, largest_item);
  return (static_cast<double>(lowest_max) * n - static_cast<double>(total)) /
         (static_cast<double>(std::max<int64_t>(lowest_max, 1)) * static_cast<double>(n));
}

double time_imbalance(std::span<const double> seconds) {
  if (seconds.empty()) return 0;
  const double max = *std::max_element(seconds.begin(), seconds.end());
  const double mean = std::accumulate(seconds.begin(), seconds.end(), 0.0) / static_cast<double>(seconds.size());
  return mean > 0 ? max / mean - 1.0 : 0.0;
}

MicroBatchLoad micro_batch_load(const Dataset& data, std::span<const uint32_t> ids, bool padded) {
  MicroBatchLoad load;
  if (!padded) {
    for (uint32_t id : ids) load.add_packed(data.vision(id), data.tokens(id));
    return load;
  }
  int64_t longest = 0;
  for (uint32_t id : ids) {
    load.vision += data.vision(id);
    longest = std::max<int64_t>(longest, data.tokens(id));
  }
  const int64_t count = static_cast<int64_t>(ids.size());
  load.sequences = count;
  load.llm_tokens = count * longest;
  load.llm_tokens_squared = count * longest * longest;
  return load;
}

namespace {

// Accumulates the Balance of groups of concurrent per-rank loads.
class BalanceAccumulator {
 public:
  explicit BalanceAccumulator(int ranks) : vit_(ranks), llm_(ranks), seconds_(ranks) {}

  void set(int rank, int64_t vit, int64_t llm, double seconds) {
    vit_[rank] = vit;
    llm_[rank] = llm;
    seconds_[rank] = seconds;
  }
  // Closes a group whose largest single sample has `largest_vit` and `largest_tokens`.
  void close(int64_t largest_vit, int64_t largest_tokens) {
    sum_.dist_ratio_vit += dist_ratio(vit_);
    sum_.dist_ratio_llm += dist_ratio(llm_);
    sum_.dist_ratio_vit_floor += dist_ratio_floor(vit_, largest_vit);
    sum_.dist_ratio_llm_floor += dist_ratio_floor(llm_, largest_tokens);
    sum_.time_imbalance += time_imbalance(seconds_);
    const double max = *std::max_element(seconds_.begin(), seconds_.end());
    max_sum_ += max;
    mean_sum_ += std::accumulate(seconds_.begin(), seconds_.end(), 0.0) / static_cast<double>(seconds_.size());
    ++groups_;
  }
  Balance mean() const {
    if (groups_ == 0) return {};
    const double g = static_cast<double>(groups_);
    return {sum_.dist_ratio_vit / g, sum_.dist_ratio_llm / g, sum_.dist_ratio_vit_floor / g,
            sum_.dist_ratio_llm_floor / g, sum_.time_imbalance / g};
  }
  double max_sum() const { return max_sum_; }
  double mean_sum() const { return mean_sum_; }

 private:
  std::vector<int64_t> vit_, llm_;
  std::vector<double> seconds_;
  Balance sum_;
  double max_sum_ = 0, mean_sum_ = 0;
  int64_t groups_ = 0;
};

}  // namespace

PlanMetrics measure_plan(const BatchPlan& plan, const Dataset& data, const SampleCost& cost) {
  const int ranks = plan.dp();
  const int m = plan.micro_batches_per_rank();
  BalanceAccumulator steps(ranks), micro(ranks);
  double padded_tokens = 0, real_tokens = 0;
  std::vector<int64_t> rank_vit(ranks), rank_llm(ranks);
  std::vector<double> rank_seconds(ranks);
  std::vector<int64_t> mb_largest_vit(m), mb_largest_tokens(m);
  for (int64_t s = 0; s < plan.steps(); ++s) {
    std::fill(rank_vit.begin(), rank_vit.end(), 0);
    std::fill(rank_llm.begin(), rank_llm.end(), 0);
    std::fill(rank_seconds.begin(), rank_seconds.end(), 0.0);
    std::fill(mb_largest_vit.begin(), mb_largest_vit.end(), 0);
    std::fill(mb_largest_tokens.begin(), mb_largest_tokens.end(), 0);
    for (int r = 0; r < ranks; ++r) {
      for (int j = 0; j < m; ++j) {
        for (uint32_t id : plan.micro_batch(s, r, j)) {
          mb_largest_vit[j] = std::max<int64_t>(mb_largest_vit[j], data.vision(id));
          mb_largest_tokens[j] = std::max<int64_t>(mb_largest_tokens[j], data.tokens(id));
          real_tokens += data.tokens(id);
        }
      }
    }
    for (int j = 0; j < m; ++j) {
      for (int r = 0; r < ranks; ++r) {
        const MicroBatchLoad load = micro_batch_load(data, plan.micro_batch(s, r, j), plan.padded());
        const double seconds = cost.micro_batch_seconds(load);
        micro.set(r, load.vision, load.llm_tokens, seconds);
        rank_vit[r] += load.vision;
        rank_llm[r] += load.llm_tokens;
        rank_seconds[r] += seconds;
        padded_tokens += static_cast<double>(load.llm_tokens);
      }
      micro.close(mb_largest_vit[j], mb_largest_tokens[j]);
    }
    for (int r = 0; r < ranks; ++r) steps.set(r, rank_vit[r], rank_llm[r], rank_seconds[r]);
    steps.close(*std::max_element(mb_largest_vit.begin(), mb_largest_vit.end()),
                *std::max_element(mb_largest_tokens.begin(), mb_largest_tokens.end()));
  }
  PlanMetrics out;
  out.pad_ratio = padded_tokens > 0 ? (padded_tokens - real_tokens) / padded_tokens : 0.0;
  out.per_step = steps.mean();
  out.per_micro_batch = micro.mean();
  out.step_seconds_sum = steps.max_sum();
  out.ideal_seconds_sum = steps.mean_sum();
  return out;
}

}  // namespace fulcrum
