#ifndef FULCRUM_PLAN_METAOP_GRAPH_H_
#define FULCRUM_PLAN_METAOP_GRAPH_H_

#include <cstdint>
#include <vector>

#include "fulcrum/model/task_graph.h"

namespace fulcrum {

// Spindle's MetaOps (reference/spindle.md §3–4). Every task runs each layer of each of its nodes' components as
// its own operator, on its own inputs; an operator i → j is merged into one MetaOp while i has one consumer, j
// one producer, and both are the same layer shape on the same input size. A MetaOp is then `layers`
// consecutive identical operators of one task's node (each keeping its own parameters), and the MetaOps form a
// DAG layered by longest path: a MetaOp's level is one more than its deepest input's, so a level's MetaOps are
// independent of each other.
struct MetaOp {
  int task = 0;
  int node = 0;         // of the task
  int component = 0;    // of the task graph's model
  int32_t first_layer = 0;  // of the component
  int32_t layers = 0;       // L_m
  LayerSpec layer;          // the shape every one of its operators has
  int64_t sequences = 0;    // per micro-batch: batch / micro_batches × items_per_sample
  int64_t tokens = 0;       // per sequence
  int64_t micro_batches = 1;
  std::vector<int> inputs;  // MetaOps whose output it takes
  int level = 0;
  // A trainable MetaOp upstream of it in its task: its backward passes the gradient of its input back (for a
  // frozen component, that input gradient is the whole of its backward; with none upstream it has no backward).
  bool input_gradient = false;
};

struct MetaGraph {
  std::vector<MetaOp> ops;                // tasks in order, each task's in topological order
  std::vector<std::vector<int>> levels;   // MetaOps by level, in ops' order
  int64_t operators = 0;                  // before contraction
};

// Contracts `graph`'s operators into MetaOps and layers them. Layers a component does not use (its unused final
// layers) are not operators.
MetaGraph contract(const TaskGraph& graph);

}  // namespace fulcrum

#endif  // FULCRUM_PLAN_METAOP_GRAPH_H_
