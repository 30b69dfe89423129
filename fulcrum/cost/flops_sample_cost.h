#ifndef FULCRUM_COST_FLOPS_SAMPLE_COST_H_
#define FULCRUM_COST_FLOPS_SAMPLE_COST_H_

#include <string>
#include <string_view>

#include "fulcrum/core/dataset.h"
#include "fulcrum/core/sample_cost.h"

namespace fulcrum {

// Forward+backward FLOPs of a micro-batch, linear in its tiles and tokens plus the attention term of each
// packed sequence, divided by a sustained device rate. The defaults are InternVL-Chat-1.5 (InternViT-6B +
// InternLM2-20B), the `internvl-chat-1.5` preset's own counts (model FLOPs, as Megatron-LM's MFU): 3.6e13
// FLOPs per 448-px tile (1,025 patch tokens through InternViT-6B, attention included, and the projector on
// its 256 merged tokens: 3.6013e13), 1.1575e11 per LLM token, and 3.54e6·t² of attention for a sequence of t
// tokens (12 · 6144 · 48 layers = 3,538,944).
struct FlopsCoefficients {
  double vit_tile_flops = 3.6e13;
  double vision_token_flops = 3.6e13 / 1025.0;  // per patch token, for datasets that count patch tokens
  // 6 × InternLM2-20B's 19,292,018,688 matmul weights (the LM head included). OmniBal's 6N, 1.19e11, takes
  // all 19.86B parameters, counting the 92,553 × 6144 embedding as if its lookup were a matmul: 2.8% more.
  double llm_token_flops = 115752112128.0;
  double llm_attention_flops_per_token_squared = 3.54e6;
  // A100 BF16 dense peak. It only scales the answer: balance uses ratios of times.
  double device_flops_per_second = 312e12;
};

class FlopsSampleCost : public SampleCost {
 public:
  explicit FlopsSampleCost(VisionUnit unit, FlopsCoefficients coefficients = {});
  double micro_batch_seconds(const MicroBatchLoad& load) const override;
  double micro_batch_flops(const MicroBatchLoad& load) const;
  const FlopsCoefficients& coefficients() const { return coefficients_; }

 private:
  FlopsCoefficients coefficients_;
  double vision_flops_;  // per vision unit of the dataset
};

// Reads coefficient overrides from a JSON object ({"vit_tile_flops": 3.6e13, ...}); keys not given keep their
// defaults, unknown keys and non-positive values are errors naming `file`.
FlopsCoefficients parse_flops_coefficients(std::string_view text, const std::string& file);
FlopsCoefficients read_flops_coefficients(const std::string& path);

}  // namespace fulcrum

#endif  // FULCRUM_COST_FLOPS_SAMPLE_COST_H_
