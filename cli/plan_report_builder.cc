#include "cli/plan_report_builder.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/cost_inputs.h"
#include "cli/warnings.h"
#include "fulcrum/core/error.h"
#include "fulcrum/core/json_document.h"
#include "fulcrum/core/json_reader.h"
#include "fulcrum/core/text_file.h"
#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/cost/model_sample_cost.h"
#include "fulcrum/cost/profiled_cost.h"
#include "fulcrum/data/balance_metrics.h"
#include "fulcrum/data/batcher.h"
#include "fulcrum/data/isf.h"
#include "fulcrum/data/meta_index.h"
#include "fulcrum/model/load_model.h"
#include "fulcrum/plan/planner.h"
#include "fulcrum/report/html.h"
#include "fulcrum/report/trace_chart.h"
#include "fulcrum/sched/schedule_json.h"
#include "fulcrum/sched/validate.h"

namespace fulcrum {
namespace {

using Json = nlohmann::json;

// Per step, per rank: the predicted seconds of the rank's micro-batches under `batcher`.
RankLoads rank_loads(const Dataset& data, const SampleCost& cost, const std::string& batcher, const PlanFile& p,
                     int steps) {
  BatchParams params;
  params.dp = p.schedule.layout.dp;
  params.micro_batches = p.micro_batches;
  params.samples_per_step = p.gbs;
  params.seed = p.seed;
  params.oversize = OversizePolicy::kOwnGroup;
  if (batcher == "isf" && p.batch_caps) take_caps(*p.batch_caps, params);
  const BatchPlan plan = make_batcher(batcher)->plan(data, params, cost);
  RankLoads out;
  out.batcher = batcher;
  const int64_t shown = std::min<int64_t>(steps, plan.steps());
  for (int64_t s = 0; s < shown; ++s) {
    std::vector<double>& ranks = out.seconds.emplace_back();
    for (int d = 0; d < params.dp; ++d) {
      double sum = 0;
      for (int j = 0; j < params.micro_batches; ++j) {
        sum += cost.micro_batch_seconds(micro_batch_load(data, plan.micro_batch(s, d, j), plan.padded()));
      }
      ranks.push_back(sum);
    }
  }
  return out;
}

// What the plan file's request names (its model, cluster, dtype, profile and data) loaded, failing with the plan
// file's name: a path in it may no longer resolve where the report runs, and the user typed only the plan's.
// A compared plan must have been made for the same job as the reported one: the same model, cluster, global batch,
// number format and samples.
void check_same_job(const PlanFile& other, const std::string& other_file, const PlanFile& p, const std::string& file) {
  const std::pair<const char*, std::pair<std::string, std::string>> fields[] = {
      {"model", {other.model, p.model}},
      {"cluster", {other.cluster, p.cluster}},
      {"gbs", {std::to_string(other.gbs), std::to_string(p.gbs)}},
      {"dtype", {other.dtype, p.dtype}},
      {"data", {other.data, p.data}},
      {"root", {other.data.empty() ? "" : other.root, p.data.empty() ? "" : p.root}},
      {"seed", {other.data.empty() ? "" : std::to_string(other.seed), p.data.empty() ? "" : std::to_string(p.seed)}},
      {"image_tokens", {std::to_string(other.image_tokens), std::to_string(p.image_tokens)}},
  };
  for (const auto& [key, values] : fields) {
    if (values.first != values.second) {
      throw InputError(fmt::format("{}: request: \"{}\" is '{}', but {} was planned with '{}': compared plans must be "
                                   "of the same job",
                                   other_file, key, values.first, file, values.second));
    }
  }
}

template <typename Load>
auto from_request(const std::string& plan_file, Load&& load) -> decltype(load()) {
  try {
    return load();
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: request: {}", plan_file, e.what()));
  }
}

}  // namespace

std::string plan_report_html(const std::string& plan_text, const std::string& plan_file, const ReportSources& sources) {
  const PlanFile p = read_plan_file(plan_text, plan_file);
  ModelSpec model = from_request(plan_file, [&] { return load_model(p.model); });
  if (p.model_name && *p.model_name != model.name) {
    throw InputError(fmt::format("{}: plan: made for model '{}', but its request's model '{}' is '{}'", plan_file,
                                 *p.model_name, p.model, model.name));
  }
  set_image_tokens(model, p.image_tokens);  // in the range set_image_tokens takes: read_plan_file checked it
  const ClusterSpec cluster = from_request(plan_file, [&] { return load_cluster(p.cluster); });
  const ParallelLayout& layout = p.schedule.layout;
  if (static_cast<int64_t>(layout.dp) * layout.tp * layout.pp != cluster.devices) {
    throw InputError(fmt::format("{}: request: cluster '{}' has {} devices, but the plan's schedule runs on DP {} × "
                                 "TP {} × PP {}", plan_file, p.cluster, cluster.devices, layout.dp, layout.tp,
                                 layout.pp));
  }
  const Dtype dtype = from_request(plan_file, [&] { return training_dtype(p.dtype, cluster); });
  const AnalyticCost analytic(cluster);
  std::optional<ProfiledCost> profiled;
  if (!p.profile.empty()) profiled.emplace(analytic, from_request(plan_file, [&] { return load_profile(p.profile); }));
  const CostModel& cost = profiled ? static_cast<const CostModel&>(*profiled) : analytic;

  // Compared plans first: a bad one fails before any work. Each must be of the same job, or its speed-up means
  // nothing; rows are named by strategy, and by file where strategies repeat.
  std::vector<ComparedPlan> compared = sources.compared;
  std::vector<PlanFile> others;
  for (const std::string& file : sources.compare_files) {
    others.push_back(read_plan_file(read_text_file(file), file));
    check_same_job(others.back(), file, p, plan_file);
  }
  for (size_t i = 0; i < others.size(); ++i) {
    const PlanFile& other = others[i];
    const bool repeated = other.strategy == p.strategy ||
                          std::count_if(others.begin(), others.end(),
                                        [&](const PlanFile& o) { return o.strategy == other.strategy; }) > 1;
    compared.push_back({repeated ? fmt::format("{} ({})", other.strategy, sources.compare_files[i]) : other.strategy,
                        other.configuration, other.iteration_seconds, other.epoch_seconds, {}});
  }
  std::optional<TimelineChart> measured;
  if (!sources.trace.empty()) measured = trace_chart(read_text_file(sources.trace), sources.trace);

  if (sources.replica >= static_cast<int>(p.detail_loads.per_replica.size())) {
    throw InputError(fmt::format("--replica {}: {} has data-parallel replicas 0 to {}", sources.replica, plan_file,
                                 p.detail_loads.per_replica.size() - 1));
  }
  SimOptions options;
  options.timeline = true;
  options.timeline_replica = sources.replica;
  options.dtype = dtype;
  SimResult simulated;
  try {
    simulated = simulate(p.schedule, model, cluster, cost, analytic.efficiency(), p.detail_loads, options);
  } catch (const InputError& e) {  // a schedule edited out of step with its model: name the file
    throw InputError(fmt::format("{}: schedule: {}", plan_file, e.what()));
  }

  const double first_step_peak =
      *std::max_element(simulated.peak_memory_bytes.begin(), simulated.peak_memory_bytes.end());
  PlanReport r;
  r.title = fmt::format("{} on {}: {} plan", model.name, p.cluster, p.strategy);
  r.plan_command = p.command;
  r.report_command = sources.report_command;
  r.name = p.strategy;
  r.configuration = p.configuration;
  r.iteration_seconds = p.iteration_seconds;
  r.epoch_seconds = p.epoch_seconds;
  r.model = &model;
  r.schedule = &p.schedule;
  r.simulated = &simulated;
  r.compared = std::move(compared);
  r.measured = std::move(measured);
  r.measured_source = sources.trace;
  const ParallelLayout& l = p.schedule.layout;
  r.summary = {
      {"model", fmt::format("{} ({:.2f} B parameters)", model.name, static_cast<double>(model.parameters()) * 1e-9)},
      {"cluster", fmt::format("{}: {} × {}, {} per node", p.cluster, cluster.devices, cluster.device.kind,
                              cluster.device.devices_per_node)},
      {"global batch",
       std::abs(p.samples_per_step - static_cast<double>(p.gbs)) < 0.5
           ? fmt::format("{} samples, {} steps per epoch", p.gbs, p.steps_per_epoch)
           : fmt::format("{} requested; {} batches give {:.1f} samples a step on average, {} steps per epoch", p.gbs,
                         p.batcher, p.samples_per_step, p.steps_per_epoch)},
      {"strategy", p.strategy},
      {"configuration", p.configuration},
      {"layout", fmt::format("{} stage{} over {} pipeline rank{}{}", l.stages(), l.stages() == 1 ? "" : "s", l.pp,
                             l.pp == 1 ? "" : "s",
                             l.encoder_tp > 0 ? fmt::format(", encoder TP {}", l.encoder_tp) : std::string())},
      {"recomputation", p.recompute},
      {"iteration", fmt::format("{} (the mean over the simulated steps); the first step, shown here: {}",
                                human_seconds(p.iteration_seconds), human_seconds(simulated.iteration_seconds))},
      {"epoch", human_seconds(p.epoch_seconds)},
      {"MFU", p.mfu ? fmt::format("{:.1f}% (the mean over the simulated steps); the first step: {:.1f}%", 100 * *p.mfu,
                                  100 * simulated.mfu)
                    : fmt::format("{:.1f}% (the first step)", 100 * simulated.mfu)},
      {"peak memory",
       fmt::format("{} of {} usable per device{}", human_bytes(p.peak_memory_bytes.value_or(first_step_peak)),
                   human_bytes(simulated.usable_memory_bytes),
                   p.peak_memory_bytes ? fmt::format(" (the most over the simulated steps); the first step: {}",
                                                     human_bytes(first_step_peak))
                                       : std::string(" (the first step)"))},
      {"number format", p.dtype},
  };
  if (!p.profile.empty()) r.summary.push_back({"profile", p.profile});
  if (p.schedule.encoder.present()) {
    const EncoderSection& e = p.schedule.encoder;
    std::string text = fmt::format("DP {} PP {} TP {}, {} encoder pipeline{} per LLM pipeline", e.dp, e.pp, e.tp,
                                   e.pipelines, e.pipelines == 1 ? "" : "s");
    if (p.efficiency_fine) text += fmt::format("; {:.0f}% of their compute in the LLM's bubbles", 100 * *p.efficiency_fine);
    r.summary.push_back({"encoders in bubbles", text});
  }

  const std::string data = sources.data.empty() ? p.data : sources.data;
  const std::string root = sources.data.empty() ? p.root : sources.root;
  if (data.empty()) {
    r.loads_note = "The plan was made without data: every step's samples are alike. Give --data (a length file or "
                   "meta index) to see each rank's load before and after balancing.";
  } else {
    const auto load = [&] {
      LoadedData loaded = load_dataset(data, {root, false, &warnings()});
      check_data_fits_the_model(loaded.dataset, data, model, model.name);
      return loaded;
    };
    // --data names its own file; the plan's data is the plan's.
    const LoadedData loaded = sources.data.empty() ? from_request(plan_file, load) : load();
    const ModelSampleCost sample_cost(model, cost, dtype);
    r.before = rank_loads(loaded.dataset, sample_cost, "random", p, sources.load_steps);
    r.after = rank_loads(loaded.dataset, sample_cost, p.batcher, p, sources.load_steps);
  }
  return render_plan_report(r);
}

}  // namespace fulcrum
