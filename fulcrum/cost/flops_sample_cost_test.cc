#include "fulcrum/cost/flops_sample_cost.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fulcrum/core/error.h"

namespace fulcrum {
namespace {

TEST(FlopsSampleCost, PinnedInternVlCoefficients) {
  FlopsSampleCost cost(VisionUnit::kTiles);
  MicroBatchLoad load;
  load.add_packed(5, 1000);  // 5 tiles, 1000 tokens
  load.add_packed(1, 300);
  // 6 tiles · 3.6e13 + 1300 tokens · 1.15752112128e11 + (1000² + 300²) · 3.54e6
  const double expected = 6 * 3.6e13 + 1300 * 1.15752112128e11 + (1e6 + 9e4) * 3.54e6;
  EXPECT_DOUBLE_EQ(cost.micro_batch_flops(load), expected);
  EXPECT_DOUBLE_EQ(cost.micro_batch_seconds(load), expected / 312e12);
}

TEST(FlopsSampleCost, PackingIsCheaperThanOneLongSequence) {
  FlopsSampleCost cost(VisionUnit::kTiles);
  MicroBatchLoad packed, single;
  packed.add_packed(0, 2000);
  packed.add_packed(0, 2000);
  single.add_packed(0, 4000);
  EXPECT_LT(cost.micro_batch_flops(packed), cost.micro_batch_flops(single));
}

TEST(FlopsSampleCost, OverridesFromJson) {
  FlopsCoefficients c = parse_flops_coefficients(R"({"fulcrum":1,"llm_token_flops":2.0})", "c.json");
  EXPECT_EQ(c.llm_token_flops, 2.0);
  EXPECT_EQ(c.vit_tile_flops, 3.6e13);
  EXPECT_THROW(parse_flops_coefficients(R"({"llm_tokn_flops":2})", "c.json"), InputError);
  EXPECT_THROW(parse_flops_coefficients(R"({"llm_token_flops":-1})", "c.json"), InputError);
  EXPECT_THROW(parse_flops_coefficients(R"({"device_flops_per_second":0})", "c.json"), InputError);
  EXPECT_THROW(parse_flops_coefficients(R"([1])", "c.json"), InputError);
  // Values whose sums overflow to inf and NaN (balance measured as NaN), a rate of no device, another schema.
  EXPECT_THAT([] { parse_flops_coefficients(R"({"vit_tile_flops":1e308})", "c.json"); },
              ::testing::ThrowsMessage<InputError>(
                  ::testing::HasSubstr("c.json: vit_tile_flops must be a number from 0 to 1e+18, got 1e+308")));
  EXPECT_THROW(parse_flops_coefficients(R"({"device_flops_per_second":1e-300})", "c.json"), InputError);
  EXPECT_THROW(parse_flops_coefficients(R"({"fulcrum":99,"llm_token_flops":2.0})", "c.json"), InputError);
  EXPECT_THROW(parse_flops_coefficients(R"({)", "c.json"), InputError);
  EXPECT_THROW(parse_flops_coefficients(R"({"llm_token_flops": 1e999})", "c.json"), InputError);
}

}  // namespace
}  // namespace fulcrum
