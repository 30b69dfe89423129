#include "fulcrum/cost/activation_memory.h"

#include <gtest/gtest.h>

#include "fulcrum/model/test_layers.h"

namespace fulcrum {
namespace {

// Korthikanti et al. 2022, Table 2, per layer, s = 2048, b = 1, h = 12288, a = 96, t = 8, 16-bit activations.
constexpr double s = 2048, h = 12288, a = 96, t = 8;
const TokenBatch kOneSequence{1, 2048, 2048 * 2048};

TEST(ActivationBytes, KorthikantiWithoutParallelism) {
  EXPECT_DOUBLE_EQ(activation_bytes(gpt3_block(), kOneSequence, {1, false}, Recompute::kNone, true),
                   s * h * (34 + 5 * a * s / h));
}

TEST(ActivationBytes, KorthikantiTensorParallelWithAndWithoutSequenceParallel) {
  // Tensor parallel: sbh(10 + 24/t + 5as/(ht)).
  EXPECT_DOUBLE_EQ(activation_bytes(gpt3_block(), kOneSequence, {8, false}, Recompute::kNone, true),
                   s * h * (10 + 24 / t + 5 * a * s / (h * t)));
  // Sequence parallel too: sbh(34/t + 5as/(ht)) = 358.6 MB for GPT-3's layer.
  const double sp = activation_bytes(gpt3_block(), kOneSequence, {8, true}, Recompute::kNone, true);
  EXPECT_DOUBLE_EQ(sp, s * h * (34 / t + 5 * a * s / (h * t)));
  EXPECT_NEAR(sp, 358.6e6, 0.1e6);
  // Selective recomputation drops the attention core: sbh·34/t.
  EXPECT_DOUBLE_EQ(activation_bytes(gpt3_block(), kOneSequence, {8, true}, Recompute::kSelective, true),
                   s * h * 34 / t);
  // Full recomputation keeps the layer input: 2sbh/t with sequence parallelism, 2sbh without.
  EXPECT_DOUBLE_EQ(activation_bytes(gpt3_block(), kOneSequence, {8, true}, Recompute::kFull, true), 2 * s * h / t);
  EXPECT_DOUBLE_EQ(activation_bytes(gpt3_block(), kOneSequence, {8, false}, Recompute::kFull, true), 2 * s * h);
}

TEST(ActivationBytes, NoDropoutGqaAndSwiGlu) {
  const LayerSpec b = tiny_gqa_swiglu_block();
  // T = 10 tokens, Σt² = 52. Replicated: norms 4Th + QKV input 2Th + MLP input 2Th = 640. Split: Q 2T·8 +
  // K, V 4T·4 + projection input 2T·8 + SwiGLU 6T·16 = 160 + 160 + 160 + 960 = 1440. Core: 4·2·52 = 416.
  EXPECT_DOUBLE_EQ(activation_bytes(b, {2, 10, 52}, {1, false}, Recompute::kNone), 640 + 1440 + 416);
  EXPECT_DOUBLE_EQ(activation_bytes(b, {2, 10, 52}, {2, true}, Recompute::kNone), (640 + 1440 + 416) / 2.0);
  LayerSpec head = b;
  head.kind = LayerKind::kLmHead;
  EXPECT_EQ(activation_bytes(head, {2, 10, 52}, {1, false}, Recompute::kNone), 0);
}

}  // namespace
}  // namespace fulcrum
