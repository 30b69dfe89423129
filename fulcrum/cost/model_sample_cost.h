#ifndef FULCRUM_COST_MODEL_SAMPLE_COST_H_
#define FULCRUM_COST_MODEL_SAMPLE_COST_H_

#include "fulcrum/core/dataset.h"
#include "fulcrum/core/sample_cost.h"
#include "fulcrum/cost/cost_model.h"
#include "fulcrum/model/model_spec.h"

namespace fulcrum {

// The balancer's SampleCost for any model, from a CostModel. The balancer asks millions of times, so the cost
// model is asked once, at construction, for the seconds (forward and both backward passes, unsharded) of:
//   one vision unit  a tile through each encoder (its fixed sequence) and its merged tokens through the
//                    projector; or, for dynamic-resolution encoders, one patch token; each its share of a pass
//                    over 64 of them, as a micro-batch's images run
//   one LLM token    the LLM's matmuls, per token of a 4,096-token reference micro-batch
//   one t²           the LLM's attention, per squared sequence length
// and a micro-batch's time is their sum weighted by its load, as FlopsSampleCost does with FLOPs. Only the
// ratios matter for balance. A dynamic-resolution encoder's attention is charged per patch token at a
// reference image of 1,024 patches. Every pass is asked in `dtype` (a profiled cost model prices only the work
// of its entries' dtype).
class ModelSampleCost : public SampleCost {
 public:
  ModelSampleCost(const ModelSpec& model, const CostModel& cost, Dtype dtype = Dtype::kBf16);
  double micro_batch_seconds(const MicroBatchLoad& load) const override;

  double seconds_per_vision_unit() const { return per_vision_unit_; }
  double seconds_per_llm_token() const { return per_llm_token_; }
  double seconds_per_token_squared() const { return per_token_squared_; }
  // The unit the encoders count: tiles when each has a fixed sequence, patch tokens otherwise.
  VisionUnit vision_unit() const { return vision_unit_; }

 private:
  double per_vision_unit_ = 0;
  double per_llm_token_ = 0;
  double per_token_squared_ = 0;
  VisionUnit vision_unit_ = VisionUnit::kTiles;
};

// The unit a model's encoders count vision in: patch tokens where the encoders have no fixed sequence per item
// (dynamic resolution), tiles otherwise (and for a model without encoders). InputError for a model that mixes the
// two: a dataset counts in one unit.
VisionUnit vision_unit_of(const ModelSpec& model);

// A synthetic sample's vision load, in the model's unit, for `items` encoder items a sample: the items where the
// model counts tiles; where it counts patch tokens, their patch tokens, `patch_tokens_per_item` each (0: a
// reference image of 1,024, a 448 × 448 image in 14-pixel patches). InputError past a length file's 2^31 − 1.
int64_t synthetic_vision_per_sample(const ModelSpec& model, int64_t items, int64_t patch_tokens_per_item);

// Seconds of a component's forward and both backward passes over `batch`, unsharded; layers the model does not
// use are skipped and frozen ones have no weight gradient.
double component_training_seconds(const ComponentSpec& component, const CostModel& cost, const TokenBatch& batch,
                                  Dtype dtype = Dtype::kBf16);

}  // namespace fulcrum

#endif  // FULCRUM_COST_MODEL_SAMPLE_COST_H_
