#include "fulcrum/model/task_graph.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "fulcrum/core/error.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

const char* kTwoTasks = R"({"fulcrum": 1, "kind": "tasks", "name": "two",
  "model": {"fulcrum": 1, "name": "towers", "components": [
    {"name": "vision", "role": "encoder", "layers": [{"kind": "transformer", "repeat": 4, "hidden": 256, "ffn": 1024, "heads": 4}]},
    {"name": "text", "role": "encoder", "layers": [{"kind": "transformer", "repeat": 2, "hidden": 256, "ffn": 1024, "heads": 4}]},
    {"name": "llm", "role": "llm", "layers": [{"kind": "transformer", "repeat": 3, "hidden": 512, "ffn": 2048, "heads": 8}]}]},
  "tasks": [
    {"name": "vl", "batch": 64, "micro_batches": 2, "nodes": [
      {"name": "llm", "component": "llm", "tokens": 512, "inputs": ["image"]},
      {"name": "image", "component": "vision", "tokens": 257, "items_per_sample": 2}]},
    {"name": "clip", "batch": 32, "nodes": [
      {"name": "image", "component": "vision", "tokens": 257},
      {"name": "caption", "component": "text", "tokens": 77}]}]})";

TEST(TaskGraph, ReadsTasksOverSharedComponents) {
  const TaskGraph g = task_graph_from_json(kTwoTasks, "two.json");
  EXPECT_EQ(g.name, "two");
  ASSERT_EQ(g.model.components.size(), 3u);
  ASSERT_EQ(g.tasks.size(), 2u);
  const Task& vl = g.tasks[0];
  EXPECT_EQ(vl.batch, 64);
  EXPECT_EQ(vl.micro_batches, 2);
  ASSERT_EQ(vl.nodes.size(), 2u);
  EXPECT_EQ(vl.nodes[0].component, 2);
  EXPECT_EQ(vl.nodes[0].inputs, std::vector<int>{1});
  EXPECT_EQ(vl.nodes[1].items_per_sample, 2);
  // Inputs come first in the order, whatever the file's.
  EXPECT_EQ(topological_order(vl), (std::vector<int>{1, 0}));
  EXPECT_EQ(g.tasks[1].micro_batches, 1);
}

// The cycle named is a cycle: 'head' takes c's output and waits on the cycle b → c → b without being on it.
TEST(TaskGraph, ACycleIsNamedByItsOwnNodes) {
  Task task;
  task.name = "t";
  task.nodes = {{.name = "head", .inputs = {3}}, {.name = "a"}, {.name = "b", .inputs = {1, 3}},
                {.name = "c", .inputs = {2}}};
  EXPECT_THAT([&] { topological_order(task); },
              ::testing::ThrowsMessage<InputError>(
                  ::testing::StrEq("node 'b' is on a cycle of inputs: 'b' → 'c' → 'b'")));
  task.nodes = {{.name = "self", .inputs = {0}}};
  EXPECT_THAT([&] { topological_order(task); },
              ::testing::ThrowsMessage<InputError>(::testing::HasSubstr("'self' → 'self'")));
}

TEST(TaskGraph, BadGraphsAreRefusedByName) {
  const std::string good = kTwoTasks;
  auto with = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  const std::pair<std::string, std::string> cases[] = {
      {with(R"("inputs": ["image"])", R"("inputs": ["llm"])"), "cycle"},
      {with(R"("component": "text")", R"("component": "audio")"), "component 'audio' is not one of model 'towers'"},
      {with(R"("micro_batches": 2)", R"("micro_batches": 3)"), "batch 64 is not divisible into 3 micro-batches"},
      {with(R"("inputs": ["image"])", R"("inputs": ["picture"])"), "'picture' is not a node of task 'vl'"},
      {with(R"("batch": 32)", R"("batch": 0)"), "tasks[1] ('clip').batch: 0 is not positive"},
      {with(R"("tokens": 77)", R"("tokens": 77, "colour": 1)"), "unknown key \"colour\""},
      {with(R"("name": "clip")", R"("name": "vl")"), "another task is named 'vl'"},
      {with(R"({"name": "caption", "component": "text", "tokens": 77})",
            R"({"name": "caption", "component": "vision", "tokens": 77})"),
       "component 'text' is run by no task"},
      {with(R"("kind": "tasks")", R"("kind": "model")"), "expected \"tasks\""},
      // Sizes whose products (tokens², a task's FLOPs) would overflow 64-bit integers.
      {with(R"("tokens": 77)", R"("tokens": 99999999999)"), "tokens: 99999999999 is too large (at most 4194304)"},
      {with(R"("batch": 32)", R"("batch": 1099511627776)"), "batch: 1099511627776 is too large"},
      {"[1, 2", "two.json"},
      {R"({"fulcrum": 1, "kind": "tasks", "name": "x", "model": "nope", "tasks": []})", "unknown model 'nope'"},
  };
  for (const auto& [text, message] : cases) {
    try {
      task_graph_from_json(text, "two.json");
      ADD_FAILURE() << "accepted: " << message;
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), HasSubstr(message));
      EXPECT_THAT(e.what(), HasSubstr("two.json"));
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
}

// The presets: the paper's model sizes (Table 1b) from the public models their notes name.
TEST(TaskGraph, PresetsHaveThePapersShapes) {
  const TaskGraph clip10 = task_graph_preset("multitask-clip-10");
  EXPECT_EQ(clip10.tasks.size(), 10u);
  EXPECT_EQ(clip10.model.components.size(), 6u);
  EXPECT_NEAR(static_cast<double>(clip10.model.parameters()) / 1e9, 1.20, 0.03);  // Table 1b: 1.20B
  EXPECT_EQ(task_graph_preset("multitask-clip-7").tasks.size(), 7u);
  const TaskGraph clip4 = task_graph_preset("multitask-clip-4");
  EXPECT_EQ(clip4.tasks.size(), 4u);
  EXPECT_EQ(clip4.model.components.size(), 5u);  // vision, text, audio, depth, thermal
  const TaskGraph qwen = task_graph_preset("qwen-val");
  EXPECT_EQ(qwen.tasks.size(), 3u);
  // 10.1B against the paper's 9.25B: the notes beside the preset say why.
  EXPECT_NEAR(static_cast<double>(qwen.model.parameters()) / 1e9, 10.1, 0.2);
  EXPECT_NEAR(static_cast<double>(task_graph_preset("qwen-val-30b").model.parameters()) / 1e9, 35.0, 1.5);
  EXPECT_NEAR(static_cast<double>(task_graph_preset("qwen-val-70b").model.parameters()) / 1e9, 74.8, 1.5);
  const TaskGraph ofasys7 = task_graph_preset("ofasys-7");
  EXPECT_EQ(ofasys7.tasks.size(), 7u);
  // text, vision, audio, motion, encoder, decoder: six modalities' inputs (box and structure enter as text).
  EXPECT_EQ(ofasys7.model.components.size(), 6u);
  // OFASys' `large` architecture and its adaptors: 0.47B against the paper's 0.66B (the notes say why).
  EXPECT_NEAR(static_cast<double>(ofasys7.model.parameters()) / 1e9, 0.47, 0.02);
  const TaskGraph ofasys4 = task_graph_preset("ofasys-4");
  EXPECT_EQ(ofasys4.tasks.size(), 4u);
  EXPECT_EQ(ofasys4.model.components.size(), 5u);  // no motion adaptor
  for (const std::string& name : task_graph_preset_names()) {
    const TaskGraph g = task_graph_preset(name);
    for (const Task& t : g.tasks) EXPECT_NO_THROW(topological_order(t)) << name;
  }
  EXPECT_THROW(task_graph_preset("clip"), InputError);
  EXPECT_THROW(load_task_graph("no-such-file.json"), InputError);
}

}  // namespace
}  // namespace fulcrum
