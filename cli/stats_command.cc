#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/output_file.h"
#include "cli/warnings.h"
#include "fulcrum/data/dataset_stats.h"
#include "fulcrum/data/meta_index.h"

namespace fulcrum {

namespace {

struct StatsOptions {
  std::string data;
  std::string root = ".";
  bool strict = false;
  bool json = false;
};

void print_distribution(const char* name, const Distribution& d) {
  std::cout << fmt::format("{:<8} mean {:.1f} ± {:.1f}   min {}  p50 {}  p90 {}  p99 {}  max {}   total {}\n", name,
                           d.mean, d.stddev, d.min, d.p50, d.p90, d.p99, d.max, d.total);
  int64_t peak = 1;
  for (const auto& [low, count] : d.histogram) peak = std::max(peak, count);
  for (const auto& [low, count] : d.histogram) {
    const std::string label = d.bin_width == 1 ? fmt::format("{}", low) : fmt::format("{}-{}", low, low + d.bin_width - 1);
    std::cout << fmt::format("  {:>11} {:>9} {}\n", label, count, std::string(static_cast<size_t>(40 * count / peak), '#'));
  }
}

void run_stats(const StatsOptions& o) {
  LoadedData loaded = load_dataset(o.data, {o.root, o.strict, &warnings()});
  const DatasetStats stats = compute_stats(loaded.dataset);
  if (o.json) {
    nlohmann::ordered_json out = stats_to_json(stats);
    nlohmann::ordered_json missing = nlohmann::ordered_json::array();
    for (const MetaEntry& e : loaded.missing) missing.push_back({{"name", e.name}, {"token_lengths", e.token_lengths}});
    out["missing_sources"] = missing;
    std::cout << json_text(out, 2) << "\n";
    return;
  }
  std::cout << fmt::format("{} samples ({} text-only) from {} source(s); vision counted in {}\n", stats.samples,
                           stats.text_only, stats.sources.size(), vision_unit_name(stats.vision_unit));
  for (const DatasetSource& s : stats.sources) {
    std::cout << fmt::format("  {:<40} {:>9} samples ({} records × {})\n", s.name, s.samples, s.records, s.repeat_time);
  }
  for (const MetaEntry& e : loaded.missing) std::cout << fmt::format("  {:<40}   missing: {}\n", e.name, e.token_lengths);
  print_distribution(stats.vision_unit == VisionUnit::kTiles ? "tiles" : "vision", stats.vision);
  print_distribution("tokens", stats.tokens);
  for (const auto& [task, count] : stats.tasks) std::cout << fmt::format("task {:<20} {:>9}\n", task, count);
}

}  // namespace

std::function<void()> add_stats_command(CLI::App& app) {
  auto options = std::make_shared<StatsOptions>();
  CLI::App* cmd = app.add_subcommand("stats", "Summarize a dataset's per-sample lengths");
  cmd->add_option("--data", options->data, "Length file (JSON, JSON Lines, CSV) or meta index")->required();
  cmd->add_option("--root", options->root, "Second folder to resolve a meta index's paths against")
      ->capture_default_str();
  cmd->add_flag("--strict", options->strict, "A missing meta index entry is an error");
  cmd->add_flag("--json", options->json, "Print one JSON object");
  return [options] { run_stats(*options); };
}

}  // namespace fulcrum
