#ifndef FULCRUM_MODEL_TASK_GRAPH_H_
#define FULCRUM_MODEL_TASK_GRAPH_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/model/model_spec.h"

namespace fulcrum {

// A multi-task model (reference/spindle.md): tasks that each run some of a set of shared components. A component
// used by several tasks is one set of parameters; each task runs it on its own inputs.

// One use of a component in a task: `items_per_sample` items of `tokens` tokens for each of the task's samples,
// after the nodes named in `inputs` (whose outputs it takes).
struct TaskNode {
  std::string name;  // unique in its task
  int component = 0;  // into TaskGraph::model.components
  int64_t tokens = 0;
  int64_t items_per_sample = 1;
  std::vector<int> inputs;  // nodes of the same task
};

struct Task {
  std::string name;
  int64_t batch = 0;         // samples per iteration
  // Run one after another in each wave; they divide the batch. Each keeps its activations until its backward
  // wave, so they bound a pass's size and data parallelism, not the activation memory (unlike accumulation).
  int64_t micro_batches = 1;
  std::vector<TaskNode> nodes;
};

struct TaskGraph {
  std::string name;
  ModelSpec model;  // the shared components
  std::vector<Task> tasks;
};

// Reads a task graph:
//   {"fulcrum": 1, "kind": "tasks", "name": "clip-2",
//    "model": "<a model preset>" | {a model document, model_json.h},
//    "tasks": [{"name": "image-text", "batch": 256, "micro_batches": 1,
//               "nodes": [{"name": "image", "component": "vision", "tokens": 257},
//                         {"name": "text", "component": "text", "tokens": 77, "items_per_sample": 1,
//                          "inputs": []}]}, ...]}
// Throws InputError, one line naming `file` and the task and node: malformed JSON, unknown keys, a component the
// model does not have, an input that is not a node of the task, a cycle, a batch that its micro-batches do not
// divide, sizes that are not positive, a component no task uses.
TaskGraph task_graph_from_json(std::string_view text, const std::string& file);

// The nodes of `task` in an order where each comes after its inputs (their order in the file among equals).
std::vector<int> topological_order(const Task& task);

// Every preset name, in a fixed order: multitask-clip-10, multitask-clip-7, multitask-clip-4, qwen-val, ...
std::vector<std::string> task_graph_preset_names();
// A preset, whose shapes and batches are documented in task_presets.cc; InputError for an unknown name.
TaskGraph task_graph_preset(std::string_view name);
// `--tasks`: a preset name, or else the path of a task graph file.
TaskGraph load_task_graph(const std::string& preset_or_path);

}  // namespace fulcrum

#endif  // FULCRUM_MODEL_TASK_GRAPH_H_
