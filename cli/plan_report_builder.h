#ifndef FULCRUM_CLI_PLAN_REPORT_BUILDER_H_
#define FULCRUM_CLI_PLAN_REPORT_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "fulcrum/report/plan_file.h"
#include "fulcrum/report/plan_report.h"

namespace fulcrum {

// What a report is made from besides the plan file itself.
struct ReportSources {
  std::string data;  // length file or meta index; empty: the one the plan was made on, if any
  std::string root = ".";
  std::vector<std::string> compare_files;  // other plan files
  std::vector<ComparedPlan> compared;      // plans already at hand (`fulcrum plan --report`'s baselines)
  std::string trace;                       // a measured Chrome trace
  std::string report_command;              // the command that makes the report
  int load_steps = 48;                     // steps shown in the load section
  int replica = -1;                        // data-parallel replica the timeline shows; -1: the slowest
};

// The HTML report of the plan file `plan_text` (what `fulcrum plan --out` writes) named `plan_file` in
// messages: its schedule simulated again on the micro-batches the plan was simulated on, with the timeline
// kept. Bad input throws InputError naming the file and the record.
std::string plan_report_html(const std::string& plan_text, const std::string& plan_file, const ReportSources& sources);

}  // namespace fulcrum

#endif  // FULCRUM_CLI_PLAN_REPORT_BUILDER_H_
