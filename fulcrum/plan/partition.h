#ifndef FULCRUM_PLAN_PARTITION_H_
#define FULCRUM_PLAN_PARTITION_H_

#include <cstdint>
#include <vector>

namespace fulcrum {

// Cutting a chain of layers (encoder blocks, projector, LLM blocks, head) into pipeline stages of consecutive
// layers. `layer_seconds[i]` is what layer i adds to its stage's time (forward, backward and recomputation for
// a typical micro-batch); `boundary_seconds[b]` is the transfer of the activation leaving layer b when a stage
// ends after it (b < layers − 1), charged to both stages it joins, since each waits for it.
struct LayerChain {
  std::vector<double> layer_seconds;
  std::vector<double> boundary_seconds;  // layers − 1 entries; empty = free transfers
  // When given (one per layer): every stage must hold at least one layer marked true (an LLM layer, for
  // Megatron-LM's pipeline layout, which cannot express a stage of encoder layers only).
  std::vector<bool> required;
};

// A partition: stage s holds layers [ends[s − 1], ends[s]) (ends[−1] = 0); ends.back() = layers.
struct Partition {
  std::vector<int32_t> ends;
  double max_stage_seconds = 0;
};

// Seconds of each stage of `partition` on `chain`: its layers plus the transfers at its two ends.
std::vector<double> stage_seconds(const LayerChain& chain, const std::vector<int32_t>& ends);

// The partition into `stages` non-empty stages whose slowest stage is fastest: exact, by dynamic programming
// over (last layer, stages used), O(layers² · stages) time and O(layers · stages) memory. Ties go by a fixed
// rule (each stage, from the last, starts as early as it can), so the result is deterministic. InputError when
// there are fewer layers (or required layers) than stages.
Partition min_max_partition(const LayerChain& chain, int stages);

// OmniBal's Balanced Model Partitioning: the min-max partition of forward times as the anchor, then every
// partition whose stage boundaries each lie within ±radius layers of the anchor's (non-empty stages), ranked by
// the variance of their stages' forward times and by their total boundary bytes: each candidate gets its rank
// in both orders, and candidates are sorted by the sum of the two ranks (then variance, then bytes, then
// boundaries). Returns the best `keep`, for the caller to time or simulate. The neighbourhood has up to
// (2·radius + 1)^(stages − 1) members (27 for OmniBal's 4 stages and radius 1); past kMaxOmnibalCandidates it
// is cut to the anchor and each boundary moved alone (2·radius·(stages − 1) + 1 candidates).
inline constexpr double kMaxOmnibalCandidates = 6561;  // 3⁸: 9 stages at radius 1
struct OmnibalCandidate {
  std::vector<int32_t> ends;
  double forward_variance = 0;  // seconds²
  double boundary_bytes = 0;
};
std::vector<OmnibalCandidate> omnibal_partitions(const std::vector<double>& forward_seconds,
                                                 const std::vector<double>& boundary_bytes, int stages, int radius,
                                                 int keep);

}  // namespace fulcrum

#endif  // FULCRUM_PLAN_PARTITION_H_
