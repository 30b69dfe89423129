#ifndef FULCRUM_CLI_COMMANDS_H_
#define FULCRUM_CLI_COMMANDS_H_

#include <CLI/CLI.hpp>
#include <functional>

namespace fulcrum {

// Each command registers its subcommand and returns the function that runs it once arguments are parsed.
// Bad input throws InputError; main() prints it as one line and exits with status 2.
std::function<void()> add_stats_command(CLI::App& app);
std::function<void()> add_batch_command(CLI::App& app);
std::function<void()> add_model_command(CLI::App& app);
std::function<void()> add_simulate_command(CLI::App& app);
std::function<void()> add_plan_command(CLI::App& app);
std::function<void()> add_multitask_command(CLI::App& app);
std::function<void()> add_report_command(CLI::App& app);

}  // namespace fulcrum

#endif  // FULCRUM_CLI_COMMANDS_H_
