#include "fulcrum/sim/simulator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/collective_cost.h"
#include "fulcrum/model/model_presets.h"
#include "fulcrum/sched/pipeline_schedules.h"
#include "fulcrum/sched/validate.h"
#include "fulcrum/sim/test_pipelines.h"

namespace fulcrum {
namespace {

// One one-token sequence per micro-batch: a layer's pass takes exactly the PerTokenCost's seconds.
SimResult run(const Schedule& s, int layers, const CostModel& cost) {
  validate(s);
  return simulate(s, blocks_only_model(layers), instant_cluster(s.layout.devices()), cost, instant_efficiency(),
                  uniform_loads(s.micro_batches, 1, 1, 0));
}

struct PipelineCase {
  int pp;
  int micro_batches;
};

class ClosedForm : public ::testing::TestWithParam<PipelineCase> {};

// With f and b per stage per micro-batch and free communication, GPipe and 1F1B both take (m + p − 1)(f + b):
// the last micro-batch's forward reaches the last stage after p − 1 forwards, and its backward takes p − 1
// more backwards to come back, around m (f + b) of work on every stage.
TEST_P(ClosedForm, GpipeAndOneFOneBTakeMPlusPMinusOneTimesFPlusB) {
  const auto [pp, m] = GetParam();
  const double f = 1.0, b = 2.0;
  const PerTokenCost cost(f, b, 0);
  for (PipelineKind kind : {PipelineKind::kGpipe, PipelineKind::kOneFOneB}) {
    const SimResult r = run(test_schedule(kind, pp, 1, m, pp), pp, cost);
    EXPECT_NEAR(r.iteration_seconds, (m + pp - 1) * (f + b), 1e-9) << pipeline_kind_name(kind);
    // Every stage computes m(f + b); the rest is pipeline idle.
    EXPECT_NEAR(r.critical.compute, m * (f + b), 1e-9);
    EXPECT_NEAR(r.mean.pp_warmup + r.mean.pp_cooldown + r.mean.pp_other, (pp - 1) * (f + b), 1e-9);
  }
}

// Megatron's interleaved 1F1B with v chunks per rank: each chunk takes f/v and b/v, and the bubble shrinks to
// (p − 1)/v (f + b): (m + (p − 1)/v)(f + b).
TEST_P(ClosedForm, InterleavedTakesMPlusPMinusOneOverVTimesFPlusB) {
  const auto [pp, m] = GetParam();
  if (m % pp != 0) GTEST_SKIP() << "interleaving needs micro-batches divisible by pp";
  const double f = 1.0, b = 2.0;
  for (int v : {2, 3}) {
    const PerTokenCost cost(f / v, b / v, 0);  // one layer per chunk
    const SimResult r = run(test_schedule(PipelineKind::kInterleaved, pp, v, m, pp * v), pp * v, cost);
    EXPECT_NEAR(r.iteration_seconds, (m + (pp - 1.0) / v) * (f + b), 1e-9) << "v " << v;
  }
}

// Zero-bubble H1 with equal F, B and W: the weight gradients fill the cool-down, leaving (p − 1)(F + B − W)
// once there are enough micro-batches (2p) for a steady phase; never more than 1F1B's (p − 1)(F + B + W).
TEST_P(ClosedForm, ZeroBubbleH1LeavesPMinusOneTimesFPlusBMinusW) {
  const auto [pp, m] = GetParam();
  const PerTokenCost cost(1, 1, 1);
  const SimResult zb = run(test_schedule(PipelineKind::kZeroBubbleH1, pp, 1, m, pp), pp, cost);
  const SimResult one_f_one_b = run(test_schedule(PipelineKind::kOneFOneB, pp, 1, m, pp), pp, cost);
  EXPECT_NEAR(one_f_one_b.iteration_seconds, 3.0 * m + (pp - 1) * 3.0, 1e-9);
  if (m >= 2 * pp) {
    EXPECT_NEAR(zb.iteration_seconds, 3.0 * m + (pp - 1) * (1 + 1 - 1), 1e-9);
  } else if (pp > 1) {
    EXPECT_LT(zb.iteration_seconds, one_f_one_b.iteration_seconds);
  }
}

// LLaVA's projector takes a tile's 576 patch tokens, not its class token (577 with the class token kept); the
// tower runs every token; InternVL's shuffle makes 256 of 1,025.
TEST(Simulate, AProjectorTakesTheTokensItsEncoderPassesOn) {
  MicroBatchLoad images;
  images.sequences = 1;
  images.llm_tokens = 1024;
  images.vision = 2;  // tiles
  ModelSpec llava = model_preset("llava-1.5-7b");
  ASSERT_EQ(llava.components[1].role, ComponentRole::kProjector);
  EXPECT_EQ(component_batch(llava, 1, images).tokens, 2 * 576);
  EXPECT_EQ(component_batch(llava, 1, images).tokens_squared, 2 * 576 * 576);
  EXPECT_EQ(component_batch(llava, 0, images).tokens, 2 * 577);
  llava.components[0].drops_class_token = false;
  EXPECT_EQ(component_batch(llava, 1, images).tokens, 2 * 577);
  const ModelSpec internvl = model_preset("internvl-chat-1.5");
  EXPECT_EQ(component_batch(internvl, 1, images).tokens, 2 * 256);
  EXPECT_EQ(component_batch(internvl, 0, images).tokens, 2 * 1025);
}

// A runtime whose split backward costs more than its whole one (PyTorch's walks the graph twice): 1F1B's B pays
// the whole (1.5), ZB-H1's BI and W the halves (1 + 1). With p = 2 and m = 4 the split no longer wins:
// 1F1B (m + p − 1)(f + B) = 12.5 against ZB-H1's 3m + (p − 1)(F + BI − W) = 13.
TEST(Simulate, AMeasuredWholeBackwardPricesOneFOneBAndTheHalvesPriceZeroBubble) {
  const int pp = 2, m = 4;
  const PerTokenCost cost(1, 1, 1, 1.5);
  const SimResult one_f_one_b = run(test_schedule(PipelineKind::kOneFOneB, pp, 1, m, pp), pp, cost);
  const SimResult zb = run(test_schedule(PipelineKind::kZeroBubbleH1, pp, 1, m, pp), pp, cost);
  EXPECT_NEAR(one_f_one_b.iteration_seconds, (m + pp - 1) * 2.5, 1e-9);
  EXPECT_NEAR(zb.iteration_seconds, 3.0 * m + (pp - 1) * 1.0, 1e-9);
  EXPECT_NEAR(one_f_one_b.critical.compute, m * 2.5, 1e-9);
}

INSTANTIATE_TEST_SUITE_P(Pipelines, ClosedForm,
                         ::testing::Values(PipelineCase{1, 1}, PipelineCase{1, 4}, PipelineCase{2, 2},
                                           PipelineCase{2, 6}, PipelineCase{4, 4}, PipelineCase{4, 8},
                                           PipelineCase{4, 3}, PipelineCase{8, 16}),
                         [](const auto& info) {
                           return "pp" + std::to_string(info.param.pp) + "_m" + std::to_string(info.param.micro_batches);
                         });

// A data-parallel replica given twice the tokens takes twice as long, and every other replica waits for it at
// the gradient reduction.
TEST(Simulate, EveryReplicaWaitsForTheOneWithTwiceTheWork) {
  const int pp = 2, m = 4, dp = 3;
  const Schedule s = test_schedule(PipelineKind::kOneFOneB, pp, 1, m, pp, dp);
  validate(s);
  MicroBatchLoads loads = uniform_loads(m, 1, 1, 0);
  loads.per_replica = {loads.per_replica[0], loads.per_replica[0], uniform_loads(m, 1, 2, 0).per_replica[0]};
  const PerTokenCost cost(1, 2, 0);
  const SimResult r = simulate(s, blocks_only_model(pp), instant_cluster(s.layout.devices()), cost,
                               instant_efficiency(), loads);
  EXPECT_NEAR(r.iteration_seconds, 2 * (m + pp - 1) * 3.0, 1e-9);
  EXPECT_EQ(r.critical_replica, 2);
  ASSERT_EQ(r.per_device.size(), static_cast<size_t>(dp * pp));
  for (int d = 0; d < dp * pp; ++d) {
    EXPECT_NEAR(r.per_device[d].total(), r.iteration_seconds, 1e-9) << "device " << d;
    // The light replicas finish at half the time and wait the other half.
    const double expected_wait = d / pp == 2 ? 0 : (m + pp - 1) * 3.0;
    EXPECT_NEAR(r.per_device[d].dp_wait, expected_wait, 1e-9) << "device " << d;
  }
}

// Gradients all-reduced over the data-parallel group with only communication to pay: the ring closed form.
TEST(Simulate, GradientAllReduceTakesTheRingTime) {
  const int dp = 4, layers = 2;
  const Schedule s = test_schedule(PipelineKind::kOneFOneB, 1, 1, 1, layers, dp, StateSharding::kZero0);
  ClusterSpec cluster = instant_cluster(dp);
  cluster.device.devices_per_node = 1;  // every member on its own node: the network link
  cluster.device.inter_node_bytes_per_second = 1e6;  // slow enough for the ring to beat the tree
  DeviceEfficiency eff = instant_efficiency();
  eff.collective_latency_seconds = 1e-5;
  const ModelSpec model = blocks_only_model(layers);
  const SimResult r = simulate(s, model, cluster, PerTokenCost(0, 0, 0), eff, uniform_loads(1, 1, 1, 0));
  const double bytes = 2.0 * static_cast<double>(model.parameters());  // 16-bit gradients
  const double ring = 2.0 * (dp - 1) / dp * bytes / 1e6 + 2.0 * (dp - 1) * 1e-5;
  EXPECT_NEAR(r.iteration_seconds, ring, 1e-12);
  EXPECT_NEAR(r.critical.dp_comm, ring, 1e-12);
}

// The simulation's dtype reaches every layer pass it prices and the bytes it moves. On a cost model where fp32
// work takes twice the bf16 time, 1F1B's (m + p − 1)(f + b) doubles; fp32 gradients (4 bytes, not 2) double the
// ring all-reduce's bandwidth term and leave its latency term alone.
TEST(Simulate, PricesEveryPassAndGradientInTheGivenDtype) {
  class SlowerInFp32 : public CostModel {
   public:
    LayerCost layer_cost(const LayerWork& w) const override {
      LayerCost c = PerTokenCost(1, 2, 0).layer_cost(w);
      if (w.dtype == Dtype::kFp32) c.seconds *= 2;
      return c;
    }
  };
  const int pp = 2, m = 4;
  const Schedule s = test_schedule(PipelineKind::kOneFOneB, pp, 1, m, pp);
  validate(s);
  SimOptions fp32;
  fp32.dtype = Dtype::kFp32;
  const auto iteration = [&](const SimOptions& options) {
    return simulate(s, blocks_only_model(pp), instant_cluster(pp), SlowerInFp32(), instant_efficiency(),
                    uniform_loads(m, 1, 1, 0), options)
        .iteration_seconds;
  };
  EXPECT_NEAR(iteration({}), (m + pp - 1) * 3.0, 1e-9);
  EXPECT_NEAR(iteration(fp32), 2 * (m + pp - 1) * 3.0, 1e-9);

  const int dp = 4, layers = 2;
  const Schedule ddp = test_schedule(PipelineKind::kOneFOneB, 1, 1, 1, layers, dp, StateSharding::kZero0);
  ClusterSpec cluster = instant_cluster(dp);
  cluster.device.devices_per_node = 1;
  cluster.device.inter_node_bytes_per_second = 1e6;
  DeviceEfficiency eff = instant_efficiency();
  eff.collective_latency_seconds = 1e-5;
  const ModelSpec model = blocks_only_model(layers);
  const double bytes = 4.0 * static_cast<double>(model.parameters());
  const SimResult r = simulate(ddp, model, cluster, PerTokenCost(0, 0, 0), eff, uniform_loads(1, 1, 1, 0), fp32);
  EXPECT_NEAR(r.iteration_seconds, 2.0 * (dp - 1) / dp * bytes / 1e6 + 2.0 * (dp - 1) * 1e-5, 1e-12);
}

// On cores shared with communication, a pipeline send costs its device communication_compute_slowdown × its
// seconds of compute. 1F1B over 2 stages and 2 micro-batches, f = 1, b = 2, transfers of p: the critical path is
// stage 0's F0, the transfer, stage 1's F0 and B0, its send of gradient 0 (s·p on its cores before it can run
// F1), F1, B1, the transfer back and stage 0's B1: (m + pp − 1)(f + b) + 2p + s·p. Overlapping devices pay
// nothing for the send, as s = 0 does.
TEST(Simulate, SharedCoresLoseTheSlowdownTimesEachTransfer) {
  const int pp = 2, m = 2;
  const double p = 0.25;
  const Schedule s = test_schedule(PipelineKind::kOneFOneB, pp, 1, m, pp);
  validate(s);
  DeviceEfficiency eff = instant_efficiency();
  eff.collective_latency_seconds = p;  // every transfer: the latency, its bytes free
  const auto iteration = [&](const ClusterSpec& cluster) {
    return simulate(s, blocks_only_model(pp), cluster, PerTokenCost(1, 2, 0), eff, uniform_loads(m, 1, 1, 0))
        .iteration_seconds;
  };
  const ClusterSpec overlapping = instant_cluster(pp);
  EXPECT_NEAR(iteration(overlapping), (m + pp - 1) * 3.0 + 2 * p, 1e-9);
  for (double slowdown : {0.0, 0.5, 1.0, 2.0}) {
    ClusterSpec shared = instant_cluster(pp);
    shared.device.communication_shares_compute = true;
    shared.device.communication_compute_slowdown = slowdown;
    EXPECT_NEAR(iteration(shared), (m + pp - 1) * 3.0 + 2 * p + slowdown * p, 1e-9) << "slowdown " << slowdown;
  }
}

// A device's transfers take their turns on its link whether or not they share its cores: with no compute lost to
// them, shared cores give the iteration of separate streams, here where transfers (5 s) outlast passes (1 s) and
// queue behind each other.
TEST(Simulate, SharedCoresQueueTransfersOnTheLink) {
  const int pp = 2, m = 4;
  const Schedule s = test_schedule(PipelineKind::kOneFOneB, pp, 1, m, pp);
  validate(s);
  DeviceEfficiency eff = instant_efficiency();
  eff.collective_latency_seconds = 5;
  SimOptions options;
  options.timeline = true;
  const auto run = [&](const ClusterSpec& cluster) {
    return simulate(s, blocks_only_model(pp), cluster, PerTokenCost(1, 2, 0), eff, uniform_loads(m, 1, 1, 0), options);
  };
  const SimResult separate = run(instant_cluster(pp));
  int held_by_the_link = 0;
  for (double slowdown : {0.0, 0.1}) {
    ClusterSpec shared = instant_cluster(pp);
    shared.device.communication_shares_compute = true;
    shared.device.communication_compute_slowdown = slowdown;
    const SimResult on_cores = run(shared);
    if (slowdown == 0) EXPECT_NEAR(on_cores.iteration_seconds, separate.iteration_seconds, 1e-9);
    for (int rank = 0; rank < pp; ++rank) {
      std::vector<std::pair<double, double>> transfers, taken;
      for (const TimelineEvent& e : on_cores.timeline) {
        if (e.rank != rank) continue;
        if (e.stream == TimelineEvent::Stream::kP2p) transfers.emplace_back(e.start_seconds, e.end_seconds);
        if (e.stream == TimelineEvent::Stream::kCompute && e.op == OpKind::kSend) {
          taken.emplace_back(e.start_seconds, e.end_seconds);
        }
      }
      ASSERT_EQ(transfers.size(), static_cast<size_t>(m)) << "rank " << rank;
      std::sort(transfers.begin(), transfers.end());
      for (size_t i = 1; i < transfers.size(); ++i) {
        EXPECT_GE(transfers[i].first, transfers[i - 1].second - 1e-12) << "rank " << rank << " transfer " << i;
      }
      // The compute a transfer takes is charged where it is issued, not when the link gets to it.
      ASSERT_EQ(taken.size(), slowdown > 0 ? transfers.size() : 0u) << "rank " << rank;
      std::sort(taken.begin(), taken.end());
      for (size_t i = 0; i < taken.size(); ++i) {
        EXPECT_NEAR(taken[i].second - taken[i].first, slowdown * 5, 1e-9);  // 5 s a transfer
        EXPECT_LE(taken[i].first, transfers[i].first + 1e-12) << "rank " << rank << " transfer " << i;
      }
      for (size_t i = 0; i < taken.size(); ++i) held_by_the_link += taken[i].first < transfers[i].first - 1e-9;
    }
  }
  EXPECT_GT(held_by_the_link, 0) << "with compute taken, some transfer still waits for the link";
}

// On shared cores the timeline draws, on the compute stream, the compute each transfer and collective takes:
// slowdown × a transfer's seconds, and a collective's share and start cost, beside the passes and never over them.
TEST(Simulate, SharedCoresDrawTheComputeTheirCommunicationTakes) {
  const int pp = 2, m = 2, dp = 2;
  const double p = 0.25, slowdown = 0.5, start_cost = 0.125;
  const Schedule s = test_schedule(PipelineKind::kOneFOneB, pp, 1, m, pp, dp);
  validate(s);
  DeviceEfficiency eff = instant_efficiency();
  eff.collective_latency_seconds = p;
  ClusterSpec shared = instant_cluster(pp * dp);
  shared.device.communication_shares_compute = true;
  shared.device.communication_compute_slowdown = slowdown;
  shared.device.collective_compute_seconds = start_cost;
  SimOptions options;
  options.timeline = true;
  const SimResult r =
      simulate(s, blocks_only_model(pp), shared, PerTokenCost(1, 2, 0), eff, uniform_loads(m, 1, 1, 0), options);
  for (int rank = 0; rank < pp; ++rank) {
    int sends = 0, collectives = 0;
    for (const Instruction& in : s.programs[rank].instructions) {
      sends += in.op == OpKind::kSend;
      collectives += in.op == OpKind::kCollective;
    }
    ASSERT_GT(sends, 0);
    ASSERT_GT(collectives, 0);
    std::vector<std::pair<double, double>> busy;
    int send_events = 0, collective_events = 0;
    double transfer_seconds = 0;
    for (const TimelineEvent& e : r.timeline) {
      if (e.rank != rank) continue;
      if (e.stream == TimelineEvent::Stream::kP2p) transfer_seconds += e.end_seconds - e.start_seconds;
      if (e.stream != TimelineEvent::Stream::kCompute) continue;
      busy.emplace_back(e.start_seconds, e.end_seconds);
      if (e.op == OpKind::kSend) {
        ++send_events;
        EXPECT_NEAR(e.end_seconds - e.start_seconds, slowdown * p, 1e-12);
      } else if (e.op == OpKind::kCollective && e.stage >= 0) {
        ++collective_events;
        EXPECT_GE(e.end_seconds - e.start_seconds, start_cost - 1e-12);
      }
    }
    EXPECT_EQ(send_events, sends) << "rank " << rank;
    EXPECT_EQ(collective_events, collectives) << "rank " << rank;
    EXPECT_NEAR(transfer_seconds, sends * p, 1e-9) << "rank " << rank;
    std::sort(busy.begin(), busy.end());
    for (size_t i = 1; i < busy.size(); ++i) {
      EXPECT_GE(busy[i].first, busy[i - 1].second - 1e-12) << "rank " << rank << ": compute drawn twice at once";
    }
  }
}

// On shared cores a data-parallel collective also costs each replica its start (collective_compute_seconds):
// the step grows by that cost for every gradient collective a rank runs, nothing else moves.
TEST(Simulate, SharedCoresLoseTheStartCostOfEachCollective) {
  const int dp = 2, layers = 4;
  const Schedule s = test_schedule(PipelineKind::kOneFOneB, 1, 1, 1, layers, dp);
  validate(s);
  int collectives = 0;
  for (const Instruction& in : s.programs[0].instructions) collectives += in.op == OpKind::kCollective;
  ASSERT_GT(collectives, 0);
  ClusterSpec shared = instant_cluster(dp);
  shared.device.communication_shares_compute = true;
  shared.device.communication_compute_slowdown = 0.5;
  const auto iteration = [&](double start_cost) {
    shared.device.collective_compute_seconds = start_cost;
    return simulate(s, blocks_only_model(layers), shared, PerTokenCost(0.25, 0.5, 0), instant_efficiency(),
                    uniform_loads(1, 1, 1, 0))
        .iteration_seconds;
  };
  EXPECT_NEAR(iteration(0.125) - iteration(0.0), 0.125 * collectives, 1e-9);
}

// ZeRO-3 gathers a stage's parameters layer by layer before each pass and overlaps the gather with compute:
// on slow links the iteration is the forward gather, the backward gather (prefetched while the forward runs)
// and the gradient reduce-scatter one after another, plus the backward's last layer between the last two.
TEST(Simulate, ZeroThreeOverlapsLayerGathersWithCompute) {
  const int dp = 4, layers = 4;
  const Schedule s = test_schedule(PipelineKind::kOneFOneB, 1, 1, 1, layers, dp, StateSharding::kZero3);
  ClusterSpec cluster = instant_cluster(dp);
  cluster.device.devices_per_node = 1;
  cluster.device.inter_node_bytes_per_second = 10;
  const ModelSpec model = blocks_only_model(layers);
  const double bytes = 2.0 * static_cast<double>(model.parameters());
  const double gather = 3.0 / 4 * bytes / 10;  // ring all-gather (and reduce-scatter) over 4
  const PerTokenCost cost(0.25, 0.5, 0);       // a pass: 1 s forward, 2 s backward over the 4 layers
  const SimResult slow = simulate(s, model, cluster, cost, instant_efficiency(), uniform_loads(1, 1, 1, 0));
  ASSERT_GT(gather, 100.0);
  EXPECT_NEAR(slow.iteration_seconds, 3 * gather + 0.5, 1e-6);
  EXPECT_NEAR(slow.critical.compute, 3.0, 1e-9);
  // On free links the passes run back to back.
  const SimResult fast = simulate(s, model, instant_cluster(dp), cost, instant_efficiency(), uniform_loads(1, 1, 1, 0));
  EXPECT_NEAR(fast.iteration_seconds, 3.0, 1e-9);
  // Memory: the sharded state plus two gathered layers, never the whole model.
  const double layer = 2.0 * static_cast<double>(model.components[0].layers[0].parameters());
  EXPECT_NEAR(fast.state_memory_bytes[0], 16.0 * static_cast<double>(model.parameters()) / dp + 2 * layer, 1e-6);
}

TEST(CollectiveCost, RingAndTreeClosedForms) {
  EXPECT_DOUBLE_EQ(ring_all_reduce_seconds(8e9, 8, 1e10, 1e-5), 2.0 * 7 / 8 * 0.8 + 14e-5);
  EXPECT_DOUBLE_EQ(ring_reduce_scatter_seconds(8e9, 8, 1e10, 1e-5), 7.0 / 8 * 0.8 + 7e-5);
  EXPECT_DOUBLE_EQ(tree_all_reduce_seconds(8e9, 8, 1e10, 1e-5), 1.6 + 6e-5);
  EXPECT_EQ(ring_all_reduce_seconds(1e9, 1, 1e10, 1e-5), 0);
  // NCCL's choice: the tree for a small message over many devices, the ring for a large one.
  const ClusterSpec cluster = cluster_preset("h100:1024");
  const DeviceEfficiency eff = efficiency_for(cluster.device);
  const DeviceGroupShape group{1024, 8};
  const double rate = group_bytes_per_second(cluster, eff, group);
  EXPECT_DOUBLE_EQ(collective_seconds(CollectiveOp::kAllReduce, 1e3, cluster, eff, group),
                   tree_all_reduce_seconds(1e3, 1024, rate, eff.collective_latency_seconds));
  // Sixteen members: the ring's latency is small, and it sends 15/16 of what the tree sends.
  EXPECT_DOUBLE_EQ(collective_seconds(CollectiveOp::kAllReduce, 1e10, cluster, eff, {16, 8}),
                   ring_all_reduce_seconds(1e10, 16, rate, eff.collective_latency_seconds));
  // In one node NVLink (half its two-way rate); across nodes the network.
  EXPECT_DOUBLE_EQ(group_bytes_per_second(cluster, eff, {8, 1}), 450e9 * eff.link);
  EXPECT_DOUBLE_EQ(group_bytes_per_second(cluster, eff, {2, 8}), cluster.device.inter_node_bytes_per_second * eff.link);
}

TEST(Simulate, RefusesLoadsThatDoNotFitTheSchedule) {
  const Schedule s = test_schedule(PipelineKind::kOneFOneB, 2, 1, 4, 2, 2);
  const PerTokenCost cost(1, 1, 0);
  const ModelSpec model = blocks_only_model(2);
  EXPECT_THROW(simulate(s, model, instant_cluster(4), cost, instant_efficiency(), uniform_loads(3, 1, 1, 0)),
               InputError);
  MicroBatchLoads three = uniform_loads(4, 1, 1, 0);
  three.per_replica.resize(3, three.per_replica[0]);
  EXPECT_THROW(simulate(s, model, instant_cluster(4), cost, instant_efficiency(), three), InputError);
  EXPECT_THROW(simulate(s, blocks_only_model(3), instant_cluster(4), cost, instant_efficiency(),
                        uniform_loads(4, 1, 1, 0)), InputError);
}

// A free releases what its buffer's allocation took, whichever buffers were allocated in between.
TEST(Simulate, AFreeReleasesWhatItsBuffersAllocationTook) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  const PerTokenCost cost(1, 1, 1);
  const Schedule plain = test_schedule(PipelineKind::kOneFOneB, 1, 1, 2, 2);
  Schedule held = plain;
  auto& program = held.programs[0].instructions;
  const auto allocate = [](int32_t buffer, int64_t bytes) {
    return Instruction{.op = OpKind::kAllocate, .stage = 0, .buffer = buffer, .bytes = bytes};
  };
  const auto free = [](int32_t buffer) { return Instruction{.op = OpKind::kFree, .stage = 0, .buffer = buffer}; };
  // Live: 1, 0, 300, 500, 200, 450, 250, 0 GiB.
  for (const Instruction& in : {allocate(0, kGiB), free(0), allocate(1, 300 * kGiB), allocate(2, 200 * kGiB), free(1),
                                allocate(3, 250 * kGiB), free(2), free(3)}) {
    program.push_back(in);
  }
  const SimResult without = run(plain, 2, cost), with = run(held, 2, cost);
  ASSERT_LT(without.peak_memory_bytes[0] - without.state_memory_bytes[0], kGiB);  // the passes' activations
  EXPECT_DOUBLE_EQ(with.peak_memory_bytes[0] - with.state_memory_bytes[0], 500.0 * kGiB);
}

// What each device of a multitask schedule keeps: the largest tensor-parallel share of each layer its slices run,
// held over (devices holding the layer) / tp replicas. Layer 0 runs on devices 0–3 at tp 2 and on devices 2–5
// at tp 1; layer 1 on devices 4 and 5 at tp 1.
TEST(MultitaskParameters, EachDeviceKeepsItsLargestShareOverTheLayersHolders) {
  const ModelSpec model = blocks_only_model(2);
  const int64_t p = model.components[0].layers[0].parameters();
  Schedule s;
  s.tasks.waves = 1;
  s.tasks.slices.push_back({.component = 0, .first_layer = 0, .layers = 1, .dp = 2, .tp = 2, .devices = {0, 1, 2, 3}});
  s.tasks.slices.push_back({.component = 0, .first_layer = 0, .layers = 1, .dp = 4, .tp = 1, .devices = {2, 3, 4, 5}});
  s.tasks.slices.push_back({.component = 0, .first_layer = 1, .layers = 1, .dp = 2, .tp = 1, .devices = {4, 5}});
  const auto held = multitask_parameters_by_device(s, model, 7);
  ASSERT_EQ(held.size(), 7u);
  // Devices 0 and 1 hold half of layer 0, over 6 holders / tp 2 = 3 replicas.
  for (int d : {0, 1}) {
    ASSERT_EQ(held[d].size(), 1u);
    const HeldParameters& h = held[d].at({0, 0});
    EXPECT_EQ(h.parameters, p / 2);
    EXPECT_EQ(h.tp, 2);
    EXPECT_EQ(h.replicas, 3);
  }
  // Devices 2 and 3 run it whole too: they keep the whole layer, counted at the larger tp.
  EXPECT_EQ(held[2].at({0, 0}).parameters, p);
  EXPECT_EQ(held[3].at({0, 0}).tp, 2);
  // Devices 4 and 5: layer 0 whole (6 holders at tp 1) and layer 1 over its 2 holders.
  EXPECT_EQ(held[4].at({0, 0}).replicas, 6);
  EXPECT_EQ(held[5].at({0, 1}).replicas, 2);
  EXPECT_EQ(held[5].at({0, 1}).parameters, p);
  EXPECT_TRUE(held[6].empty());
  // One device asked alone gets what it gets among all.
  for (int d = 0; d < 7; ++d) {
    const auto one = multitask_device_parameters(s, model, d);
    ASSERT_EQ(one.size(), held[d].size());
    for (const auto& [key, h] : one) EXPECT_EQ(h.replicas, held[d].at(key).replicas);
  }
}

}  // namespace
}  // namespace fulcrum
