#include "fulcrum/sched/pipeline_schedules.h"

#include <gtest/gtest.h>

#include <vector>

#include "fulcrum/core/error.h"
#include "fulcrum/model/model_builders.h"

namespace fulcrum {
namespace {

using R = Recompute;

// A decoder of 4 blocks (embedding, blocks, final norm, head) and one of 2.
ModelSpec two_decoders() {
  return ModelSpec{"m", {decoder_llm("a", {4, 8, 2, 2, 4, 16, 10}), decoder_llm("b", {2, 8, 2, 2, 4, 16, 10})}};
}

TEST(FirstBlocksFull, EachComponentRecomputesItsFirstShareOfBlocksFullyAndTheRestSelectively) {
  const ModelSpec m = two_decoders();
  // A quarter: 1 of a's 4 blocks; ⌈0.5⌉ = 1 of b's 2. Embeddings, norms and heads are never recomputed.
  EXPECT_EQ(first_blocks_full(m, 0.25), (std::vector<R>{R::kNone, R::kFull, R::kSelective, R::kSelective,
                                                       R::kSelective, R::kNone, R::kNone, R::kNone, R::kFull,
                                                       R::kSelective, R::kNone, R::kNone}));
  EXPECT_EQ(first_blocks_full(m, 0.5), (std::vector<R>{R::kNone, R::kFull, R::kFull, R::kSelective, R::kSelective,
                                                      R::kNone, R::kNone, R::kNone, R::kFull, R::kSelective,
                                                      R::kNone, R::kNone}));
  EXPECT_EQ(first_blocks_full(m, 0.0), block_recompute(m, R::kSelective));
  EXPECT_EQ(first_blocks_full(m, 1.0), block_recompute(m, R::kFull));
  EXPECT_THROW(first_blocks_full(m, 1.5), InputError);
  EXPECT_THROW(first_blocks_full(m, -0.1), InputError);
}

}  // namespace
}  // namespace fulcrum
