// `fulcrum simulate`: one training iteration of a model on a cluster under a parallel plan, from the schedule's
// discrete-event execution.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/cost_inputs.h"
#include "cli/output_file.h"
#include "cli/warnings.h"
#include "fulcrum/core/error.h"
#include "fulcrum/core/json_document.h"
#include "fulcrum/core/progress.h"
#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/cost/model_sample_cost.h"
#include "fulcrum/cost/profiled_cost.h"
#include "fulcrum/data/balance_metrics.h"
#include "fulcrum/data/batcher.h"
#include "fulcrum/data/isf.h"
#include "fulcrum/data/meta_index.h"
#include "fulcrum/model/cluster_spec.h"
#include "fulcrum/model/load_model.h"
#include "fulcrum/report/plan_file.h"
#include "fulcrum/sched/pipeline_schedules.h"
#include "fulcrum/sched/schedule_json.h"
#include "fulcrum/sched/validate.h"
#include "fulcrum/sim/chrome_trace.h"
#include "fulcrum/sim/simulator.h"

namespace fulcrum {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

struct SimulateOptions {
  std::string model;
  std::string cluster;
  int64_t gbs = 0;
  int64_t mbs = 1;
  int dp = 0;  // 0: the cluster's devices / (tp × pp)
  int tp = 1;
  int pp = 1;
  int vpp = 1;
  int encoder_tp = 0;
  std::string schedule;  // default: interleaved when vpp > 1, else 1f1b
  std::string recompute = "selective";
  int zero = 0;
  bool distributed_optimizer = false;
  bool sp = false;
  int64_t seq = 2048;
  int64_t images_per_sample = -1;  // -1: one per sample when the model has an encoder
  std::vector<std::string> layout_options;  // given on the command line, which a loaded schedule sets instead
  std::vector<std::string> data_options;       // given: they choose --data's batches, so need it
  std::vector<std::string> synthetic_options;  // given: they shape the samples without --data, so refuse it
  int64_t image_tokens = 0;        // 0: the encoder's own tokens per item
  std::string placement = "first-stage";
  std::string data;
  std::string root = ".";
  std::string batcher = "fulcrum";
  int64_t vision_cap = 0;  // 0: the batcher's own (isf: 9 tiles; patch tokens have none)
  int64_t token_cap = 0;
  int64_t step = 0;
  int64_t steps = 1;
  uint64_t seed = 0;
  std::string profile;
  std::string dtype = "bf16";
  std::string trace;
  std::string save_schedule;
  std::string load_schedule;
  bool json = false;
  bool quiet = false;
};

StateSharding state_sharding(const SimulateOptions& o) {
  if (o.distributed_optimizer) {
    if (o.zero != 0) throw InputError("--distributed-optimizer is Megatron's sharding: it does not go with --zero");
    return StateSharding::kMegatronDistributedOptimizer;
  }
  switch (o.zero) {
    case 0: return StateSharding::kZero0;
    case 1: return StateSharding::kZero1;
    case 2: return StateSharding::kZero2;
    case 3: return StateSharding::kZero3;
  }
  throw InputError(fmt::format("--zero {}: use 0, 1, 2 or 3", o.zero));
}

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / (1024.0 * 1024 * 1024)); }

Json breakdown_json(const TimeBreakdown& t) {
  return {{"compute", t.compute},   {"pp_warmup", t.pp_warmup}, {"pp_cooldown", t.pp_cooldown},
          {"pp_other", t.pp_other}, {"dp_comm", t.dp_comm},     {"tp_comm", t.tp_comm},
          {"dp_wait", t.dp_wait}};
}

// Each step's micro-batch loads per data-parallel replica, from a batcher's plan of the dataset.
std::vector<MicroBatchLoads> loads_from_data(const SimulateOptions& o, const ModelSpec& model,
                                            const CostModel& cost_model, Dtype dtype, int dp, int micro_batches) {
  if ((o.vision_cap > 0 || o.token_cap > 0) && o.batcher != "isf" && o.batcher != "fulcrum") {
    throw InputError(fmt::format("--vit-cap and --token-cap apply to --batcher isf and fulcrum, not {}", o.batcher));
  }
  LoadedData loaded = load_dataset(o.data, {o.root, false, &warnings()});
  const Dataset& data = loaded.dataset;
  check_data_fits_the_model(data, o.data, model, o.model);
  BatchParams params;
  params.dp = dp;
  params.micro_batches = micro_batches;
  params.samples_per_step = o.gbs;
  params.seed = o.seed;
  params.oversize = OversizePolicy::kOwnGroup;
  params.vision_cap = o.vision_cap;
  params.token_cap = o.token_cap;
  if (o.batcher == "isf") {
    naming_the_data(o.data, [&] { check_isf_caps(params, data, BatchParamNames{.search = nullptr}); });
  }
  const ModelSampleCost cost(model, cost_model, dtype);
  const std::unique_ptr<Batcher> batcher = make_batcher(o.batcher);
  const BatchPlan plan = naming_the_data(o.data, [&] { return batcher->plan(data, params, cost); });
  if (o.step < 0) throw InputError(fmt::format("--step must not be negative, got {}", o.step));
  if (o.steps > plan.steps() || o.step > plan.steps() - o.steps) {  // no sum that could overflow
    throw InputError(fmt::format("{}: --step {} and --steps {} ask for steps past the epoch's {} steps of {} samples",
                                 o.data, o.step, o.steps, plan.steps(), o.gbs));
  }
  std::vector<MicroBatchLoads> out;
  for (int64_t s = o.step; s < o.step + o.steps; ++s) {
    MicroBatchLoads loads;
    loads.per_replica.resize(dp);
    for (int d = 0; d < dp; ++d) {
      for (int j = 0; j < micro_batches; ++j) {
        loads.per_replica[d].push_back(micro_batch_load(data, plan.micro_batch(s, d, j), plan.padded()));
      }
    }
    out.push_back(std::move(loads));
  }
  return out;
}

// A schedule file's schedule, or the one a plan file (`fulcrum plan --out`) holds. A plan file is read whole, as
// `fulcrum report` reads it, and must be of the job the options describe: its schedule was made for that model,
// cluster, batch and number format, and timed on another it would answer another question.
Schedule loaded_schedule(const std::string& text, const std::string& file, const SimulateOptions& o,
                         const ModelSpec& model, Dtype dtype) {
  const Json doc = parse_json_document(text, file);
  // Any "kind" that is not "plan": not a plan.
  if (!doc.is_object() || !doc.contains("kind") || doc["kind"] != "plan") return schedule_from_json(text, file);
  if (!doc.contains("schedule")) throw InputError(fmt::format("{}: a plan without a schedule", file));
  const PlanFile p = read_plan_file(text, file);
  const auto differ = [&](const char* what, const std::string& planned, const std::string& given, const char* option) {
    throw InputError(fmt::format("{}: the plan was made for {} {}, but {} gives {}", file, what, planned, option, given));
  };
  if (p.model_name && *p.model_name != model.name) differ("model", *p.model_name, model.name, "--model");
  if (p.cluster != o.cluster) differ("cluster", p.cluster, o.cluster, "--cluster");
  if (p.gbs != o.gbs) differ("global batch", std::to_string(p.gbs), std::to_string(o.gbs), "--gbs");
  if (p.mbs != o.mbs) differ("micro-batch size", std::to_string(p.mbs), std::to_string(o.mbs), "--mbs");
  if (p.dtype != dtype_name(dtype)) differ("number format", p.dtype, std::string(dtype_name(dtype)), "--dtype");
  return p.schedule;
}

void run_simulate(const SimulateOptions& o) {
  make_batcher(o.batcher);  // an unknown name refused whether or not --data is given
  const auto start = Clock::now();
  ModelSpec model = load_model(o.model);
  ClusterSpec cluster = load_cluster(o.cluster);
  const Dtype dtype = training_dtype(o.dtype, cluster);
  std::optional<ProfileTable> profile;
  if (!o.profile.empty()) profile = load_profile(o.profile);
  if (o.tp < 1 || o.pp < 1 || o.vpp < 1 || o.dp < 0) {
    throw InputError(fmt::format("--tp, --pp and --vpp must be at least 1 and --dp not negative (tp {}, pp {}, vpp "
                                 "{}, dp {})", o.tp, o.pp, o.vpp, o.dp));
  }
  if (!o.load_schedule.empty() && !o.save_schedule.empty()) {
    throw InputError("--load-schedule and --save-schedule: give one");
  }
  if (!o.load_schedule.empty() && !o.layout_options.empty()) {  // they would be ignored without a word
    throw InputError(fmt::format("{}: the loaded schedule sets the layout, schedule and recomputation; leave out {}",
                                 o.load_schedule, fmt::join(o.layout_options, ", ")));
  }
  set_image_tokens(model, o.image_tokens);
  check_image_tokens_apply(model, o.image_tokens, !o.data.empty());
  if (o.images_per_sample < -1 || o.images_per_sample > kMostImagesPerSample) {  // -1: the default, one per sample
    throw InputError(fmt::format("--images-per-sample must be from 0 to {}, got {}", kMostImagesPerSample,
                                 o.images_per_sample));
  }
  if (o.images_per_sample > 0 && !model.has_encoder()) {
    throw InputError(fmt::format("--images-per-sample {}: model '{}' has no encoder", o.images_per_sample, o.model));
  }
  const int64_t images = o.images_per_sample >= 0 ? o.images_per_sample : (model.has_encoder() ? 1 : 0);
  if (o.steps < 1) throw InputError(fmt::format("--steps must be at least 1, got {}", o.steps));
  if (o.seq < 1 || o.seq > (int64_t{1} << 24)) {
    throw InputError(fmt::format("--seq must be from 1 to 16777216, got {}", o.seq));
  }
  check_global_batch(o.gbs, cluster.devices);
  if (o.mbs < 1 || o.mbs > o.gbs) {
    throw InputError(fmt::format("--mbs must be from 1 to the global batch ({}), got {}", o.gbs, o.mbs));
  }
  // A micro-batch's attention count, samples × tokens², is a 64-bit integer with room for its sums.
  if (static_cast<double>(o.mbs) * static_cast<double>(o.seq) * static_cast<double>(o.seq) > 0x1p62) {
    throw InputError(fmt::format("--mbs {} × --seq {} squared is more attention than a micro-batch can count (2^62)",
                                 o.mbs, o.seq));
  }

  // The plan: generated from the options, or a schedule file written by a planner (or --save-schedule).
  Schedule schedule;
  if (!o.load_schedule.empty()) {
    schedule = loaded_schedule(read_text_file(o.load_schedule), o.load_schedule, o, model, dtype);
    validate(schedule, o.load_schedule);
  }
  const ParallelLayout* given = o.load_schedule.empty() ? nullptr : &schedule.layout;
  const int tp = given ? given->tp : o.tp, pp = given ? given->pp : o.pp;
  const int64_t per_replica = static_cast<int64_t>(tp) * pp;
  const int dp = given ? given->dp : (o.dp > 0 ? o.dp : static_cast<int>(cluster.devices / per_replica));
  // A loaded schedule's layout is the file's: name it.
  const std::string layout_from = given ? fmt::format("{}: the schedule's ", o.load_schedule) : "";
  if (dp < 1 || dp * per_replica != cluster.devices) {
    throw InputError(fmt::format("{}DP {} × TP {} × PP {} = {} devices, but the cluster '{}' has {}", layout_from, dp,
                                 tp, pp, dp * per_replica, o.cluster, cluster.devices));
  }
  if (o.gbs % (o.mbs * dp) != 0) {
    throw InputError(fmt::format("global batch {} is not divisible by micro-batch {} × {}DP {}", o.gbs, o.mbs,
                                 given ? fmt::format("{}'s ", o.load_schedule) : "", dp));
  }
  const int micro_batches = static_cast<int>(o.gbs / (o.mbs * dp));
  if (given) {
    if (schedule.micro_batches != micro_batches) {
      throw InputError(fmt::format("{}: the schedule runs {} micro-batches per replica, but --gbs {} / (--mbs {} × "
                                   "DP {}) is {}", o.load_schedule, schedule.micro_batches, o.gbs, o.mbs, dp,
                                   micro_batches));
    }
  } else {
    ParallelLayout layout;
    layout.dp = dp;
    layout.tp = o.tp;
    layout.pp = o.pp;
    layout.vpp = o.vpp;
    layout.encoder_tp = o.encoder_tp;
    layout.sequence_parallel = o.sp;
    layout.state_sharding = state_sharding(o);
    const PipelineKind kind =
        parse_pipeline_kind(o.schedule.empty() ? (o.vpp > 1 ? "interleaved" : "1f1b") : o.schedule);
    if (o.placement != "first-stage" && o.placement != "spread") {
      throw InputError(fmt::format("--encoder-placement {}: use first-stage or spread", o.placement));
    }
    const EncoderPlacement placement =
        o.placement == "spread" ? EncoderPlacement::kSpread : EncoderPlacement::kFirstStage;
    schedule = make_pipeline_schedule(kind, layout, micro_batches, partition_layers(model, layout.stages(), placement),
                                      block_recompute(model, parse_recompute(o.recompute, "--recompute")));
    validate(schedule, "generated schedule");
  }
  const ParallelLayout& layout = schedule.layout;
  const PipelineKind kind = schedule.kind;

  // Layer times: the analytic model's, or measured ones where the profile has them.
  const AnalyticCost analytic(cluster);
  std::optional<ProfiledCost> profiled;
  if (profile) profiled.emplace(analytic, *profile);
  const CostModel& cost = profiled ? static_cast<const CostModel&>(*profiled) : analytic;
  const int profile_applied =
      profile ? profile_entries_applied(*profile, model, layout, schedule.recompute, dtype) : 0;

  std::vector<MicroBatchLoads> steps;
  if (o.data.empty() && !o.data_options.empty()) {  // they would be ignored without a word
    throw InputError(fmt::format("{} {} --data's batches: give --data", fmt::join(o.data_options, ", "),
                                 o.data_options.size() == 1 ? "chooses" : "choose"));
  }
  if (!o.data.empty() && !o.synthetic_options.empty()) {
    throw InputError(fmt::format("{} {} the samples without --data; --data's samples have their own",
                                 fmt::join(o.synthetic_options, ", "), o.synthetic_options.size() == 1 ? "shapes" : "shape"));
  }
  if (o.data.empty()) {
    if (o.steps != 1 || o.step != 0) throw InputError("--step and --steps choose steps of --data's plan");
    if (o.vision_cap > 0 || o.token_cap > 0) throw InputError("--vit-cap and --token-cap cap --data's micro-batches");
    steps.push_back(
        uniform_loads(micro_batches, o.mbs, o.seq, synthetic_vision_per_sample(model, images, o.image_tokens)));
  } else {
    steps = loads_from_data(o, model, cost, dtype, dp, micro_batches);
  }
  const auto sim_start = Clock::now();
  std::vector<SimResult> results;
  Progress progress("simulating", static_cast<int64_t>(steps.size()), !o.quiet && steps.size() > 1);
  for (size_t i = 0; i < steps.size(); ++i) {
    SimOptions options;
    options.timeline = !o.trace.empty() && i == 0;
    options.dtype = dtype;
    try {
      results.push_back(simulate(schedule, model, cluster, cost, analytic.efficiency(), steps[i], options));
    } catch (const InputError& e) {
      if (o.load_schedule.empty()) throw;
      // A loaded schedule the reader and validate() accept but this model does not: name the file.
      throw InputError(fmt::format("{}: {}", o.load_schedule, e.what()));
    }
    progress.advance();
  }
  progress.finish();
  const double sim_seconds = std::chrono::duration<double>(Clock::now() - sim_start).count();
  const SimResult& r = results.front();
  double mean_seconds = 0;
  for (const SimResult& x : results) mean_seconds += x.iteration_seconds / static_cast<double>(results.size());

  OutputFiles outputs;
  if (!o.save_schedule.empty()) outputs.add(o.save_schedule, schedule_to_json(schedule));
  if (!o.trace.empty()) outputs.add(o.trace, chrome_trace(r, fmt::format("{} on {}", model.name, o.cluster)));
  outputs.write();
  // After the outputs, so a run that fails says one thing: why.
  if (profile) warnings() << profile_unused_warning(o.profile, *profile, profile_applied, dtype);
  int64_t layers = 0;
  for (const ComponentSpec& c : model.components) layers += static_cast<int64_t>(c.layers.size());
  if (o.json) {
    Json out{{"iteration_seconds", r.iteration_seconds},
             {"mfu", r.mfu},
             {"hfu", r.hfu},
             {"bubble_fraction", r.bubble_fraction},
             {"breakdown", breakdown_json(r.critical)},
             {"breakdown_mean", breakdown_json(r.mean)},
             {"critical_device", {{"replica", r.critical_replica}, {"pipeline_rank", r.critical_rank}}},
             {"optimizer_seconds", r.optimizer_seconds},
             {"model_flops", r.model_flops},
             {"hardware_flops", r.hardware_flops},
             {"peak_memory_bytes", r.peak_memory_bytes},
             {"state_memory_bytes", r.state_memory_bytes},
             {"usable_memory_bytes", r.usable_memory_bytes},
             {"oom", r.oom},
             {"devices", r.devices},
             {"simulated_devices", r.simulated_devices},
             {"streams", r.streams},
             {"events", r.events},
             {"model", {{"name", model.name}, {"parameters", model.parameters()}, {"layers", layers}}},
             {"plan",
              {{"dp", dp}, {"tp", layout.tp}, {"pp", layout.pp}, {"vpp", layout.vpp}, {"encoder_tp", layout.encoder_tp},
               {"schedule", std::string(pipeline_kind_name(kind))}, {"micro_batches", micro_batches},
               {"gbs", o.gbs}, {"mbs", o.mbs},
               {"state_sharding", std::string(state_sharding_name(layout.state_sharding))},
               {"sequence_parallel", layout.sequence_parallel}, {"dtype", std::string(dtype_name(dtype))}}}};
    if (!o.load_schedule.empty()) out["plan"]["schedule_file"] = o.load_schedule;
    if (profile) {
      out["profile"] = {{"file", o.profile}, {"device", profile->device}, {"entries", profile->entries.size()},
                        {"entries_applied", profile_applied}};
    }
    if (!o.data.empty()) {
      Json per_step = Json::array();
      for (const SimResult& x : results) per_step.push_back(x.iteration_seconds);
      out["data"] = {{"path", o.data}, {"batcher", o.batcher}, {"first_step", o.step}, {"steps", o.steps},
                     {"seed", o.seed}, {"iteration_seconds_per_step", per_step}, {"iteration_seconds_mean", mean_seconds}};
      if (o.vision_cap > 0) out["data"]["vit_cap"] = o.vision_cap;
      if (o.token_cap > 0) out["data"]["token_cap"] = o.token_cap;
    }
    out["timing"] = {{"sim_seconds", sim_seconds},
                     {"total_seconds", std::chrono::duration<double>(Clock::now() - start).count()}};
    std::cout << json_text(out, 2) << "\n";
    return;
  }
  std::cout << fmt::format("{} ({:.2f}B parameters, {} layers) on {} × {}: dp {} tp {} pp {} vpp {}, {} schedule, "
                           "{} micro-batches of {} per replica{}\n",
                           model.name, static_cast<double>(model.parameters()) / 1e9, layers, cluster.devices,
                           cluster.device.kind, dp, layout.tp, layout.pp, layout.vpp, pipeline_kind_name(kind),
                           micro_batches, o.mbs, dtype == Dtype::kBf16 ? "" : fmt::format(", {}", dtype_name(dtype)));
  if (profile) {
    std::cout << fmt::format("  profile {}: {} of {} entries match this run's layer passes\n", o.profile,
                             profile_applied, profile->entries.size());
  }
  if (!o.data.empty()) {
    std::cout << fmt::format("  data {} ({} batches), steps {}..{}: mean iteration {:.4f} s\n", o.data, o.batcher,
                             o.step, o.step + o.steps - 1, mean_seconds);
  }
  std::cout << fmt::format("  iteration {:.4f} s   MFU {:.1f}%   HFU {:.1f}%   pipeline bubble {:.1f}%\n",
                           r.iteration_seconds, 100 * r.mfu, 100 * r.hfu, 100 * r.bubble_fraction);
  auto line = [](const char* label, const TimeBreakdown& t) {
    return fmt::format("  {:<9} compute {:.4f}  warm-up {:.4f}  cool-down {:.4f}  pp other {:.4f}  tp comm {:.4f}  "
                       "dp comm {:.4f}  dp wait {:.4f}\n",
                       label, t.compute, t.pp_warmup, t.pp_cooldown, t.pp_other, t.tp_comm, t.dp_comm, t.dp_wait);
  };
  std::cout << line(fmt::format("critical (replica {}, rank {})", r.critical_replica, r.critical_rank).c_str(), r.critical);
  std::cout << line("mean", r.mean);
  std::string memory;
  for (size_t s = 0; s < r.peak_memory_bytes.size(); ++s) {
    memory += fmt::format("{}{}", s ? ", " : "", gib(r.peak_memory_bytes[s]));
  }
  std::cout << fmt::format("  peak memory per pipeline rank: {} of {} usable{}\n", memory, gib(r.usable_memory_bytes),
                           r.oom ? "  OUT OF MEMORY" : "");
  std::cout << fmt::format("  {} devices, {} simulated, {} streams, {} events, in {:.3f} s\n", r.devices,
                           r.simulated_devices, r.streams, r.events, sim_seconds);
}

}  // namespace

std::function<void()> add_simulate_command(CLI::App& app) {
  auto o = std::make_shared<SimulateOptions>();
  CLI::App* cmd = app.add_subcommand("simulate", "Simulate one training iteration under a parallel plan");
  cmd->add_option("--model", o->model, "A preset or a config.json, as for `fulcrum model`")->required();
  cmd->add_option("--cluster", o->cluster, "Devices, e.g. h100:1536, or a cluster JSON file")->required();
  cmd->add_option("--gbs", o->gbs, "Global batch: samples per iteration over all replicas")->required();
  cmd->add_option("--mbs", o->mbs, "Samples per micro-batch")->capture_default_str();
  cmd->add_option("--dp", o->dp, "Data-parallel replicas (default: the cluster's devices / (tp × pp))")
      ->check(at_least(1));
  cmd->add_option("--tp", o->tp, "Tensor parallelism")->capture_default_str();
  cmd->add_option("--pp", o->pp, "Pipeline ranks")->capture_default_str();
  cmd->add_option("--vpp", o->vpp, "Model chunks per pipeline rank (interleaving)")->capture_default_str();
  cmd->add_option("--encoder-tp", o->encoder_tp, "Tensor parallelism of encoders and projectors (1 replicates them)")
      ->check(at_least(1));
  cmd->add_option("--schedule", o->schedule, "gpipe | 1f1b | interleaved | zb-h1 (default 1f1b, interleaved with --vpp)");
  cmd->add_option("--recompute", o->recompute, "none | selective | full")->capture_default_str();
  cmd->add_option("--zero", o->zero, "ZeRO stage 0-3 for parameters, gradients and optimizer state")->capture_default_str();
  cmd->add_flag("--distributed-optimizer", o->distributed_optimizer, "Megatron-LM's distributed optimizer");
  cmd->add_flag("--sp", o->sp, "Sequence parallelism");
  cmd->add_option("--seq", o->seq, "LLM tokens per sample (without --data)")->capture_default_str();
  cmd->add_option("--images-per-sample", o->images_per_sample, "Encoder items per sample (default 1 with an encoder)")
      ->check(at_least(0));
  cmd->add_option("--image-tokens", o->image_tokens,
                  "Patch tokens per image (default: the encoder's own; 1024 for a dynamic-resolution encoder)")
      ->check(at_least(1));
  cmd->add_option("--encoder-placement", o->placement, "first-stage | spread")->capture_default_str();
  cmd->add_option("--data", o->data, "Length file or meta index: micro-batches from a batcher's plan");
  cmd->add_option("--root", o->root, "Second folder for a meta index's paths")->capture_default_str();
  cmd->add_option("--batcher", o->batcher, "random | random-packed | length-grouped | isf | fulcrum")->capture_default_str();
  cmd->add_option("--vit-cap", o->vision_cap,
                  "Vision units per micro-batch at most, for --batcher isf or fulcrum (isf: default 9 tiles)")
      ->check(at_least(1));
  cmd->add_option("--token-cap", o->token_cap,
                  "LLM tokens per micro-batch at most, for --batcher isf or fulcrum (isf: default 4096)")
      ->check(at_least(1));
  cmd->add_option("--step", o->step, "First step of the plan to simulate")->capture_default_str();
  cmd->add_option("--steps", o->steps, "Steps to simulate (the mean is reported)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the batcher's shuffle")->capture_default_str();
  cmd->add_option("--profile", o->profile, "Profile table JSON: measured times for the layer passes it covers");
  cmd->add_option("--dtype", o->dtype, "Number format of every layer: bf16 | fp16 | fp8 | fp32")
      ->check(CLI::IsMember({"bf16", "fp16", "fp8", "fp32"}))->capture_default_str();
  cmd->add_option("--trace", o->trace, "Write the first simulated step's timeline, of its critical replica, as Chrome trace JSON");
  cmd->add_option("--save-schedule", o->save_schedule, "Write the generated schedule as JSON");
  cmd->add_option("--load-schedule", o->load_schedule,
                  "Simulate this schedule JSON instead of generating one (its layout replaces --dp/--tp/--pp/--vpp)");
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->add_flag("--quiet", o->quiet, "No progress bar");
  return [o, cmd] {
    for (const char* name : {"--dp", "--tp", "--pp", "--vpp", "--encoder-tp", "--schedule", "--recompute", "--zero",
                             "--distributed-optimizer", "--sp", "--encoder-placement"}) {
      if (cmd->count(name) > 0) o->layout_options.push_back(name);
    }
    for (const char* name : {"--root", "--batcher", "--seed"}) {
      if (cmd->count(name) > 0) o->data_options.push_back(name);
    }
    for (const char* name : {"--seq", "--images-per-sample"}) {
      if (cmd->count(name) > 0) o->synthetic_options.push_back(name);
    }
    run_simulate(*o);
  };
}

}  // namespace fulcrum
