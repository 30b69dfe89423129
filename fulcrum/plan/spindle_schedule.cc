#include "fulcrum/plan/spindle_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "fulcrum/core/error.h"
#include "fulcrum/sched/pipeline_schedules.h"

namespace fulcrum {
namespace {

Instruction op(OpKind kind, int slice) {
  Instruction in;
  in.op = kind;
  in.stage = slice;
  in.micro_batch = 0;
  return in;
}

Instruction transfer(OpKind kind, Payload payload, int slice, int peer) {
  Instruction in = op(kind, slice);
  in.payload = payload;
  in.peer_stage = peer;
  return in;
}

Instruction boundary(int wave) {
  Instruction in;
  in.op = OpKind::kWaveBoundary;
  in.wave = wave;
  return in;
}

}  // namespace

Schedule waves_schedule(const MultitaskInputs& in, const MetaGraph& graph, const std::vector<PlannedWave>& waves,
                        Recompute recompute) {
  if (!in.graph) throw InputError("a multitask schedule needs its task graph and cluster");
  return waves_schedule(in, graph, waves, block_recompute(in.graph->model, recompute));
}

Schedule waves_schedule(const MultitaskInputs& in, const MetaGraph& graph, const std::vector<PlannedWave>& waves,
                        std::vector<Recompute> layer_recompute) {
  if (!in.graph || !in.cluster) throw InputError("a multitask schedule needs its task graph and cluster");
  if (static_cast<int64_t>(layer_recompute.size()) != flattened_layers(in.graph->model)) {
    throw InputError(fmt::format("{} recomputation modes for the model's {} layers", layer_recompute.size(),
                                 flattened_layers(in.graph->model)));
  }
  if (waves.empty()) throw InputError("a multitask schedule needs at least one wave");
  const int devices = static_cast<int>(in.cluster->devices);
  Schedule s;
  s.kind = PipelineKind::kCustom;
  s.layout.pp = devices;
  // Gradients all-reduced in full; the optimizer state as the inputs say (ZeRO-0 or ZeRO-1).
  if (in.state_sharding != StateSharding::kZero0 && in.state_sharding != StateSharding::kZero1) {
    throw InputError("a multitask schedule all-reduces gradients in full: its optimizer state is ZeRO-0 or ZeRO-1");
  }
  s.layout.state_sharding = in.state_sharding;
  s.micro_batches = 1;
  s.model_layers = flattened_layers(in.graph->model);
  s.recompute = std::move(layer_recompute);
  MultitaskSection& t = s.tasks;
  t.waves = static_cast<int32_t>(waves.size());
  // Slices in wave order; each one's producers (the slices whose output it takes).
  std::vector<int> last_of_op(graph.ops.size(), -1);
  std::vector<int64_t> layers_done(graph.ops.size(), 0);  // of each MetaOp, by the slices so far
  std::vector<std::vector<int>> producers, consumers;
  std::vector<std::vector<int>> slices_of_wave(waves.size());
  for (size_t w = 0; w < waves.size(); ++w) {
    for (const PlacedSlice& p : waves[w].slices) {
      const MetaOp& m = graph.ops[p.metaop];
      TaskSlice sl;
      sl.task = m.task;
      sl.component = m.component;
      sl.first_layer = static_cast<int32_t>(m.first_layer + p.first_layer);
      sl.layers = static_cast<int32_t>(p.layers);
      sl.sequences = m.sequences;
      sl.tokens = m.tokens;
      sl.micro_batches = static_cast<int32_t>(m.micro_batches);
      sl.dp = p.dp;
      sl.tp = p.tp;
      sl.wave = static_cast<int32_t>(w);
      sl.devices.assign(p.device_ids.begin(), p.device_ids.end());
      sl.input_gradient = m.input_gradient || in.graph->model.components[m.component].trainable;
      const int index = static_cast<int>(t.slices.size());
      std::vector<int> from;
      if (last_of_op[p.metaop] >= 0) {
        if (layers_done[p.metaop] != p.first_layer) {
          throw InternalError(fmt::format("MetaOp {}'s layers from {} are placed after its layers up to {}", p.metaop,
                                          p.first_layer, layers_done[p.metaop]));
        }
        from.push_back(last_of_op[p.metaop]);
      } else {
        for (int input : m.inputs) {
          // Its input whole: a consumer of a part would take activations of the wrong layer.
          if (last_of_op[input] < 0 || layers_done[input] != graph.ops[input].layers) {
            throw InternalError(fmt::format("MetaOp {} is placed before its input MetaOp {} is done", p.metaop, input));
          }
          from.push_back(last_of_op[input]);
        }
      }
      layers_done[p.metaop] = p.first_layer + p.layers;
      producers.push_back(from);
      consumers.emplace_back();
      for (int f : from) consumers[f].push_back(index);
      last_of_op[p.metaop] = index;
      slices_of_wave[w].push_back(index);
      t.slices.push_back(std::move(sl));
    }
  }
  // In the order they become ready, which every device issues them in.
  std::vector<int> ready_wave;
  for (const SyncGroup& g : sync_groups_of(in, graph, waves)) {
    if (g.device_ids.size() / g.tp < 2) continue;  // one copy of each shard: nothing to synchronise
    SyncGroupSpec spec;
    spec.devices.assign(g.device_ids.begin(), g.device_ids.end());
    spec.tp = g.tp;
    for (const auto& [component, layer] : g.layers) spec.layers.emplace_back(component, layer);
    t.sync_groups.push_back(std::move(spec));
    ready_wave.push_back(g.ready_wave);
  }
  // Rows move where the devices change or, on the same devices, the split of the rows between DP and TP does.
  auto moves = [&](int a, int b) {
    const TaskSlice& x = t.slices[a];
    const TaskSlice& y = t.slices[b];
    return x.devices != y.devices || x.dp != y.dp || x.tp != y.tp;
  };
  auto on = [&](int slice, int device) {
    const auto& d = t.slices[slice].devices;
    return std::binary_search(d.begin(), d.end(), device);
  };
  const int wave_count = t.waves;
  s.programs.resize(devices);
  for (int d = 0; d < devices; ++d) {
    auto& program = s.programs[d].instructions;
    for (int w = 0; w < wave_count; ++w) {
      for (int slice : slices_of_wave[w]) {
        if (!on(slice, d)) continue;
        for (int p : producers[slice]) {
          if (moves(p, slice)) program.push_back(transfer(OpKind::kRecv, Payload::kActivation, slice, p));
        }
        program.push_back(op(OpKind::kForward, slice));
        for (int c : consumers[slice]) {
          if (moves(slice, c)) program.push_back(transfer(OpKind::kSend, Payload::kActivation, slice, c));
        }
      }
      program.push_back(boundary(w));
    }
    for (int w = wave_count - 1; w >= 0; --w) {
      const auto& in_wave = slices_of_wave[w];
      for (auto it = in_wave.rbegin(); it != in_wave.rend(); ++it) {
        const int slice = *it;
        if (!on(slice, d)) continue;
        // Gradients flow back only into slices with a backward: a frozen slice with nothing trained upstream
        // takes none.
        const bool has_backward = t.slices[slice].input_gradient;
        for (int c : consumers[slice]) {
          if (has_backward && moves(slice, c)) {
            program.push_back(transfer(OpKind::kRecv, Payload::kGradient, slice, c));
          }
        }
        program.push_back(op(OpKind::kBackward, slice));
        for (int p : producers[slice]) {
          if (t.slices[p].input_gradient && moves(p, slice)) {
            program.push_back(transfer(OpKind::kSend, Payload::kGradient, slice, p));
          }
        }
      }
      program.push_back(boundary(2 * wave_count - 1 - w));
      // The gradients this backward wave completed, all-reduced while the next backward waves run.
      for (size_t g = 0; g < t.sync_groups.size(); ++g) {
        const auto& ids = t.sync_groups[g].devices;
        if (ready_wave[g] != w || !std::binary_search(ids.begin(), ids.end(), d)) continue;
        Instruction c;
        c.op = OpKind::kCollective;
        c.group = DeviceGroup::kSync;
        c.collective = CollectiveKind::kAllReduce;
        c.tensor = CollectiveTensor::kGradients;
        c.stage = static_cast<int32_t>(g);
        program.push_back(c);
      }
    }
  }
  return s;
}

}  // namespace fulcrum
