#include "fulcrum/report/plan_report.h"

#include <gtest/gtest.h>

#include <string>

#include "fulcrum/model/model_presets.h"

namespace fulcrum {
namespace {

TimelineEvent forward_of(int rank, int stage) {
  TimelineEvent e;
  e.rank = rank;
  e.op = OpKind::kForward;
  e.stage = stage;
  e.micro_batch = 0;
  e.end_seconds = 1;
  return e;
}

// A stage's pass runs every component of its layers: a stage holding LLaVA's vision tower, projector and the
// first LLM blocks is drawn as all three's pass, a stage of LLM blocks alone as the LLM's.
TEST(SimulatedTimeline, AStageOfSeveralComponentsIsNamedByThemAll) {
  const ModelSpec model = model_preset("llava-1.5-7b");
  const int32_t layers = static_cast<int32_t>(flat_layers(model).size());
  const int32_t llm_first = static_cast<int32_t>(model.components[0].layers.size() + model.components[1].layers.size());
  Schedule schedule;
  schedule.layout.pp = 2;
  schedule.stages = {{0, llm_first + 4}, {llm_first + 4, layers}};
  SimResult simulated;
  simulated.iteration_seconds = 1;
  simulated.timeline = {forward_of(0, 0), forward_of(1, 1)};
  const TimelineChart chart = simulated_timeline(simulated, schedule, model);
  ASSERT_EQ(chart.rows.size(), 2u);
  ASSERT_EQ(chart.rows[0].work.size(), 1u);
  ASSERT_EQ(chart.rows[1].work.size(), 1u);
  EXPECT_EQ(chart.kinds.at(chart.rows[0].work[0].kind).name, "vision+projector+llm forward");
  EXPECT_EQ(chart.kinds.at(chart.rows[1].work[0].kind).name, "llm forward");
}

}  // namespace
}  // namespace fulcrum
