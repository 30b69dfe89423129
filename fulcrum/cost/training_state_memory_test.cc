#include "fulcrum/cost/training_state_memory.h"

#include <gtest/gtest.h>

namespace fulcrum {
namespace {

// The ZeRO paper's Figure 1: Ψ = 7.5B parameters, N_d = 64, mixed-precision Adam (K = 12).
constexpr int64_t kPsi = 7'500'000'000;

TEST(TrainingStateBytes, ZeroPaperWorkedExample) {
  EXPECT_DOUBLE_EQ(training_state_bytes(kPsi, 64, StateSharding::kZero0).total(), 120e9);
  EXPECT_NEAR(training_state_bytes(kPsi, 64, StateSharding::kZero1).total(), 31.4e9, 0.05e9);
  EXPECT_NEAR(training_state_bytes(kPsi, 64, StateSharding::kZero2).total(), 16.6e9, 0.05e9);
  EXPECT_NEAR(training_state_bytes(kPsi, 64, StateSharding::kZero3).total(), 1.9e9, 0.05e9);
}

TEST(TrainingStateBytes, MegatronDistributedOptimizerAndFrozenParameters) {
  // Megatron-LM's table: bf16 parameters with fp32 gradients, distributed optimizer: 6 + 12/d bytes.
  EXPECT_DOUBLE_EQ(training_state_bytes(1000, 8, StateSharding::kMegatronDistributedOptimizer).total(),
                   1000 * (6 + 12.0 / 8));
  // A frozen encoder keeps only its 16-bit weights, sharded only by ZeRO-3.
  EXPECT_DOUBLE_EQ(training_state_bytes(1000, 8, StateSharding::kZero1, false).total(), 2000);
  EXPECT_DOUBLE_EQ(training_state_bytes(1000, 8, StateSharding::kZero3, false).total(), 250);
}

}  // namespace
}  // namespace fulcrum
