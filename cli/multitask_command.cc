// `fulcrum multitask`: Spindle's wavefront plan of a multi-task model, against running it as others do.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <tuple>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/cost_inputs.h"
#include "cli/loaded_multitask_schedule.h"
#include "cli/output_file.h"
#include "cli/warnings.h"
#include "fulcrum/core/error.h"
#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/cost/profiled_cost.h"
#include "fulcrum/plan/metaop_graph.h"
#include "fulcrum/plan/spindle.h"
#include "fulcrum/plan/spindle_schedule.h"
#include "fulcrum/report/html.h"
#include "fulcrum/report/multitask_report.h"
#include "fulcrum/sched/pipeline_schedules.h"
#include "fulcrum/sched/schedule_json.h"
#include "fulcrum/sched/validate.h"
#include "fulcrum/sim/chrome_trace.h"
#include "fulcrum/sim/simulator.h"

namespace fulcrum {
namespace {

using Json = nlohmann::ordered_json;

struct MultitaskOptions {
  std::string tasks;
  std::string cluster;
  std::string dtype = "bf16";
  std::string trace;
  std::string save_schedule;
  std::string profile;
  std::string schedule_of = "plan";
  std::string report;
  std::string load_schedule;
  int zero = 1;
  double bucket_mb = 25;
  bool json = false;
  // Whether --zero and --bucket-mb were given: a loaded schedule keeps its own optimizer state and sync groups.
  const CLI::Option* zero_option = nullptr;
  const CLI::Option* bucket_option = nullptr;
};

// The command that makes this plan (and its report) again.
std::string command_line(const MultitaskOptions& o) {
  std::string out = fmt::format("fulcrum multitask --tasks {} --cluster {}", shell_word(o.tasks), shell_word(o.cluster));
  if (o.dtype != MultitaskOptions{}.dtype) out += fmt::format(" --dtype {}", o.dtype);
  if (!o.profile.empty()) out += fmt::format(" --profile {}", shell_word(o.profile));
  if (o.zero != MultitaskOptions{}.zero) out += fmt::format(" --zero {}", o.zero);
  if (o.bucket_mb != MultitaskOptions{}.bucket_mb) out += fmt::format(" --bucket-mb {}", o.bucket_mb);
  if (!o.report.empty()) out += fmt::format(" --report {}", shell_word(o.report));
  return out;
}

// An arrangement's iteration as the simulator runs its schedule, beside the planner's estimate.
struct Timed {
  std::string name;
  std::vector<PlannedWave> waves;
  BaselineTimes estimate;
  SimResult simulated;
  Recompute recompute = Recompute::kNone;
  // With recompute kFull: the sixteenths of each component's blocks recomputed fully, the rest selectively.
  int full_sixteenths = 16;
  Schedule schedule;
};

// Whether `a` is a better arrangement to keep than `b`: one that fits beats one that does not, then the shorter
// simulated iteration.
bool runs_better(const Timed& a, const Timed& b) {
  if (a.simulated.oom != b.simulated.oom) return !a.simulated.oom;
  return a.simulated.iteration_seconds < b.simulated.iteration_seconds * (1 - 1e-9);
}

const char* recompute_label(const Timed& t) {
  if (t.recompute == Recompute::kFull && t.full_sixteenths < 16) return "partial";
  return recompute_name(t.recompute).data();  // a literal's
}

double full_share(const Timed& t) { return t.recompute == Recompute::kFull ? t.full_sixteenths / 16.0 : 0.0; }

std::string recompute_text(const Timed& t) {
  if (t.recompute != Recompute::kFull || t.full_sixteenths == 16) return recompute_label(t);
  return fmt::format("full on the first {}/16 of each component's blocks (rounded up), selective on the rest",
                     t.full_sixteenths);
}

double peak_bytes(const SimResult& r) {
  double most = 0;
  for (double b : r.peak_memory_bytes) most = std::max(most, b);
  return most;
}

// The planner's estimate of an arrangement (estimate_waves), recomputation included where it recomputes.
Json estimate_json(const BaselineTimes& e) {
  return {{"iteration_seconds", e.iteration_seconds},
          {"compute_seconds", e.compute_seconds},
          {"recompute_seconds", e.recompute_seconds},
          {"transfer_seconds", e.transfer_seconds},
          {"gradient_sync_seconds", e.gradient_sync_seconds}};
}

Json timed_json(const Timed& t) {
  return {{"iteration_seconds", t.simulated.iteration_seconds},
          {"mfu", t.simulated.mfu},
          {"peak_memory_bytes", peak_bytes(t.simulated)},
          {"fits", !t.simulated.oom},
          {"recompute", recompute_label(t)},
          {"recompute_full_share", full_share(t)},
          {"estimate", estimate_json(t.estimate)}};
}

// --load-schedule: a schedule written by --save-schedule (or by hand) timed by the simulator on these tasks,
// cluster and costs, without planning: what a measured run of that schedule is compared against when the costs
// were measured after it was planned. The schedule must run exactly the tasks' work (LoadedMultitaskSchedule).
void simulate_loaded(const MultitaskOptions& o, const TaskGraph& graph, const ClusterSpec& cluster,
                     const CostModel& cost, const ProfileTable* profile, const DeviceEfficiency& efficiency,
                     Dtype dtype) {
  const std::string& file = o.load_schedule;
  const Schedule schedule = schedule_from_json(read_text_file(file), file);
  if (!schedule.tasks.present()) {
    throw InputError(fmt::format("{}: not a multitask schedule (it has no slices): time it with fulcrum simulate "
                                 "--load-schedule", file));
  }
  const LoadedMultitaskSchedule loaded(schedule, graph, file);
  // The slices against the tasks first where the schedule is for this model: a layer run twice or left out is
  // named as such, not by the fault it makes in the programs. A schedule for another model is named by the
  // simulator's check of the model, which says more.
  const bool this_model = schedule.model_layers == flattened_layers(graph.model);
  if (this_model) loaded.check_coverage();
  validate(schedule, file);
  if (schedule.layout.pp != cluster.devices) {
    throw InputError(fmt::format("{}: the schedule has programs for {} devices but the cluster '{}' has {}", file,
                                 schedule.layout.pp, o.cluster, cluster.devices));
  }
  SimOptions options;
  options.dtype = dtype;
  options.timeline = !o.trace.empty();
  SimResult simulated;
  try {
    simulated = simulate(schedule, graph.model, cluster, cost, efficiency, MicroBatchLoads{}, options);
  } catch (const InputError& e) {  // a schedule for another task graph: name the file
    throw InputError(fmt::format("{}: {}", file, e.what()));
  }
  if (!this_model) loaded.check_coverage();
  loaded.check_dataflow();
  if (!o.trace.empty()) {
    write_file_atomically(o.trace, chrome_trace(simulated, fmt::format("{} on {}: {}", graph.name, o.cluster, file)));
  }
  if (profile) {  // after the output, so a run that fails says one thing: why
    const int applied = profile_entries_applied(*profile, graph.model, schedule.layout, {}, dtype);
    warnings() << profile_unused_warning(o.profile, *profile, applied, dtype);
  }
  if (o.json) {
    const Json out{{"tasks", graph.name},
                   {"cluster", o.cluster},
                   {"schedule_file", file},
                   {"waves", schedule.tasks.waves},
                   {"slices", schedule.tasks.slices.size()},
                   {"iteration_seconds", simulated.iteration_seconds},
                   {"mfu", simulated.mfu},
                   {"peak_memory_bytes", peak_bytes(simulated)},
                   {"usable_memory_bytes", simulated.usable_memory_bytes},
                   {"fits", !simulated.oom}};
    std::cout << json_text(out, 2) << "\n";
    return;
  }
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  std::cout << fmt::format("{}: {} waves, {} slices on {} × {}: simulated iteration {:.3f} s, MFU {:.1f}%, peak memory "
                           "{:.1f} GiB of {:.1f} GiB usable{}\n",
                           file, schedule.tasks.waves, schedule.tasks.slices.size(), cluster.devices,
                           cluster.device.kind, simulated.iteration_seconds, 100 * simulated.mfu,
                           peak_bytes(simulated) / kGiB, simulated.usable_memory_bytes / kGiB,
                           simulated.oom ? ": does not fit" : "");
}

// Fulcrum's plan and the baselines at one least tensor parallelism (MultitaskInputs::min_tp), each run by the
// simulator with the least recomputation of the transformer blocks that fits in memory (none, selective, full on
// the fewest sixteenths of each component's blocks, the rest selective; full on all when none fits).
struct Arrangements {
  int min_tp = 1;
  MultitaskPlan plan;
  Timed planned, sequential, per_task, task_greedy;
  // Each of the planner's arrangements by name, as simulated (timed_json; the estimate's pick first); `planned` is
  // the fastest (runs_better), `planned_levels` its levels.
  Json planner_arrangements = Json::object();
  std::vector<LevelPlan> planned_levels;
  // The planner picks among its own arrangements by its estimate; the simulator has run every arrangement, and
  // a user should never be handed one slower than another it has already run: the fastest is kept. `sequential`
  // is what Megatron-LM and DeepSpeed already run, so another arrangement replaces it only where it fits and
  // sequential does not, or simulates at least kKeepMargin faster: a smaller gain lies within the simulator's
  // error against measured steps and does not pay for a less familiar schedule.
  static constexpr double kKeepMargin = 0.01;
  const Timed& kept() const {
    const Timed* best = &planned;
    for (const Timed* t : {&task_greedy, &per_task}) {
      if (runs_better(*t, *best)) best = t;
    }
    if (best->simulated.oom != sequential.simulated.oom) return sequential.simulated.oom ? *best : sequential;
    return best->simulated.iteration_seconds < sequential.simulated.iteration_seconds * (1 - kKeepMargin)
               ? *best
               : sequential;
  }
};

Arrangements arrange(const MultitaskInputs& in, bool timeline) {
  Arrangements a;
  a.min_tp = in.min_tp;
  a.plan = plan_multitask(in);
  const MultitaskPlan& plan = a.plan;
  auto run_waves = [&](std::string name, const BaselineTimes& estimate, std::vector<PlannedWave> waves) {
    SimOptions options;
    options.dtype = in.dtype;
    options.timeline = timeline;
    Timed t;
    t.name = std::move(name);
    t.waves = std::move(waves);
    t.estimate = estimate;
    auto run = [&](Recompute r, int full_sixteenths) {
      t.recompute = r;
      t.full_sixteenths = full_sixteenths;
      t.schedule = r == Recompute::kFull ? waves_schedule(in, plan.graph, t.waves,
                                                          first_blocks_full(in.graph->model, full_sixteenths / 16.0))
                                         : waves_schedule(in, plan.graph, t.waves, r);
      validate_planned(t.schedule, fmt::format("the {} arrangement's schedule", t.name));
      t.simulated = simulate(t.schedule, in.graph->model, *in.cluster, *in.cost, in.efficiency, MicroBatchLoads{},
                             options);
      return !t.simulated.oom;
    };
    // The planner's curves time the passes without recomputation, which memory calls for only once the
    // arrangement is simulated: the estimate is then made again with the recomputation the arrangement takes.
    auto with_recompute_estimate = [&](Timed&& done) {
      if (done.recompute != Recompute::kNone) {
        const double makespan = done.estimate.makespan_seconds;  // the curves' terms, as the bound's
        done.estimate = estimate_waves(in, plan.graph, done.waves, done.schedule.recompute);
        done.estimate.makespan_seconds = makespan;
      }
      return std::move(done);
    };
    if (run(Recompute::kNone, 16) || run(Recompute::kSelective, 16) || !run(Recompute::kFull, 16)) {
      return with_recompute_estimate(std::move(t));
    }
    // Full recomputation fits and selective does not: the fewest blocks recomputed fully that fit, by bisection
    // (memory falls as the share grows), as one lowers Megatron-LM's --recompute-num-layers until it runs out.
    Timed fits = t;
    int lo = 0, hi = 16;
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (run(Recompute::kFull, mid)) {
        hi = mid;
        fits = t;
      } else {
        lo = mid;
      }
    }
    return with_recompute_estimate(std::move(fits));
  };
  const BaselineTimes estimate{.makespan_seconds = plan.makespan_seconds,
                               .compute_seconds = plan.compute_seconds,
                               .transfer_seconds = plan.transfer_seconds,
                               .gradient_sync_seconds = plan.gradient_sync_seconds,
                               .iteration_seconds = plan.iteration_seconds};
  a.planned = run_waves(plan.arrangement, estimate, plan.waves);
  // Each baseline's waves made once, estimated and simulated.
  auto baseline = [&](const char* name, std::vector<PlannedWave> waves) {
    waves = cut_for_gradient_overlap(in, plan.graph, std::move(waves));  // as the plan's own waves are
    const BaselineTimes e = estimate_waves(in, plan.graph, waves);
    return run_waves(name, e, std::move(waves));
  };
  // The planner's other arrangements, ranked again by the simulator: its estimate knew no recomputation.
  a.planned_levels = plan.levels;
  a.planner_arrangements[a.planned.name] = timed_json(a.planned);
  for (const MultitaskPlan::Alternative& alternative : plan.alternatives) {
    Timed t = baseline(alternative.arrangement.c_str(), alternative.waves);
    a.planner_arrangements[t.name] = timed_json(t);
    if (runs_better(t, a.planned)) {
      a.planned = std::move(t);
      a.planned_levels = alternative.levels;
    }
  }
  a.sequential = baseline("sequential", sequential_waves(in, plan));
  a.per_task = baseline("per-task", per_task_waves(in, plan));
  a.task_greedy = baseline("task-greedy", task_greedy_waves(in, plan));
  return a;
}

void run(const MultitaskOptions& o) {
  if (!o.load_schedule.empty() && (!o.save_schedule.empty() || !o.report.empty() || o.schedule_of != "plan")) {
    throw InputError("--load-schedule times the given schedule: --save-schedule, --schedule-of and --report plan one");
  }
  if (!o.load_schedule.empty() && ((o.zero_option && o.zero_option->count() > 0) ||
                                   (o.bucket_option && o.bucket_option->count() > 0))) {
    throw InputError("--load-schedule times the given schedule with its own optimizer state and sync groups: "
                     "--zero and --bucket-mb plan one");
  }
  const TaskGraph graph = load_task_graph(o.tasks);
  // A task whose every component is frozen computes a forward that trains nothing: planned as asked, but said.
  for (const Task& task : graph.tasks) {
    const bool trains = std::any_of(task.nodes.begin(), task.nodes.end(), [&](const TaskNode& n) {
      return graph.model.components[n.component].trainable;
    });
    if (!trains) {
      warnings() << fmt::format("fulcrum: warning: {}: task '{}' trains nothing (every component it runs is "
                                "frozen); its forward is planned and timed all the same\n",
                                o.tasks, task.name);
    }
  }
  const ClusterSpec cluster = load_cluster(o.cluster);
  const Dtype dtype = training_dtype(o.dtype, cluster);
  std::optional<ProfileTable> profile;
  if (!o.profile.empty()) profile = load_profile(o.profile);
  // Layer times: the analytic model's, or measured ones where the profile has them.
  const AnalyticCost analytic(cluster);
  std::optional<ProfiledCost> profiled;
  if (profile) profiled.emplace(analytic, *profile);
  const CostModel& cost = profiled ? static_cast<const CostModel&>(*profiled) : analytic;
  MultitaskInputs in;
  in.graph = &graph;
  in.cluster = &cluster;
  in.cost = &cost;
  in.efficiency = analytic.efficiency();
  in.dtype = dtype;
  if (o.zero != 0 && o.zero != 1) {
    throw InputError(fmt::format("--zero {}: a multitask plan all-reduces gradients in full, so its optimizer state "
                                 "is ZeRO 0 (whole on every device) or 1 (sharded over each layer's replicas)",
                                 o.zero));
  }
  in.state_sharding = o.zero == 0 ? StateSharding::kZero0 : StateSharding::kZero1;
  if (!(o.bucket_mb >= 0 && o.bucket_mb <= 1e9)) {
    throw InputError(fmt::format("--bucket-mb {}: expected MiB from 0 (an all-reduce per sync group) to 1e9",
                                 o.bucket_mb));
  }
  in.bucket_bytes = o.bucket_mb * 1024 * 1024;
  if (!o.load_schedule.empty()) {
    simulate_loaded(o, graph, cluster, cost, profile ? &*profile : nullptr, in.efficiency, dtype);
    return;
  }
  // Every arrangement with transformer blocks split as the curves find fastest; when none of them fits in memory,
  // again with their copies split at least 2, 4, ... ways by tensor parallelism (up to a node), as one raises
  // Megatron-LM's tensor parallelism for a model too large for its devices. The first that fits is kept, unless
  // `sequential` does not fit there: those users would raise tensor parallelism until it does, so the floors go on
  // until it fits too, and the fastest arrangement that fits at any of them is kept.
  const bool timeline = !o.trace.empty() || !o.report.empty();
  std::optional<Arrangements> planned;
  double planner_seconds = 0;
  // A floor where `sequential` fits too ranks above one where it does not: the plan is compared with a run its
  // users could make.
  auto both_fit = [](const Arrangements& a) { return !a.kept().simulated.oom && !a.sequential.simulated.oom; };
  for (int min_tp = 1;; min_tp *= 2) {
    in.min_tp = min_tp;
    Arrangements a = arrange(in, timeline);
    planner_seconds += a.plan.planner_seconds;
    const bool fits = both_fit(a);
    if (!planned || (fits && !both_fit(*planned)) ||
        (fits == both_fit(*planned) && runs_better(a.kept(), planned->kept()))) {
      planned = std::move(a);
    }
    if (fits || 2 * min_tp > cluster.device.devices_per_node) break;
  }
  const MultitaskPlan& plan = planned->plan;
  const Timed& sequential = planned->sequential;
  const Timed& per_task = planned->per_task;
  const Timed& task_greedy = planned->task_greedy;
  const Timed& chosen = planned->kept();
  in.min_tp = planned->min_tp;
  const SimResult& simulated = chosen.simulated;
  const Schedule& schedule = chosen.schedule;
  const std::vector<SyncGroup> sync_groups = sync_groups_of(in, plan.graph, chosen.waves);
  const double iteration = simulated.iteration_seconds;
  const double speedup = iteration > 0 ? sequential.simulated.iteration_seconds / iteration : 0;
  if (profile) {
    const int applied = profile_entries_applied(*profile, graph.model, schedule.layout, {}, dtype);
    warnings() << profile_unused_warning(o.profile, *profile, applied, dtype);
  }
  const Timed& written = o.schedule_of == "sequential" ? sequential
                         : o.schedule_of == "per-task" ? per_task
                         : o.schedule_of == "task-greedy" ? task_greedy
                                                          : chosen;
  std::string report;
  if (!o.report.empty()) {
    MultitaskReport r;
    r.title = fmt::format("{} on {}: {}", graph.name, o.cluster, chosen.name);
    r.command = command_line(o);
    for (const Task& t : graph.tasks) r.task_names.push_back(t.name);
    r.model = &graph.model;
    r.schedule = &schedule;
    r.simulated = &simulated;
    r.summary = {
        {"tasks", fmt::format("{}: {} tasks, {} operators in {} MetaOps over {} levels", graph.name,
                              graph.tasks.size(), plan.graph.operators, plan.graph.ops.size(), plan.levels.size())},
        {"cluster", fmt::format("{}: {} × {}", o.cluster, cluster.devices, cluster.device.kind)},
        {"arrangement", fmt::format("{}, {} waves, recomputation {}, tensor parallelism of copied blocks at least {}",
                                    chosen.name, chosen.waves.size(), recompute_text(chosen),
                                    planned->min_tp)},
        {"iteration", fmt::format("{} simulated (the planner's estimate {})", human_seconds(iteration),
                                  human_seconds(chosen.estimate.iteration_seconds))},
        {"wavefront makespan", fmt::format("{}, its relaxation bound {} ({:+.1f}%)",
                                           human_seconds(plan.wavefront_makespan_seconds),
                                           human_seconds(plan.lower_bound_seconds),
                                           100 * (plan.wavefront_makespan_seconds / plan.lower_bound_seconds - 1))},
        {"MFU", fmt::format("{:.1f}%", 100 * simulated.mfu)},
        {"peak memory", fmt::format("{} of {} usable per device{}", human_bytes(peak_bytes(simulated)),
                                    human_bytes(simulated.usable_memory_bytes), simulated.oom ? ": does not fit" : "")},
        {"speed-up over sequential", fmt::format("{:.2f}×", speedup)},
    };
    auto row = [](const char* name, const char* how, const Timed& t) {
      return ComparedPlan{name, how, t.simulated.iteration_seconds, t.simulated.iteration_seconds, {}};
    };
    r.compared = {row("plan", "Fulcrum's waves (or levels in turn, or a baseline, where faster)", chosen),
                  row("sequential", "every operator on all devices in turn", sequential),
                  row("per-task", "one task after another, each planned alone", per_task),
                  row("task-greedy", "each task on devices of its own, grown by marginal gain", task_greedy)};
    report = render_multitask_report(r);
  }
  OutputFiles outputs;
  if (!o.save_schedule.empty()) outputs.add(o.save_schedule, schedule_to_json(written.schedule));
  if (!report.empty()) outputs.add(o.report, std::move(report));
  if (!o.trace.empty()) {
    outputs.add(o.trace, chrome_trace(written.simulated, fmt::format("{} on {}", graph.name, o.cluster)));
  }
  outputs.write();
  if (o.json) {
    Json waves = Json::array();
    for (const PlannedWave& w : chosen.waves) {
      Json slices = Json::array();
      for (const PlacedSlice& s : w.slices) {
        const MetaOp& op = plan.graph.ops[s.metaop];
        const Task& task = graph.tasks[op.task];
        slices.push_back({{"task", task.name},
                          {"node", task.nodes[op.node].name},
                          {"component", graph.model.components[op.component].name},
                          {"layers", {op.first_layer + s.first_layer, op.first_layer + s.first_layer + s.layers}},
                          {"devices", s.device_ids},
                          {"dp", s.dp},
                          {"tp", s.tp},
                          {"seconds", s.seconds}});
      }
      waves.push_back({{"level", w.level}, {"start_seconds", w.start_seconds}, {"seconds", w.seconds},
                       {"slices", slices}});
    }
    Json levels = Json::array();
    for (const LevelPlan& l : planned->planned_levels) {
      levels.push_back({{"metaops", l.metaops.size()},
                        {"serial", l.serial},
                        {"lower_bound_seconds", l.relaxation.makespan_seconds},
                        {"devices", l.relaxation.devices}});
    }
    Json groups = Json::array();
    for (const SyncGroup& g : sync_groups) {
      groups.push_back({{"devices", g.device_ids}, {"gradient_bytes", g.gradient_bytes}, {"seconds", g.seconds}});
    }
    const Json out{{"tasks", graph.name},
                   {"cluster", o.cluster},
                   {"operators", plan.graph.operators},
                   {"metaops", plan.graph.ops.size()},
                   {"iteration_seconds", iteration},
                   {"arrangement", chosen.name},
                   {"planner_arrangement", plan.arrangement},
                   {"planner_arrangements", planned->planner_arrangements},
                   {"levels_of", planned->planned.name},
                   {"makespan_seconds", chosen.estimate.makespan_seconds},
                   {"wavefront_makespan_seconds", plan.wavefront_makespan_seconds},
                   {"lower_bound_seconds", plan.lower_bound_seconds},
                   {"compute_seconds", chosen.estimate.compute_seconds},
                   {"mfu", simulated.mfu},
                   {"peak_memory_bytes", peak_bytes(simulated)},
                   {"usable_memory_bytes", simulated.usable_memory_bytes},
                   {"fits", !simulated.oom},
                   {"recompute", recompute_label(chosen)},
                   {"recompute_full_share", full_share(chosen)},
                   {"estimate", estimate_json(chosen.estimate)},
                   {"levels", levels},
                   {"waves", waves},
                   {"sync_groups", groups},
                   {"baselines",
                    {{"sequential", timed_json(sequential)},
                     {"per_task", timed_json(per_task)},
                     {"task_greedy", timed_json(task_greedy)}}},
                   {"speedup_vs_sequential", speedup},
                   {"min_tp", planned->min_tp},
                   {"timing", {{"planner_seconds", planner_seconds}}}};
    std::cout << json_text(out, 2) << "\n";
    return;
  }
  std::cout << fmt::format("{}: {} tasks, {} operators in {} MetaOps over {} levels, on {} × {}\n", graph.name,
                           graph.tasks.size(), plan.graph.operators, plan.graph.ops.size(), plan.levels.size(),
                           cluster.devices, cluster.device.kind);
  std::cout << fmt::format("  wavefront makespan {:.3f} s (bound {:.3f} s, {:+.1f}%); kept: {}, {} waves, simulated "
                           "iteration {:.3f} s, MFU {:.1f}% (planner's estimate {:.3f} s)\n",
                           plan.wavefront_makespan_seconds, plan.lower_bound_seconds,
                           100 * (plan.wavefront_makespan_seconds / plan.lower_bound_seconds - 1), chosen.name,
                           chosen.waves.size(), iteration,
                           100 * simulated.mfu, chosen.estimate.iteration_seconds);
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  std::cout << fmt::format("  peak memory {:.1f} GiB of {:.1f} GiB usable{}, recomputation {}\n",
                           peak_bytes(simulated) / kGiB, simulated.usable_memory_bytes / kGiB,
                           simulated.oom ? ": does not fit" : "", recompute_text(chosen));
  for (const auto& [name, b] : {std::pair<const char*, const Timed&>{"sequential", sequential},
                                {"per-task", per_task},
                                {"task-greedy", task_greedy}}) {
    std::cout << fmt::format("  {:<12} iteration {:.3f} s: {:.2f}× slower{}\n", name, b.simulated.iteration_seconds,
                             b.simulated.iteration_seconds / iteration, b.simulated.oom ? " (does not fit)" : "");
  }
  if (planned->min_tp > 1) {
    std::cout << fmt::format("  transformer blocks split at least {} ways by tensor parallelism to fit in memory\n",
                             planned->min_tp);
  }
  std::cout << fmt::format("  planned in {:.3f} s\n", planner_seconds);
}

}  // namespace

std::function<void()> add_multitask_command(CLI::App& app) {
  auto o = std::make_shared<MultitaskOptions>();
  CLI::App* cmd = app.add_subcommand("multitask", "Plan a multi-task model's iteration in waves (Spindle)");
  cmd->add_option("--tasks", o->tasks, "A task preset (multitask-clip-10, qwen-val, ...) or a task graph file")->required();
  cmd->add_option("--cluster", o->cluster, "A preset (a800:32) or a cluster file")->required();
  cmd->add_option("--dtype", o->dtype, "bf16 | fp16 | fp32 | fp8")->capture_default_str();
  cmd->add_option("--trace", o->trace, "Write the plan's simulated timeline as a Chrome trace");
  cmd->add_option("--save-schedule", o->save_schedule, "Write the plan's schedule (the waves, one program per device)");
  cmd->add_option("--profile", o->profile, "Measured layer times (a profile table) in place of the analytic model's");
  cmd->add_option("--schedule-of", o->schedule_of, "Which arrangement --save-schedule and --trace write")
      ->check(CLI::IsMember({"plan", "sequential", "per-task", "task-greedy"}))
      ->capture_default_str();
  cmd->add_option("--report", o->report, "Write an HTML report: the waves, idle time, memory, the arrangements");
  o->zero_option = cmd->add_option("--zero", o->zero,
                  "Optimizer state: 1 sharded over each layer's replicas (ZeRO-1), 0 whole on every device that holds "
                  "the layer")
      ->capture_default_str();
  o->bucket_option = cmd->add_option("--bucket-mb", o->bucket_mb,
                  "Sync groups on the same devices ready one after another share an all-reduce up to this many MiB "
                  "of gradients per device, as DDP's bucket_cap_mb; 0: one all-reduce per group (not with "
                  "--load-schedule, whose schedule keeps its own groups)")
      ->capture_default_str();
  cmd->add_option("--load-schedule", o->load_schedule,
                  "Simulate this multitask schedule (a --save-schedule file) on the tasks, cluster and costs given, "
                  "instead of planning one");
  cmd->add_flag("--json", o->json, "Print the plan as JSON");
  return [o] { run(*o); };
}

}  // namespace fulcrum
