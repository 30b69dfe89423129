#ifndef FULCRUM_REPORT_SIM_SECTIONS_H_
#define FULCRUM_REPORT_SIM_SECTIONS_H_

#include <string>
#include <utility>
#include <vector>

#include "fulcrum/sim/simulator.h"

namespace fulcrum {

// The sections every report shares, as HTML <section> elements: the summary, and what a simulated iteration
// shows.

// A row of a per-device section: its name and its index in SimResult::per_device.
struct DeviceRow {
  std::string name;
  size_t device = 0;
};

// Another plan of the same job, shown beside the reported one.
struct ComparedPlan {
  std::string name;           // "megatron" or the file it came from
  std::string configuration;  // "DP 8 TP 2 PP 4 VPP 1, micro-batch 1 × 32, 1f1b, random batches"
  double iteration_seconds = 0;
  double epoch_seconds = 0;
  std::string does_not_fit;  // when no plan of it fits: why (shown instead of its times)
};

// <section id="summary">: `rows` (label, value) as a table, then each command (caption, command line) that
// reproduces what the page shows.
std::string summary_section_html(const std::vector<std::pair<std::string, std::string>>& rows,
                                 const std::vector<std::pair<std::string, std::string>>& commands);

// <section id="idle">: each row's time as compute and idle time by cause (TimeBreakdown), as stacked bars
// (svg#idle-chart) and a table.
std::string idle_section_html(const SimResult& simulated, const std::vector<DeviceRow>& rows, const std::string& intro);

// <section id="memory">: each entry of peak_memory_bytes, named `names[i]`, as its state and the activations at
// the peak (svg#memory-chart) against the cap a plan may use, and a table.
std::string memory_section_html(const SimResult& simulated, const std::vector<std::string>& names,
                                const std::string& heading, const std::string& intro);

// <section id="compare">: `plans[0]` (the reported plan) and the others, as bars (svg#compare-chart) and a table
// with the reported plan's speed-up over each, by epoch time or (`epochs` false) iteration time; one that does not
// fit is a row saying why. `note` (HTML) shows when there is no other plan.
std::string compare_section_html(const std::vector<ComparedPlan>& plans, bool epochs, const std::string& intro,
                                 const std::string& note);

}  // namespace fulcrum

#endif  // FULCRUM_REPORT_SIM_SECTIONS_H_
