#ifndef FULCRUM_CORE_SAMPLE_COST_H_
#define FULCRUM_CORE_SAMPLE_COST_H_

#include <algorithm>
#include <cstdint>

namespace fulcrum {

// The work in one micro-batch of one data-parallel rank: what a cost model needs to predict its time.
struct MicroBatchLoad {
  int64_t vision = 0;             // tiles or patch tokens through the vision encoder
  int64_t llm_tokens = 0;         // tokens through the LLM, padding included
  int64_t llm_tokens_squared = 0; // Σ over sequences of length², the attention term
  int64_t sequences = 0;          // sequences (samples) in the micro-batch

  // A sample packed into the micro-batch as its own variable-length sequence.
  void add_packed(uint32_t vision_units, uint32_t tokens) {
    vision += vision_units;
    llm_tokens += tokens;
    llm_tokens_squared += static_cast<int64_t>(tokens) * tokens;
    ++sequences;
  }
  void remove_packed(uint32_t vision_units, uint32_t tokens) {
    vision -= vision_units;
    llm_tokens -= tokens;
    llm_tokens_squared -= static_cast<int64_t>(tokens) * tokens;
    --sequences;
  }
};

// Predicts how long a micro-batch takes (forward and backward). The data module balances with it; the cost
// module implements it. Only ratios of its answers are used for balance, so any consistent unit works, but
// implementations return seconds on their device.
class SampleCost {
 public:
  virtual ~SampleCost() = default;
  virtual double micro_batch_seconds(const MicroBatchLoad& load) const = 0;
};

}  // namespace fulcrum

#endif  // FULCRUM_CORE_SAMPLE_COST_H_
