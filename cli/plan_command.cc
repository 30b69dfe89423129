// `fulcrum plan`: the fastest plan of a strategy that fits in memory, compared with what users run today.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/cost_inputs.h"
#include "cli/output_file.h"
#include "cli/plan_report_builder.h"
#include "cli/warnings.h"
#include "fulcrum/core/error.h"
#include "fulcrum/data/meta_index.h"
#include "fulcrum/model/cluster_spec.h"
#include "fulcrum/model/load_model.h"
#include "fulcrum/plan/export.h"
#include "fulcrum/plan/planner.h"
#include "fulcrum/sched/schedule_json.h"

namespace fulcrum {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

struct PlanOptions {
  std::string model;
  std::string cluster;
  int64_t gbs = 0;
  int64_t seq = 2048;
  int64_t images_per_sample = 1;
  int64_t image_tokens = 0;
  std::string data;
  std::string root = ".";
  std::string strategy = "fulcrum";
  std::string config;
  std::string baseline_config;
  std::string profile;
  std::string dtype = "bf16";
  std::string out;
  std::string report;
  std::string exporter;
  std::string encoders = "best";
  int encoder_pp = 0;
  std::string encoder_recompute = "auto";
  bool json = false;
  bool quiet = false;
  bool no_baselines = false;
  bool megatron_layout = false;
  bool ablation = false;
  int threads = 2;
  uint64_t seed = 0;
  std::vector<std::string> data_options;       // given: they choose --data's samples and batches, so need it
  std::vector<std::string> synthetic_options;  // given: they shape the samples without --data, so refuse it
  bool encoder_pp_given = false;
  bool encoder_recompute_given = false;
  bool baseline_config_given = false;
};

// "DP,TP,PP,VPP,MBS", given to `option`.
ParallelConfig parse_config(const std::string& text, const std::string& option) {
  std::vector<int64_t> v;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    try {
      size_t used = 0;
      v.push_back(std::stoll(part, &used));
      if (used != part.size() || v.back() < 1 || v.back() > std::numeric_limits<int32_t>::max()) {
        throw std::invalid_argument(part);
      }
    } catch (const std::exception&) {
      throw InputError(fmt::format("{} '{}': expected DP,TP,PP,VPP,MBS as positive integers", option, text));
    }
  }
  if (v.size() != 5) throw InputError(fmt::format("{} '{}': expected DP,TP,PP,VPP,MBS", option, text));
  ParallelConfig c;
  c.dp = static_cast<int>(v[0]);
  c.tp = static_cast<int>(v[1]);
  c.pp = static_cast<int>(v[2]);
  c.vpp = static_cast<int>(v[3]);
  c.mbs = v[4];
  c.sharding = c.dp > 1 ? StateSharding::kMegatronDistributedOptimizer : StateSharding::kZero0;
  return c;
}

Json summary_json(const TrainingPlan& p) {
  const ParallelConfig& c = p.config;
  Json stages = Json::array();
  for (const StageLayers& st : p.schedule.stages) stages.push_back({st.first_layer, st.end_layer});
  Json out{{"dp", c.dp},
           {"tp", c.tp},
           {"pp", c.pp},
           {"vpp", c.vpp},
           {"encoder_tp", c.encoder_tp},
           {"mbs", c.mbs},
           {"micro_batches", p.micro_batches},
           {"schedule", std::string(pipeline_kind_name(c.schedule))},
           {"sequence_parallel", c.sequence_parallel},
           {"state_sharding", state_sharding_name(c.sharding)},
           {"batcher", p.batcher},
           {"stages", stages},
           {"recompute", recompute_summary(p.schedule)},
           {"steps_per_epoch", p.steps_per_epoch},
           {"samples_per_step", p.samples_per_step},
           {"epoch_seconds", p.epoch_seconds},
           {"iteration_seconds", p.iteration_seconds}};
  // The caps ISF's cap search chose for these batches (patch-token data): what makes them again.
  if (p.batch_caps) {
    out["batch_caps"] = {{"vision_cap", p.batch_caps->vision_cap},
                         {"token_cap", p.batch_caps->token_cap},
                         {"vision_full", p.batch_caps->vision_full},
                         {"text_full", p.batch_caps->text_full}};
  }
  return out;
}

// Optimus's encoder plan and schedule. Efficiencies: the share of encoder compute inside the LLM's bubbles.
Json optimus_json(const OptimusPlan& o) {
  const EncoderPlan& e = o.encoder_plan;
  return {{"encoder_plan", {{"dp", e.dp}, {"pp", e.pp}, {"tp", e.tp}, {"recompute", recompute_name(e.recompute)}}},
          {"m", e.pipelines},
          {"microbatch_split", o.split},
          {"efficiency_coarse", o.coarse.efficiency},
          {"efficiency_fine", o.fine.efficiency},
          {"llm_alone_seconds", o.fine.llm_seconds},
          {"no_bubble_seconds", o.no_bubble_seconds},
          {"coarse_seconds", o.coarse.iteration_seconds},
          {"fine_seconds", o.fine.iteration_seconds},
          {"head_shift_seconds", o.fine.head_shift_seconds},
          {"fewer_warmup_forwards", o.fewer_warmup_forwards},
          {"encoder_plans", o.encoder_plans},
          {"splits_evaluated", o.splits_evaluated},
          {"scheduler_seconds", o.scheduler_seconds}};
}

// The command that makes this plan again: every option that differs from its default.
std::string command_line(const PlanOptions& o) {
  const PlanOptions defaults;
  std::string out = fmt::format("fulcrum plan --model {} --cluster {} --gbs {}", shell_word(o.model),
                                shell_word(o.cluster), o.gbs);
  auto add = [&](const char* option, const std::string& value, const std::string& default_value) {
    if (value != default_value) out += fmt::format(" {} {}", option, shell_word(value));
  };
  add("--data", o.data, defaults.data);
  if (!o.data.empty()) add("--root", o.root, defaults.root);
  add("--seq", std::to_string(o.seq), std::to_string(defaults.seq));
  add("--images-per-sample", std::to_string(o.images_per_sample), std::to_string(defaults.images_per_sample));
  add("--image-tokens", std::to_string(o.image_tokens), std::to_string(defaults.image_tokens));
  add("--strategy", o.strategy, defaults.strategy);
  add("--config", o.config, defaults.config);
  add("--baseline-config", o.baseline_config, defaults.baseline_config);
  add("--profile", o.profile, defaults.profile);
  add("--dtype", o.dtype, defaults.dtype);
  if (o.no_baselines) out += " --no-baselines";
  if (o.megatron_layout) out += " --megatron-layout";
  add("--encoders", o.encoders, defaults.encoders);
  add("--encoder-pp", std::to_string(o.encoder_pp), std::to_string(defaults.encoder_pp));
  add("--encoder-recompute", o.encoder_recompute, defaults.encoder_recompute);
  add("--seed", std::to_string(o.seed), std::to_string(defaults.seed));
  add("--out", o.out, defaults.out);
  add("--report", o.report, defaults.report);
  return out;
}

std::string describe(const TrainingPlan& p) {
  const ParallelConfig& c = p.config;
  return configuration_text(c.dp, c.tp, c.pp, c.vpp, c.mbs, p.micro_batches, std::string(pipeline_kind_name(c.schedule)),
                            p.batcher);
}

void run_plan(const PlanOptions& o) {
  const auto start = Clock::now();
  if (!o.out.empty() || !o.report.empty()) {
    // The plan file records these to make the plan again; JSON holds only UTF-8 text, and a name written
    // otherwise would name a file the user never gave.
    for (const auto& [option, name] : {std::pair<const char*, const std::string&>{"--model", o.model},
                                       {"--cluster", o.cluster}, {"--data", o.data}, {"--root", o.root},
                                       {"--profile", o.profile}}) {
      if (!is_utf8(name)) {
        throw InputError(fmt::format("{}: a name that is not UTF-8 text cannot be recorded in the plan file", option));
      }
    }
  }
  PlanRequest request;
  request.model = load_model(o.model);
  request.cluster = load_cluster(o.cluster);
  request.dtype = training_dtype(o.dtype, request.cluster);
  if (!o.profile.empty()) request.profile = load_profile(o.profile);
  check_global_batch(o.gbs, request.cluster.devices);
  // Options this run would ignore without a word.
  if (o.data.empty() && !o.data_options.empty()) {
    throw InputError(fmt::format("{} {} --data's samples and batches: give --data", fmt::join(o.data_options, ", "),
                                 o.data_options.size() == 1 ? "chooses" : "choose"));
  }
  if (!o.data.empty() && !o.synthetic_options.empty()) {
    throw InputError(fmt::format("{} {} the samples without --data; --data's samples have their own",
                                 fmt::join(o.synthetic_options, ", "), o.synthetic_options.size() == 1 ? "shapes" : "shape"));
  }
  if (o.seq < 1 || o.seq > (int64_t{1} << 24)) {
    throw InputError(fmt::format("--seq must be from 1 to 16777216, got {}", o.seq));
  }
  if (o.images_per_sample < 0 || o.images_per_sample > kMostImagesPerSample) {
    throw InputError(fmt::format("--images-per-sample must be from 0 to {}, got {}", kMostImagesPerSample,
                                 o.images_per_sample));
  }
  request.gbs = o.gbs;
  request.seq = o.seq;
  request.images_per_sample = o.images_per_sample;
  request.seed = o.seed;
  request.threads = o.threads;
  request.progress = !o.quiet;
  request.llm_in_every_stage = o.megatron_layout;
  request.encoders = parse_encoder_site(o.encoders);
  if (o.encoder_pp < 0) throw InputError(fmt::format("--encoder-pp must be at least 1, got {}", o.encoder_pp));
  request.encoder_pp = o.encoder_pp;
  if (request.encoders != EncoderSite::kBest && parse_strategy(o.strategy) != Strategy::kFulcrum) {
    throw InputError(fmt::format("--encoders {}: only --strategy fulcrum chooses where the encoders run",
                                 o.encoders));
  }
  // An exporter and Megatron-LM's layout need one pipeline over the whole model.
  if (!o.exporter.empty() || o.megatron_layout) {
    if (request.encoders == EncoderSite::kBubbles) {
      throw InputError(fmt::format("--encoders bubbles: {} needs one pipeline over the whole model",
                                   o.exporter.empty() ? "--megatron-layout" : "--export"));
    }
    request.encoders = EncoderSite::kStages;
  }
  const Strategy planned_strategy = parse_strategy(o.strategy);
  if (o.encoder_recompute != "auto") request.encoder_recompute = parse_recompute(o.encoder_recompute, "--encoder-recompute");
  for (const auto& [given, option] : {std::pair{o.encoder_pp_given, "--encoder-pp"},
                                      std::pair{o.encoder_recompute_given, "--encoder-recompute"}}) {
    if (!given) continue;
    if (!request.model.has_encoder()) {
      throw InputError(fmt::format("{}: model '{}' has no encoder", option, request.model.name));
    }
    // --ablation's last step moves the encoders into the bubbles whatever the strategy.
    const bool bubbles = planned_strategy == Strategy::kOptimus ||
                         ((planned_strategy == Strategy::kFulcrum || o.ablation) &&
                          request.encoders != EncoderSite::kStages);
    if (!bubbles) {
      throw InputError(fmt::format(
          "{} sets the encoder plan of encoders in the LLM's bubbles: --strategy optimus, or fulcrum (or "
          "--ablation) with --encoders best or bubbles{}", option,
          planned_strategy == Strategy::kFulcrum ? " (--export and --megatron-layout keep them in the stages)" : ""));
    }
  }
  if (planned_strategy == Strategy::kOptimus) {
    // Optimus runs the encoders on their own plan in the LLM's bubbles, and its LLM plan is pinned one way.
    if (o.megatron_layout) {
      throw InputError("--megatron-layout keeps the encoders in the first stage; --strategy optimus runs them on "
                       "their own plan in the LLM's bubbles");
    }
    if (o.baseline_config_given && !o.config.empty()) {
      throw InputError("--config and --baseline-config both pin --strategy optimus's LLM plan: give one");
    }
  }
  if (o.baseline_config_given && o.no_baselines && !o.ablation && planned_strategy != Strategy::kMegatron &&
      planned_strategy != Strategy::kBalanced && planned_strategy != Strategy::kOptimus) {
    throw InputError(fmt::format("--baseline-config pins megatron, balanced and optimus's LLM plan; --strategy {} with "
                                 "--no-baselines plans none of them",
                                 o.strategy));
  }
  // More threads than any machine runs would only fail to start, mid-plan.
  if (o.threads < 1 || o.threads > 1024) {
    throw InputError(fmt::format("--threads must be from 1 to 1024, got {}", o.threads));
  }
  set_image_tokens(request.model, o.image_tokens);
  check_image_tokens_apply(request.model, o.image_tokens, !o.data.empty());
  request.image_tokens = o.image_tokens;
  if (!o.baseline_config.empty()) request.pinned = parse_config(o.baseline_config, "--baseline-config");
  if (!o.config.empty()) request.config = parse_config(o.config, "--config");
  const Strategy strategy = parse_strategy(o.strategy);
  if (!o.exporter.empty() && o.exporter != "megatron" && o.exporter != "deepspeed") {
    throw InputError(fmt::format("--export {}: use megatron or deepspeed", o.exporter));
  }
  if (strategy == Strategy::kOptimus && !o.exporter.empty()) {
    // Megatron-LM's and DeepSpeed's arguments describe one pipeline over the whole model; an Optimus plan runs two.
    throw InputError("--strategy optimus: Megatron-LM and DeepSpeed cannot express its encoder plan; drop --export "
                     "(--out writes its schedule)");
  }
  std::optional<LoadedData> loaded;
  if (!o.data.empty()) {
    loaded = load_dataset(o.data, {o.root, false, &warnings()});
    check_data_fits_the_model(loaded->dataset, o.data, request.model, o.model);
    request.data = &loaded->dataset;
    request.data_name = o.data;
  }
  const TrainingPlan plan = make_plan(strategy, request);
  // What users run today, on the same data.
  std::vector<std::pair<Strategy, std::optional<TrainingPlan>>> baselines;
  std::map<Strategy, std::string> why_not;  // the baselines with no plan: the planner's reason
  if (!o.no_baselines) {
    PlanRequest baseline = request;
    baseline.llm_in_every_stage = false;  // the baselines as users run them
    baseline.config.reset();              // --config pins the planned strategy; --baseline-config the baselines
    for (Strategy b : {Strategy::kZero3, Strategy::kMegatron, Strategy::kBalanced}) {
      if (b == strategy) continue;
      try {
        baselines.push_back({b, make_plan(b, baseline)});
      } catch (const NoPlanFits& e) {  // the baseline itself cannot run here: reported as such
        baselines.push_back({b, std::nullopt});
        why_not[b] = e.what();
      } catch (const InputError& e) {  // a request the baseline cannot take (--baseline-config): the user's to fix
        throw InputError(fmt::format("baseline {}: {}", strategy_name(b), e.what()));
      }
    }
  }
  // One change at a time from Megatron-LM's rules to Fulcrum's plan.
  std::vector<TrainingPlan> ablation;
  if (o.ablation) {
    for (const Recipe& recipe : ablation_recipes()) ablation.push_back(make_plan(recipe, request));
  }
  const double search_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // Before anything is written, so an unexportable plan leaves no output behind.
  std::string exported;
  if (o.exporter == "megatron") {
    try {
      exported = megatron_arguments(request.model, plan, o.gbs);
    } catch (const InputError& e) {
      throw InputError(fmt::format("--export megatron: {}; --megatron-layout plans only what Megatron-LM's layout "
                                   "can express", e.what()));
    }
  }
  if (o.exporter == "deepspeed") exported = deepspeed_partition(plan);
  const SimResult& d = plan.detail;
  const AnalyticCost cost(request.cluster);
  // Both over the simulated steps: a step's work with another step's time would overstate or understate them.
  const double bound_seconds =
      plan.model_flops / (static_cast<double>(request.cluster.devices) *
                          matmul_peak_flops_per_second(request.cluster.device, request.dtype) * cost.efficiency().matmul);
  const double peak_flops_per_second =
      static_cast<double>(request.cluster.devices) * request.cluster.device.bf16_flops_per_second;
  const double mfu =
      plan.iteration_seconds > 0 ? plan.model_flops / (plan.iteration_seconds * peak_flops_per_second) : 0;
  const int profile_applied =
      request.profile ? profile_entries_applied(*request.profile, request.model, plan.schedule.layout,
                                                plan.schedule.recompute, request.dtype)
                      : 0;
  if (request.profile) {
    warnings() << profile_unused_warning(o.profile, *request.profile, profile_applied, request.dtype);
  }
  const double fraction_of_bound = plan.iteration_seconds > 0 ? bound_seconds / plan.iteration_seconds : 0;
  // Iteration and MFU: the mean over the simulated steps; peak memory: each stage's most over them.
  const Json predicted{{"epoch_seconds", plan.epoch_seconds},
                       {"iteration_seconds", plan.iteration_seconds},
                       {"mfu", mfu},
                       {"bubble_fraction", d.bubble_fraction},
                       {"peak_memory_bytes", d.peak_memory_bytes}};

  if (!o.out.empty() || !o.report.empty()) {
    // What the plan is and how it was made: enough for `fulcrum report` to simulate it again.
    Json file{{"fulcrum", 1},
              {"kind", "plan"},
              {"model", request.model.name},
              {"cluster", o.cluster},
              {"gbs", o.gbs},
              {"dtype", std::string(dtype_name(request.dtype))},
              {"strategy", std::string(strategy_name(strategy))},
              {"command", command_line(o)},
              {"request",
               {{"model", o.model},
                {"cluster", o.cluster},
                {"gbs", o.gbs},
                {"seq", o.seq},
                {"images_per_sample", o.images_per_sample},
                {"image_tokens", o.image_tokens},
                {"data", o.data},
                {"root", o.root},
                {"profile", o.profile},
                {"dtype", std::string(dtype_name(request.dtype))},
                {"seed", o.seed}}},
              {"plan", summary_json(plan)},
              {"predicted", predicted}};
    if (plan.optimus) file["optimus"] = optimus_json(*plan.optimus);
    file["schedule"] = Json::parse(schedule_to_json(plan.schedule));
    // The micro-batches of the step `detail` simulated, per replica: [vision, tokens, tokens², sequences].
    Json loads = Json::array();
    for (const auto& replica : plan.detail_loads.per_replica) {
      Json r = Json::array();
      for (const MicroBatchLoad& l : replica) r.push_back({l.vision, l.llm_tokens, l.llm_tokens_squared, l.sequences});
      loads.push_back(std::move(r));
    }
    file["detail_loads"] = std::move(loads);
    Json blocks = Json::array(), llm_blocks = Json::array();
    for (const ComponentSpec& c : request.model.components) {
      for (const LayerSpec& l : c.layers) {
        blocks.push_back(l.kind == LayerKind::kTransformerBlock);
        llm_blocks.push_back(l.kind == LayerKind::kTransformerBlock && c.role == ComponentRole::kLlm);
      }
    }
    file["transformer_blocks"] = blocks;
    file["llm_blocks"] = llm_blocks;  // which flattened layers fulcrum.megatron counts: Megatron's 't'
    const std::string text = json_text(file, 1) + "\n";
    std::string report;
    if (!o.report.empty()) {
      ReportSources sources;
      sources.report_command = command_line(o);
      for (const auto& [b, p] : baselines) {
        if (p) {
          sources.compared.push_back({std::string(strategy_name(b)), describe(*p), p->iteration_seconds, p->epoch_seconds, {}});
        } else {
          sources.compared.push_back({std::string(strategy_name(b)), "", 0, 0, why_not[b]});
        }
      }
      report = plan_report_html(text, o.out.empty() ? "the plan" : o.out, sources);
    }
    OutputFiles outputs;
    if (!o.out.empty()) outputs.add(o.out, text);
    if (!o.report.empty()) outputs.add(o.report, std::move(report));
    outputs.write();
  }
  if (o.json) {
    Json base = Json::object(), speedup = Json::object();
    for (const auto& [b, p] : baselines) {
      const std::string name(strategy_name(b));
      if (!p) {
        base[name] = {{"fits", false}, {"reason", why_not[b]}};
        continue;
      }
      base[name] = {{"epoch_seconds", p->epoch_seconds}, {"plan", summary_json(*p)}};
      speedup[name] = plan.epoch_seconds > 0 ? p->epoch_seconds / plan.epoch_seconds : 0;
    }
    Json out{{"strategy", std::string(strategy_name(strategy))},
             {"model", {{"name", request.model.name}, {"parameters", request.model.parameters()}}},
             {"cluster", o.cluster},
             {"gbs", o.gbs},
             {"dtype", std::string(dtype_name(request.dtype))},
             {"plan", summary_json(plan)},
             {"predicted", predicted},
             {"baselines", base},
             {"speedup_vs", speedup},
             {"fraction_of_bound", fraction_of_bound},
             {"candidates", plan.candidates},
             {"feasible", plan.feasible},
             {"left_out", plan.left_out}};
    if (request.profile) {
      out["profile"] = {{"file", o.profile}, {"device", request.profile->device},
                        {"entries", request.profile->entries.size()}, {"entries_applied", profile_applied}};
    }
    if (plan.optimus) out["optimus"] = optimus_json(*plan.optimus);
    if (!o.out.empty()) out["out"] = o.out;
    if (!exported.empty()) out["export"] = {{"format", o.exporter}, {"text", exported}};
    if (o.ablation) {
      Json rows = Json::array();
      for (const TrainingPlan& p : ablation) {
        rows.push_back({{"step", p.recipe}, {"epoch_seconds", p.epoch_seconds}, {"plan", summary_json(p)}});
      }
      out["ablation"] = rows;
    }
    out["timing"] = {{"search_seconds", search_seconds}};
    std::cout << json_text(out, 2) << "\n";
    return;
  }
  std::cout << fmt::format("{} on {} × {}, global batch {}{}: {} plan\n", request.model.name,
                           request.cluster.devices, request.cluster.device.kind, o.gbs,
                           request.dtype == Dtype::kBf16 ? "" : fmt::format(", {}", dtype_name(request.dtype)),
                           strategy_name(strategy));
  if (request.profile) {
    std::cout << fmt::format("  profile {}: {} of {} entries match the plan's layer passes\n", o.profile,
                             profile_applied, request.profile->entries.size());
  }
  std::cout << fmt::format("  {}\n  stages (layers): ", describe(plan));
  for (const StageLayers& st : plan.schedule.stages) std::cout << fmt::format("[{}, {}) ", st.first_layer, st.end_layer);
  std::cout << fmt::format("\n  recomputation: {}\n", recompute_summary(plan.schedule));
  if (plan.optimus) {
    const OptimusPlan& op = *plan.optimus;
    std::cout << fmt::format("  encoders on their own plan: DP {} PP {} TP {}{}, m = {}, split {}; {:.0f}% of their "
                             "compute in LLM bubbles ({:.0f}% coarse); scheduled in {:.2f} s\n",
                             op.encoder_plan.dp, op.encoder_plan.pp, op.encoder_plan.tp,
                             op.encoder_plan.recompute == Recompute::kNone
                                 ? ""
                                 : fmt::format(", {} recomputation", recompute_name(op.encoder_plan.recompute)),
                             op.encoder_plan.pipelines,
                             fmt::join(op.split, "/"), 100 * op.fine.efficiency, 100 * op.coarse.efficiency,
                             op.scheduler_seconds);
  }
  std::cout << fmt::format("  epoch {:.1f} s ({} steps of {:.1f} s), MFU {:.1f}%, pipeline bubble {:.1f}%, "
                           "{:.0f}% of the compute bound\n",
                           plan.epoch_seconds, plan.steps_per_epoch, plan.iteration_seconds, 100 * mfu,
                           100 * d.bubble_fraction, 100 * fraction_of_bound);
  for (const auto& [b, p] : baselines) {
    if (!p) {
      std::cout << fmt::format("  {:<9} cannot run: {}\n", strategy_name(b), why_not[b]);
      continue;
    }
    std::cout << fmt::format("  {:<9} epoch {:.1f} s ({}): {:.2f}× slower\n", strategy_name(b), p->epoch_seconds,
                             describe(*p), p->epoch_seconds / plan.epoch_seconds);
  }
  std::cout << fmt::format("  {} configurations, {} fit; searched in {:.2f} s\n", plan.candidates, plan.feasible,
                           search_seconds);
  if (!plan.left_out.empty()) {
    std::cout << fmt::format("  {} (DP, micro-batches) left out, their batches not made; the first: {}\n",
                             plan.left_out.size(), plan.left_out.front());
  }
  if (o.ablation) {
    std::cout << "  ablation, one change at a time:\n";
    for (const TrainingPlan& p : ablation) {
      std::cout << fmt::format("    {:<24} epoch {:.1f} s ({})\n", p.recipe, p.epoch_seconds, describe(p));
    }
  }
  if (!exported.empty()) std::cout << fmt::format("{} export:\n{}", o.exporter, exported);
}

}  // namespace

std::function<void()> add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand("plan", "Find the fastest parallel plan that fits, against the baselines");
  cmd->add_option("--model", o->model, "A preset or a config.json, as for `fulcrum model`")->required();
  cmd->add_option("--cluster", o->cluster, "Devices, e.g. a100:256, or a cluster JSON file")->required();
  cmd->add_option("--gbs", o->gbs, "Global batch: samples per iteration over all replicas")->required();
  cmd->add_option("--data", o->data, "Length file or meta index the epoch runs over");
  cmd->add_option("--root", o->root, "Second folder for a meta index's paths")->capture_default_str();
  cmd->add_option("--seq", o->seq, "Without --data: LLM tokens per sample")->capture_default_str();
  cmd->add_option("--images-per-sample", o->images_per_sample, "Without --data: encoder items per sample")
      ->capture_default_str();
  cmd->add_option("--image-tokens", o->image_tokens,
                  "Patch tokens per image (default: the encoder's own; 1024 for a dynamic-resolution encoder)")
      ->check(at_least(1));
  cmd->add_option("--strategy", o->strategy, "zero3 | megatron | balanced | omnibal | optimus | fulcrum")->capture_default_str();
  cmd->add_option("--config", o->config,
                  "DP,TP,PP,VPP,MBS pinning the planned strategy's configuration (its schedule is still chosen)");
  cmd->add_option("--baseline-config", o->baseline_config, "DP,TP,PP,VPP,MBS pinning megatron, balanced and optimus's LLM plan");
  cmd->add_option("--profile", o->profile, "Profile table JSON: measured times for the layer passes it covers");
  cmd->add_option("--dtype", o->dtype, "Number format of every layer: bf16 | fp16 | fp8 | fp32")
      ->check(CLI::IsMember({"bf16", "fp16", "fp8", "fp32"}))->capture_default_str();
  cmd->add_flag("--no-baselines", o->no_baselines, "Skip planning the zero3, megatron and balanced baselines");
  cmd->add_flag("--megatron-layout", o->megatron_layout,
                "Only plans whose every stage holds LLM layers (what Megatron-LM's pipeline layout can express)");
  cmd->add_option("--encoders", o->encoders,
                  "Where fulcrum runs the encoders: best (in the LLM's bubbles where faster), stages, bubbles")
      ->capture_default_str();
  cmd->add_option("--encoder-pp", o->encoder_pp,
                  "Encoders in bubbles: only encoder plans of this many pipeline stages (default: any)")
      ->check(at_least(1));
  cmd->add_option("--encoder-recompute", o->encoder_recompute,
                  "Encoders in bubbles: recomputation of their layers, auto (none, or full where their activations "
                  "would not fit) | none | selective | full")
      ->check(CLI::IsMember({"auto", "none", "selective", "full"}))->capture_default_str();
  cmd->add_option("--out", o->out, "Write the plan and its schedule as JSON");
  cmd->add_option("--report", o->report, "Write an HTML report of the plan beside its baselines (fulcrum report)");
  cmd->add_option("--export", o->exporter, "Also print the plan as megatron arguments or a deepspeed partition");
  cmd->add_option("--threads", o->threads, "Threads simulating candidates")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the batchers' shuffle")->capture_default_str();
  cmd->add_flag("--ablation", o->ablation,
                "Also plan megatron, + Fulcrum's batches, + exact partition, + adaptive recomputation, + zero-bubble, + "
                "encoders in bubbles");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->add_flag("--quiet", o->quiet, "No progress bar");
  return [o, cmd] {
    for (const char* name : {"--root", "--seed"}) {
      if (cmd->count(name) > 0) o->data_options.push_back(name);
    }
    for (const char* name : {"--seq", "--images-per-sample"}) {
      if (cmd->count(name) > 0) o->synthetic_options.push_back(name);
    }
    o->encoder_pp_given = cmd->count("--encoder-pp") > 0;
    o->encoder_recompute_given = cmd->count("--encoder-recompute") > 0;
    o->baseline_config_given = cmd->count("--baseline-config") > 0;
    run_plan(*o);
  };
}

}  // namespace fulcrum
