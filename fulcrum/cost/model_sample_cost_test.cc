#include "fulcrum/cost/model_sample_cost.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/cost/flops_sample_cost.h"
#include "fulcrum/model/model_presets.h"

namespace fulcrum {
namespace {

// A cost model whose every pass takes its FLOPs over 1 TFLOP/s: what ModelSampleCost derives from it can be
// compared with FLOP counts directly.
class FlopsOnlyCost : public CostModel {
 public:
  LayerCost layer_cost(const LayerWork& w) const override {
    const double flops = layer_flops(*w.layer, w.pass, w.batch, w.trainable, w.recompute).total();
    return {flops / 1e12, flops, {}};
  }
};

TEST(ModelSampleCost, InternVlCoefficientsAreTheModelsFlops) {
  const ModelSpec m = model_preset("internvl-chat-1.5");
  const ModelSampleCost cost(m, FlopsOnlyCost());
  EXPECT_EQ(cost.vision_unit(), VisionUnit::kTiles);
  const FlopsCoefficients pinned;
  // The pinned defaults are this model's numbers (issue: "its pinned default must equal this model's
  // numbers"), to 0.5%. A tile: InternViT-6B on 1,025 tokens (3.58e13) and the projector on its 256 merged
  // tokens (1.8e11).
  EXPECT_NEAR(cost.seconds_per_vision_unit() * 1e12 / pinned.vit_tile_flops, 1.0, 0.005);
  // A token: 6 × the LLM's matmul weights (see LayerFlops).
  EXPECT_NEAR(cost.seconds_per_llm_token() * 1e12 / pinned.llm_token_flops, 1.0, 0.005);
  EXPECT_NEAR(cost.seconds_per_llm_token() * 1e12, 1.157e11, 0.002e11);
  EXPECT_NEAR(cost.seconds_per_token_squared() * 1e12, 12.0 * 6144 * 48, 1.0);
  EXPECT_NEAR(cost.seconds_per_token_squared() * 1e12 / pinned.llm_attention_flops_per_token_squared, 1.0, 0.005);
  // The time of a micro-batch is the load-weighted sum.
  MicroBatchLoad load;
  load.add_packed(5, 811);
  load.add_packed(1, 300);
  EXPECT_DOUBLE_EQ(cost.micro_batch_seconds(load), 6 * cost.seconds_per_vision_unit() +
                                                       1111 * cost.seconds_per_llm_token() +
                                                       (811.0 * 811 + 300 * 300) * cost.seconds_per_token_squared());
}

TEST(ModelSampleCost, DynamicResolutionCountsPatchTokensAndFrozenLlmsCostLess) {
  ModelSpec llava = model_preset("llava-1.5-7b");
  const AnalyticCost a100(cluster_preset("a100"));
  const ModelSampleCost trained(llava, a100);
  llava.components[2].trainable = false;  // no weight gradients for the LLM
  const ModelSampleCost frozen(llava, a100);
  EXPECT_LT(frozen.seconds_per_llm_token(), trained.seconds_per_llm_token());
  EXPECT_GT(frozen.seconds_per_llm_token(), 0.5 * trained.seconds_per_llm_token());
  llava.components[0].tokens_per_item = 0;  // as a dynamic-resolution encoder
  EXPECT_EQ(ModelSampleCost(llava, a100).vision_unit(), VisionUnit::kPatchTokens);
}

// The balancer's costs are asked in the training dtype. In fp32 the analytic model halves every compute rate
// (TF32 matmuls and attention) and doubles every byte moved, so each coefficient doubles exactly.
TEST(ModelSampleCost, AsksEveryPassInTheGivenDtype) {
  const ModelSpec m = model_preset("internvl-chat-1.5");
  const AnalyticCost a100(cluster_preset("a100"));
  const ModelSampleCost bf16(m, a100);
  const ModelSampleCost fp32(m, a100, Dtype::kFp32);
  EXPECT_DOUBLE_EQ(fp32.seconds_per_vision_unit(), 2 * bf16.seconds_per_vision_unit());
  EXPECT_DOUBLE_EQ(fp32.seconds_per_llm_token(), 2 * bf16.seconds_per_llm_token());
  EXPECT_DOUBLE_EQ(fp32.seconds_per_token_squared(), 2 * bf16.seconds_per_token_squared());
  EXPECT_THROW(ModelSampleCost(m, a100, Dtype::kFp8), InputError);  // no fp8 tensor cores
}

// A small encoder's pass over one image waits for the host to issue its operators (CLIP-L's 577 tokens on an A100),
// a pass over a micro-batch's images does not: a tile costs its share of a full pass, so the host's bound does not
// multiply with the images.
TEST(ModelSampleCost, ATileCostsItsShareOfAPassNotAPassOfItsOwn) {
  const ModelSpec llava = model_preset("llava-1.5-7b");
  ClusterSpec roofline_only = cluster_preset("a100");
  roofline_only.device.kernel_launch_seconds = 0;
  const AnalyticCost hosted(cluster_preset("a100")), roofline(roofline_only);
  const ComponentSpec& clip = llava.components[0];
  ASSERT_GT(clip.tokens_per_item, 0);
  const int64_t t = clip.tokens_per_item;
  const TokenBatch one_image{1, t, t * t};
  ASSERT_GT(component_training_seconds(clip, hosted, one_image, Dtype::kBf16),
            1.5 * component_training_seconds(clip, roofline, one_image, Dtype::kBf16));
  EXPECT_NEAR(ModelSampleCost(llava, hosted).seconds_per_vision_unit() /
                  ModelSampleCost(llava, roofline).seconds_per_vision_unit(), 1.0, 0.02);
}

TEST(ModelSampleCost, TheVisionUnitIsTheEncodersAndOneUnitPerModel) {
  EXPECT_EQ(vision_unit_of(model_preset("gpt-11b")), VisionUnit::kTiles);  // no encoder
  EXPECT_EQ(vision_unit_of(model_preset("llava-1.5-7b")), VisionUnit::kTiles);
  ModelSpec two = model_preset("vit-3b+vit-5b+gpt-11b");
  std::vector<ComponentSpec*> encoders;
  for (ComponentSpec& c : two.components) {
    if (c.role == ComponentRole::kEncoder) encoders.push_back(&c);
  }
  ASSERT_EQ(encoders.size(), 2u);
  encoders[0]->tokens_per_item = 0;  // one dynamic-resolution encoder beside a tiled one
  try {
    vision_unit_of(two);
    ADD_FAILURE() << "a model mixing the units was given one";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "model '" + two.name + "' mixes tiled and dynamic-resolution encoders: one "
                                     "vision unit per dataset");
  }
  EXPECT_THROW(ModelSampleCost(two, FlopsOnlyCost()), InputError);
  encoders[1]->tokens_per_item = 0;
  EXPECT_EQ(vision_unit_of(two), VisionUnit::kPatchTokens);
  EXPECT_EQ(ModelSampleCost(two, FlopsOnlyCost()).vision_unit(), VisionUnit::kPatchTokens);
}

TEST(ModelSampleCost, NeedsAnLlm) {
  EXPECT_THROW(ModelSampleCost(model_preset("vit-3b"), FlopsOnlyCost()), InputError);
}

}  // namespace
}  // namespace fulcrum
