// The `fulcrum` command line: wires the modules' implementations to each other's interfaces.
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <new>

#include "cli/commands.h"
#include "cli/warnings.h"
#include "fulcrum/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"fulcrum: balanced data, plans and schedules for multimodal training", "fulcrum"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "fulcrum 0.1.0");
  auto run_stats = fulcrum::add_stats_command(app);
  auto run_batch = fulcrum::add_batch_command(app);
  auto run_model = fulcrum::add_model_command(app);
  auto run_simulate = fulcrum::add_simulate_command(app);
  auto run_plan = fulcrum::add_plan_command(app);
  auto run_multitask = fulcrum::add_multitask_command(app);
  auto run_report = fulcrum::add_report_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::cerr << fmt::format("fulcrum: error: {} (see --help)\n", e.what());
    return 2;
  }
  try {
    if (app.got_subcommand("stats")) run_stats();
    if (app.got_subcommand("batch")) run_batch();
    if (app.got_subcommand("model")) run_model();
    if (app.got_subcommand("simulate")) run_simulate();
    if (app.got_subcommand("plan")) run_plan();
    if (app.got_subcommand("multitask")) run_multitask();
    if (app.got_subcommand("report")) run_report();
    fulcrum::flush_warnings();
  } catch (const fulcrum::InputError& e) {
    std::cerr << fmt::format("fulcrum: error: {}\n", e.what());
    return 2;
  } catch (const fulcrum::InternalError& e) {
    std::cerr << fmt::format("fulcrum: internal error: {} (the inputs passed their checks: a fault in fulcrum)\n",
                             e.what());
    return 3;
  } catch (const std::bad_alloc&) {
    std::cerr << "fulcrum: error: out of memory\n";
    return 1;
  }
  return 0;
}
