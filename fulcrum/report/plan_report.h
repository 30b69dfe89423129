#ifndef FULCRUM_REPORT_PLAN_REPORT_H_
#define FULCRUM_REPORT_PLAN_REPORT_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fulcrum/model/model_spec.h"
#include "fulcrum/report/sim_sections.h"
#include "fulcrum/report/timeline_chart.h"
#include "fulcrum/sched/schedule.h"
#include "fulcrum/sim/simulator.h"

namespace fulcrum {

// Each data-parallel rank's predicted seconds in each step of an epoch's first steps, under one batcher.
struct RankLoads {
  std::string batcher;
  std::vector<std::vector<double>> seconds;  // [step][rank]
};

// What a plan's report shows. The pointers must outlive render_plan_report.
struct PlanReport {
  std::string title;           // "internvl-chat-1.5 on a100:256: fulcrum plan"
  std::string plan_command;    // reproduces the plan
  std::string report_command;  // reproduces this report
  std::vector<std::pair<std::string, std::string>> summary;  // label, value; in order
  std::string name;            // the plan's name among the compared ones
  std::string configuration;
  double iteration_seconds = 0;  // the mean over the plan's simulated steps
  double epoch_seconds = 0;
  // One simulated iteration of the plan's schedule, its timeline kept (SimOptions::timeline).
  const ModelSpec* model = nullptr;
  const Schedule* schedule = nullptr;
  const SimResult* simulated = nullptr;
  std::vector<ComparedPlan> compared;
  // Per-rank load before balancing (random batches) and under the plan's batcher; without data, why not.
  std::optional<RankLoads> before;
  std::optional<RankLoads> after;
  std::string loads_note;
  // A measured timeline beside the simulated one, and where it came from.
  std::optional<TimelineChart> measured;
  std::string measured_source;
};

// The simulated iteration as a chart: a row per pipeline rank of the traced data-parallel replica, its compute
// coloured by component and pass, encoder work placed in bubbles apart, the optimizer step, and a thin band of
// its transfers and collectives.
TimelineChart simulated_timeline(const SimResult& simulated, const Schedule& schedule, const ModelSpec& model);

// One self-contained HTML page (inline SVG and CSS, nothing fetched): the summary and the commands, the
// timeline, idle time by cause, memory per stage against the cap, per-rank load before and after balancing,
// the compared plans with their speed-ups, and the measured timeline. Deterministic.
std::string render_plan_report(const PlanReport& report);

}  // namespace fulcrum

#endif  // FULCRUM_REPORT_PLAN_REPORT_H_
