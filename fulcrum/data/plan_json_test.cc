#include "fulcrum/data/plan_json.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/flops_sample_cost.h"
#include "fulcrum/data/batcher.h"
#include "fulcrum/data/test_data.h"

namespace fulcrum {
namespace {

TEST(PlanJson, RoundTrips) {
  const Dataset data = testing::random_dataset(500, 1);
  BatchParams params;
  params.dp = 3;
  params.micro_batches = 2;
  params.seed = 9;
  const BatchPlan plan = make_batcher("fulcrum")->plan(data, params, FlopsSampleCost(VisionUnit::kTiles), 0);
  const std::string text = plan_to_json(plan);
  const BatchPlan back = plan_from_json(text, "plan.json");
  EXPECT_TRUE(same_batches(plan, back));
  EXPECT_EQ(back.seed, 9u);
  EXPECT_EQ(back.samples_in, 500);
  EXPECT_EQ(back.repeated, plan.repeated);
  EXPECT_EQ(plan_to_json(back), text);
}

TEST(PlanJson, ShapeIsStepsRanksMicroBatches) {
  BatchPlan plan("x", 2, 1, false);
  const std::vector<uint32_t> a{4, 2}, b{7};
  plan.add_micro_batch(a);
  plan.add_micro_batch(b);
  const std::string text = plan_to_json(plan);
  EXPECT_NE(text.find("\"steps\":[\n[[[4,2]],[[7]]]]"), std::string::npos) << text;
  EXPECT_NE(text.find("\"packing\":\"packed\""), std::string::npos);
}

TEST(PlanJson, RejectsMalformedPlans) {
  EXPECT_THROW(plan_from_json("{", "p.json"), InputError);
  EXPECT_THROW(plan_from_json(R"({"fulcrum":2,"kind":"batch_plan"})", "p.json"), InputError);
  EXPECT_THROW(plan_from_json(R"({"fulcrum":1,"kind":"batch_plan","algo":"x","dp":2,"micro_batches_per_rank":1,
    "packing":"packed","seed":0,"epoch":0,"first_step":0,"samples_in":1,"repeated":0,"dropped":0,"steps":[[[[0]]]]})",
                              "p.json"),
               InputError);  // one rank in a dp-2 plan
}

// Every field is read strictly: the JSON library would turn a float or a negative number into an id or a count
// without a word (and an out-of-range float into undefined behaviour).
TEST(PlanJson, RefusesValuesThatAreNotWhatTheFieldHolds) {
  auto plan = [](const std::string& dp, const std::string& packing, const std::string& id) {
    return R"({"fulcrum":1,"kind":"batch_plan","algo":"x","dp":)" + dp + R"(,"micro_batches_per_rank":1,"packing":)" +
           packing + R"(,"seed":0,"epoch":0,"first_step":0,"samples_in":4,"repeated":0,"dropped":0,"steps":[[[[)" +
           id + "]]]]}";
  };
  EXPECT_EQ(plan_from_json(plan("1", R"("packed")", "3"), "p.json").sample_ids(), std::vector<uint32_t>{3});
  // Any 64-bit seed the writer writes reads back.
  BatchPlan seeded = plan_from_json(plan("1", R"("packed")", "3"), "p.json");
  seeded.seed = 18446744073709551615u;
  EXPECT_EQ(plan_from_json(plan_to_json(seeded), "p.json").seed, seeded.seed);
  const std::pair<std::string, std::string> bad[] = {
      {plan("1", R"("packed")", "2.1e24"), "step 0: rank 0: micro-batch 0: sample id 2.1e+24 is not an id"},
      {plan("1", R"("packed")", "-1"), "sample id -1 is not an id"},
      {plan("1", R"("packed")", "4294967296"), "sample id 4294967296 is not an id"},
      {plan("1.5", R"("packed")", "0"), "'dp' must be an integer from 1"},
      {plan("0", R"("packed")", "0"), "'dp' must be an integer from 1"},
      {plan("1", R"("stacked")", "0"), "'packing' must be"},
      {R"({"fulcrum":5.5e74,"kind":"batch_plan"})", "not a fulcrum batch plan"},
  };
  for (const auto& [text, message] : bad) {
    try {
      plan_from_json(text, "p.json");
      ADD_FAILURE() << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).rfind("p.json", 0), 0u) << e.what();
    }
  }
}

}  // namespace
}  // namespace fulcrum
