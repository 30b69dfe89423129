#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/cost_inputs.h"
#include "cli/output_file.h"
#include "cli/warnings.h"
#include "fulcrum/core/error.h"
#include "fulcrum/core/progress.h"
#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/cost/flops_sample_cost.h"
#include "fulcrum/cost/model_sample_cost.h"
#include "fulcrum/cost/profiled_cost.h"
#include "fulcrum/data/balance_metrics.h"
#include "fulcrum/data/batcher.h"
#include "fulcrum/data/isf.h"
#include "fulcrum/data/isf_search.h"
#include "fulcrum/data/meta_index.h"
#include "fulcrum/data/plan_audit.h"
#include "fulcrum/data/plan_json.h"
#include "fulcrum/model/cluster_spec.h"
#include "fulcrum/model/load_model.h"

namespace fulcrum {

namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct BatchOptions {
  std::string data;
  std::string root = ".";
  bool strict = false;
  std::string algo = "fulcrum";
  BatchParams params;
  std::string cost_file;
  std::string model;             // balance with this model's cost instead of the pinned InternVL one
  std::string cluster = "a100";  // the devices that model runs on: a preset or a cluster JSON file
  std::string profile;           // measured layer times refining that model's cost
  std::string dtype;             // the number format it trains in (default bf16)
  std::string oversize = "error";
  std::string out;
  bool json = false;
  bool compare = false;
  bool quiet = false;
  // Options given on the command line, which a run that would ignore them refuses.
  const CLI::Option* cluster_option = nullptr;
  const CLI::Option* algo_option = nullptr;
  std::vector<const CLI::Option*> isf_options;  // --text-full, --vit-full, --passes, --search
};

// One batcher's run: the plan's summary as the --json object.
struct Run {
  std::string label;
  Json summary;
  double seconds = 0;
};

Json balance_json(const Balance& b) {
  return {{"dist_ratio_vit", b.dist_ratio_vit},
          {"dist_ratio_llm", b.dist_ratio_llm},
          {"dist_ratio_vit_floor", b.dist_ratio_vit_floor},
          {"dist_ratio_llm_floor", b.dist_ratio_llm_floor},
          {"time_imbalance", b.time_imbalance}};
}

Json params_json(const std::string& algo, const BatchParams& p, const Dataset& data, const IsfSearchResult* search) {
  Json out{{"samples_per_step", p.resolved_samples_per_step()},
           {"microbatches", p.micro_batches},
           {"seed", p.seed},
           {"epoch", p.epoch},
           {"drop_last", p.drop_last},
           {"oversize", p.oversize == OversizePolicy::kError ? "error" : "own-group"}};
  if (algo == "isf") {
    const IsfParams isf = isf_params(p, data);
    out["samples_per_step"] = nullptr;  // set by the groups, reported as samples_per_step_mean
    out["vit_cap"] = isf.vision_cap;
    out["token_cap"] = isf.token_cap;
    out["vit_full"] = isf.vision_full;
    out["text_full"] = isf.text_full;
    out["passes"] = isf.passes;
    out["search"] = search != nullptr;
    if (search) {
      if (data.vision_unit() == VisionUnit::kTiles) out["search_tokens_per_tile"] = search->tokens_per_tile;
      out["search_vision_step"] = search->vision_step;
      out["search_token_step"] = search->token_step;
      out["search_trials"] = search->trials.size();
    }
  } else {
    if (algo == "fulcrum") out["window"] = p.window_steps;
    if (p.vision_cap > 0) out["vit_cap"] = p.vision_cap;
    if (p.token_cap > 0) out["token_cap"] = p.token_cap;
  }
  return out;
}

Run run_batcher(const std::string& algo, BatchParams params, const Dataset& data, const std::string& data_name,
                const SampleCost& cost, const std::string& out_path, const std::string& label) {
  const auto start = Clock::now();
  std::optional<IsfSearchResult> search;
  if (algo == "isf" && params.search) {
    search = naming_the_data(data_name, [&] { return isf_search(data, params, cost); });
    take_caps(search->best, params);
    params.search = false;
  }
  if (algo != "isf" && algo != "fulcrum" && (params.vision_cap > 0 || params.token_cap > 0)) {
    throw InputError(fmt::format("--vit-cap and --token-cap apply to isf and fulcrum, not {}", algo));
  }
  const BatchPlan plan = naming_the_data(data_name, [&] { return make_batcher(algo)->plan(data, params, cost); });
  const double plan_seconds = seconds_since(start);

  const auto measure_start = Clock::now();
  const PlanAudit audit = audit_plan(plan, data);
  if (!audit.ok(plan)) {
    throw std::logic_error(fmt::format("{} broke its guarantees: missing {} (dropped {}), extra {} (repeated {}), "
                                       "{} empty micro-batches",
                                       algo, audit.missing, plan.dropped, audit.extra, plan.repeated,
                                       audit.empty_micro_batches));
  }
  const PlanMetrics m = measure_plan(plan, data, cost);
  const double measure_seconds = seconds_since(measure_start);

  double write_seconds = 0;
  if (!out_path.empty()) {
    const auto write_start = Clock::now();
    write_file_atomically(out_path, plan_to_json(plan));
    write_seconds = seconds_since(write_start);
  }
  Json metrics{{"pad_ratio", m.pad_ratio}};
  const Json per_step = balance_json(m.per_step);
  for (const auto& [key, value] : per_step.items()) metrics[key] = value;
  metrics["per_microbatch"] = balance_json(m.per_micro_batch);
  metrics["predicted_step_seconds_sum"] = m.step_seconds_sum;
  metrics["balanced_step_seconds_sum"] = m.ideal_seconds_sum;
  Json summary{{"algo", algo},
               {"dp", params.dp},
               {"samples_in", plan.samples_in},
               {"samples_out", audit.samples_out},
               {"repeated", plan.repeated},
               {"dropped", plan.dropped},
               {"duplicated", audit.duplicated},
               {"steps", plan.steps()},
               {"microbatches_per_rank_per_step", plan.micro_batches_per_rank()},
               {"samples_per_step_mean",
                plan.steps() ? static_cast<double>(audit.samples_out) / static_cast<double>(plan.steps()) : 0.0},
               {"vision_unit", std::string(vision_unit_name(data.vision_unit()))},
               {"metrics", metrics},
               {"params", params_json(algo, params, data, search ? &*search : nullptr)}};
  if (!out_path.empty()) summary["out"] = out_path;
  summary["timing"] = {{"seconds", plan_seconds},
                       {"metrics_seconds", measure_seconds},
                       {"write_seconds", write_seconds}};
  return {label, summary, plan_seconds};
}

void print_run(const Run& run) {
  const Json& s = run.summary;
  const Json& m = s["metrics"];
  std::cout << fmt::format(
      "{}: {} steps at dp {} × {} micro-batches, {:.1f} samples/step; {} samples in, {} repeated, {} dropped\n",
      s["algo"].get<std::string>(), s["steps"].get<int64_t>(), s["dp"].get<int>(),
      s["microbatches_per_rank_per_step"].get<int>(), s["samples_per_step_mean"].get<double>(),
      s["samples_in"].get<int64_t>(), s["repeated"].get<int64_t>(), s["dropped"].get<int64_t>());
  std::cout << fmt::format(
      "  pad {:.4f}  dist vit {:.4f} (floor {:.4f})  dist llm {:.4f} (floor {:.4f})  time imbalance {:.4f} "
      "(per micro-batch {:.4f})  in {:.3f} s\n",
      m["pad_ratio"].get<double>(), m["dist_ratio_vit"].get<double>(), m["dist_ratio_vit_floor"].get<double>(),
      m["dist_ratio_llm"].get<double>(), m["dist_ratio_llm_floor"].get<double>(), m["time_imbalance"].get<double>(),
      m["per_microbatch"]["time_imbalance"].get<double>(), run.seconds);
}

void print_table(const std::vector<Run>& runs, const BatchOptions& o) {
  std::cout << fmt::format("{} at dp {}, {} micro-batch(es) per rank per step, seed {}\n", o.data, o.params.dp,
                           o.params.micro_batches, o.params.seed);
  std::cout << fmt::format("{:<26} {:>8} {:>9} {:>7} {:>15} {:>15} {:>9} {:>9} {:>8} {:>8}\n", "batcher", "steps",
                           "smp/step", "pad", "dist vit(floor)", "dist llm(floor)", "time imb", "mb imb", "repeat",
                           "seconds");
  for (const Run& run : runs) {
    const Json& s = run.summary;
    const Json& m = s["metrics"];
    std::cout << fmt::format(
        "{:<26} {:>8} {:>9.2f} {:>7.4f} {:>7.4f}({:.4f}) {:>7.4f}({:.4f}) {:>9.4f} {:>9.4f} {:>8} {:>8.3f}\n",
        run.label, s["steps"].get<int64_t>(), s["samples_per_step_mean"].get<double>(), m["pad_ratio"].get<double>(),
        m["dist_ratio_vit"].get<double>(), m["dist_ratio_vit_floor"].get<double>(), m["dist_ratio_llm"].get<double>(),
        m["dist_ratio_llm_floor"].get<double>(), m["time_imbalance"].get<double>(),
        m["per_microbatch"]["time_imbalance"].get<double>(), s["repeated"].get<int64_t>(), run.seconds);
  }
}

void run_batch(BatchOptions& o) {
  const auto start = Clock::now();
  if (o.oversize == "own-group") o.params.oversize = OversizePolicy::kOwnGroup;
  if (o.params.dp < 1) throw InputError(fmt::format("--dp must be at least 1, got {}", o.params.dp));
  if (o.compare && o.algo_option && o.algo_option->count() > 0) {
    throw InputError("--algo picks one batcher; --compare runs every one");
  }
  if (!o.compare) make_batcher(o.algo);  // reject an unknown name before loading anything
  if (o.model.empty() && o.cluster_option && o.cluster_option->count() > 0) {
    throw InputError("--cluster sets the devices of --model's cost: give --model");
  }
  if (!o.compare && o.algo != "isf") {
    for (const CLI::Option* option : o.isf_options) {
      if (option->count() > 0) {
        throw InputError(fmt::format("{} applies to --algo isf (and its --compare rows), not --algo {}",
                                     option->get_name(), o.algo));
      }
    }
  }
  if (!o.model.empty() && !o.cost_file.empty()) throw InputError("--model and --cost both set the cost: give one");
  const FlopsCoefficients coefficients = o.cost_file.empty() ? FlopsCoefficients{} : read_flops_coefficients(o.cost_file);
  if (o.model.empty() && (!o.profile.empty() || !o.dtype.empty())) {
    throw InputError("--profile and --dtype refine --model's cost: give --model");
  }
  std::unique_ptr<ModelSampleCost> model_cost;
  std::optional<ProfileTable> profile;
  Dtype dtype = Dtype::kBf16;
  int profile_applied = 0;
  if (!o.model.empty()) {
    const ModelSpec model = load_model(o.model);
    const ClusterSpec cluster = load_cluster(o.cluster);
    dtype = training_dtype(o.dtype.empty() ? "bf16" : o.dtype, cluster);
    const AnalyticCost analytic(cluster);
    if (o.profile.empty()) {
      model_cost = std::make_unique<ModelSampleCost>(model, analytic, dtype);
    } else {
      profile = load_profile(o.profile);
      // The balancer prices unsharded passes without recomputation.
      profile_applied = profile_entries_applied(*profile, model, ParallelLayout{}, {}, dtype);
      model_cost = std::make_unique<ModelSampleCost>(model, ProfiledCost(analytic, *profile), dtype);
    }
  }
  LoadedData loaded = load_dataset(o.data, {o.root, o.strict, &warnings()});
  const Dataset& data = loaded.dataset;
  const double load_seconds = seconds_since(start);
  check_params(o.params, data);
  if (model_cost && model_cost->vision_unit() != data.vision_unit()) {
    throw InputError(fmt::format("{}: counts vision in {}, but model '{}' takes {}", o.data,
                                 vision_unit_text(data.vision_unit()), o.model,
                                 vision_unit_text(model_cost->vision_unit())));
  }
  if (profile) warnings() << profile_unused_warning(o.profile, *profile, profile_applied, dtype);
  const FlopsSampleCost flops_cost(data.vision_unit(), coefficients);
  const SampleCost& cost = model_cost ? static_cast<const SampleCost&>(*model_cost) : flops_cost;

  if (!o.compare) {
    Run run = run_batcher(o.algo, o.params, data, o.data, cost, o.out, o.algo);
    if (model_cost) {
      run.summary["params"]["model"] = o.model;
      run.summary["params"]["cluster"] = o.cluster;
      run.summary["params"]["dtype"] = std::string(dtype_name(dtype));
      if (profile) {
        run.summary["params"]["profile"] = {{"file", o.profile}, {"device", profile->device},
                                            {"entries", profile->entries.size()}, {"entries_applied", profile_applied}};
      }
    }
    run.summary["timing"]["load_seconds"] = load_seconds;
    run.summary["timing"]["total_seconds"] = seconds_since(start);
    if (o.json) {
      std::cout << json_text(run.summary, 2) << "\n";
    } else {
      print_run(run);
    }
    return;
  }
  if (!o.out.empty()) throw InputError("--out writes one plan; it does not go with --compare");
  // The isf row runs at the given caps, whether or not --search adds a row of its own.
  BatchParams fixed = o.params;
  fixed.search = false;
  naming_the_data(o.data, [&] { check_isf_caps(fixed, data, BatchParamNames{.search = nullptr}); });
  // Every batcher on the same data; caps given apply to isf and fulcrum only.
  std::vector<Run> runs;
  // The batchers of the table: three baselines, isf, isf --search and fulcrum at its samples, fulcrum.
  Progress progress("batching", o.params.search ? 7 : 5, !o.quiet);
  BatchParams uncapped = o.params;
  uncapped.vision_cap = uncapped.token_cap = 0;
  uncapped.search = false;
  for (const char* algo : {"random", "random-packed", "length-grouped"}) {
    runs.push_back(run_batcher(algo, uncapped, data, o.data, cost, "", algo));
    progress.advance();
  }
  runs.push_back(run_batcher("isf", fixed, data, o.data, cost, "", "isf"));
  progress.advance();
  if (o.params.search) {
    BatchParams searched = o.params;
    runs.push_back(run_batcher("isf", searched, data, o.data, cost, "", "isf --search"));
    progress.advance();
    const double isf_per_step = runs.back().summary["samples_per_step_mean"].get<double>();
    BatchParams matched = o.params;
    matched.search = false;
    matched.samples_per_step = std::max<int64_t>(o.params.slots_per_step(), std::llround(isf_per_step));
    runs.push_back(run_batcher("fulcrum", matched, data, o.data, cost, "",
                               fmt::format("fulcrum @{} smp/step", matched.samples_per_step)));
    progress.advance();
  }
  runs.push_back(run_batcher("fulcrum", fixed, data, o.data, cost, "", "fulcrum"));
  progress.advance();
  progress.finish();
  if (o.json) {
    Json rows = Json::array();
    for (Run& run : runs) {
      run.summary["label"] = run.label;
      rows.push_back(run.summary);
    }
    std::cout << json_text(Json{{"data", o.data}, {"rows", rows}, {"timing", {{"seconds", seconds_since(start)}}}}, 2)
              << "\n";
  } else {
    print_table(runs, o);
  }
}

}  // namespace

std::function<void()> add_batch_command(CLI::App& app) {
  auto o = std::make_shared<BatchOptions>();
  BatchParams& p = o->params;
  CLI::App* cmd = app.add_subcommand("batch", "Cut a dataset into balanced mini-batches for data-parallel training");
  cmd->add_option("--data", o->data, "Length file (JSON, JSON Lines, CSV) or meta index")->required();
  cmd->add_option("--root", o->root, "Second folder to resolve a meta index's paths against")->capture_default_str();
  cmd->add_flag("--strict", o->strict, "A missing meta index entry is an error");
  cmd->add_option("--dp", p.dp, "Data-parallel ranks")->required();
  o->algo_option =
      cmd->add_option("--algo", o->algo, "random | random-packed | length-grouped | isf | fulcrum")->capture_default_str();
  cmd->add_option("--samples-per-step", p.samples_per_step,
                  "Samples per optimizer step over all ranks (default 4 per micro-batch)")
      ->check(at_least(1));  // 0 stands for the default: given, it would be taken for it
  cmd->add_option("--microbatches", p.micro_batches, "Micro-batches per rank per step")->capture_default_str();
  cmd->add_option("--window", p.window_steps, "fulcrum: steps a sample may move within")->capture_default_str();
  cmd->add_option("--vit-cap", p.vision_cap, "Vision units per micro-batch at most (isf: Q_v, default 9)")
      ->check(at_least(1));
  cmd->add_option("--token-cap", p.token_cap, "Tokens per micro-batch at most (isf: Q_t, default 4096)")
      ->check(at_least(1));
  o->isf_options = {
      cmd->add_option("--text-full", p.text_full, "isf: tokens that make a group full (Q'_t, default token cap - 128)")
          ->check(at_least(1)),
      cmd->add_option("--vit-full", p.vision_full, "isf: vision units that make a group full (Q'_v, default vit cap)")
          ->check(at_least(1)),
      cmd->add_option("--passes", p.passes, "isf: sampling passes (T)")->capture_default_str(),
      cmd->add_flag("--search", p.search, "isf: choose the caps by OmniBal's parameter search")};
  cmd->add_option("--cost", o->cost_file, "JSON file of cost coefficients overriding the InternVL-Chat-1.5 defaults");
  cmd->add_option("--model", o->model,
                  "balance with this model's cost (a preset or a config.json, as for `fulcrum model`)");
  o->cluster_option = cmd->add_option("--cluster", o->cluster,
                                      "the devices for --model's cost, e.g. h100, or a cluster JSON file (default a100)");
  cmd->add_option("--profile", o->profile, "--model's cost: a profile table JSON of measured layer times");
  cmd->add_option("--dtype", o->dtype, "--model's cost: the number format, bf16 | fp16 | fp8 | fp32 (default bf16)")
      ->check(CLI::IsMember({"bf16", "fp16", "fp8", "fp32"}));
  cmd->add_option("--oversize", o->oversize, "A sample over a cap: error | own-group")
      ->check(CLI::IsMember({"error", "own-group"}))
      ->capture_default_str();
  cmd->add_flag("--drop-last", p.drop_last, "Drop a last incomplete step instead of completing it");
  cmd->add_option("--seed", p.seed, "Seed of the shuffle")->capture_default_str();
  cmd->add_option("--epoch", p.epoch, "Epoch (each epoch is shuffled anew)")->capture_default_str();
  cmd->add_option("--out", o->out, "Write the plan as JSON to this file");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->add_flag("--compare", o->compare, "Run every batcher on the same data and print a table");
  cmd->add_flag("--quiet", o->quiet, "No progress bar (it shows only on a terminal)");
  return [o] { run_batch(*o); };
}

}  // namespace fulcrum
