#include "fulcrum/plan/spindle.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/cost/collective_cost.h"
#include "fulcrum/cost/dtype.h"

namespace fulcrum {
namespace {

// Two tasks over shared towers: a vision-language task (two images a sample into the LLM) and a CLIP task.
TaskGraph two_tasks() {
  return task_graph_from_json(R"({"fulcrum": 1, "kind": "tasks", "name": "two",
  "model": {"fulcrum": 1, "name": "towers", "components": [
    {"name": "vision", "role": "encoder", "layers": [{"kind": "transformer", "repeat": 4, "hidden": 1024, "ffn": 4096, "heads": 16}]},
    {"name": "text", "role": "encoder", "layers": [{"kind": "transformer", "repeat": 2, "hidden": 512, "ffn": 2048, "heads": 8}]},
    {"name": "llm", "role": "llm", "layers": [{"kind": "transformer", "repeat": 3, "hidden": 2048, "ffn": 8192, "heads": 16}]}]},
  "tasks": [
    {"name": "vl", "batch": 64, "nodes": [
      {"name": "image", "component": "vision", "tokens": 257, "items_per_sample": 2},
      {"name": "llm", "component": "llm", "tokens": 1024, "inputs": ["image"]}]},
    {"name": "clip", "batch": 128, "nodes": [
      {"name": "image", "component": "vision", "tokens": 257},
      {"name": "caption", "component": "text", "tokens": 77}]}]})",
                              "two.json");
}

TEST(MetaGraph, ContractsChainsOfIdenticalOperatorsAndLayersByLongestPath) {
  const MetaGraph g = contract(two_tasks());
  EXPECT_EQ(g.operators, 4 + 3 + 4 + 2);
  ASSERT_EQ(g.ops.size(), 4u);
  EXPECT_EQ(g.ops[0].layers, 4);  // vl's image tower
  EXPECT_EQ(g.ops[0].sequences, 128);  // 64 samples × 2 images
  EXPECT_EQ(g.ops[1].layers, 3);  // vl's LLM, after it
  EXPECT_EQ(g.ops[1].inputs, std::vector<int>{0});
  EXPECT_EQ(g.ops[2].layers, 4);  // clip's image tower: its own MetaOp (another task, another input size)
  EXPECT_EQ(g.ops[3].layers, 2);
  ASSERT_EQ(g.levels.size(), 2u);
  EXPECT_EQ(g.levels[0], (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(g.levels[1], (std::vector<int>{1}));
}

// A frozen MetaOp passes its input's gradient back only where a trained MetaOp is upstream in its task: its
// curve then carries the backward-input pass, and without one it runs forward alone (the simulator alike).
TEST(MetaGraph, AFrozenMetaOpPassesAGradientBackOnlyForATrainedOneUpstream) {
  TaskGraph g = two_tasks();
  g.model.components[2].trainable = false;  // the LLM, after the trained image tower
  MetaGraph m = contract(g);
  EXPECT_FALSE(m.ops[0].input_gradient);  // the image tower: nothing upstream
  EXPECT_TRUE(m.ops[1].input_gradient);
  const ClusterSpec cluster = cluster_preset("a800:8");
  const AnalyticCost cost(cluster);
  const ComponentSpec& llm = g.model.components[2];
  CurveOptions options;
  options.efficiency = cost.efficiency();
  const double with_gradient = metaop_curve(m.ops[1], llm, cost, cluster, 1, options).points().front().seconds;
  LayerWork w = metaop_work(m.ops[1], 1, 1, false, Dtype::kBf16);
  const double forward = cost.layer_cost(w).seconds;
  w.pass = Pass::kBackwardInput;
  EXPECT_NEAR(with_gradient, forward + cost.layer_cost(w).seconds, 1e-12 * with_gradient);
  m.ops[1].input_gradient = false;  // the tower frozen too: nothing to pass a gradient back to
  EXPECT_NEAR(metaop_curve(m.ops[1], llm, cost, cluster, 1, options).points().front().seconds, forward,
              1e-12 * forward);
  g.model.components[0].trainable = false;
  EXPECT_FALSE(contract(g).ops[1].input_gradient);
}

// A diamond a → b, a → c, b → c: breadth-first depth would put b and c on one level although b feeds c.
TEST(MetaGraph, LongestPathLevelsKeepALevelIndependent) {
  TaskGraph g = two_tasks();
  Task& vl = g.tasks[0];
  vl.nodes.push_back({"side", 1, 77, 1, {0}});  // text tower after the image tower
  vl.nodes[1].inputs = {0, 2};                  // the LLM after both
  const MetaGraph m = contract(g);
  std::map<int, int> level_of_node;
  for (const MetaOp& op : m.ops) {
    if (op.task == 0) level_of_node[op.node] = op.level;
  }
  EXPECT_EQ(level_of_node[0], 0);
  EXPECT_EQ(level_of_node[2], 1);
  EXPECT_EQ(level_of_node[1], 2);
}

TEST(Spindle, PlansWavesThatCoverEveryOperatorOnDisjointDevices) {
  const TaskGraph graph = two_tasks();
  for (const char* preset : {"a800:8", "a800:16", "a800:5"}) {
    const ClusterSpec cluster = cluster_preset(preset);
    const AnalyticCost cost(cluster);
    MultitaskInputs in{&graph, &cluster, &cost, cost.efficiency()};
    const MultitaskPlan plan = plan_multitask(in);
    std::vector<int64_t> next(plan.graph.ops.size(), 0);
    double previous_end = 0;
    int last_level = 0;
    for (const PlannedWave& w : plan.waves) {
      EXPECT_GE(w.level, last_level) << "levels run in order";
      last_level = w.level;
      EXPECT_NEAR(w.start_seconds, previous_end, 1e-12);
      previous_end = w.start_seconds + w.seconds;
      std::set<int> used;
      for (const PlacedSlice& s : w.slices) {
        EXPECT_EQ(static_cast<int>(s.device_ids.size()), s.devices);
        for (int d : s.device_ids) {
          EXPECT_GE(d, 0);
          EXPECT_LT(d, cluster.devices);
          EXPECT_TRUE(used.insert(d).second) << preset << ": device " << d << " twice in a wave";
        }
        EXPECT_EQ(s.dp * s.tp, s.devices);
        // A slice wider than a node, on consecutive devices, starts on a node's first device.
        const int per_node = cluster.device.devices_per_node;
        if (s.devices > per_node && s.device_ids.back() - s.device_ids.front() + 1 == s.devices) {
          EXPECT_EQ(s.device_ids.front() % per_node, 0) << preset;
        }
        EXPECT_EQ(s.first_layer, next[s.metaop]);
        next[s.metaop] += s.layers;
        // Every input of a MetaOp's first slice has finished in an earlier wave.
        if (s.first_layer == 0) {
          for (int input : plan.graph.ops[s.metaop].inputs) {
            EXPECT_EQ(next[input], plan.graph.ops[input].layers) << "a MetaOp before its input";
          }
        }
      }
    }
    for (size_t m = 0; m < plan.graph.ops.size(); ++m) EXPECT_EQ(next[m], plan.graph.ops[m].layers) << preset;
    EXPECT_NEAR(plan.makespan_seconds, previous_end, 1e-12);
    // The relaxation bounds the makespan from below.
    EXPECT_GE(plan.makespan_seconds, plan.lower_bound_seconds * (1 - 1e-9)) << preset;
    EXPECT_LE(plan.compute_seconds, plan.makespan_seconds * (1 + 1e-12)) << "compute is the makespan without sync";
    EXPECT_GE(plan.wavefront_makespan_seconds, plan.lower_bound_seconds * (1 - 1e-9)) << preset;
    EXPECT_TRUE(plan.arrangement == "waves" || plan.arrangement == "fastest" || plan.arrangement == "widest");
    if (plan.arrangement == "waves") {
      EXPECT_EQ(plan.makespan_seconds, plan.wavefront_makespan_seconds);
    }
    for (const LevelPlan& level : plan.levels) {
      if (plan.arrangement != "waves") {
        EXPECT_TRUE(level.serial) << "the MetaOps in turn, level by level";
      }
    }
    EXPECT_NEAR(plan.iteration_seconds, plan.compute_seconds + plan.transfer_seconds + plan.gradient_sync_seconds,
                1e-12);
    // Every trained layer's gradients are synchronised in exactly one group.
    double synced = 0;
    for (const SyncGroup& group : plan.sync_groups) synced += group.gradient_bytes * group.tp;
    EXPECT_NEAR(synced, 2.0 * static_cast<double>(graph.model.parameters()), 1.0);
    const MultitaskBaselines base = multitask_baselines(in, plan);
    EXPECT_GE(base.sequential.makespan_seconds, plan.lower_bound_seconds * (1 - 1e-9));
    // Each level keeps the faster of its waves and its MetaOps in turn on all devices: never slower than
    // running every MetaOp in turn.
    EXPECT_LE(plan.makespan_seconds, base.sequential.makespan_seconds * (1 + 1e-12)) << preset;
    EXPECT_GE(base.per_task.makespan_seconds, plan.lower_bound_seconds * (1 - 1e-9));
    EXPECT_GT(base.task_greedy.compute_seconds, 0);
  }
}

// More tasks than devices: task-greedy runs them in rounds, here one task at a time on the one device.
TEST(Spindle, TaskGreedyRunsRoundsWhenTasksOutnumberDevices) {
  const TaskGraph graph = two_tasks();
  const ClusterSpec cluster = cluster_preset("a800:1");
  const AnalyticCost cost(cluster);
  MultitaskInputs in{&graph, &cluster, &cost, cost.efficiency()};
  const MultitaskPlan plan = plan_multitask(in);
  double serial = 0;
  for (size_t m = 0; m < plan.graph.ops.size(); ++m) {
    serial += static_cast<double>(plan.graph.ops[m].layers) * plan.curves[m].at(1)->seconds;
  }
  const MultitaskBaselines base = multitask_baselines(in, plan);
  EXPECT_NEAR(base.task_greedy.compute_seconds, serial, 1e-12 * serial);
  EXPECT_NEAR(base.sequential.compute_seconds, serial, 1e-12 * serial);
  EXPECT_NEAR(plan.compute_seconds, serial, 1e-12 * serial);
  EXPECT_EQ(base.task_greedy.gradient_sync_seconds, 0);  // one device holds everything
}

// Both tasks' image MetaOps use the vision tower's layers: slices of them split 4 ways on devices 0-7 and 2-9
// leave a union of 10 devices, not whole copies of a 4-way split. The sync group coarsens its shards to halves
// (gcd of 4 and 10), which every one of the 10 holds, so the schedule's sync groups validate (on 1,024 GPUs
// Multitask-CLIP's towers met this with slices split 6 ways over 896 devices).
TEST(Spindle, SyncGroupsHoldWholeCopiesOfTheirShards) {
  const TaskGraph graph = two_tasks();
  const ClusterSpec cluster = cluster_preset("a800:16");
  const AnalyticCost cost(cluster);
  MultitaskInputs in{&graph, &cluster, &cost, cost.efficiency()};
  const MetaGraph g = contract(graph);
  std::vector<PlannedWave> waves;
  int first_device = 0;
  for (size_t m = 0; m < g.ops.size(); ++m) {
    if (graph.model.components[g.ops[m].component].name != "vision" || g.ops[m].layers != 4) continue;
    PlannedWave w;
    PlacedSlice s;
    s.metaop = static_cast<int>(m);
    s.devices = 8;
    s.layers = 4;
    s.dp = 2;
    s.tp = 4;
    for (int d = first_device; d < first_device + 8; ++d) s.device_ids.push_back(d);
    first_device += 2;
    w.slices.push_back(s);
    waves.push_back(w);
  }
  ASSERT_EQ(waves.size(), 2u) << "both tasks' image MetaOps";
  const std::vector<SyncGroup> groups = sync_groups_of(in, g, waves);
  ASSERT_FALSE(groups.empty());
  for (const SyncGroup& group : groups) {
    EXPECT_EQ(group.device_ids.size(), 10u);
    EXPECT_EQ(group.tp, 2);
    EXPECT_EQ(group.device_ids.size() % group.tp, 0u);
  }
}

// vl's image tower (wave 0) and LLM (wave 2) on devices 0-3, clip's caption tower between them (wave 1) on
// devices 0-1: three groups, as the backward completes them LLM, text, vision.
std::vector<PlannedWave> three_waves(const MetaGraph& g) {
  std::vector<PlannedWave> waves(3);
  auto put = [&](int metaop, int wave, int devices) {
    PlacedSlice s;
    s.metaop = metaop;
    s.devices = devices;
    s.layers = g.ops[metaop].layers;
    s.dp = devices;
    for (int d = 0; d < devices; ++d) s.device_ids.push_back(d);
    waves[wave].slices.push_back(s);
  };
  put(0, 0, 4);
  put(3, 1, 2);
  put(1, 2, 4);
  return waves;
}

TEST(Spindle, SyncGroupsOnTheSameDevicesShareAnAllReduceUpToTheBucketSize) {
  const TaskGraph graph = two_tasks();
  const ClusterSpec cluster = cluster_preset("a800:8");
  const AnalyticCost cost(cluster);
  MultitaskInputs in{&graph, &cluster, &cost, cost.efficiency()};
  const MetaGraph g = contract(graph);
  const std::vector<PlannedWave> waves = three_waves(g);
  in.bucket_bytes = 0;
  const std::vector<SyncGroup> one_each = sync_groups_of(in, g, waves);
  ASSERT_EQ(one_each.size(), 3u);
  EXPECT_EQ(one_each[0].ready_wave, 2);  // the LLM
  EXPECT_EQ(one_each[1].ready_wave, 1);  // the text tower, on devices 0-1
  EXPECT_EQ(one_each[2].ready_wave, 0);  // the image tower
  EXPECT_EQ(one_each[1].device_ids, (std::vector<int>{0, 1}));
  const double llm = one_each[0].gradient_bytes, vision = one_each[2].gradient_bytes;

  // A bucket just too small for both: as before.
  in.bucket_bytes = llm + vision - 1;
  EXPECT_EQ(sync_groups_of(in, g, waves).size(), 3u);

  // Room for both: the image tower joins the LLM's bucket across the text tower's group on other devices, and the
  // bucket is ready when the image tower is, after the text tower's group.
  in.bucket_bytes = llm + vision;
  const std::vector<SyncGroup> bucketed = sync_groups_of(in, g, waves);
  ASSERT_EQ(bucketed.size(), 2u);
  EXPECT_EQ(bucketed[0].device_ids, (std::vector<int>{0, 1}));
  EXPECT_EQ(bucketed[1].device_ids, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(bucketed[1].ready_wave, 0);
  EXPECT_DOUBLE_EQ(bucketed[1].gradient_bytes, llm + vision);
  std::vector<std::pair<int, int>> layers = one_each[0].layers;
  layers.insert(layers.end(), one_each[2].layers.begin(), one_each[2].layers.end());
  EXPECT_EQ(bucketed[1].layers, layers);
  // One all-reduce of both costs less than the two alone: one start-up latency fewer.
  EXPECT_LT(bucketed[1].seconds, one_each[0].seconds + one_each[2].seconds);
  EXPECT_GT(bucketed[1].seconds, std::max(one_each[0].seconds, one_each[2].seconds));

  // The same devices holding other shards (the LLM split 2 ways): never one bucket, however large.
  std::vector<PlannedWave> split = waves;
  split[2].slices[0].dp = 2;
  split[2].slices[0].tp = 2;
  in.bucket_bytes = 1e18;
  const std::vector<SyncGroup> by_shards = sync_groups_of(in, g, split);
  ASSERT_EQ(by_shards.size(), 3u);
  EXPECT_EQ(by_shards[0].tp, 2);
  EXPECT_EQ(by_shards[0].layers, one_each[0].layers);
  EXPECT_EQ(by_shards[2].tp, 1);
  EXPECT_EQ(by_shards[2].layers, one_each[2].layers);
}

// One wave, vl's image tower on devices 0-3: its gradients' all-reduce can start only when its backward is over.
// Cut, the later parts' all-reduces run under the earlier parts' backward: the estimate falls, every operator is
// still run once, in order, on the same devices, and the compute is the same. With almost no compute to hide
// under, cutting only adds all-reduce start-ups, and the wave stays whole.
TEST(Spindle, ALongWaveIsCutSoItsGradientsAllReduceUnderItsOwnBackward) {
  const TaskGraph graph = two_tasks();
  const ClusterSpec cluster = cluster_preset("a800:8");
  const AnalyticCost cost(cluster);
  MultitaskInputs in{&graph, &cluster, &cost, cost.efficiency()};
  in.bucket_bytes = 0;
  const MetaGraph g = contract(graph);
  auto one_wave = [&](double seconds) {
    std::vector<PlannedWave> waves(1);
    PlacedSlice s;
    s.metaop = 0;
    s.devices = 4;
    s.layers = g.ops[0].layers;
    s.dp = 4;
    s.device_ids = {0, 1, 2, 3};
    s.seconds = seconds;
    waves[0].slices.push_back(s);
    waves[0].seconds = seconds;
    return waves;
  };
  const double all_reduce = sync_groups_of(in, g, one_wave(1)).at(0).seconds;
  ASSERT_GT(all_reduce, 0);
  const std::vector<PlannedWave> whole = one_wave(3 * all_reduce);  // a backward of twice the all-reduce
  const std::vector<PlannedWave> cut = cut_for_gradient_overlap(in, g, whole);
  ASSERT_GT(cut.size(), 1u);
  EXPECT_LT(estimate_waves(in, g, cut).iteration_seconds, estimate_waves(in, g, whole).iteration_seconds);
  int64_t next_layer = 0;
  double seconds = 0, start = 0;
  for (const PlannedWave& w : cut) {
    ASSERT_EQ(w.slices.size(), 1u);
    EXPECT_EQ(w.slices[0].metaop, 0);
    EXPECT_EQ(w.slices[0].device_ids, whole[0].slices[0].device_ids);
    EXPECT_EQ(w.slices[0].first_layer, next_layer);
    EXPECT_GE(w.slices[0].layers, 1);
    next_layer += w.slices[0].layers;
    seconds += w.slices[0].seconds;
    EXPECT_DOUBLE_EQ(w.start_seconds, start);
    start += w.seconds;
  }
  EXPECT_EQ(next_layer, g.ops[0].layers);
  EXPECT_NEAR(seconds, whole[0].seconds, 1e-12);

  const std::vector<PlannedWave> brief = one_wave(all_reduce / 1000);
  EXPECT_EQ(cut_for_gradient_overlap(in, g, brief).size(), 1u);
}

// An arrangement that memory makes recompute runs each recomputed block's forward again before its backward: the
// estimate carries it. Each MetaOp alone in its wave on all the devices (sequential), so the added compute is the
// sum over slices of their recomputed layers' forward (full recomputation, the same kernels as the forward) on
// the slice's share of the sequences; selective recomputation adds its attention core only, which is less; no
// recomputation leaves the estimate as it was; and the bound's makespan never moves.
TEST(Spindle, TheEstimateCarriesTheRecomputationOfTheBlocks) {
  const TaskGraph graph = two_tasks();
  const ClusterSpec cluster = cluster_preset("a800:8");
  const AnalyticCost cost(cluster);
  MultitaskInputs in{&graph, &cluster, &cost, cost.efficiency()};
  const MultitaskPlan plan = plan_multitask(in);
  const std::vector<PlannedWave> waves = sequential_waves(in, plan);
  const BaselineTimes plain = estimate_waves(in, plan.graph, waves);
  const ModelSpec& model = graph.model;
  auto modes = [&](Recompute r) {
    std::vector<Recompute> out;
    for (const ComponentSpec& c : model.components) {
      for (const LayerSpec& l : c.layers) out.push_back(l.kind == LayerKind::kTransformerBlock ? r : Recompute::kNone);
    }
    return out;
  };
  const BaselineTimes none = estimate_waves(in, plan.graph, waves, modes(Recompute::kNone));
  EXPECT_DOUBLE_EQ(none.iteration_seconds, plain.iteration_seconds);
  EXPECT_EQ(none.recompute_seconds, 0);

  double forwards = 0;
  for (const PlannedWave& w : waves) {
    ASSERT_EQ(w.slices.size(), 1u);
    const PlacedSlice& s = w.slices[0];
    const MetaOp& op = plan.graph.ops[s.metaop];
    ASSERT_EQ(op.layer.kind, LayerKind::kTransformerBlock);
    const LayerWork work = metaop_work(op, s.dp, s.tp, true, Dtype::kBf16);  // a forward pass
    forwards += static_cast<double>(s.layers * op.micro_batches) * cost.layer_cost(work).seconds;
  }
  ASSERT_GT(forwards, 0);
  const BaselineTimes full = estimate_waves(in, plan.graph, waves, modes(Recompute::kFull));
  EXPECT_NEAR(full.recompute_seconds, forwards, 1e-9 * forwards);
  EXPECT_NEAR(full.compute_seconds, plain.compute_seconds + forwards, 1e-9 * forwards);
  EXPECT_GT(full.iteration_seconds, plain.iteration_seconds);
  EXPECT_DOUBLE_EQ(full.makespan_seconds, plain.makespan_seconds);

  const BaselineTimes selective = estimate_waves(in, plan.graph, waves, modes(Recompute::kSelective));
  EXPECT_GT(selective.recompute_seconds, 0);
  EXPECT_LT(selective.recompute_seconds, full.recompute_seconds);

  EXPECT_THROW(estimate_waves(in, plan.graph, waves, std::vector<Recompute>(2, Recompute::kFull)), InputError);
}

// A light encoder before a heavy LLM, one after the other: the LLM's backward runs first, then its gradients'
// all-reduce (the longer by far) while the encoder's backward runs. The encoder's recomputation belongs to that
// backward, under the all-reduce: it leaves the iteration as it was (were a third of it counted in the forward,
// the LLM's all-reduce would start and end that much later).
TEST(Spindle, RecomputationIsPartOfTheBackwardAndHidesUnderALaterWavesAllReduce) {
  const TaskGraph graph = task_graph_from_json(R"({"fulcrum": 1, "kind": "tasks", "name": "chain",
  "model": {"fulcrum": 1, "name": "chain", "components": [
    {"name": "vision", "role": "encoder", "layers": [{"kind": "transformer", "repeat": 2, "hidden": 256, "ffn": 1024, "heads": 4}]},
    {"name": "llm", "role": "llm", "layers": [{"kind": "transformer", "repeat": 2, "hidden": 8192, "ffn": 32768, "heads": 64}]}]},
  "tasks": [{"name": "vl", "batch": 64, "nodes": [
      {"name": "image", "component": "vision", "tokens": 64},
      {"name": "llm", "component": "llm", "tokens": 512, "inputs": ["image"]}]}]})",
                                               "chain.json");
  const ClusterSpec cluster = cluster_preset("a800:8");
  const AnalyticCost cost(cluster);
  MultitaskInputs in{&graph, &cluster, &cost, cost.efficiency()};
  const MultitaskPlan plan = plan_multitask(in);
  const std::vector<PlannedWave> waves = sequential_waves(in, plan);
  ASSERT_EQ(waves.size(), 2u);
  ASSERT_EQ(plan.graph.ops[waves[0].slices[0].metaop].component, 0);  // the encoder's wave first
  const BaselineTimes plain = estimate_waves(in, plan.graph, waves);
  std::vector<Recompute> encoder_only{Recompute::kFull, Recompute::kFull, Recompute::kNone, Recompute::kNone};
  const BaselineTimes recomputing = estimate_waves(in, plan.graph, waves, encoder_only);
  ASSERT_GT(recomputing.recompute_seconds, 0);
  // The premise: the LLM's all-reduce outlasts the encoder's whole backward, recomputation included.
  double llm_sync = 0;
  for (const SyncGroup& g : sync_groups_of(in, plan.graph, waves)) {
    if (g.ready_wave == 1) llm_sync += g.seconds;
  }
  ASSERT_GT(llm_sync, 10 * (waves[0].slices[0].seconds + recomputing.recompute_seconds));
  EXPECT_NEAR(recomputing.compute_seconds, plain.compute_seconds + recomputing.recompute_seconds,
              1e-12 * plain.compute_seconds);
  EXPECT_NEAR(recomputing.iteration_seconds, plain.iteration_seconds, 1e-12 * plain.iteration_seconds);
}

// A tower that shrinks from 8 devices to 4 keeps half of its own, where its activations are, though a wider slice
// with nothing to fetch (the other task's tower) comes first by size: on another node the tower's new devices would
// take a quarter of the batch each over the network.
TEST(Spindle, ASliceShrinkingOntoItsDevicesKeepsThemBeforeAWiderOneTakesThem) {
  const TaskGraph graph = two_tasks();
  const ClusterSpec cluster = cluster_preset("a800:16");
  const AnalyticCost cost(cluster);
  const MultitaskInputs in{&graph, &cluster, &cost, cost.efficiency()};
  const MultitaskPlan plan = plan_multitask(in);
  const MetaGraph& g = plan.graph;
  int tower = -1, other = -1;
  for (size_t m = 0; m < g.ops.size(); ++m) {
    const std::string& component = graph.model.components[g.ops[m].component].name;
    if (g.ops[m].task == 0 && component == "vision") tower = static_cast<int>(m);
    if (g.ops[m].task == 1 && component == "vision") other = static_cast<int>(m);
  }
  ASSERT_GE(tower, 0);
  ASSERT_GE(other, 0);
  ASSERT_TRUE(g.ops[other].inputs.empty());
  for (const auto& [m, devices] : {std::pair{tower, 8}, std::pair{tower, 4}, std::pair{other, 8}}) {
    ASSERT_NE(plan.curves[m].at(devices), nullptr) << m << " on " << devices;
  }
  auto slice = [&](int m, int devices, int64_t first_layer, int64_t layers) {
    const CurvePoint& p = *plan.curves[m].at(devices);
    PlacedSlice s;
    s.metaop = m;
    s.devices = devices;
    s.first_layer = first_layer;
    s.layers = layers;
    s.seconds = static_cast<double>(layers) * p.seconds;
    s.dp = p.dp;
    s.tp = p.tp;
    return s;
  };
  const int64_t half = g.ops[tower].layers / 2;
  std::vector<PlannedWave> waves(2);
  waves[0].slices = {slice(tower, 8, 0, half)};
  waves[1].slices = {slice(other, 8, 0, g.ops[other].layers), slice(tower, 4, half, g.ops[tower].layers - half)};
  place_waves(in, g, waves);
  const std::vector<int>& before = waves[0].slices[0].device_ids;
  const std::vector<int>& after = waves[1].slices[1].device_ids;
  ASSERT_EQ(after.size(), 4u);
  for (int d : after) EXPECT_TRUE(std::binary_search(before.begin(), before.end(), d)) << d;
  for (int d : waves[1].slices[0].device_ids) {
    EXPECT_FALSE(std::binary_search(after.begin(), after.end(), d)) << "device " << d << " twice in a wave";
  }
  // All of it over NVLink: device 0 keeps its eighth and fetches device 1's; devices 1–3, each holding an eighth
  // that another needs, fetch two eighths each, the busiest.
  const PlacedSlice& from = waves[0].slices[0];
  ASSERT_EQ(from.dp, 8);
  ASSERT_EQ(waves[1].slices[1].dp, 4);
  const double bytes = activation_element_bytes(in.dtype) *
                       static_cast<double>(g.ops[tower].micro_batches * g.ops[tower].sequences * g.ops[tower].tokens *
                                           g.ops[tower].layer.hidden);
  const double nvlink = link_bytes_per_second(cluster, in.efficiency, true);
  EXPECT_NEAR(estimate_waves(in, g, waves).transfer_seconds,
              2 * (in.efficiency.collective_latency_seconds + bytes / 4 / nvlink), 1e-12);
}

TEST(Spindle, RefusesMissingInputs) {
  EXPECT_THROW(plan_multitask({}), InputError);
}

}  // namespace
}  // namespace fulcrum
