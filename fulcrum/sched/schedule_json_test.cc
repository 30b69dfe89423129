#include "fulcrum/sched/schedule_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fulcrum/core/error.h"
#include "fulcrum/sched/pipeline_schedules.h"
#include "fulcrum/sched/validate.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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
    EXPECT_THAT(text, Not(HasSubstr("\"encoder\"")));  // no encoder section, no key
    EXPECT_THAT(text, Not(HasSubstr("\"tasks\"")));    // no multitask section, no key
    const Schedule back = schedule_from_json(text, "s.json");
    EXPECT_EQ(schedule_to_json(back), text);
    EXPECT_FALSE(back.encoder.present());
    EXPECT_FALSE(back.tasks.present());
    for (const Program& p : back.programs) {
      for (const Instruction& in : p.instructions) {
        if (in.op == OpKind::kCollective) EXPECT_EQ(in.group, DeviceGroup::kData);  // without "tasks", never kSync
      }
    }
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
  p.insert(p.begin(), {wave, alloc, release});
  const std::string text = schedule_to_json(s);
  EXPECT_THAT(text, HasSubstr(R"(["wave",0])"));
  EXPECT_THAT(text, HasSubstr(R"(["allocate",0,3,1048576])"));
  EXPECT_THAT(text, HasSubstr(R"(["free",0,3])"));
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
  // A layer count past any model: its recompute runs would fill gigabytes before validate() saw the schedule.
  EXPECT_THAT(error_of(with("\"model_layers\": 4", "\"model_layers\": 2147483647")),
              HasSubstr("s.json: model_layers: 2147483647 is out of range [1, 1048576]"));
}

// Optimus: an LLM of pp 2, tp 2 whose two ranks host four encoder pipelines of one stage each (tp 1), with one
// instruction of every encoder form. Not a runnable schedule (the reader checks form, validate() the rest).
Schedule with_encoder_section() {
  Schedule s = generated(PipelineKind::kOneFOneB, 2, 1, 4, 1, StateSharding::kZero0);
  s.encoder.dp = 4;
  s.encoder.pp = 1;
  s.encoder.tp = 1;
  s.encoder.pipelines = 4;
  s.encoder.stages = {{{0, 3}}};
  s.encoder.llm_micro_batch = {{0}, {2}, {1}, {3}};
  s.encoder.collective_slowdown = 0.15;
  Instruction inside{.op = OpKind::kEncoderKernels, .stage = 0, .micro_batch = 0};
  inside.encoder_pipeline = 1;
  inside.layer = 2;
  inside.pass = Pass::kForward;
  inside.kernel_begin = 0;
  inside.kernel_end = 4;
  inside.inside_pass = true;
  Instruction after{.op = OpKind::kEncoderKernels, .stage = 0, .micro_batch = 0};
  after.encoder_pipeline = 1;
  after.layer = 1;
  after.pass = Pass::kBackward;
  after.kernel_begin = 1;
  after.kernel_end = 3;
  after.inside_pass = false;
  Instruction to_llm{.op = OpKind::kSend, .stage = 0, .micro_batch = 0, .peer_stage = 0};
  to_llm.encoder_pipeline = 1;
  Instruction from_encoder{.op = OpKind::kRecv, .stage = 0, .micro_batch = 2, .peer_stage = 0};
  from_encoder.peer_encoder_pipeline = 1;
  Instruction reduce{.op = OpKind::kCollective, .stage = 0, .group = DeviceGroup::kEncoderData};
  reduce.encoder_pipeline = 1;
  reduce.tensor = CollectiveTensor::kGradients;
  auto& p = s.programs[0].instructions;
  p.insert(p.begin(), {inside, after, to_llm, from_encoder, reduce});
  return s;
}

void expect_same_instruction(const Instruction& a, const Instruction& b) {
  EXPECT_EQ(a.op, b.op);
  EXPECT_EQ(a.stage, b.stage);
  EXPECT_EQ(a.micro_batch, b.micro_batch);
  EXPECT_EQ(a.peer_stage, b.peer_stage);
  EXPECT_EQ(a.payload, b.payload);
  EXPECT_EQ(a.collective, b.collective);
  EXPECT_EQ(a.group, b.group);
  EXPECT_EQ(a.tensor, b.tensor);
  EXPECT_EQ(a.layer, b.layer);
  EXPECT_EQ(a.pass, b.pass);
  EXPECT_EQ(a.kernel_begin, b.kernel_begin);
  EXPECT_EQ(a.kernel_end, b.kernel_end);
  EXPECT_EQ(a.wave, b.wave);
  EXPECT_EQ(a.buffer, b.buffer);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.encoder_pipeline, b.encoder_pipeline);
  EXPECT_EQ(a.peer_encoder_pipeline, b.peer_encoder_pipeline);
  EXPECT_EQ(a.inside_pass, b.inside_pass);
}

TEST(ScheduleJson, EncoderSectionRoundTrips) {
  const Schedule s = with_encoder_section();
  const std::string text = schedule_to_json(s);
  EXPECT_THAT(text, HasSubstr("\n\"encoder\": {\"dp\":4,\"pp\":1,\"tp\":1,\"pipelines\":4,\"stages\":[[[0,3]]],"
                              "\"llm_micro_batch\":[[0],[2],[1],[3]],\"collective_slowdown\":0.15},\n\"programs\""));
  EXPECT_LT(text.find("\"recompute\""), text.find("\"encoder\""));
  EXPECT_THAT(text, HasSubstr(R"(["encoder",1,0,0,2,"forward",0,4,"inside_pass"])"));
  EXPECT_THAT(text, HasSubstr(R"(["encoder",1,0,0,1,"backward",1,3,"after_pass"])"));
  EXPECT_THAT(text, HasSubstr(R"(["send","activation",0,0,0,1,-1])"));
  EXPECT_THAT(text, HasSubstr(R"(["recv","activation",0,2,0,-1,1])"));
  EXPECT_THAT(text, HasSubstr(R"(["collective","all_reduce","gradients",0,1])"));
  EXPECT_THAT(text, HasSubstr(R"(["send","activation",0,0,1])"));  // LLM to LLM keeps the 5-field form

  const Schedule back = schedule_from_json(text, "s.json");
  EXPECT_EQ(schedule_to_json(back), text);
  ASSERT_TRUE(back.encoder.present());
  EXPECT_EQ(back.encoder.dp, 4);
  EXPECT_EQ(back.encoder.pp, 1);
  EXPECT_EQ(back.encoder.tp, 1);
  EXPECT_EQ(back.encoder.pipelines, 4);
  ASSERT_EQ(back.encoder.stages.size(), 1u);
  ASSERT_EQ(back.encoder.stages[0].size(), 1u);
  EXPECT_EQ(back.encoder.stages[0][0].first_layer, 0);
  EXPECT_EQ(back.encoder.stages[0][0].end_layer, 3);
  EXPECT_EQ(back.encoder.llm_micro_batch, s.encoder.llm_micro_batch);
  EXPECT_EQ(back.encoder.collective_slowdown, 0.15);
  ASSERT_EQ(back.programs.size(), s.programs.size());
  for (size_t r = 0; r < s.programs.size(); ++r) {
    ASSERT_EQ(back.programs[r].instructions.size(), s.programs[r].instructions.size());
    for (size_t i = 0; i < s.programs[r].instructions.size(); ++i) {
      SCOPED_TRACE(testing::Message() << "programs[" << r << "][" << i << "]");
      expect_same_instruction(back.programs[r].instructions[i], s.programs[r].instructions[i]);
    }
  }
  // The new forms, spelled out.
  const auto& p = back.programs[0].instructions;
  EXPECT_TRUE(p[0].inside_pass);
  EXPECT_FALSE(p[1].inside_pass);
  EXPECT_EQ(p[1].pass, Pass::kBackward);
  EXPECT_EQ(p[2].encoder_pipeline, 1);
  EXPECT_EQ(p[2].peer_encoder_pipeline, -1);
  EXPECT_EQ(p[3].encoder_pipeline, -1);
  EXPECT_EQ(p[3].peer_encoder_pipeline, 1);
  EXPECT_EQ(p[4].group, DeviceGroup::kEncoderData);
  EXPECT_EQ(p[4].encoder_pipeline, 1);
  EXPECT_EQ(p[5].encoder_pipeline, -1);  // the LLM's own instructions name no encoder pipeline
}

TEST(ScheduleJson, BadEncoderInputNamesThePlace) {
  const std::string good = schedule_to_json(with_encoder_section());
  auto with = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    EXPECT_EQ(text.find(from, at + 1), std::string::npos) << from << " is not unique";
    return at == std::string::npos ? text : text.replace(at, from.size(), to);
  };
  const std::string inside = R"(["encoder",1,0,0,2,"forward",0,4,"inside_pass"])";
  const std::string send = R"(["send","activation",0,0,0,1,-1])";
  const std::string reduce = R"(["collective","all_reduce","gradients",0,1])";
  const struct {
    std::string from, to, message;
  } cases[] = {
      {inside, R"(["encoder",1,0,0,2,"forward",0,4,"beside"])", "s.json: programs[0][0][8]: placement 'beside'"},
      {inside, R"(["encoder",1,0,0,2,"forward",0,4,true])", "s.json: programs[0][0][8]: expected a string"},
      {inside, R"(["encoder",-1,0,0,2,"forward",0,4,"inside_pass"])", "s.json: programs[0][0][1]: -1 is out of range"},
      {inside, R"(["encoder",0,0,2,"forward",0,4])", "s.json: programs[0][0]: \"encoder\" takes 9 fields, not 7"},
      {R"("backward",1,3)", R"("sideways",1,3)", "s.json: programs[0][1][5]: pass 'sideways'"},
      {send, R"(["send","activation",0,0,0,-1,-1])", "s.json: programs[0][2]: both sides are the LLM's"},
      {send, R"(["send","activation",0,0,0,1,-2])", "s.json: programs[0][2][6]: -2 is out of range [-1,"},
      {send, R"(["send","activation",0,0,0,1])", "s.json: programs[0][2]: \"send\" takes 5 fields (7 with encoder pipelines), not 6"},
      {reduce, R"(["collective","all_reduce","gradients",0,-1])", "s.json: programs[0][4][4]: -1 is out of range"},
      {reduce, R"(["collective","all_reduce","gradients",0,1,2])", "s.json: programs[0][4]: \"collective\" takes 4 fields"},
      {R"("collective_slowdown":0.15)", R"("collective_slowdown":-1)", "s.json: encoder.collective_slowdown: -1 is not"},
      {R"("collective_slowdown":0.15)", R"("collective_slowdown":"fast")",
       "s.json: encoder.collective_slowdown: expected a number"},
      {R"("pipelines":4)", R"("pipelines":4,"extra":1)", "s.json: encoder: unknown key \"extra\""},
      {R"("pipelines":4)", R"("pipelines":0)", "s.json: encoder.pipelines: 0 is out of range"},
      {R"("pp":1,"tp":1,)", R"("pp":1,)", "s.json: encoder: missing key \"tp\""},
      {R"("stages":[[[0,3]]])", R"("stages":[[[0]]])", "s.json: encoder.stages[0][0]: expected [first_layer, end_layer]"},
      {R"("stages":[[[0,3]]])", R"("stages":[[[0,-3]]])", "s.json: encoder.stages[0][0][1]: -3 is out of range"},
      {R"("llm_micro_batch":[[0],[2])", R"("llm_micro_batch":[[0],[-2])", "s.json: encoder.llm_micro_batch[1][0]: -2 is out of range"},
      {R"("llm_micro_batch":[[0],[2])", R"("llm_micro_batch":[[0],2)", "s.json: encoder.llm_micro_batch[1]: expected an array"},
  };
  for (const auto& c : cases) EXPECT_THAT(error_of(with(c.from, c.to)), HasSubstr(c.message)) << c.to;
  std::string not_an_object = good;
  const size_t begin = not_an_object.find("\"encoder\": {");
  ASSERT_NE(begin, std::string::npos);
  not_an_object.replace(begin, not_an_object.find("\n\"programs\"") - begin, "\"encoder\": [7],");
  EXPECT_THAT(error_of(not_an_object), HasSubstr("s.json: encoder: expected an object"));
}

// Spindle: four devices (pp 4, dp = tp = vpp = 1, no stages) running three slices in two waves: two tasks'
// first layers side by side on two devices each, then task 0's last layers on all four (tp 4), and one sync
// group all-reducing the layers both tasks share. Not a runnable schedule (the reader checks form only).
Schedule with_tasks_section() {
  Schedule s;
  s.kind = PipelineKind::kCustom;
  s.layout.pp = 4;
  s.micro_batches = 1;
  s.model_layers = 6;
  s.recompute.assign(6, Recompute::kNone);
  s.tasks.waves = 2;
  s.tasks.slices = {
      {.task = 0, .component = 0, .first_layer = 0, .layers = 3, .sequences = 64, .tokens = 257,
       .micro_batches = 1, .dp = 2, .tp = 1, .wave = 0, .devices = {0, 1}},
      {.task = 1, .component = 0, .first_layer = 0, .layers = 3, .sequences = 32, .tokens = 129,
       .micro_batches = 2, .dp = 2, .tp = 1, .wave = 0, .devices = {2, 3}},
      {.task = 0, .component = 0, .first_layer = 3, .layers = 3, .sequences = 64, .tokens = 257,
       .micro_batches = 1, .dp = 1, .tp = 4, .wave = 1, .devices = {0, 1, 2, 3}},
  };
  s.tasks.sync_groups = {{.devices = {0, 1, 2, 3}, .layers = {{0, 0}, {0, 1}}}};
  auto wave = [](int w) {
    Instruction in{.op = OpKind::kWaveBoundary};
    in.wave = w;
    return in;
  };
  for (int d = 0; d < 4; ++d) {
    const int own = d < 2 ? 0 : 1;  // the slice of wave 0 on this device
    s.programs.push_back({{
        {.op = OpKind::kForward, .stage = own, .micro_batch = 0},
        {.op = OpKind::kSend, .stage = own, .micro_batch = 0, .peer_stage = 2, .payload = Payload::kActivation},
        wave(0),
        {.op = OpKind::kRecv, .stage = 2, .micro_batch = 0, .peer_stage = own, .payload = Payload::kActivation},
        {.op = OpKind::kForward, .stage = 2, .micro_batch = 0},
        wave(1),
        {.op = OpKind::kBackward, .stage = 2, .micro_batch = 0},
        {.op = OpKind::kSend, .stage = 2, .micro_batch = 0, .peer_stage = own, .payload = Payload::kGradient},
        wave(2),
        {.op = OpKind::kRecv, .stage = own, .micro_batch = 0, .peer_stage = 2, .payload = Payload::kGradient},
        {.op = OpKind::kBackward, .stage = own, .micro_batch = 0},
        wave(3),
        {.op = OpKind::kCollective, .stage = 0, .collective = CollectiveKind::kAllReduce,
         .group = DeviceGroup::kSync, .tensor = CollectiveTensor::kGradients},
    }});
  }
  return s;
}

TEST(ScheduleJson, TasksSectionRoundTrips) {
  const Schedule s = with_tasks_section();
  const std::string text = schedule_to_json(s);
  EXPECT_THAT(text, HasSubstr("\n\"tasks\": {\"waves\":2,\"slices\":[[0,0,0,3,64,257,1,2,1,0,[0,1]],"
                              "[1,0,0,3,32,129,2,2,1,0,[2,3]],[0,0,3,3,64,257,1,1,4,1,[0,1,2,3]]],"
                              "\"sync_groups\":[{\"devices\":[0,1,2,3],\"tp\":1,\"layers\":[[0,0],[0,1]]}]},\n\"programs\""));
  EXPECT_LT(text.find("\"recompute\""), text.find("\"tasks\""));
  EXPECT_THAT(text, Not(HasSubstr("\"encoder\"")));
  EXPECT_THAT(text, HasSubstr(R"(["collective","all_reduce","gradients",0]])"));  // kSync keeps the 4-field form
  EXPECT_THAT(text, HasSubstr(R"(["send","activation",0,0,2])"));
  EXPECT_THAT(text, HasSubstr(R"(["recv","gradient",1,0,2])"));

  const Schedule back = schedule_from_json(text, "s.json");
  EXPECT_EQ(schedule_to_json(back), text);
  EXPECT_TRUE(back.tasks.slices[1].input_gradient);  // the default, left out
  // A slice without an input gradient (a frozen tower nothing trained feeds) carries a twelfth field.
  Schedule frozen = s;
  frozen.tasks.slices[1].input_gradient = false;
  const std::string frozen_text = schedule_to_json(frozen);
  EXPECT_THAT(frozen_text, HasSubstr("[1,0,0,3,32,129,2,2,1,0,[2,3],0]"));
  EXPECT_FALSE(schedule_from_json(frozen_text, "s.json").tasks.slices[1].input_gradient);
  EXPECT_FALSE(back.encoder.present());
  EXPECT_EQ(back.layout.pp, 4);
  EXPECT_TRUE(back.stages.empty());
  EXPECT_EQ(back.model_layers, 6);
  EXPECT_EQ(back.recompute, s.recompute);
  ASSERT_TRUE(back.tasks.present());
  EXPECT_EQ(back.tasks.waves, 2);
  ASSERT_EQ(back.tasks.slices.size(), 3u);
  for (size_t i = 0; i < s.tasks.slices.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "slices[" << i << "]");
    const TaskSlice& a = back.tasks.slices[i];
    const TaskSlice& b = s.tasks.slices[i];
    EXPECT_EQ(a.task, b.task);
    EXPECT_EQ(a.component, b.component);
    EXPECT_EQ(a.first_layer, b.first_layer);
    EXPECT_EQ(a.layers, b.layers);
    EXPECT_EQ(a.sequences, b.sequences);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.micro_batches, b.micro_batches);
    EXPECT_EQ(a.dp, b.dp);
    EXPECT_EQ(a.tp, b.tp);
    EXPECT_EQ(a.wave, b.wave);
    EXPECT_EQ(a.devices, b.devices);
  }
  ASSERT_EQ(back.tasks.sync_groups.size(), 1u);
  EXPECT_EQ(back.tasks.sync_groups[0].devices, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(back.tasks.sync_groups[0].layers, (std::vector<std::pair<int32_t, int32_t>>{{0, 0}, {0, 1}}));
  ASSERT_EQ(back.programs.size(), s.programs.size());
  for (size_t r = 0; r < s.programs.size(); ++r) {
    ASSERT_EQ(back.programs[r].instructions.size(), s.programs[r].instructions.size());
    for (size_t i = 0; i < s.programs[r].instructions.size(); ++i) {
      SCOPED_TRACE(testing::Message() << "programs[" << r << "][" << i << "]");
      expect_same_instruction(back.programs[r].instructions[i], s.programs[r].instructions[i]);
    }
  }
  EXPECT_EQ(back.programs[3].instructions.back().op, OpKind::kCollective);
  EXPECT_EQ(back.programs[3].instructions.back().group, DeviceGroup::kSync);
  EXPECT_EQ(back.programs[3].instructions.back().stage, 0);  // the sync group
  EXPECT_EQ(back.programs[3].instructions[0].stage, 1);      // device 3 runs slice 1 in wave 0
}

TEST(ScheduleJson, BadTasksInputNamesThePlace) {
  const std::string good = schedule_to_json(with_tasks_section());
  auto with = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    EXPECT_EQ(text.find(from, at + 1), std::string::npos) << from << " is not unique";
    return at == std::string::npos ? text : text.replace(at, from.size(), to);
  };
  const std::string slice0 = "[0,0,0,3,64,257,1,2,1,0,[0,1]]";
  const struct {
    std::string from, to, message;
  } cases[] = {
      {slice0, "[0,0,0,3,64,257,1,2,1,[0,1]]", "s.json: tasks.slices[0]: expected [task, component"},
      {slice0, "[0,0,0,3,64,257,1,2,1,[0,1]]", "(11 or 12 fields, not 10)"},
      {slice0, "[0,0,0,3,64,257,1,2,1,0,[0,1],2]", "s.json: tasks.slices[0][11]: 2 is out of range [0, 1]"},
      {slice0, "7", "s.json: tasks.slices[0]: expected [task, component"},
      {"[1,0,0,3,32,129", "[1,0,0,0,32,129", "s.json: tasks.slices[1][3]: 0 is out of range [1,"},
      {"[1,0,0,3,32,129", "[1,0,0,3,32,1099511627777", "s.json: tasks.slices[1][5]: 1099511627777 is out of range"},
      {"[1,0,0,3,32,129", "[1,0,-1,3,32,129", "s.json: tasks.slices[1][2]: -1 is out of range [0,"},
      {"1,4,1,[0,1,2,3]]", "1,4,1,[0,-1,2,3]]", "s.json: tasks.slices[2][10][1]: -1 is out of range [0,"},
      {"1,4,1,[0,1,2,3]]", "1,4,1,0]", "s.json: tasks.slices[2][10]: expected an array of device ids"},
      {"1,4,1,[0,1,2,3]]", "0,4,1,[0,1,2,3]]", "s.json: tasks.slices[2][7]: 0 is out of range [1,"},
      {R"({"waves":2,)", R"({"waves":2,"extra":1,)", "s.json: tasks: unknown key \"extra\""},
      {R"("waves":2)", R"("waves":0)", "s.json: tasks.waves: 0 is out of range [1,"},
      {R"("waves":2)", R"("waves":"two")", "s.json: tasks.waves: expected an integer"},
      {R"({"waves":2,)", "{", "s.json: tasks: missing key \"waves\""},
      {R"({"devices":[0,1,2,3])", R"({"devices":[0,1,2,3],"color":1)", "s.json: tasks.sync_groups[0]: unknown key \"color\""},
      {R"({"devices":[0,1,2,3],)", "{", "s.json: tasks.sync_groups[0]: missing key \"devices\""},
      {R"({"devices":[0,1,2,3])", R"({"devices":[0,1,-2,3])", "s.json: tasks.sync_groups[0].devices[2]: -2 is out of range"},
      {"[[0,0],[0,1]]", "[[0,0],[0]]", "s.json: tasks.sync_groups[0].layers[1]: expected [component, layer]"},
      {"[[0,0],[0,1]]", "[[0,0],[0,-1]]", "s.json: tasks.sync_groups[0].layers[1][1]: -1 is out of range"},
      {R"("sync_groups":[{)", R"("sync_groups":[7,{)", "s.json: tasks.sync_groups[0]: expected an object"},
  };
  for (const auto& c : cases) EXPECT_THAT(error_of(with(c.from, c.to)), HasSubstr(c.message)) << c.to;

  auto with_section = [&](const std::string& section) {
    std::string text = good;
    const size_t begin = text.find("\"tasks\": {");
    EXPECT_NE(begin, std::string::npos);
    return begin == std::string::npos ? text : text.replace(begin, text.find("\n\"programs\"") - begin, section);
  };
  EXPECT_THAT(error_of(with_section("\"tasks\": [7],")), HasSubstr("s.json: tasks: expected an object"));
  EXPECT_THAT(error_of(with_section(R"("tasks": {"waves":2,"slices":[],"sync_groups":[]},)")),
              HasSubstr("s.json: tasks.slices: expected at least one slice"));
  EXPECT_THAT(error_of(with_section(R"("tasks": {"waves":2,"slices":[[0,0,0,3,64,257,1,2,1,0,[0,1]]]},)")),
              HasSubstr("s.json: tasks: missing key \"sync_groups\""));
  // Without "tasks", the 4-field collective is the stage's data-parallel one again.
  const Schedule plain = schedule_from_json(with_section(""), "s.json");
  EXPECT_FALSE(plain.tasks.present());
  EXPECT_EQ(plain.programs[0].instructions.back().group, DeviceGroup::kData);
}

}  // namespace
}  // namespace fulcrum
