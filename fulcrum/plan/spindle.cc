#include "fulcrum/plan/spindle.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/collective_cost.h"
#include "fulcrum/cost/dtype.h"

namespace fulcrum {
namespace {

void check_inputs(const MultitaskInputs& in) {
  if (!in.graph || !in.cluster || !in.cost) throw InputError("multi-task planning needs tasks, a cluster and a cost model");
  if (in.cluster->devices < 1) throw InputError("the cluster has no devices");
  if (in.cluster->devices > (int64_t{1} << 20)) throw InputError("more than 1,048,576 devices");
}

int device_count(const MultitaskInputs& in) { return static_cast<int>(in.cluster->devices); }

// The curve of every MetaOp; MetaOps of the same shape, batch and component share one.
std::vector<ScalabilityCurve> curves_of(const MultitaskInputs& in, const MetaGraph& g) {
  std::vector<ScalabilityCurve> out;
  out.reserve(g.ops.size());
  for (size_t m = 0; m < g.ops.size(); ++m) {
    const MetaOp& op = g.ops[m];
    bool shared = false;
    for (size_t k = 0; k < m && !shared; ++k) {
      const MetaOp& o = g.ops[k];
      if (o.component == op.component && o.layer == op.layer && o.sequences == op.sequences && o.tokens == op.tokens &&
          o.micro_batches == op.micro_batches) {
        out.push_back(out[k]);
        shared = true;
      }
    }
    if (shared) continue;
    try {
      out.push_back(metaop_curve(op, in.graph->model.components[op.component], *in.cost, *in.cluster,
                                 device_count(in), in.dtype));
    } catch (const InputError& e) {
      const Task& task = in.graph->tasks[op.task];
      throw InputError(fmt::format("task '{}' node '{}': {}", task.name, task.nodes[op.node].name, e.what()));
    }
  }
  return out;
}

// The levels' waves from `now` on, for the MetaOps `wanted` selects; appends to `plan.levels` and `plan.waves`.
double plan_levels(const MetaGraph& g, const std::vector<ScalabilityCurve>& curves, int devices,
                   const std::vector<bool>& wanted, double now, MultitaskPlan& plan) {
  for (size_t level = 0; level < g.levels.size(); ++level) {
    LevelPlan lp;
    std::vector<LevelOp> ops;
    for (int m : g.levels[level]) {
      if (!wanted[m]) continue;
      lp.metaops.push_back(m);
      ops.push_back({&curves[m], g.ops[m].layers});
    }
    if (ops.empty()) continue;
    lp.relaxation = relax_level(ops, devices);
    lp.parts = bipoint(ops, lp.relaxation);
    std::vector<Wave> waves = wavefront(ops, lp.parts, devices, now);
    // The level's MetaOps one after another, each on all the devices it can use: exact for curves that scale
    // linearly, where the discretised waves lose to it. Kept when faster.
    std::vector<Wave> serial;
    double at = now;
    for (size_t k = 0; k < ops.size(); ++k) {
      const CurvePoint& p = *ops[k].curve->largest_within(devices);
      Wave w;
      w.start_seconds = at;
      w.seconds = static_cast<double>(ops[k].layers) * p.seconds;
      w.slices.push_back({static_cast<int>(k), p.devices, 0, ops[k].layers, w.seconds, -1});
      at += w.seconds;
      serial.push_back(std::move(w));
    }
    const double wave_end = waves.empty() ? now : waves.back().start_seconds + waves.back().seconds;
    if (at < wave_end * (1 - 1e-12)) {
      waves = std::move(serial);
      lp.serial = true;
    }
    for (const Wave& w : waves) {
      PlannedWave pw;
      pw.level = static_cast<int>(level);
      pw.start_seconds = w.start_seconds;
      pw.seconds = w.seconds;
      for (const WaveSlice& s : w.slices) {
        PlacedSlice ps;
        ps.metaop = lp.metaops[s.op];
        ps.devices = s.devices;
        ps.first_layer = s.first_layer;
        ps.layers = s.layers;
        ps.seconds = s.seconds;
        const CurvePoint* point = curves[ps.metaop].at(s.devices);
        ps.dp = point->dp;
        ps.tp = point->tp;
        pw.slices.push_back(std::move(ps));
      }
      now = w.start_seconds + w.seconds;
      plan.waves.push_back(std::move(pw));
    }
    plan.lower_bound_seconds += lp.relaxation.makespan_seconds;
    plan.levels.push_back(std::move(lp));
  }
  return now;
}

// Devices for each slice of each wave: the largest slices first; a block of consecutive free devices inside one
// node when the slice fits in one, the block sharing the most devices with where the MetaOp (or, for its first
// slice, its inputs) last ran, so that activations stay put; the first free devices when no block is free.
void place(const MetaGraph& g, int devices, int per_node, std::vector<PlannedWave>& waves) {
  std::vector<std::vector<int>> last_devices(g.ops.size());
  for (PlannedWave& wave : waves) {
    std::vector<char> free(devices, 1);
    std::vector<size_t> order(wave.slices.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return wave.slices[a].devices > wave.slices[b].devices; });
    for (size_t i : order) {
      PlacedSlice& s = wave.slices[i];
      std::vector<char> wanted(devices, 0);
      const MetaOp& op = g.ops[s.metaop];
      if (!last_devices[s.metaop].empty()) {
        for (int d : last_devices[s.metaop]) wanted[d] = 1;
      } else {
        for (int input : op.inputs) {
          for (int d : last_devices[input]) wanted[d] = 1;
        }
      }
      // Prefix sums of free and wanted devices: every block is scored in O(1).
      std::vector<int> free_before(devices + 1, 0), wanted_before(devices + 1, 0);
      for (int d = 0; d < devices; ++d) {
        free_before[d + 1] = free_before[d] + free[d];
        wanted_before[d + 1] = wanted_before[d] + (free[d] && wanted[d]);
      }
      int best = -1, best_score = -1;
      bool best_in_node = false;
      for (int start = 0; start + s.devices <= devices; ++start) {
        const int end = start + s.devices;
        if (free_before[end] - free_before[start] != s.devices) continue;
        const bool in_node = start / per_node == (end - 1) / per_node;
        const int score = wanted_before[end] - wanted_before[start];
        // In one node beats across nodes (when the slice fits in one); then more devices shared; then first.
        const bool better = best < 0 || (in_node && !best_in_node && s.devices <= per_node) ||
                            (in_node == best_in_node && score > best_score);
        if (better) {
          best = start;
          best_score = score;
          best_in_node = in_node;
        }
      }
      s.device_ids.clear();
      if (best >= 0) {
        for (int d = best; d < best + s.devices; ++d) s.device_ids.push_back(d);
      } else {
        for (int d = 0; d < devices && static_cast<int>(s.device_ids.size()) < s.devices; ++d) {
          if (free[d]) s.device_ids.push_back(d);
        }
      }
      for (int d : s.device_ids) free[d] = 0;
      last_devices[s.metaop] = s.device_ids;
    }
  }
}

DeviceGroupShape group_shape(const std::vector<int>& ids, int per_node) {
  const bool one_node = !ids.empty() && ids.front() / per_node == ids.back() / per_node;
  return {static_cast<int64_t>(ids.size()), one_node ? 1 : per_node};
}

// The busiest device's share of the groups' all-reduces.
double gradient_sync(const MultitaskInputs& in, const std::vector<SyncGroup>& groups) {
  std::vector<double> per_device(static_cast<size_t>(device_count(in)), 0);
  for (const SyncGroup& group : groups) {
    for (int d : group.device_ids) per_device[d] += group.seconds;
  }
  return per_device.empty() ? 0 : *std::max_element(per_device.begin(), per_device.end());
}

// Activations into each wave from where they were made, forward and their gradients back: at each wave's start,
// the slowest of its incoming flows, the flow split over the pairs of producing and consuming devices.
double transfers(const MultitaskInputs& in, const MetaGraph& g, const std::vector<PlannedWave>& waves) {
  const int per_node = std::max(1, in.cluster->device.devices_per_node);
  const double element = activation_element_bytes(in.dtype);
  std::vector<const PlacedSlice*> last(g.ops.size(), nullptr);
  double total = 0;
  for (const PlannedWave& w : waves) {
    double wave_in = 0;
    for (const PlacedSlice& s : w.slices) {
      const MetaOp& op = g.ops[s.metaop];
      std::vector<std::pair<const PlacedSlice*, const MetaOp*>> sources;
      if (last[s.metaop]) {
        sources.push_back({last[s.metaop], &op});
      } else {
        for (int input : op.inputs) sources.push_back({last[input], &g.ops[input]});
      }
      for (const auto& [from, producer] : sources) {
        if (!from || from->device_ids == s.device_ids) continue;
        const double bytes = element * static_cast<double>(producer->micro_batches * producer->sequences *
                                                           producer->tokens * producer->layer.hidden);
        const double pairs = static_cast<double>(std::min(from->devices, s.devices));
        const bool same_node = from->device_ids.front() / per_node == s.device_ids.back() / per_node &&
                               s.device_ids.front() / per_node == from->device_ids.back() / per_node;
        wave_in = std::max(wave_in, 2 * p2p_seconds(bytes / pairs, *in.cluster, in.efficiency, same_node ? 1 : per_node));
      }
    }
    total += wave_in;
    for (const PlacedSlice& s : w.slices) last[s.metaop] = &s;
  }
  return total;
}

}  // namespace

std::vector<SyncGroup> sync_groups_of(const MultitaskInputs& in, const MetaGraph& g,
                                      const std::vector<PlannedWave>& waves) {
  const ModelSpec& model = in.graph->model;
  const int per_node = std::max(1, in.cluster->device.devices_per_node);
  const double element = activation_element_bytes(in.dtype);
  // (component, layer) → devices holding it.
  std::map<std::pair<int, int>, std::vector<int>> holders;
  for (const PlannedWave& w : waves) {
    for (const PlacedSlice& s : w.slices) {
      const MetaOp& op = g.ops[s.metaop];
      for (int64_t l = 0; l < s.layers; ++l) {
        auto& ids = holders[{op.component, static_cast<int>(op.first_layer + s.first_layer + l)}];
        ids.insert(ids.end(), s.device_ids.begin(), s.device_ids.end());
      }
    }
  }
  std::map<std::vector<int>, SyncGroup> pools;
  for (auto& [key, ids] : holders) {
    const ComponentSpec& c = model.components[key.first];
    if (!c.trainable) continue;
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    SyncGroup& group = pools[ids];
    group.device_ids = ids;
    group.layers.push_back(key);
    group.gradient_bytes += element * static_cast<double>(c.layers[key.second].parameters());
  }
  std::vector<SyncGroup> groups;
  for (auto& [ids, group] : pools) {
    if (ids.size() > 1 && group.gradient_bytes > 0) {
      group.seconds = collective_seconds(CollectiveOp::kAllReduce, group.gradient_bytes, *in.cluster, in.efficiency,
                                         group_shape(ids, per_node));
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

MultitaskPlan plan_multitask(const MultitaskInputs& in) {
  check_inputs(in);
  const auto started = std::chrono::steady_clock::now();
  MultitaskPlan plan;
  plan.graph = contract(*in.graph);
  plan.curves = curves_of(in, plan.graph);
  const int devices = device_count(in);
  plan.compute_seconds =
      plan_levels(plan.graph, plan.curves, devices, std::vector<bool>(plan.graph.ops.size(), true), 0.0, plan);
  place(plan.graph, devices, std::max(1, in.cluster->device.devices_per_node), plan.waves);
  plan.sync_groups = sync_groups_of(in, plan.graph, plan.waves);
  plan.gradient_sync_seconds = gradient_sync(in, plan.sync_groups);
  plan.transfer_seconds = transfers(in, plan.graph, plan.waves);
  plan.iteration_seconds = plan.compute_seconds + plan.transfer_seconds + plan.gradient_sync_seconds;
  plan.planner_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return plan;
}

namespace {

PlacedSlice whole_metaop(const MultitaskPlan& plan, int m, const CurvePoint& point, int first_device) {
  PlacedSlice s;
  s.metaop = m;
  s.devices = point.devices;
  s.layers = plan.graph.ops[m].layers;
  s.seconds = static_cast<double>(s.layers) * point.seconds;
  s.dp = point.dp;
  s.tp = point.tp;
  for (int d = first_device; d < first_device + point.devices; ++d) s.device_ids.push_back(d);
  return s;
}

}  // namespace

BaselineTimes estimate_waves(const MultitaskInputs& in, const MetaGraph& g, const std::vector<PlannedWave>& waves) {
  BaselineTimes t;
  for (const PlannedWave& w : waves) {
    std::map<int, double> busy;
    double longest = 0;
    for (const PlacedSlice& s : w.slices) {
      for (int d : s.device_ids) longest = std::max(longest, busy[d] += s.seconds);
    }
    t.compute_seconds += longest;
  }
  t.gradient_sync_seconds = gradient_sync(in, sync_groups_of(in, g, waves));
  t.iteration_seconds = t.compute_seconds + transfers(in, g, waves) + t.gradient_sync_seconds;
  return t;
}

std::vector<PlannedWave> sequential_waves(const MultitaskInputs& in, const MultitaskPlan& plan) {
  check_inputs(in);
  std::vector<PlannedWave> waves;
  double now = 0;
  for (size_t m = 0; m < plan.graph.ops.size(); ++m) {
    PlannedWave w;
    w.level = plan.graph.ops[m].level;
    w.start_seconds = now;
    w.slices.push_back(whole_metaop(plan, static_cast<int>(m), *plan.curves[m].largest_within(device_count(in)), 0));
    w.seconds = w.slices.back().seconds;
    now += w.seconds;
    waves.push_back(std::move(w));
  }
  return waves;
}

std::vector<PlannedWave> per_task_waves(const MultitaskInputs& in, const MultitaskPlan& plan) {
  check_inputs(in);
  const MetaGraph& g = plan.graph;
  MultitaskPlan alone;
  double now = 0;
  for (size_t t = 0; t < in.graph->tasks.size(); ++t) {
    std::vector<bool> wanted(g.ops.size(), false);
    for (size_t m = 0; m < g.ops.size(); ++m) wanted[m] = g.ops[m].task == static_cast<int>(t);
    now = plan_levels(g, plan.curves, device_count(in), wanted, now, alone);
  }
  place(g, device_count(in), std::max(1, in.cluster->device.devices_per_node), alone.waves);
  return alone.waves;
}

std::vector<PlannedWave> task_greedy_waves(const MultitaskInputs& in, const MultitaskPlan& plan) {
  check_inputs(in);
  const MetaGraph& g = plan.graph;
  const int devices = device_count(in);
  const int tasks = static_cast<int>(in.graph->tasks.size());
  // A task's MetaOps all run on its devices: the most of them valid for every one (1 always is), so that nothing
  // moves between them.
  auto common_count = [&](int t, int n) {
    for (int c = n; c > 1; --c) {
      bool valid = true;
      for (size_t m = 0; m < g.ops.size() && valid; ++m) valid = g.ops[m].task != t || plan.curves[m].at(c);
      if (valid) return c;
    }
    return 1;
  };
  auto task_seconds = [&](int t, int n) {
    const int c = common_count(t, n);
    double s = 0;
    for (size_t m = 0; m < g.ops.size(); ++m) {
      if (g.ops[m].task == t) s += static_cast<double>(g.ops[m].layers) * plan.curves[m].at(c)->seconds;
    }
    return s;
  };
  // One wave a round of as many tasks as devices; in it each task's MetaOps in turn on its own devices.
  std::vector<PlannedWave> waves;
  double now = 0;
  for (int round_first = 0; round_first < tasks; round_first += devices) {
    const int round = std::min(devices, tasks - round_first);
    std::vector<int> given(round, 1);
    int used = round;
    while (true) {
      int best = -1, best_next = 0;
      double best_gain = 0;
      for (int k = 0; k < round; ++k) {
        const double now_t = task_seconds(round_first + k, given[k]);
        for (int next = given[k] + 1; next <= given[k] + (devices - used); ++next) {
          const double then = task_seconds(round_first + k, next);
          if (then >= now_t) continue;
          const double gain = (now_t - then) / static_cast<double>(next - given[k]);
          if (gain > best_gain) {
            best = k;
            best_next = next;
            best_gain = gain;
          }
          break;  // the next count at which the task gets faster
        }
      }
      if (best < 0) break;
      used += best_next - given[best];
      given[best] = best_next;
    }
    PlannedWave w;
    w.start_seconds = now;
    int first = 0;
    for (int k = 0; k < round; ++k) {
      double task_time = 0;
      for (size_t m = 0; m < g.ops.size(); ++m) {
        if (g.ops[m].task != round_first + k) continue;
        const int c = common_count(round_first + k, given[k]);
        w.slices.push_back(whole_metaop(plan, static_cast<int>(m), *plan.curves[m].at(c), first));
        task_time += w.slices.back().seconds;
      }
      w.seconds = std::max(w.seconds, task_time);
      first += given[k];
    }
    now += w.seconds;
    waves.push_back(std::move(w));
  }
  return waves;
}

MultitaskBaselines multitask_baselines(const MultitaskInputs& in, const MultitaskPlan& plan) {
  MultitaskBaselines out;
  out.sequential = estimate_waves(in, plan.graph, sequential_waves(in, plan));
  out.per_task = estimate_waves(in, plan.graph, per_task_waves(in, plan));
  out.task_greedy = estimate_waves(in, plan.graph, task_greedy_waves(in, plan));
  return out;
}

}  // namespace fulcrum
