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

TEST(ActivationBytes, ContextParallelismSplitsTokensAndAttentionPairs) {
  // cp 2: each device keeps T/2 tokens and its queries' half of the attention pairs: half of every term.
  for (const TensorSharding sharding : {TensorSharding{1, false}, TensorSharding{8, true}, TensorSharding{8, false}}) {
    TensorSharding cp2 = sharding;
    cp2.cp = 2;
    EXPECT_DOUBLE_EQ(activation_bytes(gpt3_block(), kOneSequence, cp2, Recompute::kNone, true),
                     activation_bytes(gpt3_block(), kOneSequence, sharding, Recompute::kNone, true) / 2);
  }
  // GPT-3's layer at tp 8 with sequence parallelism and cp 2: sbh(34/t + 5as/(ht)) / 2 = 179.3 MB.
  EXPECT_NEAR(activation_bytes(gpt3_block(), kOneSequence, {8, true, 2}, Recompute::kNone, true), 179.3e6, 0.1e6);
  EXPECT_DOUBLE_EQ(activation_bytes(gpt3_block(), kOneSequence, {8, true, 4}, Recompute::kFull, true),
                   2 * s * h / t / 4);
}

TEST(ActivationBytes, DtypeSetsTheElementSizes) {
  const LayerSpec b = tiny_gqa_swiglu_block();
  const TokenBatch batch{2, 10, 52};
  EXPECT_DOUBLE_EQ(activation_bytes(b, batch, {1, false}, Recompute::kNone, false, Dtype::kFp16), 2496);
  // fp32: every 2-byte element is 4 bytes (no masks here): twice the 16-bit total.
  EXPECT_DOUBLE_EQ(activation_bytes(b, batch, {1, false}, Recompute::kNone, false, Dtype::kFp32), 2 * 2496);
  // fp8: the matmul inputs take 1 byte. Replicated: norms 4Th = 320, QKV and MLP inputs 1·Th each = 160.
  // Split: Q 2T·8 = 160, K and V 4T·4 = 160, projection input 1·T·8 = 80, SwiGLU gate and up 4T·16 = 640,
  // their product (the down projection's input) 1·T·16 = 160. Core 4·2·52 = 416 as in 16-bit.
  EXPECT_DOUBLE_EQ(activation_bytes(b, batch, {1, false}, Recompute::kNone, false, Dtype::kFp8),
                   480 + 1200 + 416);
  // With dropout, masks stay 1 byte in fp32: 2Th + a·Σt² of them.
  EXPECT_DOUBLE_EQ(activation_bytes(b, batch, {1, false}, Recompute::kNone, true, Dtype::kFp32),
                   2 * 2496 + 2 * 10 * 8 + 2 * 52);
}

}  // namespace
}  // namespace fulcrum
