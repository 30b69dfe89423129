// `fulcrum report`: a plan as one self-contained HTML page, beside other plans and a measured timeline.
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/output_file.h"
#include "cli/plan_report_builder.h"
#include "fulcrum/core/error.h"
#include "fulcrum/core/text_file.h"

namespace fulcrum {
namespace {

struct ReportOptions {
  std::string plan;
  std::string data;
  std::string root = ".";
  std::vector<std::string> compare;
  std::string trace;
  std::string out;
  int steps = 48;
  int replica = -1;
};

std::string command_line(const ReportOptions& o) {
  std::string out = fmt::format("fulcrum report --plan {}", shell_word(o.plan));
  if (!o.data.empty()) out += fmt::format(" --data {}", shell_word(o.data));
  if (!o.data.empty() && o.root != ".") out += fmt::format(" --root {}", shell_word(o.root));
  for (const std::string& c : o.compare) out += fmt::format(" --compare {}", shell_word(c));
  if (!o.trace.empty()) out += fmt::format(" --trace {}", shell_word(o.trace));
  if (o.steps != ReportOptions{}.steps) out += fmt::format(" --steps {}", o.steps);
  if (o.replica >= 0) out += fmt::format(" --replica {}", o.replica);
  return out + fmt::format(" --out {}", shell_word(o.out));
}

void run_report(const ReportOptions& o) {
  if (o.steps < 1) throw InputError(fmt::format("--steps must be at least 1, got {}", o.steps));
  if (o.replica < -1) throw InputError(fmt::format("--replica must be at least 0, got {}", o.replica));
  ReportSources sources;
  sources.data = o.data;
  sources.root = o.root;
  sources.compare_files = o.compare;
  sources.trace = o.trace;
  sources.load_steps = o.steps;
  sources.replica = o.replica;
  sources.report_command = command_line(o);
  const std::string html = plan_report_html(read_text_file(o.plan), o.plan, sources);
  write_file_atomically(o.out, html);
}

}  // namespace

std::function<void()> add_report_command(CLI::App& app) {
  auto o = std::make_shared<ReportOptions>();
  CLI::App* cmd = app.add_subcommand("report", "Write a plan's HTML report: timeline, idle time, memory, balance");
  cmd->add_option("--plan", o->plan, "Plan file (fulcrum plan --out)")->required();
  cmd->add_option("--data", o->data, "Length file or meta index for the load section (default: the plan's own)");
  cmd->add_option("--root", o->root, "Second folder for a meta index's paths")->capture_default_str();
  cmd->add_option("--compare", o->compare, "Other plan files of the same job, shown side by side");
  cmd->add_option("--trace", o->trace, "A measured Chrome trace, shown beside the simulated timeline");
  cmd->add_option("--steps", o->steps, "Steps shown in the load section")->capture_default_str();
  cmd->add_option("--replica", o->replica, "Data-parallel replica the timeline shows (default: the slowest)")
      ->check(at_least(0));
  cmd->add_option("--out", o->out, "The HTML file to write")->required();
  return [o, cmd] {
    // The plan's own data resolves against the plan's root; a --root for it would be ignored.
    if (cmd->count("--root") > 0 && o->data.empty()) {
      throw InputError("--root applies to --data: the plan's own data uses the root it was planned with");
    }
    run_report(*o);
  };
}

}  // namespace fulcrum
