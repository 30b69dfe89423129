#include "fulcrum/sched/schedule_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fulcrum/core/error.h"
#include "fulcrum/sched/pipeline_schedules.h"
#include "fulcrum/sched/validate.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

Schedule generated(PipelineKind kind, int pp, int vpp, int m, int dp, StateSharding sharding) {
  ParallelLayout layout;
  layout.pp = pp;
  layout.vpp = vpp;
  layout.dp = dp;
  layout.tp = 2;
  layout.sequence_parallel = true;
  layout.state_sharding = sharding;
  std::vector<StageLayers> stages;
  for (int s = 0; s < pp * vpp; ++s) stages.push_back({2 * s, 2 * s + 2});
  std::vector<Recompute> recompute(2 * pp * vpp, Recompute::kSelective);
  recompute[0] = Recompute::kFull;
  return make_pipeline_schedule(kind, layout, m, stages, recompute);
}

std::string error_of(const std::string& text) {
  try {
    schedule_from_json(text, "s.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ScheduleJson, GeneratedSchedulesRoundTrip) {
  const Schedule cases[] = {
      generated(PipelineKind::kInterleaved, 4, 3, 8, 2, StateSharding::kMegatronDistributedOptimizer),
      generated(PipelineKind::kZeroBubbleH1, 3, 1, 6, 2, StateSharding::kZero3),
      generated(PipelineKind::kGpipe, 2, 1, 3, 1, StateSharding::kZero0),
  };
  for (const Schedule& s : cases) {
    const std::string text = schedule_to_json(s);
    const Schedule back = schedule_from_json(text, "s.json");
    EXPECT_EQ(schedule_to_json(back), text);
    EXPECT_EQ(back.kind, s.kind);
    EXPECT_EQ(back.layout.vpp, s.layout.vpp);
    EXPECT_EQ(back.layout.state_sharding, s.layout.state_sharding);
    EXPECT_EQ(back.recompute, s.recompute);
    EXPECT_EQ(back.instruction_count(), s.instruction_count());
    validate(back, "s.json");
  }
}

TEST(ScheduleJson, EveryInstructionKindRoundTrips) {
  Schedule s = generated(PipelineKind::kOneFOneB, 1, 1, 1, 1, StateSharding::kZero0);
  auto& p = s.programs[0].instructions;
  Instruction wave{.op = OpKind::kWaveBoundary};
  wave.wave = 0;
  Instruction alloc{.op = OpKind::kAllocate, .stage = 0};
  alloc.buffer = 3;
  alloc.bytes = 1 << 20;
  Instruction release{.op = OpKind::kFree, .stage = 0};
  release.buffer = 3;
  Instruction encoder{.op = OpKind::kEncoderKernels, .stage = 0, .micro_batch = 0};
  encoder.layer = 1;
  encoder.pass = Pass::kBackwardWeight;
  encoder.kernel_begin = 2;
  encoder.kernel_end = 5;
  p.insert(p.begin(), {wave, alloc, encoder, release});
  const std::string text = schedule_to_json(s);
  EXPECT_THAT(text, HasSubstr(R"(["encoder",0,0,1,"backward_weight",2,5])"));
  EXPECT_THAT(text, HasSubstr(R"(["allocate",0,3,1048576])"));
  const Schedule back = schedule_from_json(text, "s.json");
  EXPECT_EQ(schedule_to_json(back), text);
  validate(back);
}

TEST(ScheduleJson, BadInputNamesTheFileAndThePlace) {
  const std::string good = schedule_to_json(generated(PipelineKind::kOneFOneB, 2, 1, 2, 1, StateSharding::kZero0));
  auto with = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  EXPECT_THAT(error_of("{"), HasSubstr("s.json: malformed JSON"));
  EXPECT_THAT(error_of(with("\"fulcrum\": 1", "\"fulcrum\": 2")), HasSubstr("s.json: fulcrum: 2 is out of range"));
  EXPECT_THAT(error_of(with("\"kind\": \"schedule\"", "\"kind\": \"schedule\", \"extra\": 1")),
              HasSubstr("s.json: schedule: unknown key \"extra\""));
  EXPECT_THAT(error_of(with("\"dp\":1", "\"dp\":0")), HasSubstr("s.json: layout.dp: 0 is out of range"));
  EXPECT_THAT(error_of(with("\"dp\":1", "\"dp\":\"one\"")), HasSubstr("layout.dp: expected an integer"));
  EXPECT_THAT(error_of(with("[\"F\",0,0]", "[\"X\",0,0]")), HasSubstr("s.json: programs[0][0][0]: unknown instruction 'X'"));
  EXPECT_THAT(error_of(with("[\"F\",0,0]", "[\"F\",0]")), HasSubstr("programs[0][0]: \"F\" takes 3 fields, not 2"));
  EXPECT_THAT(error_of(with("[\"F\",0,0]", "[\"F\",-1,0]")), HasSubstr("programs[0][0][1]: -1 is out of range"));
  EXPECT_THAT(error_of(with("[\"F\",0,0]", "[\"F\",0,99999999999]")), HasSubstr("out of range"));
  EXPECT_THAT(error_of(with("\"pipeline\": \"1f1b\"", "\"pipeline\": \"2f2b\"")), HasSubstr("s.json: pipeline: '2f2b'"));
  EXPECT_THAT(error_of(with("[\"selective\",3]", "[\"selective\",4]")), HasSubstr("s.json: recompute[1]: more layers than the model's 4"));
  EXPECT_THAT(error_of(with("\"activation\"", "\"photons\"")), HasSubstr("payload 'photons'"));
}

}  // namespace
}  // namespace fulcrum
