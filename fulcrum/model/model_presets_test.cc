#include "fulcrum/model/model_presets.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "fulcrum/core/error.h"

namespace fulcrum {
namespace {

struct PublishedSize {
  const char* preset;
  double parameters;  // as published
  double tolerance;   // relative: 3% for exact counts; the label's rounding for sizes given as "22B"
};

// Sizes published for the models (model cards for exact counts; Optimus's Appendix A table and the LLaMA-2 and
// GPT-3 papers for the labels).
const PublishedSize kPublished[] = {
    {"internvit-6b", 5.54e9, 0.03},          // InternViT-6B-448px-V1-5 model card
    {"internlm2-20b", 19.86e9, 0.03},        // internlm/internlm2-20b
    {"yi-34b", 34.39e9, 0.03},               // 01-ai/Yi-34B
    {"internvl-chat-1.5", 25.5e9, 0.03},     // OpenGVLab/InternVL-Chat-V1-5
    {"internvl-chat-1.5-plus", 40.0e9, 0.03},  // InternVL-Chat-V1-2-Plus, "40B"
    {"llava-1.5-7b", 7.06e9, 0.03},          // llava-hf/llava-1.5-7b-hf
    {"llama-70b", 70e9, 0.03},               // LLaMA-2-70B (68.98B counted)
    {"gpt-175b", 175e9, 0.03},               // GPT-3
    {"vit-3b", 3e9, 0.5 / 3},                // "3B"
    {"vit-5b", 5.5e9, 0.03},                 // "5.5B"
    {"vit-11b", 10e9, 0.5 / 10},             // "10B"
    {"vit-22b", 22e9, 0.5 / 22},             // "22B"
};

TEST(ModelPresets, ParameterCountsMatchPublishedSizes) {
  for (const PublishedSize& p : kPublished) {
    const double counted = static_cast<double>(model_preset(p.preset).parameters());
    EXPECT_NEAR(counted / p.parameters, 1.0, p.tolerance) << p.preset << " counted " << counted;
  }
}

TEST(ModelPresets, Gpt11bFollowsTheListedDimensions) {
  // Optimus lists GPT-11B as width 3072, 80 layers, 24 heads and calls it 11B; a GPT layer of width h holds
  // 12h² + 13h parameters, so those dimensions give 80 × 113.3M + the 50,257 × 3072 tied embedding = 9.22B.
  // The preset follows the dimensions, which are what cost and memory depend on.
  EXPECT_NEAR(static_cast<double>(model_preset("gpt-11b").parameters()), 9.22e9, 0.01e9);
}

TEST(ModelPresets, InternVitShape) {
  const ModelSpec m = model_preset("internvit-6b");
  ASSERT_EQ(m.components.size(), 1u);
  const ComponentSpec& vit = m.components[0];
  EXPECT_EQ(vit.role, ComponentRole::kEncoder);
  EXPECT_EQ(vit.transformer_blocks(), 45);
  EXPECT_EQ(vit.attention_heads(), 25);
  EXPECT_EQ(vit.tokens_per_item, 1025);  // (448 / 14)² patches + class token
  EXPECT_EQ(vit.layers[1].hidden, 3200);
  EXPECT_EQ(vit.layers[1].ffn, 12800);
}

TEST(ModelPresets, PlusJoinsEncodersWithProjectorsBeforeTheLlm) {
  const ModelSpec m = model_preset("vit-22b+vit-5b+gpt-175b");
  ASSERT_EQ(m.components.size(), 5u);
  EXPECT_EQ(m.components[0].name, "vit-22b");
  EXPECT_EQ(m.components[1].name, "vit-22b-projector");
  EXPECT_EQ(m.components[2].name, "vit-5b");
  EXPECT_EQ(m.components[4].name, "gpt-175b");
  EXPECT_EQ(m.components[4].role, ComponentRole::kLlm);
  // The projector maps the encoder's width to the LLM's.
  EXPECT_EQ(m.components[1].layers[0].in_features, 6144);
  EXPECT_EQ(m.components[1].layers[0].hidden, 12288);
  EXPECT_EQ(m.parameters(), model_preset("vit-22b").parameters() + model_preset("vit-5b").parameters() +
                                model_preset("gpt-175b").parameters() + m.components[1].parameters() +
                                m.components[3].parameters());
}

TEST(ModelPresets, UnknownNamesAndMisplacedLlmsAreInputErrors) {
  EXPECT_THROW(model_preset("vit-99b"), InputError);
  try {
    model_preset("vit-3b+nope");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("unknown model 'nope'"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("internvl-chat-1.5"));
  }
  EXPECT_THROW(model_preset("gpt-175b+vit-3b"), InputError);
  EXPECT_THROW(model_preset("vit-3b+vit-5b"), InputError);
  EXPECT_THROW(model_preset(""), InputError);
}

}  // namespace
}  // namespace fulcrum
