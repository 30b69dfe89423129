#include "fulcrum/cost/model_sample_cost.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "fulcrum/core/error.h"

namespace fulcrum {

double component_training_seconds(const ComponentSpec& c, const CostModel& cost, const TokenBatch& batch,
                                  Dtype dtype) {
  double seconds = 0;
  const size_t used = c.layers.size() - static_cast<size_t>(c.unused_final_layers);
  for (size_t i = 0; i < used; ++i) {
    const LayerWork work{&c.layers[i], Pass::kForward, batch, {1, false}, c.trainable, Recompute::kNone, dtype};
    seconds += cost.layer_cost(work).seconds + backward_seconds(cost, work);
  }
  return seconds;
}

namespace {

constexpr int64_t kReferenceTokens = 4096;
constexpr int64_t kReferenceImagePatches = 1024;
// Vision costs are asked of this many tiles (or reference images) at once and divided: a micro-batch's many images
// go through each layer in one pass, so a unit's cost is its share of a full pass, not one image's pass alone (which
// the host's time to issue its operators can bound from below).
constexpr int64_t kReferenceItems = 64;

}  // namespace

VisionUnit vision_unit_of(const ModelSpec& model) {
  bool fixed = false, dynamic = false;
  for (const ComponentSpec& c : model.components) {
    if (c.role == ComponentRole::kEncoder) (c.tokens_per_item > 0 ? fixed : dynamic) = true;
  }
  if (fixed && dynamic) {
    throw InputError(fmt::format("model '{}' mixes tiled and dynamic-resolution encoders: one vision unit per "
                                 "dataset", model.name));
  }
  return dynamic ? VisionUnit::kPatchTokens : VisionUnit::kTiles;
}

int64_t synthetic_vision_per_sample(const ModelSpec& model, int64_t items, int64_t patch_tokens_per_item) {
  if (vision_unit_of(model) == VisionUnit::kTiles) return items;
  const int64_t per_item = patch_tokens_per_item > 0 ? patch_tokens_per_item : kReferenceImagePatches;
  constexpr int64_t kMostVision = std::numeric_limits<int32_t>::max();  // a length file's cap on a sample
  if (items > 0 && per_item > kMostVision / items) {
    throw InputError(fmt::format("{} items of {} patch tokens: {} patch tokens a sample, more than {}", items,
                                 per_item, items * per_item, kMostVision));
  }
  return items * per_item;
}

ModelSampleCost::ModelSampleCost(const ModelSpec& model, const CostModel& cost, Dtype dtype) {
  const ComponentSpec* llm = nullptr;
  for (const ComponentSpec& c : model.components) {
    if (c.role == ComponentRole::kLlm) llm = &c;
  }
  if (!llm) throw InputError(fmt::format("model '{}' has no LLM to balance micro-batches for", model.name));
  vision_unit_ = vision_unit_of(model);

  // One vision unit through every encoder and the projector after it.
  const ComponentSpec* encoder = nullptr;  // the latest encoder: what the next projector receives
  for (const ComponentSpec& c : model.components) {
    if (c.role == ComponentRole::kEncoder) {
      encoder = &c;
      const int64_t t = c.tokens_per_item > 0 ? c.tokens_per_item : kReferenceImagePatches;
      const int64_t n = kReferenceItems;
      const double seconds = component_training_seconds(c, cost, {n, n * t, n * t * t}, dtype) / static_cast<double>(n);
      per_vision_unit_ += c.tokens_per_item > 0 ? seconds : seconds / static_cast<double>(t);
    } else if (c.role == ComponentRole::kProjector) {
      // A tile's tokens (or, per patch token, a reference sequence) after the encoder's merge.
      const bool tiled = encoder && encoder->tokens_per_item > 0;
      const int64_t in = tiled ? encoder->tokens_per_item : kReferenceTokens;
      const int64_t merged = tiled ? encoder->projected_tokens_per_item()
                                   : std::max<int64_t>(1, in / std::max<int64_t>(1, encoder ? encoder->merge : 1));
      const int64_t n = kReferenceItems;
      const double seconds =
          component_training_seconds(c, cost, {n, n * merged, n * merged * merged}, dtype) / static_cast<double>(n);
      per_vision_unit_ += tiled ? seconds : seconds / static_cast<double>(in);
    }
  }

  // The LLM: linear part per token, then the attention part per t² from a second, longer sequence.
  const int64_t t = kReferenceTokens;
  const double linear = component_training_seconds(*llm, cost, {t, t, t}, dtype);  // t one-token sequences: Σt² = t
  const double with_attention = component_training_seconds(*llm, cost, {1, t, t * t}, dtype);
  per_llm_token_ = linear / static_cast<double>(t);
  per_token_squared_ = std::max(0.0, (with_attention - linear) / static_cast<double>(t * t - t));
}

double ModelSampleCost::micro_batch_seconds(const MicroBatchLoad& load) const {
  return per_vision_unit_ * static_cast<double>(load.vision) + per_llm_token_ * static_cast<double>(load.llm_tokens) +
         per_token_squared_ * static_cast<double>(load.llm_tokens_squared);
}

}  // namespace fulcrum
