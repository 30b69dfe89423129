#include "fulcrum/model/task_graph.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "fulcrum/core/error.h"
#include "fulcrum/core/json_reader.h"
#include "fulcrum/core/json_document.h"
#include "fulcrum/core/text_file.h"
#include "fulcrum/model/model_json.h"
#include "fulcrum/model/model_presets.h"

namespace fulcrum {
namespace {

using Json = nlohmann::json;

// Every error names the file, then where in it.
class Reader : public JsonReader {
 public:
  using JsonReader::JsonReader;

  // An integer from 1 to `most`: bounds far past any model.
  int64_t positive(const Json& j, const std::string& where, int64_t most) const {
    if (!j.is_number_integer()) fail(where, "expected a positive integer");
    if (j.is_number_unsigned() ? j.get<uint64_t>() > static_cast<uint64_t>(most) : j.get<int64_t>() > most) {
      fail(where, "{} is too large (at most {})", j.dump(), most);
    }
    const int64_t v = j.get<int64_t>();
    if (v < 1) fail(where, "{} is not positive", v);
    return v;
  }
  std::string text(const Json& j, const std::string& where) const {
    if (!j.is_string() || j.get<std::string>().empty()) fail(where, "expected a non-empty string");
    return j.get<std::string>();
  }

  TaskGraph read(const Json& doc) const {
    only_keys(doc, {"fulcrum", "kind", "name", "model", "tasks"}, "tasks file");
    const Json& version = member(doc, "fulcrum", "tasks file");
    if (!version.is_number_integer() || version.get<int64_t>() != 1) fail("fulcrum", "version 1 expected");
    if (text(member(doc, "kind", "tasks file"), "kind") != "tasks") fail("kind", "expected \"tasks\"");
    TaskGraph g;
    g.name = text(member(doc, "name", "tasks file"), "name");
    const Json& model = member(doc, "model", "tasks file");
    if (model.is_string()) {
      try {
        g.model = model_preset(model.get<std::string>());
      } catch (const InputError& e) {
        fail("model", "{}", e.what());
      }
    } else if (model.is_object()) {
      g.model = model_from_json(model.dump(), file() + ": model");
    } else {
      fail("model", "expected a model preset name or a model document");
    }
    const Json& tasks = member(doc, "tasks", "tasks file");
    if (!tasks.is_array() || tasks.empty()) fail("tasks", "expected a non-empty array of tasks");
    std::set<std::string> task_names;
    for (size_t t = 0; t < tasks.size(); ++t) {
      g.tasks.push_back(read_task(tasks[t], fmt::format("tasks[{}]", t), g.model));
      if (!task_names.insert(g.tasks.back().name).second) {
        fail(fmt::format("tasks[{}]", t), "another task is named '{}'", g.tasks.back().name);
      }
    }
    std::vector<bool> used(g.model.components.size(), false);
    for (const Task& task : g.tasks) {
      for (const TaskNode& n : task.nodes) used[n.component] = true;
    }
    for (size_t c = 0; c < used.size(); ++c) {
      if (!used[c]) fail("model", "component '{}' is run by no task", g.model.components[c].name);
    }
    return g;
  }

  Task read_task(const Json& j, const std::string& where, const ModelSpec& model) const {
    only_keys(j, {"name", "batch", "micro_batches", "nodes"}, where);
    Task task;
    task.name = text(member(j, "name", where), where + ".name");
    const std::string at = fmt::format("{} ('{}')", where, task.name.substr(0, 60));
    task.batch = positive(member(j, "batch", at), at + ".batch", int64_t{1} << 24);
    if (j.contains("micro_batches")) {
      task.micro_batches = positive(j["micro_batches"], at + ".micro_batches", int64_t{1} << 20);
    }
    if (task.batch % task.micro_batches != 0) {
      fail(at, "batch {} is not divisible into {} micro-batches", task.batch, task.micro_batches);
    }
    const Json& nodes = member(j, "nodes", at);
    if (!nodes.is_array() || nodes.empty()) fail(at + ".nodes", "expected a non-empty array of nodes");
    std::map<std::string, int> index;
    for (size_t k = 0; k < nodes.size(); ++k) {
      const std::string node_at = fmt::format("{}.nodes[{}]", at, k);
      only_keys(nodes[k], {"name", "component", "tokens", "items_per_sample", "inputs"}, node_at);
      TaskNode n;
      n.name = text(member(nodes[k], "name", node_at), node_at + ".name");
      if (!index.emplace(n.name, static_cast<int>(k)).second) fail(node_at, "another node is named '{}'", n.name);
      const std::string component = text(member(nodes[k], "component", node_at), node_at + ".component");
      const ComponentSpec* c = model.find(component);
      if (!c) fail(node_at, "component '{}' is not one of model '{}'", component.substr(0, 60), model.name);
      n.component = static_cast<int>(c - model.components.data());
      n.tokens = positive(member(nodes[k], "tokens", node_at), node_at + ".tokens", int64_t{1} << 22);
      if (nodes[k].contains("items_per_sample")) {
        n.items_per_sample = positive(nodes[k]["items_per_sample"], node_at + ".items_per_sample", int64_t{1} << 16);
      }
      // Attention's work grows with sequences × tokens²: kept within 2^53, where it stays exact (in int64 and in
      // double) and far past any model.
      const double sequences = static_cast<double>(task.batch / task.micro_batches * n.items_per_sample);
      if (sequences * static_cast<double>(n.tokens) * static_cast<double>(n.tokens) > 0x1p53) {
        fail(node_at, "{} sequences of {} tokens a micro-batch is too large (sequences × tokens² at most 2^53)",
             sequences, n.tokens);
      }
      task.nodes.push_back(std::move(n));
    }
    // Inputs by name, once every node is known.
    for (size_t k = 0; k < nodes.size(); ++k) {
      if (!nodes[k].contains("inputs")) continue;
      const std::string inputs_at = fmt::format("{}.nodes[{}].inputs", at, k);
      const Json& inputs = nodes[k]["inputs"];
      if (!inputs.is_array()) fail(inputs_at, "expected an array of node names");
      for (size_t i = 0; i < inputs.size(); ++i) {
        const std::string name = text(inputs[i], fmt::format("{}[{}]", inputs_at, i));
        const auto it = index.find(name);
        if (it == index.end()) fail(inputs_at, "'{}' is not a node of task '{}'", name.substr(0, 60), task.name);
        std::vector<int>& taken = task.nodes[k].inputs;
        if (std::find(taken.begin(), taken.end(), it->second) != taken.end()) {
          fail(inputs_at, "'{}' is named twice", name.substr(0, 60));
        }
        taken.push_back(it->second);
      }
    }
    try {
      (void)topological_order(task);
    } catch (const InputError& e) {
      fail(at, "{}", e.what());
    }
    return task;
  }

};

}  // namespace

std::vector<int> topological_order(const Task& task) {
  const int n = static_cast<int>(task.nodes.size());
  std::vector<int> waiting(n, 0);
  std::vector<std::vector<int>> consumers(n);
  for (int k = 0; k < n; ++k) {
    for (int input : task.nodes[k].inputs) {
      if (input < 0 || input >= n) throw InputError(fmt::format("node '{}' takes an input that does not exist", task.nodes[k].name));
      ++waiting[k];
      consumers[input].push_back(k);
    }
  }
  // Kahn's algorithm, always taking the earliest ready node so the order is the file's among equals.
  std::set<int> ready;
  for (int k = 0; k < n; ++k) {
    if (waiting[k] == 0) ready.insert(k);
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int k = *ready.begin();
    ready.erase(ready.begin());
    order.push_back(k);
    for (int c : consumers[k]) {
      if (--waiting[c] == 0) ready.insert(c);
    }
  }
  if (static_cast<int>(order.size()) != n) {
    // A node left waiting has an input left waiting: walking back from one, a node repeats, and the walk from
    // its first visit is a cycle (a node merely downstream of one is not on it).
    int k = 0;
    while (waiting[k] == 0) ++k;
    std::vector<int> visited_at(n, -1);
    std::vector<int> walk;
    while (visited_at[k] < 0) {
      visited_at[k] = static_cast<int>(walk.size());
      walk.push_back(k);
      for (int input : task.nodes[k].inputs) {
        if (waiting[input] > 0) {
          k = input;
          break;
        }
      }
    }
    std::vector<int> on_cycle(walk.begin() + visited_at[k], walk.end());
    std::reverse(on_cycle.begin(), on_cycle.end());  // in the direction the outputs flow
    std::rotate(on_cycle.begin(), std::min_element(on_cycle.begin(), on_cycle.end()), on_cycle.end());  // file's first
    std::vector<std::string> cycle;
    for (int node : on_cycle) cycle.push_back(fmt::format("'{}'", task.nodes[node].name));
    throw InputError(fmt::format("node {} is on a cycle of inputs: {} → {}", cycle.front(), fmt::join(cycle, " → "),
                                 cycle.front()));
  }
  return order;
}

TaskGraph task_graph_from_json(std::string_view text, const std::string& file) {
  const Json doc = parse_json_document(text, file);
  try {
    return Reader(file).read(doc);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: {}", file, e.what()));
  }
}

TaskGraph load_task_graph(const std::string& preset_or_path) {
  for (const std::string& name : task_graph_preset_names()) {
    if (name == preset_or_path) return task_graph_preset(name);
  }
  std::error_code ignored;
  if (!std::filesystem::is_regular_file(preset_or_path, ignored)) {
    throw InputError(fmt::format("--tasks {}: neither a preset ({}) nor a file", preset_or_path,
                                 fmt::join(task_graph_preset_names(), ", ")));
  }
  return task_graph_from_json(read_text_file(preset_or_path), preset_or_path);
}

}  // namespace fulcrum
