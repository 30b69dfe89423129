#include "cli/loaded_multitask_schedule.h"

#include <fmt/format.h>

#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "fulcrum/core/error.h"

namespace fulcrum {
namespace {

// An operator as the task graph knows it: (task, component, layer, sequences a micro-batch, micro-batches,
// tokens a sequence). Two nodes of a task running one component on the same inputs share a key.
using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t>;

Key key_of(const MetaOp& op, int64_t layer) {
  return {op.task, op.component, layer, op.sequences, op.micro_batches, op.tokens};
}
Key key_of(const TaskSlice& sl, int64_t layer) {
  return {sl.task, sl.component, layer, sl.sequences, sl.micro_batches, sl.tokens};
}

bool passes_gradient_back(const TaskGraph& graph, const MetaOp& op) {
  return op.input_gradient || graph.model.components[op.component].trainable;
}

// Where each slice's forward and backward stand in each device's program, and the transfers each device receives:
// (device, slice) → instruction index; (device, receiving slice, sending slice).
struct ProgramIndex {
  std::map<std::pair<int, int>, size_t> forward, backward;
  std::set<std::tuple<int, int, int>> activations_in, gradients_in;

  explicit ProgramIndex(const Schedule& s) {
    for (size_t d = 0; d < s.programs.size(); ++d) {
      const std::vector<Instruction>& program = s.programs[d].instructions;
      for (size_t k = 0; k < program.size(); ++k) {
        const Instruction& in = program[k];
        const int device = static_cast<int>(d);
        if (in.op == OpKind::kForward) forward.emplace(std::pair{device, in.stage}, k);
        if (in.op == OpKind::kBackward) backward.emplace(std::pair{device, in.stage}, k);
        if (in.op == OpKind::kRecv) {
          (in.payload == Payload::kActivation ? activations_in : gradients_in)
              .emplace(device, in.stage, in.peer_stage);
        }
      }
    }
  }
};

}  // namespace

LoadedMultitaskSchedule::LoadedMultitaskSchedule(const Schedule& schedule, const TaskGraph& graph, std::string file)
    : schedule_(schedule), graph_(graph), file_(std::move(file)), metaops_(contract(graph)) {}

void LoadedMultitaskSchedule::check_coverage() const {
  const ModelSpec& model = graph_.model;
  std::map<Key, int> left;              // the nodes running each operator that no slice has run yet
  std::map<Key, int> gradients_wanted;  // of them, those whose backward passes their input's gradient back
  for (const MetaOp& op : metaops_.ops) {
    for (int64_t l = op.first_layer; l < int64_t{op.first_layer} + op.layers; ++l) {
      ++left[key_of(op, l)];
      gradients_wanted[key_of(op, l)] += passes_gradient_back(graph_, op);
    }
  }
  std::map<Key, int> gradients_given;
  std::map<Key, int> slice_of;  // the last slice running each operator
  const auto& slices = schedule_.tasks.slices;
  for (size_t i = 0; i < slices.size(); ++i) {
    const TaskSlice& sl = slices[i];
    if (sl.task < 0 || sl.task >= static_cast<int>(graph_.tasks.size())) {
      throw InputError(fmt::format("{}: slice {} runs task {}, but '{}' has {} tasks", file_, i, sl.task, graph_.name,
                                   graph_.tasks.size()));
    }
    if (sl.component < 0 || sl.component >= static_cast<int>(model.components.size()) || sl.first_layer < 0 ||
        sl.layers < 1 ||
        int64_t{sl.first_layer} + sl.layers > static_cast<int64_t>(model.components[sl.component].layers.size())) {
      throw InputError(fmt::format("{}: slice {} runs layers [{}, {}) of component {}, which model '{}' does not have",
                                   file_, i, sl.first_layer, int64_t{sl.first_layer} + sl.layers, sl.component,
                                   model.name));
    }
    for (int64_t l = sl.first_layer; l < int64_t{sl.first_layer} + sl.layers; ++l) {
      const Key key = key_of(sl, l);
      const auto it = left.find(key);
      if (it == left.end() || it->second == 0) {
        throw InputError(fmt::format("{}: slice {} runs layer {} of '{}' in {} micro-batch{} of {} sequences of {} "
                                     "tokens, which task '{}' does not run{}",
                                     file_, i, l, model.components[sl.component].name, sl.micro_batches,
                                     sl.micro_batches == 1 ? "" : "es", sl.sequences, sl.tokens,
                                     graph_.tasks[sl.task].name, it == left.end() ? "" : " again"));
      }
      --it->second;
      gradients_given[key] += sl.input_gradient;
      slice_of[key] = static_cast<int>(i);
    }
  }
  for (const auto& [key, count] : left) {
    if (count > 0) {
      throw InputError(fmt::format("{}: no slice runs layer {} of '{}' for task '{}'", file_, std::get<2>(key),
                                   model.components[std::get<1>(key)].name, graph_.tasks[std::get<0>(key)].name));
    }
  }
  // A slice's input gradient as its task graph has it: a stale or edited one would drop or add backward work.
  for (const auto& [key, wanted] : gradients_wanted) {
    const int given = gradients_given[key];
    if (given == wanted) continue;
    const int i = slice_of.at(key);
    const TaskSlice& sl = slices[i];
    int nodes = 0;
    for (const MetaOp& op : metaops_.ops) {
      nodes += key_of(op, std::get<2>(key)) == key && op.first_layer <= std::get<2>(key) &&
               std::get<2>(key) < int64_t{op.first_layer} + op.layers;
    }
    if (nodes == 1) {
      throw InputError(fmt::format("{}: slice {} says its backward {} its input's gradient, but in '{}' {}", file_, i,
                                   sl.input_gradient ? "passes back" : "does not pass back", graph_.name,
                                   sl.input_gradient ? "no trained node feeds it and it trains nothing"
                                                     : "it trains or a trained node feeds it"));
    }
    throw InputError(fmt::format("{}: {} of the slices running layer {} of '{}' for task '{}' pass its input's "
                                 "gradient back, but {} of the task's {} nodes running it so do in '{}'",
                                 file_, given, std::get<2>(key), model.components[sl.component].name,
                                 graph_.tasks[sl.task].name, wanted, nodes, graph_.name));
  }
}

void LoadedMultitaskSchedule::check_dataflow() const {
  const ModelSpec& model = graph_.model;
  const auto& slices = schedule_.tasks.slices;
  std::map<Key, int> nodes_running;
  for (const MetaOp& op : metaops_.ops) {
    for (int64_t l = op.first_layer; l < int64_t{op.first_layer} + op.layers; ++l) ++nodes_running[key_of(op, l)];
  }
  std::map<Key, int> slice_of;
  std::set<int> ambiguous;  // slices running an operator two nodes of its task run alike
  for (size_t i = 0; i < slices.size(); ++i) {
    const TaskSlice& sl = slices[i];
    for (int64_t l = sl.first_layer; l < int64_t{sl.first_layer} + sl.layers; ++l) {
      slice_of[key_of(sl, l)] = static_cast<int>(i);
      if (nodes_running.at(key_of(sl, l)) != 1) ambiguous.insert(static_cast<int>(i));
    }
  }
  const ProgramIndex index(schedule_);
  std::set<std::pair<int, int>> feeds;  // (consumer, producer) slices
  auto name = [&](const Key& k) {
    return fmt::format("layer {} of '{}' for task '{}'", std::get<2>(k), model.components[std::get<1>(k)].name,
                       graph_.tasks[std::get<0>(k)].name);
  };
  auto check_edge = [&](const Key& from, const Key& to) {
    if (nodes_running.at(from) != 1 || nodes_running.at(to) != 1) return;
    const int a = slice_of.at(from), b = slice_of.at(to);
    if (a == b) return;
    feeds.emplace(b, a);
    const TaskSlice &x = slices[a], &y = slices[b];
    // Order: a later wave, or the same wave on the same devices, after it in every forward, before it in every
    // backward (the backward runs the chain in reverse).
    bool after = x.wave < y.wave;
    if (x.wave == y.wave && x.devices == y.devices) {
      after = true;
      for (int d : y.devices) {
        after = after && index.forward.at({d, a}) < index.forward.at({d, b}) &&
                index.backward.at({d, b}) < index.backward.at({d, a});
      }
    }
    if (!after) {
      throw InputError(fmt::format("{}: slice {} runs {} in wave {}, before its input, layer {} of '{}' in slice {} "
                                   "(wave {})", file_, b, name(to), y.wave, std::get<2>(from),
                                   model.components[std::get<1>(from)].name, a, x.wave));
    }
    // Rows move where the devices change or, on the same devices, the split of the rows between DP and TP does.
    if (x.devices == y.devices && x.dp == y.dp && x.tp == y.tp) return;
    for (int d : y.devices) {
      if (!index.activations_in.count({d, b, a})) {
        throw InputError(fmt::format("{}: slice {} takes {} from slice {} on other devices or split otherwise, but "
                                     "device {} receives no activations from it",
                                     file_, b, name(from), a, d));
      }
    }
    // A gradient flows back only where both ends have a backward (a frozen slice with nothing trained upstream
    // takes none).
    if (!y.input_gradient || !x.input_gradient) return;
    for (int d : x.devices) {
      if (!index.gradients_in.count({d, a, b})) {
        throw InputError(fmt::format("{}: slice {} passes the gradient of {} back to slice {} on other devices or "
                                     "split otherwise, but device {} receives no gradients from it",
                                     file_, b, name(from), a, d));
      }
    }
  };
  for (const MetaOp& op : metaops_.ops) {
    for (int input : op.inputs) {
      const MetaOp& in = metaops_.ops[input];
      check_edge(key_of(in, in.first_layer + in.layers - 1), key_of(op, op.first_layer));
    }
    for (int64_t l = op.first_layer + 1; l < int64_t{op.first_layer} + op.layers; ++l) {
      check_edge(key_of(op, l - 1), key_of(op, l));
    }
  }
  // Transfers between slices where nothing flows would be timed as if they carried the iteration's data.
  for (const auto* received : {&index.activations_in, &index.gradients_in}) {
    for (const auto& [device, to, from] : *received) {
      const bool activations = received == &index.activations_in;
      const int consumer = activations ? to : from, producer = activations ? from : to;
      if (ambiguous.count(consumer) || ambiguous.count(producer) || feeds.count({consumer, producer})) continue;
      throw InputError(fmt::format("{}: device {} receives {} for slice {} from slice {}, but slice {} takes no input "
                                   "from slice {}",
                                   file_, device, activations ? "activations" : "gradients", to, from, consumer,
                                   producer));
    }
  }
}

}  // namespace fulcrum
