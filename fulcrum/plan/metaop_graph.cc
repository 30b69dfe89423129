#include "fulcrum/plan/metaop_graph.h"

#include <algorithm>

namespace fulcrum {
namespace {

// One operator: a layer of a task node's component.
struct Operator {
  int node = 0;
  int32_t layer = 0;
  std::vector<int> inputs;     // operators
  std::vector<int> consumers;  // operators
};

}  // namespace

MetaGraph contract(const TaskGraph& graph) {
  MetaGraph out;
  for (int t = 0; t < static_cast<int>(graph.tasks.size()); ++t) {
    const Task& task = graph.tasks[t];
    // The task's operators, node by node in topological order; each node's first and last operator.
    std::vector<Operator> ops;
    std::vector<int> first(task.nodes.size(), -1), last(task.nodes.size(), -1);
    for (int k : topological_order(task)) {
      const TaskNode& node = task.nodes[k];
      const ComponentSpec& c = graph.model.components[node.component];
      const int32_t used = static_cast<int32_t>(c.layers.size() - static_cast<size_t>(c.unused_final_layers));
      for (int32_t l = 0; l < used; ++l) {
        Operator op;
        op.node = k;
        op.layer = l;
        if (l > 0) {
          op.inputs.push_back(static_cast<int>(ops.size()) - 1);
        } else {
          for (int input : node.inputs) op.inputs.push_back(last[input]);
        }
        for (int i : op.inputs) ops[i].consumers.push_back(static_cast<int>(ops.size()));
        if (l == 0) first[k] = static_cast<int>(ops.size());
        last[k] = static_cast<int>(ops.size());
        ops.push_back(std::move(op));
      }
    }
    out.operators += static_cast<int64_t>(ops.size());
    auto shape = [&](const Operator& op) -> const LayerSpec& {
      return graph.model.components[task.nodes[op.node].component].layers[op.layer];
    };
    auto input_size = [&](const Operator& op) {
      const TaskNode& n = task.nodes[op.node];
      return std::pair<int64_t, int64_t>{n.items_per_sample, n.tokens};
    };
    // Merge i → j while i has one consumer, j one input, and both are the same shape on the same input size.
    // Operators are in topological order, so each joins its input's MetaOp or starts its own.
    std::vector<int> meta_of(ops.size(), -1);
    for (size_t j = 0; j < ops.size(); ++j) {
      const Operator& op = ops[j];
      if (op.inputs.size() == 1) {
        const Operator& in = ops[op.inputs[0]];
        if (in.consumers.size() == 1 && in.node == op.node && shape(in) == shape(op) &&
            input_size(in) == input_size(op)) {
          meta_of[j] = meta_of[op.inputs[0]];
          ++out.ops[meta_of[j]].layers;
          continue;
        }
      }
      MetaOp m;
      const TaskNode& node = task.nodes[op.node];
      m.task = t;
      m.node = op.node;
      m.component = node.component;
      m.first_layer = op.layer;
      m.layers = 1;
      m.layer = shape(op);
      m.micro_batches = task.micro_batches;
      m.sequences = task.batch / task.micro_batches * node.items_per_sample;
      m.tokens = node.tokens;
      for (int i : op.inputs) m.inputs.push_back(meta_of[i]);
      meta_of[j] = static_cast<int>(out.ops.size());
      out.ops.push_back(std::move(m));
    }
  }
  // Longest-path levels and input gradients: the ops are in topological order, so one pass suffices.
  for (MetaOp& m : out.ops) {
    m.level = 0;
    for (int i : m.inputs) {
      const MetaOp& in = out.ops[i];
      m.level = std::max(m.level, in.level + 1);
      m.input_gradient = m.input_gradient || in.input_gradient || graph.model.components[in.component].trainable;
    }
    if (static_cast<int>(out.levels.size()) <= m.level) out.levels.resize(m.level + 1);
  }
  for (int i = 0; i < static_cast<int>(out.ops.size()); ++i) out.levels[out.ops[i].level].push_back(i);
  return out;
}

}  // namespace fulcrum
