#include "fulcrum/cost/layer_flops.h"

#include <gtest/gtest.h>

#include "fulcrum/cost/flops_sample_cost.h"
#include "fulcrum/model/model_presets.h"
#include "fulcrum/model/test_layers.h"

namespace fulcrum {
namespace {

TEST(LayerFlops, AttentionAndMlpOfAGpt3LayerByHand) {
  // One sequence of s = 2048: forward 24·s·h² (QKV 6sh², output projection 2sh², MLP 16sh²) + 4·s²·h (scores, values),
  // Megatron-LM's per-layer count; model FLOPs are three times that (forward, both backward halves).
  const double s = 2048, h = 12288;
  const TokenBatch one{1, 2048, 2048 * 2048};
  const LayerFlops fwd = layer_flops(gpt3_block(), Pass::kForward, one);
  EXPECT_DOUBLE_EQ(fwd.matmul, 24 * s * h * h);
  EXPECT_DOUBLE_EQ(fwd.attention, 4 * s * s * h);
  EXPECT_DOUBLE_EQ(layer_flops(gpt3_block(), Pass::kBackwardInput, one).total(), 24 * s * h * h + 8 * s * s * h);
  EXPECT_DOUBLE_EQ(layer_flops(gpt3_block(), Pass::kBackwardWeight, one).total(), 24 * s * h * h);
  EXPECT_DOUBLE_EQ(model_flops(gpt3_block(), one), 72 * s * h * h + 12 * s * s * h);
  EXPECT_DOUBLE_EQ(layer_flops(gpt3_block(), Pass::kBackwardWeight, one, /*trainable=*/false).total(), 0);
  // Full recomputation reruns the forward: hardware FLOPs are four forwards' worth (Megatron's 96Bslh² form).
  EXPECT_DOUBLE_EQ(hardware_flops(gpt3_block(), one, Recompute::kFull), 96 * s * h * h + 16 * s * s * h);
  EXPECT_DOUBLE_EQ(hardware_flops(gpt3_block(), one, Recompute::kSelective), 72 * s * h * h + 16 * s * s * h);
  EXPECT_DOUBLE_EQ(hardware_flops(gpt3_block(), one, Recompute::kNone), model_flops(gpt3_block(), one));
}

TEST(LayerFlops, PackedSequencesAndWindowsChangeOnlyAttention) {
  // Two sequences of 1024 packed: the same matmuls, half the attention pairs of one 2048 sequence.
  const TokenBatch packed{2, 2048, 2 * 1024 * 1024};
  const TokenBatch one{1, 2048, 2048 * 2048};
  EXPECT_DOUBLE_EQ(layer_flops(gpt3_block(), Pass::kForward, packed).matmul,
                   layer_flops(gpt3_block(), Pass::kForward, one).matmul);
  EXPECT_DOUBLE_EQ(layer_flops(gpt3_block(), Pass::kForward, packed).attention,
                   layer_flops(gpt3_block(), Pass::kForward, one).attention / 2);
  LayerSpec windowed = gpt3_block();
  windowed.window_tokens = 64;  // each token attends to 64: 4 · 2048 · 64 · h
  EXPECT_DOUBLE_EQ(layer_flops(windowed, Pass::kForward, one).attention, 4.0 * 2048 * 64 * 12288);
}

TEST(LayerFlops, SwiGluGqaBlockByHand) {
  const LayerSpec b = tiny_gqa_swiglu_block();
  // Per token: 2 · (8·(8 + 2·4) + 8·8 + 3·8·16) = 2 · (128 + 64 + 384) = 1152; 10 tokens. Attention 4·Σt²·8.
  const TokenBatch batch{2, 10, 52};  // lengths 4 and 6
  EXPECT_DOUBLE_EQ(layer_flops(b, Pass::kForward, batch).matmul, 11520);
  EXPECT_DOUBLE_EQ(layer_flops(b, Pass::kForward, batch).attention, 4.0 * 52 * 8);
}

double component_model_flops(const ComponentSpec& c, const TokenBatch& batch) {
  double total = 0;
  for (const LayerSpec& layer : c.layers) total += model_flops(layer, batch, c.trainable);
  return total;
}

TEST(LayerFlops, AgreeWithThePinnedInternVlSampleCost) {
  // The balancer's pinned InternVL-Chat-1.5 coefficients are the model's own counts, to 0.5%.
  const ModelSpec m = model_preset("internvl-chat-1.5");
  const FlopsCoefficients pinned;
  // One 448-px tile: 1,025 tokens through InternViT-6B (3.5834e13) and its 1,025 / 4 = 256 merged tokens
  // through the projector (1.788e11): 3.6013e13.
  const double tile = component_model_flops(*m.find("vision"), {1, 1025, 1025 * 1025}) +
                      component_model_flops(*m.find("projector"), {1, 256, 256 * 256});
  EXPECT_NEAR(tile, 3.6013e13, 0.0001e13);
  EXPECT_NEAR(tile / pinned.vit_tile_flops, 1.0, 0.005);
  // Attention per t² of one sequence: 12 · 6144 · 48 layers = 3,538,944, which the pinned 3.54e6 rounds.
  const double t = 1000;
  const double llm_one = component_model_flops(*m.find("llm"), {1, 1000, 1000 * 1000});
  const double llm_linear = component_model_flops(*m.find("llm"), {1, 1000, 0});
  EXPECT_DOUBLE_EQ((llm_one - llm_linear) / (t * t), 12.0 * 6144 * 48);
  EXPECT_NEAR((llm_one - llm_linear) / (t * t) / pinned.llm_attention_flops_per_token_squared, 1.0, 0.005);
  // Per token: 6 × the matmul weights, all parameters but the embedding (an embedding lookup does no matmul)
  // and the norms: 6 × (19,861,260,288 − 92,553 · 6144 − 97 · 6144) = 6 × 19,292,018,688, pinned exactly.
  const ComponentSpec& llm = *m.find("llm");
  EXPECT_EQ(llm.parameters() - 92553 * 6144 - 97 * 6144, 19292018688);
  EXPECT_DOUBLE_EQ(llm_linear / t, 6.0 * 19292018688);
  EXPECT_DOUBLE_EQ(pinned.llm_token_flops, 6.0 * 19292018688);
}

}  // namespace
}  // namespace fulcrum
