#ifndef FULCRUM_REPORT_MULTITASK_REPORT_H_
#define FULCRUM_REPORT_MULTITASK_REPORT_H_

#include <string>
#include <utility>
#include <vector>

#include "fulcrum/model/model_spec.h"
#include "fulcrum/report/sim_sections.h"
#include "fulcrum/report/timeline_chart.h"
#include "fulcrum/sched/schedule.h"
#include "fulcrum/sim/simulator.h"

namespace fulcrum {

// What a multi-task plan's report shows. The pointers must outlive render_multitask_report.
struct MultitaskReport {
  std::string title;    // "multitask-clip-10 on a800:16: waves"
  std::string command;  // reproduces the plan and this report
  std::vector<std::pair<std::string, std::string>> summary;
  std::vector<std::string> task_names;  // by task index of the schedule's slices
  const ModelSpec* model = nullptr;
  const Schedule* schedule = nullptr;   // with its multitask section
  const SimResult* simulated = nullptr;  // its iteration, timeline kept
  std::vector<ComparedPlan> compared;    // the plan first, then the arrangements it is compared with
};

// The waves as a chart: a row per device, each slice's forward and backward a block coloured by its task (the
// forward lighter), so the devices a slice spans show as one block across their rows; transfers and gradient
// all-reduces in a thin band; a line where each wave starts.
TimelineChart wave_timeline(const SimResult& simulated, const Schedule& schedule, const ModelSpec& model,
                            const std::vector<std::string>& task_names);

// One self-contained HTML page: summary and command, the waves, idle time by cause and memory per device, and
// the arrangements side by side. Deterministic.
std::string render_multitask_report(const MultitaskReport& report);

}  // namespace fulcrum

#endif  // FULCRUM_REPORT_MULTITASK_REPORT_H_
