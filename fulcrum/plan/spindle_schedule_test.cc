#include "fulcrum/plan/spindle_schedule.h"

#include <algorithm>
#include <functional>
#include <stdexcept>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/cost/collective_cost.h"
#include "fulcrum/cost/dtype.h"
#include "fulcrum/sched/schedule_json.h"
#include "fulcrum/sched/validate.h"
#include "fulcrum/sim/simulator.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

struct Planned {
  TaskGraph graph;
  ClusterSpec cluster;
  AnalyticCost cost;
  MultitaskInputs in;
  MultitaskPlan plan;

  Planned(const std::string& tasks, const std::string& devices, const std::function<void(TaskGraph&)>& edit = {})
      : graph(task_graph_preset(tasks)), cluster(cluster_preset(devices)), cost(cluster) {
    if (edit) edit(graph);
    in = {&graph, &cluster, &cost, cost.efficiency()};
    plan = plan_multitask(in);
  }
  SimResult run(const Schedule& s) const {
    return simulate(s, graph.model, cluster, cost, in.efficiency, MicroBatchLoads{});
  }
};

// The plan's waves and every baseline's arrangement become schedules that validate and simulate; the simulated
// iteration is at least the planned compute (its forward and backward waves each as long as the slowest slice)
// and close to the planner's own estimate.
TEST(WavesSchedule, ThePlanAndItsBaselinesValidateAndSimulate) {
  for (const auto& [tasks, devices] : {std::pair{"multitask-clip-4", "a800:8"}, std::pair{"multitask-clip-10", "a800:16"},
                                       std::pair{"qwen-val", "a800:32"}}) {
    Planned p(tasks, devices);
    const MultitaskBaselines base = multitask_baselines(p.in, p.plan);
    const std::pair<std::vector<PlannedWave>, double> arrangements[] = {
        {p.plan.waves, p.plan.iteration_seconds},
        {sequential_waves(p.in, p.plan), base.sequential.iteration_seconds},
        {per_task_waves(p.in, p.plan), base.per_task.iteration_seconds},
        {task_greedy_waves(p.in, p.plan), base.task_greedy.iteration_seconds}};
    for (const auto& [waves, estimate] : arrangements) {
      const Schedule s = waves_schedule(p.in, p.plan.graph, waves);
      ASSERT_NO_THROW(validate(s)) << tasks;
      const SimResult r = p.run(s);
      const double compute = estimate_waves(p.in, p.plan.graph, waves).compute_seconds;
      EXPECT_GE(r.iteration_seconds, 0.99 * compute) << tasks;
      // The simulator times forward and backward waves apart and adds the optimizer step; the planner does not.
      EXPECT_NEAR(r.iteration_seconds, estimate, 0.25 * estimate) << tasks;
      EXPECT_GT(r.model_flops, 0);
      // Written and read back, the same run.
      const Schedule back = schedule_from_json(schedule_to_json(s), "waves.json");
      EXPECT_EQ(p.run(back).iteration_seconds, r.iteration_seconds);
    }
  }
}

// Waves cut so their gradients' all-reduces overlap their own backward keep every MetaOp after its inputs: a
// task-greedy wave holds a task's chain of MetaOps on its devices, which a cut into parts of every slice's layers
// broke (a tower's final norm in the first part, after only its first blocks). waves_schedule() refuses a MetaOp
// placed before its input is whole.
TEST(WavesSchedule, CutWavesKeepEachMetaOpAfterItsInputs) {
  for (const auto& [tasks, devices] : {std::pair{"multitask-clip-4", "a800:16"}, std::pair{"qwen-val", "a800:64"},
                                       std::pair{"ofasys-4", "a800:8"}, std::pair{"multitask-clip-10", "a800:32"}}) {
    Planned p(tasks, devices);
    for (const std::vector<PlannedWave>& waves :
         {task_greedy_waves(p.in, p.plan), per_task_waves(p.in, p.plan), p.plan.waves}) {
      const std::vector<PlannedWave> cut = cut_for_gradient_overlap(p.in, p.plan.graph, waves);
      ASSERT_NO_THROW(validate(waves_schedule(p.in, p.plan.graph, cut))) << tasks << " on " << devices;
    }
  }
}

// Every plan of the same model does the same work: the model FLOPs do not depend on the arrangement.
TEST(WavesSchedule, EveryArrangementDoesTheSameWork) {
  Planned p("multitask-clip-7", "a800:16");
  const double planned = p.run(waves_schedule(p.in, p.plan.graph, p.plan.waves)).model_flops;
  for (const auto& waves : {sequential_waves(p.in, p.plan), per_task_waves(p.in, p.plan), task_greedy_waves(p.in, p.plan)}) {
    EXPECT_NEAR(p.run(waves_schedule(p.in, p.plan.graph, waves)).model_flops, planned, 1e-9 * planned);
  }
}

// MetaOp `m` on `ids`, whole, at its curve's point for their count.
PlacedSlice placed(const Planned& p, int m, const std::vector<int>& ids) {
  const CurvePoint* at = p.plan.curves[m].at(static_cast<int>(ids.size()));
  if (!at) throw std::logic_error("the test's MetaOp has no point at the devices it is given");
  PlacedSlice s;
  s.metaop = m;
  s.devices = at->devices;
  s.layers = p.plan.graph.ops[m].layers;
  s.seconds = static_cast<double>(s.layers) * at->seconds;
  s.dp = at->dp;
  s.tp = at->tp;
  s.device_ids = ids;
  return s;
}

// A MetaOp on `producer_ids` and the one after it on `consumer_ids`, in two waves, each over its devices at its
// curve's point for their count.
std::vector<PlannedWave> two_waves(const Planned& p, const std::vector<int>& producer_ids,
                                   const std::vector<int>& consumer_ids) {
  const MetaGraph& g = p.plan.graph;
  int consumer = -1;
  for (size_t m = 0; m < g.ops.size() && consumer < 0; ++m) {
    if (g.ops[m].inputs.size() == 1) consumer = static_cast<int>(m);
  }
  const int producer = g.ops.at(consumer).inputs[0];
  std::vector<PlannedWave> waves(2);
  for (int m : {producer, consumer}) {
    PlannedWave& w = waves[m == producer ? 0 : 1];
    w.slices.push_back(placed(p, m, m == producer ? producer_ids : consumer_ids));
    w.seconds = w.slices.back().seconds;
  }
  return waves;
}

// A MetaOp and the one after it in two waves on different devices, so that activations and gradients move.
std::vector<PlannedWave> two_waves_apart(const Planned& p) { return two_waves(p, {0, 1, 2, 3}, {4, 5, 6, 7}); }

class BrokenWaves : public ::testing::Test {
 protected:
  BrokenWaves() : p_("multitask-clip-4", "a800:8"), s_(waves_schedule(p_.in, p_.plan.graph, two_waves_apart(p_))) {}
  std::string error_of(const Schedule& s) const {
    try {
      validate(s);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }
  std::string simulation_error_of(const Schedule& s) const {
    try {
      p_.run(s);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }
  Planned p_;
  Schedule s_;
};

// The two waves apart move activations forward and gradients back, and the simulator waits for them.
TEST_F(BrokenWaves, TheWellFormedOneValidatesAndRuns) {
  ASSERT_NO_THROW(validate(s_));
  int sends = 0;
  for (const Program& program : s_.programs) {
    for (const Instruction& in : program.instructions) sends += in.op == OpKind::kSend;
  }
  EXPECT_EQ(sends, 8);  // 4 devices send activations on, 4 send gradients back
  // Both waves' passes, forward and backward, and the transfers between them, one after another.
  double passes = 0;
  for (const PlannedWave& w : two_waves_apart(p_)) passes += w.seconds;
  EXPECT_GT(p_.run(s_).iteration_seconds, passes);
}

// A tensor-parallel group of at most a node placed across a node boundary (where placement found no block of a
// node free) runs its collectives at the network's rate, not NVLink's: the same slice simulates slower there.
TEST(WavesSchedule, ATensorParallelGroupAcrossANodeBoundaryRunsAtTheNetworksRate) {
  Planned p("multitask-clip-4", "a800:16");
  const auto consumer_on = [&](const std::vector<int>& ids) {
    std::vector<PlannedWave> waves = two_waves(p, {12, 13, 14, 15}, {12, 13, 14, 15});
    PlacedSlice& s = waves[1].slices.at(0);
    EXPECT_GT(p.graph.model.components[p.plan.graph.ops[s.metaop].component].layers.size(), 2u);
    s.tp = 4;
    s.dp = 1;
    s.device_ids = ids;
    const Schedule schedule = waves_schedule(p.in, p.plan.graph, waves);
    validate(schedule);
    return p.run(schedule).iteration_seconds;
  };
  // Its input comes from node 1: placed in node 0, all of it crosses the network; across the boundary, half of it
  // stays in node 1, so only the tensor-parallel collectives can make it slower.
  const double inside = consumer_on({0, 1, 2, 3});
  const double across = consumer_on({6, 7, 8, 9});
  EXPECT_GT(across, 1.01 * inside);
}

// Quarters of a batch on devices 0–3 taken on by devices 0 and 1 in halves: device 0 keeps its quarter and sends
// nothing, devices 1, 2 and 3 send theirs (reshard_cost.h), and device 1, which takes two quarters, starts its
// forward only once both are in over its link.
TEST(WavesSchedule, ActivationsMoveOnlyWhereTheirRowsChangeDevice) {
  Planned p("multitask-clip-4", "a800:8");
  const std::vector<PlannedWave> waves = two_waves(p, {0, 1, 2, 3}, {0, 1});
  const PlacedSlice& from = waves[0].slices[0];
  const PlacedSlice& to = waves[1].slices[0];
  ASSERT_EQ(from.dp, 4);
  ASSERT_EQ(to.dp, 2);
  const Schedule s = waves_schedule(p.in, p.plan.graph, waves);
  ASSERT_NO_THROW(validate(s));
  SimOptions options;
  options.timeline = true;
  const SimResult r = simulate(s, p.graph.model, p.cluster, p.cost, p.in.efficiency, MicroBatchLoads{}, options);
  const MetaOp& producer = p.plan.graph.ops[from.metaop];
  const double bytes = activation_element_bytes(options.dtype) *
                       static_cast<double>(producer.micro_batches * producer.sequences * producer.tokens *
                                           producer.layer.hidden);
  const double quarter = bytes / 4 / link_bytes_per_second(p.cluster, p.in.efficiency, true);
  const double latency = p.in.efficiency.collective_latency_seconds;
  std::vector<double> sent(4, -1);
  double first_send_start = 1e300, consumer_start = -1;
  for (const TimelineEvent& e : r.timeline) {
    if (e.stream == TimelineEvent::Stream::kP2p && e.op == OpKind::kSend && e.stage == 0) {
      sent[static_cast<size_t>(e.rank)] = e.end_seconds - e.start_seconds;
      if (e.end_seconds > e.start_seconds) first_send_start = std::min(first_send_start, e.start_seconds);
    }
    if (e.rank == 1 && e.op == OpKind::kForward && e.stage == 1) consumer_start = e.start_seconds;
  }
  EXPECT_EQ(sent[0], 0);
  for (size_t d = 1; d < 4; ++d) EXPECT_NEAR(sent[d], latency + quarter, 1e-12) << d;
  EXPECT_GE(consumer_start, first_send_start + latency + 2 * quarter - 1e-12);
}

// A frozen producer with nothing trained upstream has no backward: the trained slice after it, on other devices,
// passes it no gradient (it had sent one nobody used, which the simulator priced and the runtime sent as zeros).
// The same waves with the producer trained carry the gradient back, and take longer for it.
TEST(WavesSchedule, AFrozenSliceWithoutABackwardTakesNoGradient) {
  auto transfers = [](const Schedule& s, Payload payload, int sender, int receiver) {
    int n = 0;
    for (const Program& program : s.programs) {
      for (const Instruction& in : program.instructions) {
        if ((in.op != OpKind::kSend && in.op != OpKind::kRecv) || in.payload != payload) continue;
        const bool send = in.op == OpKind::kSend;
        n += (send ? in.stage : in.peer_stage) == sender && (send ? in.peer_stage : in.stage) == receiver;
      }
    }
    return n;
  };
  // qwen-val's first task: the image tower's stem (MetaOp 0) and blocks (1) on devices 0–3 in wave 0, its adapter
  // (2) on devices 4–7 in wave 1.
  auto waves_of = [](const Planned& p) {
    const MetaGraph& g = p.plan.graph;
    if (g.ops.size() < 3 || g.ops[1].inputs != std::vector<int>{0} || g.ops[2].inputs != std::vector<int>{1} ||
        g.ops[1].component == g.ops[2].component) {
      throw std::logic_error("qwen-val's first MetaOps are not the tower's stem, blocks and adapter");
    }
    std::vector<PlannedWave> waves(2);
    waves[0].slices = {placed(p, 0, {0, 1, 2, 3}), placed(p, 1, {0, 1, 2, 3})};
    waves[1].slices = {placed(p, 2, {4, 5, 6, 7})};
    for (PlannedWave& w : waves) {
      for (const PlacedSlice& sl : w.slices) w.seconds += sl.seconds;
    }
    return waves;
  };
  const Planned trained("qwen-val", "a800:8");
  const int tower = trained.plan.graph.ops[1].component;
  const Planned frozen("qwen-val", "a800:8",
                       [&](TaskGraph& g) { g.model.components[static_cast<size_t>(tower)].trainable = false; });
  const Schedule with = waves_schedule(trained.in, trained.plan.graph, waves_of(trained));
  const Schedule without = waves_schedule(frozen.in, frozen.plan.graph, waves_of(frozen));
  ASSERT_NO_THROW(validate(with));
  ASSERT_NO_THROW(validate(without));
  ASSERT_TRUE(with.tasks.slices[1].input_gradient);
  ASSERT_FALSE(without.tasks.slices[1].input_gradient);
  EXPECT_TRUE(without.tasks.slices[2].input_gradient);  // the adapter trains
  // Activations go forward either way (4 sends, 4 receives); the gradient only to a tower with a backward.
  EXPECT_EQ(transfers(with, Payload::kActivation, 1, 2), 8);
  EXPECT_EQ(transfers(without, Payload::kActivation, 1, 2), 8);
  EXPECT_EQ(transfers(with, Payload::kGradient, 2, 1), 8);
  EXPECT_EQ(transfers(without, Payload::kGradient, 2, 1), 0);
  EXPECT_LT(frozen.run(without).iteration_seconds, trained.run(with).iteration_seconds);
}

// The same four devices going from data parallelism (each a quarter of the rows, whole) to tensor parallelism
// (every row, a quarter of each): each device holds a quarter of what it needs, so the rows move between the waves
// both ways, and the planner's transfer estimate counts them.
TEST(WavesSchedule, RowsMoveWhereTheSameDevicesSplitThemAnotherWay) {
  Planned p("multitask-clip-4", "a800:8");
  std::vector<PlannedWave> waves = two_waves(p, {0, 1, 2, 3}, {0, 1, 2, 3});
  ASSERT_EQ(waves[0].slices[0].dp, 4);
  PlacedSlice& to = waves[1].slices[0];
  to.dp = 1;
  to.tp = 4;
  const Schedule s = waves_schedule(p.in, p.plan.graph, waves);
  ASSERT_NO_THROW(validate(s));
  int sends = 0;
  for (const Program& program : s.programs) {
    for (const Instruction& in : program.instructions) sends += in.op == OpKind::kSend;
  }
  EXPECT_EQ(sends, 8);  // every device sends activations on and gradients back
  EXPECT_GT(estimate_waves(p.in, p.plan.graph, waves).transfer_seconds, 0);
  double passes = 0;
  for (const PlannedWave& w : waves) passes += w.seconds;
  EXPECT_GT(p.run(s).iteration_seconds, passes);
}

TEST_F(BrokenWaves, AForwardOutsideItsWave) {
  Schedule s = s_;
  auto& program = s.programs[0].instructions;
  const auto forward = std::find_if(program.begin(), program.end(),
                                    [](const Instruction& in) { return in.op == OpKind::kForward; });
  const auto boundary = std::find_if(forward, program.end(),
                                     [](const Instruction& in) { return in.op == OpKind::kWaveBoundary; });
  ASSERT_NE(boundary, program.end());
  std::rotate(forward, boundary, boundary + 1);  // wave 0's boundary before the forward and its send
  EXPECT_THAT(error_of(s), HasSubstr("its slice's is 0"));
}

TEST_F(BrokenWaves, ASliceOnADeviceItDoesNotHold) {
  Schedule s = s_;
  s.tasks.slices[0].devices = {0};
  s.tasks.slices[0].dp = 1;
  s.tasks.slices[0].tp = 1;
  EXPECT_FALSE(error_of(s).empty());
}

TEST_F(BrokenWaves, AReceiveWithoutItsSend) {
  Schedule s = s_;
  for (auto& program : s.programs) {
    auto& ins = program.instructions;
    const auto send = std::find_if(ins.begin(), ins.end(), [](const Instruction& in) { return in.op == OpKind::kSend; });
    if (send == ins.end()) continue;
    ins.erase(send);
    EXPECT_THAT(error_of(s), HasSubstr("sends its"));
    return;
  }
  FAIL() << "no transfer between the two waves";
}

// Gradients are whole only once the backward wave that completes them is over; a sync group names layers that run.
TEST_F(BrokenWaves, ASyncBeforeTheBackwardOrOfLayersThatDoNotExist) {
  Schedule early = s_;
  ASSERT_FALSE(early.tasks.sync_groups.empty());
  for (auto& program : early.programs) {
    auto& ins = program.instructions;
    const auto c = std::find_if(ins.begin(), ins.end(), [](const Instruction& in) { return in.op == OpKind::kCollective; });
    if (c == ins.end()) continue;
    std::rotate(ins.begin(), c, c + 1);
    break;
  }
  EXPECT_THAT(error_of(early), HasSubstr("which completes its gradients, is over"));
  Schedule unknown = s_;
  unknown.tasks.sync_groups[0].layers.push_back({0, 100000});
  EXPECT_THAT(error_of(unknown), HasSubstr("which no slice runs"));
  EXPECT_THROW(p_.run(unknown), InputError);
}

// A group's shards must be whole shards of every slice holding its layers, and its devices hold each shard's copies.
TEST_F(BrokenWaves, ASyncGroupOfShardsItsDevicesOrSlicesDoNotHold) {
  ASSERT_FALSE(s_.tasks.sync_groups.empty());
  Schedule uneven = s_;
  uneven.tasks.sync_groups[0].tp = static_cast<int32_t>(uneven.tasks.sync_groups[0].devices.size()) + 1;
  EXPECT_THAT(error_of(uneven), HasSubstr("do not hold"));
  Schedule finer = s_;
  int slice_tp = 0;
  for (const TaskSlice& sl : finer.tasks.slices) slice_tp = std::max(slice_tp, sl.tp);
  ASSERT_EQ(slice_tp, 1) << "the two waves apart use data parallelism only";
  finer.tasks.sync_groups[0].tp = 2;
  ASSERT_EQ(finer.tasks.sync_groups[0].devices.size() % 2, 0u);
  EXPECT_THAT(error_of(finer), HasSubstr("splits 1 ways"));
}

TEST_F(BrokenWaves, AMissingSyncCollective) {
  Schedule s = s_;
  ASSERT_FALSE(s.tasks.sync_groups.empty());
  for (auto& program : s.programs) {
    auto& ins = program.instructions;
    const auto c = std::find_if(ins.begin(), ins.end(), [](const Instruction& in) { return in.op == OpKind::kCollective; });
    if (c == ins.end()) continue;
    ins.erase(c);
    EXPECT_THAT(error_of(s), HasSubstr("is missing on device"));
    return;
  }
}

// A sync group all-reduces gradients, which is what the simulator times and the runtime runs: a collective of
// another kind or tensor in its place is refused.
TEST_F(BrokenWaves, ASyncCollectiveOfAnotherKindOrTensor) {
  for (const bool kind : {true, false}) {
    Schedule s = s_;
    bool changed = false;
    for (auto& program : s.programs) {
      for (Instruction& in : program.instructions) {
        if (in.op != OpKind::kCollective || changed) continue;
        if (kind) {
          in.collective = CollectiveKind::kAllGather;
        } else {
          in.tensor = CollectiveTensor::kParameters;
        }
        changed = true;
      }
    }
    ASSERT_TRUE(changed);
    EXPECT_THAT(error_of(s), HasSubstr(kind ? "a sync group all-reduces gradients, not all_gather gradients"
                                            : "a sync group all-reduces gradients, not all_reduce parameters"));
  }
}

// A shared layer whose copies no group all-reduces, or one all-reduced over fewer devices than hold it, is a
// schedule that trains its copies apart: well formed, so validate() passes it, but the simulator knows the model.
// The validator refuses a group issued twice or left out on a device; the simulator, run without it, fails
// rather than time a step whose gradients were never all-reduced, or read past a device's list.
TEST_F(BrokenWaves, ASyncCollectiveTwiceOrMissingNeverStartsInTheSimulator) {
  ASSERT_FALSE(s_.tasks.sync_groups.empty());
  for (const bool twice : {true, false}) {
    Schedule s = s_;
    auto& ins = s.programs[s_.tasks.sync_groups[0].devices[0]].instructions;
    const auto c = std::find_if(ins.begin(), ins.end(), [](const Instruction& in) {
      return in.op == OpKind::kCollective && in.stage == 0;
    });
    ASSERT_NE(c, ins.end());
    if (twice) {
      ins.insert(c, *c);
    } else {
      ins.erase(c);
    }
    EXPECT_FALSE(error_of(s).empty());
    EXPECT_THAT(simulation_error_of(s), HasSubstr("is left waiting")) << (twice ? "twice" : "missing");
  }
}

TEST_F(BrokenWaves, CopiesOfALayerThatNoSyncGroupKeepsEqual) {
  ASSERT_NO_THROW(p_.run(s_));
  ASSERT_FALSE(s_.tasks.sync_groups.empty());
  // The widest group of several layers: one of them taken out still leaves a group of layers that run.
  const auto group = std::max_element(s_.tasks.sync_groups.begin(), s_.tasks.sync_groups.end(),
                                      [](const SyncGroupSpec& a, const SyncGroupSpec& b) {
                                        return std::pair(a.layers.size() > 1, a.devices.size() / a.tp) <
                                               std::pair(b.layers.size() > 1, b.devices.size() / b.tp);
                                      });
  ASSERT_GE(group->layers.size(), 2u);
  ASSERT_GE(group->devices.size() / group->tp, 2u);
  const int g = static_cast<int>(group - s_.tasks.sync_groups.begin());
  const auto [component, layer] = group->layers.front();
  const std::string held = fmt::format("layer {} of component '{}' is held by devices", layer,
                                       p_.graph.model.components[component].name);

  Schedule unsynced = s_;
  unsynced.tasks.sync_groups[g].layers.erase(unsynced.tasks.sync_groups[g].layers.begin());
  ASSERT_NO_THROW(validate(unsynced));
  EXPECT_THAT(simulation_error_of(unsynced), HasSubstr(held));
  EXPECT_THAT(simulation_error_of(unsynced), HasSubstr("no sync group over all of them"));

  // The group over one device fewer, that device's collective gone with it: one copy is left out.
  Schedule partial = s_;
  const int32_t left_out = partial.tasks.sync_groups[g].devices.back();
  partial.tasks.sync_groups[g].devices.pop_back();
  ASSERT_EQ(partial.tasks.sync_groups[g].tp, 1) << "the two waves apart use data parallelism only";
  auto& ins = partial.programs[left_out].instructions;
  ins.erase(std::remove_if(ins.begin(), ins.end(),
                           [&](const Instruction& in) { return in.op == OpKind::kCollective && in.stage == g; }),
            ins.end());
  ASSERT_NO_THROW(validate(partial));
  EXPECT_THAT(simulation_error_of(partial), HasSubstr(held));
}

// A sync group all-reduces exactly the copies its layers have: a group over more devices than hold its layers, a
// layer listed twice or in two groups (all-reduced twice, its bytes counted twice) are refused.
TEST_F(BrokenWaves, ASyncGroupOverOtherDevicesOrALayerSynchronisedTwice) {
  ASSERT_FALSE(s_.tasks.sync_groups.empty());
  const SyncGroupSpec& group = s_.tasks.sync_groups.front();
  ASSERT_FALSE(group.layers.empty());
  int32_t outside = 0;  // a device the group's layers are not on
  while (std::binary_search(group.devices.begin(), group.devices.end(), outside)) ++outside;
  ASSERT_LT(outside, p_.cluster.devices);

  Schedule wider = s_;
  std::vector<int32_t>& devices = wider.tasks.sync_groups.front().devices;
  devices.insert(std::lower_bound(devices.begin(), devices.end(), outside), outside);
  EXPECT_THAT(simulation_error_of(wider), HasSubstr("sync group 0 spans devices "));
  EXPECT_THAT(simulation_error_of(wider), HasSubstr(" is held by devices "));

  Schedule listed_twice = s_;
  listed_twice.tasks.sync_groups.front().layers.push_back(group.layers.front());
  EXPECT_THAT(simulation_error_of(listed_twice), HasSubstr("is in sync group 0 and again in sync group 0"));

  Schedule two_groups = s_;
  two_groups.tasks.sync_groups.push_back(group);
  EXPECT_THAT(simulation_error_of(two_groups),
              HasSubstr(fmt::format("is in sync group 0 and again in sync group {}", s_.tasks.sync_groups.size())));
}

// Moved from where their gradients are whole to the end of every program, the same all-reduces no longer run
// under the later backward waves, and the iteration gets longer: the overlap is what the earlier place buys.
TEST(WavesSchedule, GradientSyncOverlapsTheLaterBackwardWaves) {
  Planned p("multitask-clip-10", "a800:16");
  const Schedule overlapped = waves_schedule(p.in, p.plan.graph, sequential_waves(p.in, p.plan));
  Schedule at_end = overlapped;
  int moved = 0;
  for (Program& program : at_end.programs) {
    auto& ins = program.instructions;
    const auto last_boundary = std::find_if(ins.rbegin(), ins.rend(), [](const Instruction& in) {
      return in.op == OpKind::kWaveBoundary;
    });
    moved += static_cast<int>(std::count_if(ins.begin(), last_boundary.base(), [](const Instruction& in) {
      return in.op == OpKind::kCollective;
    }));
    std::stable_partition(ins.begin(), ins.end(), [](const Instruction& in) { return in.op != OpKind::kCollective; });
  }
  ASSERT_GT(moved, 0) << "every all-reduce already waits for the last backward wave";
  ASSERT_NO_THROW(validate(overlapped));
  ASSERT_NO_THROW(validate(at_end));
  EXPECT_LT(p.run(overlapped).iteration_seconds, 0.97 * p.run(at_end).iteration_seconds);
}

// On cores shared with compute (the cpu kind), each sync group's all-reduce takes slowdown × its seconds from
// every member's compute, as a pipeline's data-parallel all-reduce does: with slowdown 1, each device's
// data-parallel time holds at least the seconds of every all-reduce it takes part in, as the same cluster without
// sharing times them on their own stream.
TEST(WavesSchedule, SyncAllReducesOnSharedCoresTakeTheirTimeFromCompute) {
  Planned p("multitask-clip-4", "a800:8");
  const Schedule s = waves_schedule(p.in, p.plan.graph, sequential_waves(p.in, p.plan));
  ASSERT_FALSE(s.tasks.sync_groups.empty());
  SimOptions timed;
  timed.timeline = true;
  const SimResult apart = simulate(s, p.graph.model, p.cluster, p.cost, p.in.efficiency, MicroBatchLoads{}, timed);
  std::vector<double> all_reduce_seconds(s.programs.size(), 0.0);
  for (const TimelineEvent& e : apart.timeline) {
    if (e.stream == TimelineEvent::Stream::kCollective && e.op == OpKind::kCollective && e.stage >= 0) {
      all_reduce_seconds[e.rank] += e.end_seconds - e.start_seconds;
    }
  }
  ClusterSpec shared = p.cluster;
  shared.device.communication_shares_compute = true;
  const auto run_with_slowdown = [&](double slowdown) {
    shared.device.communication_compute_slowdown = slowdown;
    return simulate(s, p.graph.model, shared, p.cost, p.in.efficiency, MicroBatchLoads{});
  };
  const SimResult free_beside = run_with_slowdown(0.0);
  const SimResult on_compute = run_with_slowdown(1.0);
  ASSERT_EQ(on_compute.per_device.size(), s.programs.size());
  for (size_t d = 0; d < s.programs.size(); ++d) {
    ASSERT_GT(all_reduce_seconds[d], 0) << "device " << d;
    EXPECT_GE(on_compute.per_device[d].dp_comm, all_reduce_seconds[d] * (1 - 1e-9)) << "device " << d;
    EXPECT_NEAR(on_compute.per_device[d].total(), on_compute.iteration_seconds, 1e-9 * on_compute.iteration_seconds);
  }
  EXPECT_GT(on_compute.iteration_seconds, free_beside.iteration_seconds);

  // Starting each all-reduce costs every member its measured compute on top: each device's data-parallel time
  // grows by that cost times the sync groups it belongs to, and the step by at least one of them.
  constexpr double kStart = 2e-3;
  shared.device.collective_compute_seconds = kStart;
  const SimResult started = run_with_slowdown(1.0);
  for (size_t d = 0; d < s.programs.size(); ++d) {
    const auto holds_d = [&](const SyncGroupSpec& g) {
      return std::find(g.devices.begin(), g.devices.end(), static_cast<int32_t>(d)) != g.devices.end();
    };
    const auto groups = std::count_if(s.tasks.sync_groups.begin(), s.tasks.sync_groups.end(), holds_d);
    // Every device holds every group, so the step's end is shared and only the starts move it.
    ASSERT_EQ(groups, static_cast<std::ptrdiff_t>(s.tasks.sync_groups.size())) << "device " << d;
    EXPECT_NEAR(started.per_device[d].dp_comm - on_compute.per_device[d].dp_comm, groups * kStart, 1e-9)
        << "device " << d;
    EXPECT_NEAR(started.per_device[d].total(), started.iteration_seconds, 1e-9 * started.iteration_seconds);
  }
  EXPECT_GE(started.iteration_seconds, on_compute.iteration_seconds + kStart * (1 - 1e-9));
}

// A device's all-reduces run one at a time in its program's order, as on one NCCL stream, even where a group it
// reaches later has all its devices there before an earlier one does (simulated out of that order, the later
// one started early and pushed the earlier past it).
TEST(WavesSchedule, EachDeviceRunsItsAllReducesOneAtATimeInItsProgramsOrder) {
  Planned p("multitask-clip-10", "a800:32");
  SimOptions timed;
  timed.timeline = true;
  for (const std::vector<PlannedWave>& waves : {p.plan.waves, sequential_waves(p.in, p.plan),
                                                per_task_waves(p.in, p.plan), task_greedy_waves(p.in, p.plan)}) {
    const Schedule s = waves_schedule(p.in, p.plan.graph, waves);
    const SimResult r = simulate(s, p.graph.model, p.cluster, p.cost, p.in.efficiency, MicroBatchLoads{}, timed);
    std::vector<std::vector<const TimelineEvent*>> ran(s.programs.size());
    for (const TimelineEvent& e : r.timeline) {
      if (e.stream == TimelineEvent::Stream::kCollective && e.op == OpKind::kCollective && e.stage >= 0) {
        ran[e.rank].push_back(&e);
      }
    }
    for (size_t d = 0; d < s.programs.size(); ++d) {
      std::vector<int32_t> issued;
      for (const Instruction& in : s.programs[d].instructions) {
        if (in.op == OpKind::kCollective) issued.push_back(in.stage);
      }
      std::stable_sort(ran[d].begin(), ran[d].end(), [](const TimelineEvent* a, const TimelineEvent* b) {
        return a->start_seconds < b->start_seconds;
      });
      ASSERT_EQ(ran[d].size(), issued.size()) << "device " << d;
      for (size_t i = 0; i < issued.size(); ++i) {
        EXPECT_EQ(ran[d][i]->stage, issued[i]) << "device " << d << ", all-reduce " << i;
        if (i > 0) {
          EXPECT_GE(ran[d][i]->start_seconds, ran[d][i - 1]->end_seconds - 1e-12) << "device " << d;
        }
      }
    }
  }
}

// A wave boundary orders a device's own work and waits for no other device, as WaveRuntime runs it: a device
// whose inputs for the next wave are there starts it while a slower slice of the wave before is still running
// (QWen-VAL on 64 devices: its encoders' slices end at different times).
TEST(WavesSchedule, ADeviceGoesOnToItsNextWaveWithoutWaitingForTheOthers) {
  Planned p("qwen-val", "a800:64");
  const Schedule s = waves_schedule(p.in, p.plan.graph, p.plan.waves);
  ASSERT_GT(s.tasks.waves, 1);
  SimOptions timed;
  timed.timeline = true;
  const SimResult r = simulate(s, p.graph.model, p.cluster, p.cost, p.in.efficiency, MicroBatchLoads{}, timed);
  std::vector<double> last_end(s.tasks.waves, 0.0), first_start(s.tasks.waves, r.iteration_seconds);
  for (const TimelineEvent& e : r.timeline) {
    if (e.stream != TimelineEvent::Stream::kCompute || e.op != OpKind::kForward) continue;
    const int wave = s.tasks.slices.at(e.stage).wave;
    last_end[wave] = std::max(last_end[wave], e.end_seconds);
    first_start[wave] = std::min(first_start[wave], e.start_seconds);
  }
  int early = 0;
  for (int w = 1; w < s.tasks.waves; ++w) early += first_start[w] < last_end[w - 1] ? 1 : 0;
  EXPECT_GT(early, 0) << "every forward wave began after the whole wave before it";
}

// Two sync groups issued in one order on a device and in the other on another device they share would each
// wait for the other under NCCL.
TEST(WavesSchedule, SyncGroupsIssuedInOppositeOrdersAreADeadlock) {
  Planned p("multitask-clip-10", "a800:16");
  Schedule s = waves_schedule(p.in, p.plan.graph, p.plan.waves);
  ASSERT_NO_THROW(validate(s));
  const auto& groups = s.tasks.sync_groups;
  auto shared_devices = [&](size_t a, size_t b) {
    std::vector<int32_t> both;
    std::set_intersection(groups[a].devices.begin(), groups[a].devices.end(), groups[b].devices.begin(),
                          groups[b].devices.end(), std::back_inserter(both));
    return both;
  };
  auto collective_of = [&](std::vector<Instruction>& ins, size_t group) {
    return std::find_if(ins.begin(), ins.end(), [&](const Instruction& i) {
      return i.op == OpKind::kCollective && i.group == DeviceGroup::kSync && i.stage == static_cast<int32_t>(group);
    });
  };
  for (size_t a = 0; a < groups.size(); ++a) {
    for (size_t b = a + 1; b < groups.size(); ++b) {
      const std::vector<int32_t> both = shared_devices(a, b);
      if (both.size() < 2) continue;
      // On the first shared device, group a's all-reduce (issued first everywhere) moves to just after group
      // b's: later than its gradients are ready, which alone is allowed.
      auto& ins = s.programs[both.front()].instructions;
      const auto first = collective_of(ins, a), second = collective_of(ins, b);
      ASSERT_NE(first, ins.end()) << "sync group " << a << " not issued";
      ASSERT_NE(second, ins.end()) << "sync group " << b << " not issued";
      ASSERT_LT(first, second) << "sync group " << a << " issued first";
      std::rotate(first, first + 1, second + 1);  // a's all-reduce now just after b's
      try {
        validate(s);
        FAIL() << "opposite orders of sync groups " << a << " and " << b << " validated";
      } catch (const InputError& e) {
        EXPECT_THAT(e.what(), HasSubstr("deadlock: sync group"));
      }
      return;
    }
  }
  FAIL() << "no two sync groups share two devices";
}

}  // namespace
}  // namespace fulcrum
