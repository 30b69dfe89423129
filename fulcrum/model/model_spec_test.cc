#include "fulcrum/model/model_spec.h"

#include <gtest/gtest.h>

#include "fulcrum/core/error.h"
#include "fulcrum/model/model_builders.h"
#include "fulcrum/model/test_layers.h"

namespace fulcrum {
namespace {

TEST(LayerParameters, GroupedQueryAttentionAndSwiGluByHand) {
  // q 8×8 = 64, k and v 8×4 = 32 each, o 8×8 = 64 → 192; MLP 3 × 8 × 16 = 384; two RMSNorms 2 × 8 = 16.
  EXPECT_EQ(tiny_gqa_swiglu_block().parameters(), 192 + 384 + 16);
  LayerSpec biased = tiny_gqa_swiglu_block();
  biased.qkv_bias = true;  // + 8 + 4 + 4
  EXPECT_EQ(biased.parameters(), 592 + 16);
}

TEST(LayerParameters, GeluMlpWithBiasesAndLayerNormByHand) {
  LayerSpec b = tiny_gqa_swiglu_block();
  b.kv_heads = 2;
  b.mlp = MlpKind::kGelu;
  b.norm = NormKind::kLayerNorm;
  b.linear_bias = true;
  // Attention 4 × 64 + output bias 8 = 264; MLP 2 × 8 × 16 + biases 16 + 8 = 280; two LayerNorms 2 × 16 = 32.
  EXPECT_EQ(b.parameters(), 264 + 280 + 32);
  b.layer_scale = true;  // two scales of 8
  b.qk_norm = true;      // LayerNorms over q (8) and k (8): 16 + 16
  EXPECT_EQ(b.parameters(), 576 + 16 + 32);
}

TEST(LayerParameters, ProjectorPatchEmbeddingAndHeadByHand) {
  const ComponentSpec projector = mlp_projector("p", {16, 8, 4, 2, NormKind::kLayerNorm, true});
  // LayerNorm over 16: 32; 16 × 8 + 8; 8 × 4 + 4.
  EXPECT_EQ(projector.parameters(), 32 + 136 + 36);
  LayerSpec patch;
  patch.kind = LayerKind::kPatchEmbedding;
  patch.hidden = 10;
  patch.in_features = 3 * 14 * 14;
  patch.class_token = true;
  patch.positions = 5;
  patch.norm = NormKind::kNone;
  // Convolution 588 × 10 + bias 10, class token 10, positions 5 × 10.
  EXPECT_EQ(patch.parameters(), 5880 + 10 + 10 + 50);
  patch.norm = NormKind::kLayerNorm;  // CLIP's norm after the embedding: + 2 × 10
  EXPECT_EQ(patch.parameters(), 5950 + 20);
  LayerSpec head;
  head.kind = LayerKind::kLmHead;
  head.hidden = 4;
  head.vocab = 100;
  EXPECT_EQ(head.parameters(), 400);
  head.tied_to_embedding = true;
  EXPECT_EQ(head.parameters(), 0);
}

TEST(DecoderLlm, CountsAnUntiedHeadTwiceAndATiedOneOnce) {
  DecoderShape s{2, 8, 2, 1, 4, 16, 100};
  const ComponentSpec untied = decoder_llm("llm", s);
  // Embedding 800, two blocks of 592, final RMSNorm 8, head 800.
  EXPECT_EQ(untied.parameters(), 800 + 2 * 592 + 8 + 800);
  EXPECT_EQ(untied.transformer_blocks(), 2);
  EXPECT_EQ(untied.attention_heads(), 2);
  EXPECT_EQ(untied.kv_heads(), 1);
  s.tied_embeddings = true;
  EXPECT_EQ(decoder_llm("llm", s).parameters(), 800 + 2 * 592 + 8);
}

TEST(ModelSpec, FrozenComponentsAreNotTrainable) {
  ModelSpec m{"m", {decoder_llm("llm", {1, 8, 2, 1, 4, 16, 10}), mlp_projector("p", {16, 8, 8, 2})}};
  m.components[0].trainable = false;
  EXPECT_EQ(m.trainable_parameters(), m.components[1].parameters());
  EXPECT_EQ(m.parameters(), m.components[0].parameters() + m.components[1].parameters());
  EXPECT_EQ(m.find("p"), &m.components[1]);
  EXPECT_EQ(m.find("nope"), nullptr);
}

TEST(ValidateModel, NamesTheComponentAndLayer) {
  ModelSpec m{"m", {decoder_llm("llm", {1, 8, 3, 2, 4, 16, 10})}};
  try {
    validate_model(m, "model.json");
    FAIL() << "kv_heads 2 does not divide heads 3";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "model.json: component 'llm' layer 1: kv_heads must divide heads");
  }
  ModelSpec empty{"m", {}};
  EXPECT_THROW(validate_model(empty, "x"), InputError);
  ModelSpec negative{"m", {decoder_llm("llm", {1, -8, 2, 1, 4, 16, 10})}};
  EXPECT_THROW(validate_model(negative, "x"), InputError);
}

}  // namespace
}  // namespace fulcrum
