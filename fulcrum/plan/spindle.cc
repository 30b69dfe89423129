#include "fulcrum/plan/spindle.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include "fulcrum/core/error.h"
#include "fulcrum/core/sorted_ids.h"
#include "fulcrum/cost/collective_cost.h"
#include "fulcrum/cost/reshard_cost.h"
#include "fulcrum/cost/dtype.h"
#include "fulcrum/plan/configuration_program.h"
#include "fulcrum/sched/pipeline_schedules.h"

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
    CurveOptions options;
    options.dtype = in.dtype;
    options.efficiency = in.efficiency;
    options.min_tp = in.min_tp;
    options.sharers = 0;  // the MetaOps running this one's first layer, itself included
    for (const MetaOp& o : g.ops) {
      options.sharers += o.component == op.component && o.first_layer <= op.first_layer &&
                         op.first_layer < o.first_layer + o.layers;
    }
    try {
      out.push_back(metaop_curve(op, in.graph->model.components[op.component], *in.cost, *in.cluster,
                                 device_count(in), options));
    } catch (const InputError& e) {
      const Task& task = in.graph->tasks[op.task];
      throw InputError(fmt::format("task '{}' node '{}': {}", task.name, task.nodes[op.node].name, e.what()));
    }
  }
  return out;
}

// How each level runs: the faster (in the curves' terms) of its waves and its MetaOps one after another at their
// fastest counts, or every level's MetaOps one after another at their fastest or their widest counts.
enum class LevelChoice { kFasterOfWavesAndSerial, kSerialFastest, kSerialWidest };

// The levels' waves from `now` on, for the MetaOps `wanted` selects; appends to `plan.levels` and `plan.waves`.
double plan_levels(const MetaGraph& g, const std::vector<ScalabilityCurve>& curves, int devices,
                   const std::vector<bool>& wanted, double now, MultitaskPlan& plan,
                   LevelChoice choice = LevelChoice::kFasterOfWavesAndSerial) {
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
    // The discretised parts packed both ways a part that fits no whole operator in a wave can go, with waves as
    // long as their shortest part or as keeps them busiest; the shortest packing kept (each is best somewhere).
    auto end_of = [&](const std::vector<Wave>& w) { return w.empty() ? now : w.back().start_seconds + w.back().seconds; };
    std::vector<Wave> waves;
    if (choice == LevelChoice::kFasterOfWavesAndSerial) {
      for (WaveLength length : {WaveLength::kShortestPart, WaveLength::kBusiestWave}) {
        for (PartThatFitsNone fits_none : {PartThatFitsNone::kRunOne, PartThatFitsNone::kLeave}) {
          std::vector<Wave> packed = wavefront(ops, lp.parts, devices, now, fits_none, length);
          if (waves.empty() || end_of(packed) < end_of(waves) * (1 - 1e-12)) waves = std::move(packed);
        }
      }
      // The linear program over device configurations, where its whole operators end sooner: the exact
      // packing when operators split freely, which the bi-point parts cannot reach where counts between the
      // envelope's points are not valid.
      std::vector<Wave> program = configuration_program(ops, devices, now).waves;
      if (!program.empty() && end_of(program) < end_of(waves) * (1 - 1e-12)) waves = std::move(program);
    }
    // The level's MetaOps one after another, each on all the devices it can use: exact for curves that scale
    // linearly, where the discretised waves lose to it. Kept when faster.
    std::vector<Wave> serial;
    double at = now;
    for (size_t k = 0; k < ops.size(); ++k) {
      const CurvePoint& p =
          choice == LevelChoice::kSerialWidest ? ops[k].curve->widest() : *ops[k].curve->largest_within(devices);
      Wave w;
      w.start_seconds = at;
      w.seconds = static_cast<double>(ops[k].layers) * p.seconds;
      w.slices.push_back({static_cast<int>(k), p.devices, 0, ops[k].layers, w.seconds, -1});
      at += w.seconds;
      serial.push_back(std::move(w));
    }
    const double wave_end = end_of(waves);
    if (choice != LevelChoice::kFasterOfWavesAndSerial || at < wave_end * (1 - 1e-12)) {
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
        const CurvePoint* point = curves[ps.metaop].measured_at(s.devices);
        ps.dp = point->dp;
        ps.tp = point->tp;
        ps.gradient_sync_seconds = static_cast<double>(s.layers) * point->gradient_sync_seconds;
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

// The activation a MetaOp hands on: every sequence's tokens at its width, over all its micro-batches.
double output_bytes(const MultitaskInputs& in, const MetaOp& op) {
  return activation_element_bytes(in.dtype) * static_cast<double>(op.micro_batches) *
         static_cast<double>(op.sequences) * static_cast<double>(op.tokens) * static_cast<double>(op.layer.hidden);
}

// The slices a slice takes its inputs from, each with the bytes it hands on.
using SliceInputs = std::vector<std::pair<const PlacedSlice*, double>>;

// Where a slice's inputs are when it starts, `last` holding each MetaOp's latest slice: the MetaOp's previous
// slice, or for its first slice the last slices of the MetaOps it takes.
SliceInputs inputs_of(const MultitaskInputs& in, const MetaGraph& g, const std::vector<const PlacedSlice*>& last,
                      const PlacedSlice& s) {
  const MetaOp& op = g.ops[s.metaop];
  SliceInputs sources;
  if (last[s.metaop]) {
    sources.emplace_back(last[s.metaop], output_bytes(in, op));
  } else {
    for (int input : op.inputs) {
      if (last[input]) sources.emplace_back(last[input], output_bytes(in, g.ops[input]));
    }
  }
  return sources;
}

// The time to bring a slice's inputs onto `ids` (reshard_cost.h): the slowest of its incoming exchanges.
double inflow_seconds(const MultitaskInputs& in, const SliceInputs& sources, const PlacedSlice& s,
                      const std::vector<int>& ids) {
  double worst = 0;
  for (const auto& [from, bytes] : sources) {
    // Each device goes on from its own share, as the schedules run it, unless the share's layout changes.
    if (from->device_ids == ids && from->dp == s.dp && from->tp == s.tp) continue;
    worst = std::max(worst, reshard_seconds({from->device_ids, from->dp, from->tp}, {ids, s.dp, s.tp}, bytes,
                                            *in.cluster, in.efficiency)
                                .seconds());
  }
  return worst;
}

// Tensor-parallel groups (tp consecutive devices of `count`, the k-th being id_at(k)) that span two nodes: their
// layer collectives cross the network, which the simulator charges and the curves (priced inside a node) do not.
template <typename IdAt>
int split_groups(int count, int tp, int per_node, IdAt id_at) {
  int split = 0;
  for (int first = 0; first + tp <= count; first += tp) {
    split += id_at(first) / per_node != id_at(first + tp - 1) / per_node;
  }
  return split;
}

// How good a wave's placement is: fewer tensor-parallel groups across nodes, then the slowest exchange into it.
struct WavePlacement {
  int split_groups = 0;
  double inflow_seconds = 0;
  bool operator<(const WavePlacement& o) const {
    return split_groups != o.split_groups ? split_groups < o.split_groups : inflow_seconds < o.inflow_seconds;
  }
};

// Places `wave`'s slices in `order`: each takes, of the blocks of consecutive free devices, the one with the fewest
// tensor-parallel groups across nodes, then the one its inputs reach soonest, then one inside a node, then the first;
// the first free devices when no block is free. `remote[i]`: slice i's inflow from nodes none of its inputs are on.
WavePlacement place_wave(const MultitaskInputs& in, const std::vector<SliceInputs>& sources,
                         const std::vector<double>& remote, const std::vector<size_t>& order, PlannedWave& wave) {
  const int devices = device_count(in);
  const int per_node = std::max(1, in.cluster->device.devices_per_node);
  const int nodes = (devices + per_node - 1) / per_node;
  WavePlacement placement;
  std::vector<char> free(devices, 1);
  for (size_t i : order) {
    PlacedSlice& s = wave.slices[i];
    // Blocks on no node its inputs are on all cost `remote[i]`: only the others are priced one by one.
    std::vector<int> input_nodes_before(nodes + 1, 0);
    {
      std::vector<char> input_node(nodes, 0);
      for (const auto& [from, bytes] : sources[i]) {
        for (int d : from->device_ids) input_node[d / per_node] = 1;
      }
      for (int k = 0; k < nodes; ++k) input_nodes_before[k + 1] = input_nodes_before[k] + input_node[k];
    }
    std::vector<int> free_before(devices + 1, 0);
    for (int d = 0; d < devices; ++d) free_before[d + 1] = free_before[d] + free[d];
    std::vector<int> block(static_cast<size_t>(s.devices));
    int best = -1, best_split = 0;
    double best_seconds = 0;
    bool best_in_node = false;
    // A slice wider than a node starts on a node's first device; a narrower one anywhere.
    const int step = s.devices > per_node ? per_node : 1;
    for (int start = 0; start + s.devices <= devices; start += step) {
      const int end = start + s.devices;
      if (free_before[end] - free_before[start] != s.devices) continue;
      const int first_node = start / per_node, last_node = (end - 1) / per_node;
      const bool in_node = first_node == last_node && s.devices <= per_node;
      const int split = split_groups(s.devices, s.tp, per_node, [start](int k) { return start + k; });
      double seconds = remote[i];
      if (input_nodes_before[last_node + 1] - input_nodes_before[first_node] > 0) {
        std::iota(block.begin(), block.end(), start);
        seconds = inflow_seconds(in, sources[i], s, block);
      }
      const double tie = 1e-9 * std::max(seconds, best_seconds);
      const bool better =
          best < 0 || split < best_split ||
          (split == best_split && (seconds < best_seconds - tie ||
                                   (seconds <= best_seconds + tie && in_node && !best_in_node)));
      if (better) {
        best = start;
        best_split = split;
        best_seconds = seconds;
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
      best_split =
          split_groups(s.devices, s.tp, per_node, [&s](int k) { return s.device_ids[static_cast<size_t>(k)]; });
      best_seconds = inflow_seconds(in, sources[i], s, s.device_ids);
    }
    for (int d : s.device_ids) free[d] = 0;
    placement.split_groups += best_split;
    placement.inflow_seconds = std::max(placement.inflow_seconds, best_seconds);
  }
  return placement;
}

}  // namespace

void place_waves(const MultitaskInputs& in, const MetaGraph& g, std::vector<PlannedWave>& waves) {
  const int devices = device_count(in);
  const int per_node = std::max(1, in.cluster->device.devices_per_node);
  const int nodes = (devices + per_node - 1) / per_node;
  std::vector<const PlacedSlice*> last(g.ops.size(), nullptr);
  for (PlannedWave& wave : waves) {
    const size_t n = wave.slices.size();
    std::vector<SliceInputs> sources(n);
    std::vector<double> remote(n, 0);
    for (size_t i = 0; i < n; ++i) {
      const PlacedSlice& s = wave.slices[i];
      sources[i] = inputs_of(in, g, last, s);
      if (sources[i].empty()) continue;
      // A block on a node past the cluster's: every part of an exchange into it crosses the network.
      std::vector<int> far(static_cast<size_t>(s.devices));
      std::iota(far.begin(), far.end(), nodes * per_node);
      remote[i] = inflow_seconds(in, sources[i], s, far);
    }
    // The slices that would lose most away from their inputs first, and the largest first; kept where the wave
    // places better (a wide slice with no inputs, left last, may find no block of consecutive devices free).
    std::vector<size_t> by_size(n);
    std::iota(by_size.begin(), by_size.end(), size_t{0});
    std::stable_sort(by_size.begin(), by_size.end(),
                     [&](size_t a, size_t b) { return wave.slices[a].devices > wave.slices[b].devices; });
    std::vector<size_t> by_loss = by_size;
    std::stable_sort(by_loss.begin(), by_loss.end(), [&](size_t a, size_t b) { return remote[a] > remote[b]; });
    PlannedWave by_size_wave = wave;
    const WavePlacement loss_first = place_wave(in, sources, remote, by_loss, wave);
    const WavePlacement size_first = place_wave(in, sources, remote, by_size, by_size_wave);
    if (size_first < loss_first) wave = std::move(by_size_wave);
    for (const PlacedSlice& s : wave.slices) last[s.metaop] = &s;
  }
}

namespace {

// One wave's compute on its busiest device: all of it, and the part its backward wave takes (recomputation and
// two thirds of the rest).
struct WaveCompute {
  double seconds = 0;
  double backward_seconds = 0;
};

// What of the groups' all-reduces outlasts the backward waves: each group starts once its backward wave is over
// and its devices' earlier all-reduces are done. `exposed_waves` (when given) gets the ready waves of the groups
// that end after the backward waves, each with the latest end of its groups.
double exposed_gradient_sync(const MultitaskInputs& in, const std::vector<WaveCompute>& wave_compute,
                             const std::vector<SyncGroup>& groups,
                             std::map<int, double>* exposed_waves = nullptr) {
  const size_t waves = wave_compute.size();
  double forward = 0;
  for (const WaveCompute& c : wave_compute) forward += c.seconds - c.backward_seconds;
  // backward_end[w]: when the backward of forward wave w is over.
  std::vector<double> backward_end(waves, forward);
  double now = forward;
  for (size_t k = waves; k-- > 0;) {
    now += wave_compute[k].backward_seconds;
    backward_end[k] = now;
  }
  std::vector<double> link_free(static_cast<size_t>(device_count(in)), 0);
  double last = now;
  for (const SyncGroup& group : groups) {
    if (group.seconds <= 0) continue;
    double start = waves > 0 ? backward_end[static_cast<size_t>(group.ready_wave)] : 0;
    for (int d : group.device_ids) start = std::max(start, link_free[d]);
    for (int d : group.device_ids) link_free[d] = start + group.seconds;
    last = std::max(last, start + group.seconds);
    if (exposed_waves && start + group.seconds > now) {
      double& end = (*exposed_waves)[group.ready_wave];
      end = std::max(end, start + group.seconds);
    }
  }
  return last - now;
}

// Activations into each wave from where they were made, forward and their gradients back (the same parts, the
// roles of sender and receiver swapped): at each wave's start, the slowest of its incoming exchanges.
double transfers(const MultitaskInputs& in, const MetaGraph& g, const std::vector<PlannedWave>& waves) {
  std::vector<const PlacedSlice*> last(g.ops.size(), nullptr);
  double total = 0;
  for (const PlannedWave& w : waves) {
    double wave_in = 0;
    for (const PlacedSlice& s : w.slices) {
      wave_in = std::max(wave_in, 2 * inflow_seconds(in, inputs_of(in, g, last, s), s, s.device_ids));
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
  // (component, layer) → the first forward wave that runs it, the shards every slice's split refines (the gcd of
  // their tensor parallelism), the devices.
  struct Holder {
    int first_wave = 0;
    int tp = 0;
    std::vector<int> ids;
  };
  std::map<std::pair<int, int>, Holder> holders;
  for (size_t w = 0; w < waves.size(); ++w) {
    for (const PlacedSlice& s : waves[w].slices) {
      const MetaOp& op = g.ops[s.metaop];
      for (int64_t l = 0; l < s.layers; ++l) {
        auto [it, added] = holders.try_emplace({op.component, static_cast<int>(op.first_layer + s.first_layer + l)},
                                               Holder{static_cast<int>(w), s.tp, {}});
        Holder& h = it->second;
        h.tp = std::gcd(h.tp, s.tp);
        merge_sorted_ids(h.ids, s.device_ids);
      }
    }
  }
  // Keyed by readiness (later forward waves complete first), then shards, then devices.
  std::map<std::tuple<int, int, std::vector<int>>, SyncGroup> pools;
  for (auto& [key, h] : holders) {
    const ComponentSpec& c = model.components[key.first];
    if (!c.trainable) continue;
    // Slices on overlapping device sets can leave a union that is not whole copies of their split (two slices of
    // 600 devices split 6 ways, 304 of them shared: 896): the shards coarsen until the group holds whole copies.
    h.tp = std::gcd(h.tp, static_cast<int>(h.ids.size()));
    // A device holding the layer in a slice split more ways than h.tp holds part of the group's shard; the
    // estimate all-reduces whole shards (an upper bound on the bytes).
    SyncGroup& group = pools[{-h.first_wave, h.tp, h.ids}];
    group.ready_wave = h.first_wave;
    group.tp = h.tp;
    group.device_ids = h.ids;
    group.layers.push_back(key);
    group.gradient_bytes += element * static_cast<double>(c.layers[key.second].parameters()) / h.tp;
  }
  // Buckets: each (shards, devices) fills one while the next group ready on them fits, as DDP fills its buckets in
  // the order backward completes the gradients; a bucket is ready when its last group is.
  std::map<std::pair<int, std::vector<int>>, size_t> open;  // → index in `buckets`
  std::vector<SyncGroup> buckets;
  for (auto& [key, group] : pools) {
    const auto on = std::make_pair(group.tp, group.device_ids);
    const auto it = open.find(on);
    if (it != open.end() && in.bucket_bytes > 0 &&
        buckets[it->second].gradient_bytes + group.gradient_bytes <= in.bucket_bytes) {
      SyncGroup& bucket = buckets[it->second];
      bucket.ready_wave = group.ready_wave;
      bucket.layers.insert(bucket.layers.end(), group.layers.begin(), group.layers.end());
      bucket.gradient_bytes += group.gradient_bytes;
      continue;
    }
    open[on] = buckets.size();
    buckets.push_back(std::move(group));
  }
  std::stable_sort(buckets.begin(), buckets.end(), [](const SyncGroup& a, const SyncGroup& b) {
    return std::tie(b.ready_wave, a.tp, a.device_ids) < std::tie(a.ready_wave, b.tp, b.device_ids);
  });
  std::vector<SyncGroup> groups;
  for (SyncGroup& group : buckets) {
    const std::vector<int>& ids = group.device_ids;
    const int64_t copies = static_cast<int64_t>(ids.size()) / group.tp;
    if (copies > 1 && group.gradient_bytes > 0) {
      group.seconds = collective_seconds(CollectiveOp::kAllReduce, group.gradient_bytes, *in.cluster, in.efficiency,
                                         device_group_shape(ids, group.tp, per_node));
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

namespace {

// estimate_waves() with `waves`' sync groups already made, and their transfers when known (`transfer_seconds`
// at least 0).
BaselineTimes estimate_with(const MultitaskInputs& in, const MetaGraph& g, const std::vector<PlannedWave>& waves,
                            const std::vector<SyncGroup>& groups,
                            std::map<int, double>* exposed_waves = nullptr, double transfer_seconds = -1) {
  BaselineTimes t;
  std::vector<WaveCompute> wave_compute;
  std::vector<double> busy(static_cast<size_t>(device_count(in)), 0), modelled(busy.size(), 0),
      recompute(busy.size(), 0);
  for (const PlannedWave& w : waves) {
    WaveCompute longest;
    double longest_modelled = 0;
    for (const PlacedSlice& s : w.slices) {
      for (int d : s.device_ids) {
        busy.at(d) += s.seconds - s.gradient_sync_seconds;
        recompute.at(d) += s.recompute_seconds;
        if (busy[d] > longest.seconds) {
          longest.seconds = busy[d];
          longest.backward_seconds = recompute[d] + 2 * (busy[d] - recompute[d]) / 3;
        }
        longest_modelled = std::max(longest_modelled, modelled.at(d) += s.seconds);
      }
    }
    for (const PlacedSlice& s : w.slices) {
      for (int d : s.device_ids) busy[d] = modelled[d] = recompute[d] = 0;
    }
    wave_compute.push_back(longest);
    t.compute_seconds += longest.seconds;
    t.makespan_seconds += longest_modelled;
  }
  t.transfer_seconds = transfer_seconds >= 0 ? transfer_seconds : transfers(in, g, waves);
  t.gradient_sync_seconds = exposed_gradient_sync(in, wave_compute, groups, exposed_waves);
  t.iteration_seconds = t.compute_seconds + t.transfer_seconds + t.gradient_sync_seconds;
  return t;
}

// `waves` with wave `w` cut into `parts` waves on the same devices; empty when it holds two slices of one MetaOp,
// or a MetaOp and one of its inputs (a task-greedy task's chain on its devices): part j takes the j-th share of
// every slice's layers, so a consumer's first share would run before its input's last.
std::vector<PlannedWave> cut_wave(const MetaGraph& g, const std::vector<PlannedWave>& waves, size_t w, int parts) {
  const PlannedWave& whole = waves[w];
  std::vector<int> metaops;
  for (const PlacedSlice& s : whole.slices) metaops.push_back(s.metaop);
  std::sort(metaops.begin(), metaops.end());
  if (std::adjacent_find(metaops.begin(), metaops.end()) != metaops.end()) return {};
  for (int m : metaops) {
    for (int input : g.ops[m].inputs) {
      if (std::binary_search(metaops.begin(), metaops.end(), input)) return {};
    }
  }
  std::vector<PlannedWave> cut(static_cast<size_t>(parts));
  for (PlannedWave& c : cut) c.level = whole.level;
  for (const PlacedSlice& s : whole.slices) {
    const int64_t n = std::min<int64_t>(parts, s.layers);
    for (int64_t j = 0; j < n; ++j) {
      PlacedSlice part = s;
      part.first_layer = s.first_layer + s.layers * j / n;
      part.layers = s.first_layer + s.layers * (j + 1) / n - part.first_layer;
      const double share = static_cast<double>(part.layers) / static_cast<double>(s.layers);
      part.seconds = s.seconds * share;
      part.gradient_sync_seconds = s.gradient_sync_seconds * share;
      part.recompute_seconds = s.recompute_seconds * share;
      cut[static_cast<size_t>(j)].slices.push_back(std::move(part));
    }
  }
  std::vector<PlannedWave> out(waves.begin(), waves.begin() + static_cast<std::ptrdiff_t>(w));
  for (PlannedWave& c : cut) {
    if (c.slices.empty()) continue;
    // Each part as long as its busiest device.
    std::map<int, double> busy;
    for (const PlacedSlice& s : c.slices) {
      for (int d : s.device_ids) c.seconds = std::max(c.seconds, busy[d] += s.seconds);
    }
    out.push_back(std::move(c));
  }
  out.insert(out.end(), waves.begin() + static_cast<std::ptrdiff_t>(w) + 1, waves.end());
  double now = 0;
  for (PlannedWave& wave : out) {
    wave.start_seconds = now;
    now += wave.seconds;
  }
  return out;
}

}  // namespace

std::vector<PlannedWave> cut_for_gradient_overlap(const MultitaskInputs& in, const MetaGraph& graph,
                                                  std::vector<PlannedWave> waves) {
  constexpr double kLeastGain = 1e-3;
  constexpr size_t kLatestWaves = 4;
  constexpr size_t kLongestWaves = 4;
  constexpr int kRounds = 4;
  // Worth cutting: the waves whose gradients' all-reduces end last after the backward waves, and the longest
  // waves, whose all-reduces the chain of each device's all-reduces may wait on.
  std::map<int, double> exposed;
  // A cut wave's parts run on its devices, so what the waves move stays the same.
  const double moved = transfers(in, graph, waves);
  double best = estimate_with(in, graph, waves, sync_groups_of(in, graph, waves), &exposed, moved).iteration_seconds;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<PlannedWave> best_cut;
    std::map<int, double> best_exposed;
    std::vector<std::pair<double, int>> by_end;
    for (const auto& [w, end] : exposed) by_end.emplace_back(-end, w);
    std::sort(by_end.begin(), by_end.end());
    std::set<int> candidates;
    for (size_t k = 0; k < std::min(kLatestWaves, by_end.size()); ++k) candidates.insert(by_end[k].second);
    std::vector<int> by_length(waves.size());
    std::iota(by_length.begin(), by_length.end(), 0);
    std::stable_sort(by_length.begin(), by_length.end(),
                     [&](int a, int b) { return waves[a].seconds > waves[b].seconds; });
    candidates.insert(by_length.begin(), by_length.begin() + std::min(kLongestWaves, by_length.size()));
    for (int w : candidates) {
      for (int parts : {2, 3, 4, 6}) {
        std::vector<PlannedWave> cut = cut_wave(graph, waves, static_cast<size_t>(w), parts);
        if (cut.size() <= waves.size()) continue;  // nothing cut
        std::map<int, double> cut_exposed;
        const double t =
            estimate_with(in, graph, cut, sync_groups_of(in, graph, cut), &cut_exposed, moved).iteration_seconds;
        if (t < best * (1 - kLeastGain)) {
          best = t;
          best_cut = std::move(cut);
          best_exposed = std::move(cut_exposed);
        }
      }
    }
    if (best_cut.empty()) break;
    waves = std::move(best_cut);
    exposed = std::move(best_exposed);
  }
  return waves;
}

MultitaskPlan plan_multitask(const MultitaskInputs& in) {
  check_inputs(in);
  const auto started = std::chrono::steady_clock::now();
  MultitaskPlan plan;
  plan.graph = contract(*in.graph);
  plan.curves = curves_of(in, plan.graph);
  const int devices = device_count(in);
  const std::vector<bool> all(plan.graph.ops.size(), true);
  // The curves charge each operator its gradients' all-reduce in full, while the runtime overlaps it with the
  // later backward waves: the waves are kept only where the whole estimate (compute, transfers, the exposed
  // all-reduces) says they beat every level's MetaOps in turn, at their fastest or their widest counts.
  BaselineTimes estimate;
  for (LevelChoice choice :
       {LevelChoice::kFasterOfWavesAndSerial, LevelChoice::kSerialFastest, LevelChoice::kSerialWidest}) {
    MultitaskPlan candidate;
    candidate.makespan_seconds = plan_levels(plan.graph, plan.curves, devices, all, 0.0, candidate, choice);
    place_waves(in, plan.graph, candidate.waves);
    std::vector<SyncGroup> groups = sync_groups_of(in, plan.graph, candidate.waves);
    const BaselineTimes e = estimate_with(in, plan.graph, candidate.waves, groups);
    if (choice == LevelChoice::kFasterOfWavesAndSerial) plan.wavefront_makespan_seconds = candidate.makespan_seconds;
    const char* name = choice == LevelChoice::kFasterOfWavesAndSerial ? "waves"
                       : choice == LevelChoice::kSerialFastest    ? "fastest"
                                                                   : "widest";
    if (choice == LevelChoice::kFasterOfWavesAndSerial || e.iteration_seconds < estimate.iteration_seconds * (1 - 1e-9)) {
      if (choice != LevelChoice::kFasterOfWavesAndSerial) {
        plan.alternatives.push_back({plan.arrangement, std::move(plan.levels), std::move(plan.waves)});
      }
      estimate = e;
      plan.arrangement = name;
      plan.levels = std::move(candidate.levels);
      plan.waves = std::move(candidate.waves);
      plan.sync_groups = std::move(groups);
      plan.makespan_seconds = candidate.makespan_seconds;
      plan.lower_bound_seconds = candidate.lower_bound_seconds;
    } else {
      plan.alternatives.push_back({name, std::move(candidate.levels), std::move(candidate.waves)});
    }
  }
  // The kept arrangement's long waves cut where their gradients' all-reduces would wait (cut_for_gradient_overlap).
  plan.waves = cut_for_gradient_overlap(in, plan.graph, std::move(plan.waves));
  plan.sync_groups = sync_groups_of(in, plan.graph, plan.waves);
  estimate = estimate_with(in, plan.graph, plan.waves, plan.sync_groups);
  plan.compute_seconds = estimate.compute_seconds;
  plan.gradient_sync_seconds = estimate.gradient_sync_seconds;
  plan.transfer_seconds = estimate.transfer_seconds;
  plan.iteration_seconds = estimate.iteration_seconds;
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
  s.gradient_sync_seconds = static_cast<double>(s.layers) * point.gradient_sync_seconds;
  s.dp = point.dp;
  s.tp = point.tp;
  for (int d = first_device; d < first_device + point.devices; ++d) s.device_ids.push_back(d);
  return s;
}

}  // namespace

BaselineTimes estimate_waves(const MultitaskInputs& in, const MetaGraph& g, const std::vector<PlannedWave>& waves) {
  return estimate_with(in, g, waves, sync_groups_of(in, g, waves));
}

BaselineTimes estimate_waves(const MultitaskInputs& in, const MetaGraph& g, const std::vector<PlannedWave>& waves,
                             const std::vector<Recompute>& layer_recompute) {
  check_inputs(in);
  const ModelSpec& model = in.graph->model;
  if (static_cast<int64_t>(layer_recompute.size()) != flattened_layers(model)) {
    throw InputError(fmt::format("{} recomputation modes for the model's {} layers", layer_recompute.size(),
                                 flattened_layers(model)));
  }
  std::vector<int64_t> first_of(model.components.size() + 1, 0);  // each component's first flattened layer
  for (size_t c = 0; c < model.components.size(); ++c) {
    first_of[c + 1] = first_of[c] + static_cast<int64_t>(model.components[c].layers.size());
  }
  std::vector<PlannedWave> recomputing = waves;
  for (PlannedWave& w : recomputing) {
    for (PlacedSlice& s : w.slices) {
      const MetaOp& op = g.ops.at(static_cast<size_t>(s.metaop));
      if (!model.components[op.component].trainable && !op.input_gradient) continue;  // no backward to recompute for
      // A MetaOp's operators are one layer repeated: its recomputation in each mode, priced once.
      LayerWork work = metaop_work(op, s.dp, s.tp, model.components[op.component].trainable, in.dtype);
      work.pass = Pass::kRecompute;
      std::map<Recompute, double> seconds_of;
      for (int64_t l = op.first_layer + s.first_layer; l < op.first_layer + s.first_layer + s.layers; ++l) {
        const Recompute r = layer_recompute[static_cast<size_t>(first_of[op.component] + l)];
        if (r == Recompute::kNone) continue;
        auto [it, added] = seconds_of.emplace(r, 0.0);
        if (added) {
          work.recompute = r;
          it->second = in.cost->layer_cost(work).seconds * static_cast<double>(op.micro_batches);
        }
        s.seconds += it->second;
        s.recompute_seconds += it->second;
      }
    }
  }
  const BaselineTimes without = estimate_waves(in, g, waves);
  BaselineTimes with = estimate_waves(in, g, recomputing);
  with.makespan_seconds = without.makespan_seconds;
  with.recompute_seconds = with.compute_seconds - without.compute_seconds;
  return with;
}

std::vector<PlannedWave> sequential_waves(const MultitaskInputs& in, const MultitaskPlan& plan) {
  check_inputs(in);
  std::vector<PlannedWave> waves;
  double now = 0;
  for (size_t m = 0; m < plan.graph.ops.size(); ++m) {
    PlannedWave w;
    w.level = plan.graph.ops[m].level;
    w.start_seconds = now;
    w.slices.push_back(whole_metaop(plan, static_cast<int>(m), plan.curves[m].widest(), 0));
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
  place_waves(in, g, alone.waves);
  return alone.waves;
}

std::vector<PlannedWave> task_greedy_waves(const MultitaskInputs& in, const MultitaskPlan& plan) {
  check_inputs(in);
  const MetaGraph& g = plan.graph;
  const int devices = device_count(in);
  const int tasks = static_cast<int>(in.graph->tasks.size());
  // A task's MetaOps all run on its devices: the most of them valid for every one (1 always is), so that nothing
  // moves between them. Each task's counts valid for all its MetaOps, and its seconds on each, are worked out once:
  // the greedy below asks for them at every count it tries (on thousands of devices, many times each).
  std::vector<std::vector<std::pair<int, double>>> valid(tasks);  // (count, the task's seconds), increasing
  for (int t = 0; t < tasks; ++t) {
    std::vector<size_t> ops;
    for (size_t m = 0; m < g.ops.size(); ++m) {
      if (g.ops[m].task == t) ops.push_back(m);
    }
    for (int c = 1; c <= devices; ++c) {
      double s = 0;
      bool all = true;
      for (size_t m : ops) {
        const CurvePoint* p = plan.curves[m].measured_at(c);
        if (!p) {
          all = false;
          break;
        }
        s += static_cast<double>(g.ops[m].layers) * p->seconds;
      }
      if (all || c == 1) valid[t].emplace_back(c, s);
    }
  }
  // The task's most devices up to n valid for all its MetaOps, with its seconds there (1 device's when none is).
  auto common = [&](int t, int n) -> const std::pair<int, double>& {
    const auto& v = valid[t];
    const auto it = std::upper_bound(v.begin(), v.end(), n, [](int x, const auto& e) { return x < e.first; });
    return it == v.begin() ? v.front() : *std::prev(it);
  };
  auto common_count = [&](int t, int n) { return common(t, n).first; };
  auto task_seconds = [&](int t, int n) { return common(t, n).second; };
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
        w.slices.push_back(whole_metaop(plan, static_cast<int>(m), *plan.curves[m].measured_at(c), first));
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
