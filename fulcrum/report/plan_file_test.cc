#include "fulcrum/report/plan_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "fulcrum/core/error.h"
#include "fulcrum/model/model_presets.h"
#include "fulcrum/sched/pipeline_schedules.h"
#include "fulcrum/sched/schedule_json.h"

namespace fulcrum {
namespace {

using Json = nlohmann::json;

// A plan file as `fulcrum plan --out` lays one out: gpt-11b on DP 2 × PP 2, 1F1B over 4 micro-batches.
Json plan_file() {
  const ModelSpec model = model_preset("gpt-11b");
  ParallelLayout layout;
  layout.dp = 2;
  layout.pp = 2;
  const Schedule schedule =
      make_pipeline_schedule(PipelineKind::kOneFOneB, layout, 4, partition_layers(model, 2, EncoderPlacement::kFirstStage),
                             block_recompute(model, Recompute::kNone));
  Json stages = Json::array();
  for (const StageLayers& st : schedule.stages) stages.push_back({st.first_layer, st.end_layer});
  Json loads = Json::array();
  for (int d = 0; d < 2; ++d) {
    Json replica = Json::array();
    for (int j = 0; j < 4; ++j) replica.push_back({0, 2048, 2048 * 2048, 1});
    loads.push_back(replica);
  }
  return {{"fulcrum", 1},
          {"kind", "plan"},
          {"model", "gpt-11b"},
          {"cluster", "a100:4"},
          {"gbs", 8},
          {"dtype", "bf16"},
          {"strategy", "megatron"},
          {"command", "fulcrum plan --model gpt-11b --cluster a100:4 --gbs 8 --out plan.json"},
          {"request",
           {{"model", "gpt-11b"}, {"cluster", "a100:4"}, {"gbs", 8}, {"seq", 2048}, {"images_per_sample", 0},
            {"image_tokens", 0}, {"data", ""}, {"root", "."}, {"profile", ""}, {"dtype", "bf16"}, {"seed", 0}}},
          {"plan",
           {{"dp", 2}, {"tp", 1}, {"pp", 2}, {"vpp", 1}, {"encoder_tp", 0}, {"mbs", 1}, {"micro_batches", 4},
            {"schedule", "1f1b"}, {"sequence_parallel", false}, {"batcher", "random"}, {"stages", stages},
            {"recompute", recompute_summary(schedule)}, {"steps_per_epoch", 10}, {"samples_per_step", 8},
            {"epoch_seconds", 12.5}, {"iteration_seconds", 1.25}}},
          {"schedule", Json::parse(schedule_to_json(schedule))},
          {"detail_loads", loads}};
}

TEST(PlanFile, ReadsWhatThePlanCommandWrites) {
  const PlanFile p = read_plan_file(plan_file().dump(), "plan.json");
  EXPECT_EQ(p.strategy, "megatron");
  EXPECT_EQ(p.model_name, "gpt-11b");
  EXPECT_EQ(p.cluster, "a100:4");
  EXPECT_EQ(p.gbs, 8);
  EXPECT_EQ(p.schedule.layout.dp, 2);
  EXPECT_EQ(p.schedule.layout.pp, 2);
  EXPECT_EQ(p.schedule.micro_batches, 4);
  EXPECT_EQ(p.configuration, "DP 2 TP 1 PP 2 VPP 1, micro-batch 1 × 4, 1f1b, random batches");
  ASSERT_EQ(p.detail_loads.per_replica.size(), 2u);
  ASSERT_EQ(p.detail_loads.per_replica[1].size(), 4u);
  EXPECT_EQ(p.detail_loads.per_replica[1][3].llm_tokens, 2048);
  EXPECT_DOUBLE_EQ(p.epoch_seconds, 12.5);
  EXPECT_FALSE(p.efficiency_fine.has_value());
}

// Each edit leaves a well-formed file that states one plan and schedules another, or one no run could make.
TEST(PlanFile, RefusesASummaryThatDisagreesWithItsSchedule) {
  const std::pair<std::function<void(Json&)>, std::string> cases[] = {
      {[](Json& d) { d["plan"]["tp"] = 2; }, "plan.json: plan: \"tp\" is 2, but its schedule's layout has 1"},
      {[](Json& d) { d["plan"]["vpp"] = 2; }, "plan.json: plan: \"vpp\" is 2"},
      {[](Json& d) { d["plan"]["sequence_parallel"] = true; }, "\"sequence_parallel\" is true"},
      {[](Json& d) { d["plan"]["schedule"] = "interleaved"; }, "\"schedule\" is 'interleaved', but its schedule runs '1f1b'"},
      {[](Json& d) { d["plan"]["stages"] = Json::array({{0, 1}, {1, 83}}); }, "\"stages\" differ"},
      {[](Json& d) { d["plan"]["recompute"] = "0 none, 0 selective, 83 full"; }, "\"recompute\" is"},
      {[](Json& d) { d["plan"]["epoch_seconds"] = 13.0; }, "\"epoch_seconds\" is 13, but 10 steps of 1.25 s take 12.5"},
      {[](Json& d) { d["plan"]["micro_batches"] = 8; }, "8 micro-batches, but its schedule runs 4"},
      {[](Json& d) { d["plan"]["batcher"] = "best"; }, "unknown batcher 'best'"},
      {[](Json& d) { d["strategy"] = "best"; }, "plan.json: plan: unknown strategy 'best'"},
      {[](Json& d) { d["dtype"] = "fp8"; }, "\"dtype\" is \"fp8\", but the request's is \"bf16\""},
      {[](Json& d) { d["optimus"] = {{"efficiency_fine", 0.5}}; }, "its schedule has no encoder section"},
      {[](Json& d) { d["optimus"] = {{"efficiency_fine", -0.5}}; }, "\"efficiency_fine\" must be between 0 and 1"},
      {[](Json& d) { d["detail_loads"][1].erase(0); }, "detail_loads[1]: expected 4 micro-batches"},
      // Past these the simulation's Σt² overflows, or the micro-batch count wraps onto the schedule's.
      {[](Json& d) { d["request"]["image_tokens"] = int64_t{1} << 62; }, "request: \"image_tokens\" must be from 0"},
      {[](Json& d) { d["plan"]["micro_batches"] = (int64_t{1} << 32) + 4; }, "\"micro_batches\" must be at most"},
      {[](Json& d) { d["kind"] = 5; }, "plan.json: not a plan file"},
      // A micro-batch size or global batch that the schedule's micro-batches and replicas do not make.
      {[](Json& d) { d["plan"]["mbs"] = 999; }, "\"mbs\" 999 × 4 micro-batches × DP 2 is not the request's global batch 8"},
      {[](Json& d) {
         d["gbs"] = 4000;
         d["request"]["gbs"] = 4000;
       },
       "\"mbs\" 1 × 4 micro-batches × DP 2 is not the request's global batch 4000"},
      // Counts no micro-batch has: the simulator's products of them would overflow.
      {[](Json& d) { d["detail_loads"][0][0] = {7, INT64_MAX, INT64_MAX, 0}; },
       "detail_loads[0][0]: expected integers from 0 to 2^40"},
  };
  for (const auto& [edit, message] : cases) {
    Json doc = plan_file();
    edit(doc);
    EXPECT_THAT([&] { read_plan_file(doc.dump(), "plan.json"); },
                ::testing::ThrowsMessage<InputError>(::testing::HasSubstr(message)))
        << message;
  }
}

TEST(PlanFile, RecomputeSummaryCountsEachMode) {
  Schedule s;
  s.recompute = {Recompute::kNone, Recompute::kFull, Recompute::kSelective, Recompute::kFull};
  EXPECT_EQ(recompute_summary(s), "1 none, 1 selective, 2 full");
}

}  // namespace
}  // namespace fulcrum
