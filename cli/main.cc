// The `fulcrum` command line: wires the modules' implementations to each other's interfaces.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/error_line.h"
#include "cli/output_file.h"
#include "cli/warnings.h"
#include "fulcrum/core/error.h"

int main(int argc, char** argv) {
  // A reader that closed standard output makes the write fail (the run's error path: status 2, its files not put
  // in place) instead of killing the process between staging its files and renaming them.
  std::signal(SIGPIPE, SIG_IGN);
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
  if (argc > 1 && argv[1][0] != '-') {  // CLI11 would say only that a subcommand is required
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      names.push_back(sub->get_name());
    }
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      std::cerr << fmt::format("fulcrum: error: unknown command '{}'; the commands are {} (see --help)\n",
                               fulcrum::one_line(argv[1]),
                               fmt::join(names, ", "));
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::cerr << fmt::format("fulcrum: error: {} (see --help)\n", fulcrum::one_line(e.what()));
    return 2;
  }
  // An empty value would be taken as the option left out (no output written, the default used) without a word.
  for (const CLI::App* sub : app.get_subcommands()) {
    for (const CLI::Option* option : sub->get_options()) {
      for (const std::string& value : option->results()) {
        if (value.empty()) {
          std::cerr << fmt::format("fulcrum: error: {} is given an empty value (see --help)\n", option->get_name());
          return 2;
        }
      }
    }
  }
  fulcrum::defer_output_renames();  // files go into place once standard output is written
  try {
    if (app.got_subcommand("stats")) run_stats();
    if (app.got_subcommand("batch")) run_batch();
    if (app.got_subcommand("model")) run_model();
    if (app.got_subcommand("simulate")) run_simulate();
    if (app.got_subcommand("plan")) run_plan();
    if (app.got_subcommand("multitask")) run_multitask();
    if (app.got_subcommand("report")) run_report();
    fulcrum::flush_warnings();
    std::cout.flush();
    if (!std::cout) throw fulcrum::InputError("standard output: cannot write");
    fulcrum::commit_outputs();
  } catch (const fulcrum::InputError& e) {
    fulcrum::discard_outputs();
    std::cerr << fmt::format("fulcrum: error: {}\n", fulcrum::one_line(e.what()));
    return 2;
  } catch (const fulcrum::InternalError& e) {
    fulcrum::discard_outputs();
    std::cerr << fmt::format("fulcrum: internal error: {} (the inputs passed their checks: a fault in fulcrum)\n",
                             fulcrum::one_line(e.what()));
    return 3;
  } catch (const std::bad_alloc&) {
    fulcrum::discard_outputs();
    std::cerr << "fulcrum: error: out of memory\n";
    return 1;
  } catch (...) {  // a fault: no staged file is left behind it
    fulcrum::discard_outputs();
    throw;
  }
  return 0;
}
