// Properties of generated schedules and their simulation on random plans and random per-replica loads.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <tuple>

#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/model/model_presets.h"
#include "fulcrum/sched/pipeline_schedules.h"
#include "fulcrum/sched/schedule_json.h"
#include "fulcrum/sched/validate.h"
#include "fulcrum/sim/simulator.h"

namespace fulcrum {
namespace {

struct RandomPlan {
  Schedule schedule;
  MicroBatchLoads loads;
  ClusterSpec cluster;
  std::string description;
};

RandomPlan random_plan(const ModelSpec& model, std::mt19937_64& rng) {
  auto pick = [&](std::initializer_list<int> values) {
    return *(values.begin() + std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng));
  };
  ParallelLayout layout;
  layout.pp = pick({1, 2, 3, 4});
  layout.dp = pick({1, 2, 3, 5});
  layout.tp = pick({1, 2});
  layout.sequence_parallel = rng() % 2 == 0;
  layout.state_sharding = static_cast<StateSharding>(rng() % 5);
  const PipelineKind kind = static_cast<PipelineKind>(rng() % 4);
  layout.vpp = kind == PipelineKind::kInterleaved ? pick({1, 2, 3}) : 1;
  int m = pick({1, 2, 3, 4, 6, 8});
  if (kind == PipelineKind::kInterleaved) m = layout.pp * pick({1, 2, 3});
  const auto placement = rng() % 2 ? EncoderPlacement::kFirstStage : EncoderPlacement::kSpread;
  std::vector<Recompute> recompute(flattened_layers(model));
  for (Recompute& r : recompute) r = static_cast<Recompute>(rng() % 3);
  RandomPlan p;
  p.schedule = make_pipeline_schedule(kind, layout, m, partition_layers(model, layout.stages(), placement), recompute);
  p.cluster = cluster_preset(fmt::format("{}:{}", rng() % 2 ? "a100" : "h100", layout.devices()));
  // Uneven replicas: each micro-batch packs 1–4 samples of 100–3,000 tokens and 0–3 images each.
  const int replicas = rng() % 3 == 0 ? 1 : layout.dp;
  p.loads.per_replica.resize(replicas);
  for (auto& replica : p.loads.per_replica) {
    for (int j = 0; j < m; ++j) {
      MicroBatchLoad load;
      const int samples = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < samples; ++k) {
        load.add_packed(static_cast<uint32_t>(rng() % 4), 100 + static_cast<uint32_t>(rng() % 2900));
      }
      replica.push_back(load);
    }
  }
  p.description = fmt::format("{} dp {} tp {} pp {} vpp {} m {} sharding {} replicas {}", pipeline_kind_name(kind),
                              layout.dp, layout.tp, layout.pp, layout.vpp, m, static_cast<int>(layout.state_sharding),
                              replicas);
  return p;
}

TEST(SimulatorProperties, RandomPlansValidateSimulateAndAddUp) {
  const ModelSpec model = model_preset("vit-3b+gpt-11b");
  std::mt19937_64 rng(20261123);
  for (int trial = 0; trial < 400; ++trial) {
    const RandomPlan p = random_plan(model, rng);
    SCOPED_TRACE(p.description);
    ASSERT_NO_THROW(validate(p.schedule));
    // The JSON form reads back to the same schedule.
    const std::string text = schedule_to_json(p.schedule);
    ASSERT_EQ(schedule_to_json(schedule_from_json(text, "s.json")), text);
    const AnalyticCost cost(p.cluster);
    SimOptions options;
    options.timeline = trial % 10 == 0;
    const SimResult r = simulate(p.schedule, model, p.cluster, cost, cost.efficiency(), p.loads, options);
    ASSERT_GT(r.iteration_seconds, 0);
    // Every device's busy and idle time add up to the iteration, with no negative cause.
    for (const TimeBreakdown& t : r.per_device) {
      EXPECT_NEAR(t.total(), r.iteration_seconds, 1e-9 * r.iteration_seconds);
      for (double part : {t.compute, t.pp_warmup, t.pp_cooldown, t.pp_other, t.tp_comm, t.dp_comm, t.dp_wait}) {
        EXPECT_GE(part, -1e-12);
      }
    }
    EXPECT_GE(r.hardware_flops, r.model_flops * (1 - 1e-12));
    EXPECT_LE(r.mfu, 1.0);
    // The same inputs give the same result.
    const SimResult again = simulate(p.schedule, model, p.cluster, cost, cost.efficiency(), p.loads, options);
    EXPECT_EQ(again.iteration_seconds, r.iteration_seconds);
    EXPECT_EQ(again.peak_memory_bytes, r.peak_memory_bytes);
    EXPECT_EQ(again.timeline.size(), r.timeline.size());
  }
}

// One replica standing for all gives the same answer as every replica simulated with the same loads.
TEST(SimulatorProperties, IdenticalReplicasSimulatedOnceMatchAllOfThem) {
  const ModelSpec model = model_preset("vit-3b+gpt-11b");
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    RandomPlan p = random_plan(model, rng);
    SCOPED_TRACE(p.description);
    MicroBatchLoads one;
    one.per_replica = {p.loads.per_replica[0]};
    MicroBatchLoads all;
    all.per_replica.assign(p.schedule.layout.dp, p.loads.per_replica[0]);
    const AnalyticCost cost(p.cluster);
    const SimResult a = simulate(p.schedule, model, p.cluster, cost, cost.efficiency(), one);
    const SimResult b = simulate(p.schedule, model, p.cluster, cost, cost.efficiency(), all);
    EXPECT_NEAR(a.iteration_seconds, b.iteration_seconds, 1e-12 * b.iteration_seconds);
    EXPECT_NEAR(a.model_flops, b.model_flops, 1e-9 * b.model_flops);
    EXPECT_EQ(a.peak_memory_bytes, b.peak_memory_bytes);
    EXPECT_EQ(a.simulated_devices, p.schedule.layout.pp);
    EXPECT_EQ(b.simulated_devices, static_cast<int64_t>(p.schedule.layout.dp) * p.schedule.layout.pp);
  }
}

// A memo of pass prices shared across simulations (as the planner shares it) changes no result: the same steps
// simulated again, with other recomputation modes (priced only once a schedule asks for them), on the other
// tensor-parallel degree, and other steps, with tables evicted and taken back, all give what a simulation without
// the memo gives.
TEST(SimulatorProperties, APassPriceMemoChangesNoResult) {
  const ModelSpec model = model_preset("vit-3b+gpt-11b");
  std::mt19937_64 rng(20261127);
  struct Case {
    RandomPlan plan;
    Schedule sharded;  // the same step on the other tensor-parallel degree
    ClusterSpec sharded_cluster;
    std::unique_ptr<AnalyticCost> cost;  // one for both: only the sharding tells their prices apart
  };
  std::deque<Case> cases;  // the steps and cost models stay alive while the memo may hold their addresses
  PassPriceMemo memo(3);
  SimOptions with_memo;
  with_memo.memo = &memo;
  for (int trial = 0; trial < 60; ++trial) {
    if (trial % 3 != 2) {
      Case& c = cases.emplace_back();
      c.plan = random_plan(model, rng);
      c.sharded = c.plan.schedule;
      c.sharded.layout.tp = 3 - c.sharded.layout.tp;
      c.sharded_cluster =
          cluster_preset(fmt::format("{}:{}", c.plan.cluster.device.kind, c.sharded.layout.devices()));
      c.cost = std::make_unique<AnalyticCost>(c.plan.cluster);
    }
    const Case& c = trial % 3 == 2 ? cases[rng() % cases.size()] : cases.back();
    SCOPED_TRACE(c.plan.description);
    Schedule other = c.plan.schedule;
    for (Recompute& r : other.recompute) r = static_cast<Recompute>(rng() % 3);
    const std::tuple<const Schedule*, const ClusterSpec*, const AnalyticCost*> runs[] = {
        {&c.plan.schedule, &c.plan.cluster, c.cost.get()},
        {&other, &c.plan.cluster, c.cost.get()},
        {&c.sharded, &c.sharded_cluster, c.cost.get()},
        {&c.plan.schedule, &c.plan.cluster, c.cost.get()}};
    for (const auto& [s, cluster, cost] : runs) {
      const SimResult plain = simulate(*s, model, *cluster, *cost, cost->efficiency(), c.plan.loads);
      const SimResult memoized = simulate(*s, model, *cluster, *cost, cost->efficiency(), c.plan.loads, with_memo);
      EXPECT_EQ(memoized.iteration_seconds, plain.iteration_seconds);
      EXPECT_EQ(memoized.peak_memory_bytes, plain.peak_memory_bytes);
      EXPECT_EQ(memoized.model_flops, plain.model_flops);
      EXPECT_EQ(memoized.hardware_flops, plain.hardware_flops);
      EXPECT_EQ(memoized.oom, plain.oom);
    }
  }
}

// The busy bound sits between the busiest device's own time in the simulation and the iteration, and a
// simulation given up at a bar below it keeps the memory exact; at a bar the iteration meets, nothing is given up.
// Each plan runs twice through one memo, the second time with other recomputation modes on the same step (whose
// per-replica totals the bound then sums again), and a quarter of the plans run on CPU devices, whose
// communication takes the compute cores.
TEST(SimulatorProperties, TheBusyBoundIsALowerBoundAndGivingUpKeepsTheMemory) {
  const ModelSpec model = model_preset("vit-3b+gpt-11b");
  std::mt19937_64 rng(20261129);
  std::deque<RandomPlan> plans;  // alive while the memo may hold their addresses
  std::deque<AnalyticCost> costs;
  PassPriceMemo memo(4);
  for (int trial = 0; trial < 300; ++trial) {
    RandomPlan& p = plans.emplace_back(random_plan(model, rng));
    if (trial % 4 == 3) p.cluster = cluster_preset(fmt::format("cpu:{}", p.schedule.layout.devices()));
    const AnalyticCost& cost = costs.emplace_back(p.cluster);
    Schedule other = p.schedule;
    for (Recompute& r : other.recompute) r = static_cast<Recompute>(rng() % 3);
    for (const Schedule* s : {&p.schedule, &other}) {
      SCOPED_TRACE(fmt::format("{} on {}{}", p.description, p.cluster.device.kind,
                               s == &other ? ", other recomputation" : ""));
      SimOptions options;
      if (trial % 2 == 0) options.memo = &memo;
      const SimResult whole = simulate(*s, model, p.cluster, cost, cost.efficiency(), p.loads);
      const double bound = iteration_lower_bound(*s, model, p.cluster, cost, cost.efficiency(), p.loads, options);
      EXPECT_LE(bound, whole.iteration_seconds);
      double busiest = 0;
      for (const TimeBreakdown& t : whole.per_device) busiest = std::max(busiest, t.compute + t.tp_comm);
      EXPECT_GE(bound, busiest * (1 - 2e-9));

      options.give_up_above_seconds = bound * (1 - 1e-9);
      const SimResult stopped = simulate(*s, model, p.cluster, cost, cost.efficiency(), p.loads, options);
      ASSERT_TRUE(stopped.gave_up);
      EXPECT_EQ(stopped.iteration_seconds, bound);
      EXPECT_EQ(stopped.peak_memory_bytes, whole.peak_memory_bytes);
      EXPECT_EQ(stopped.state_memory_bytes, whole.state_memory_bytes);
      EXPECT_EQ(stopped.usable_memory_bytes, whole.usable_memory_bytes);
      EXPECT_EQ(stopped.oom, whole.oom);
      EXPECT_EQ(stopped.devices, whole.devices);
      EXPECT_EQ(stopped.events, 0);

      options.give_up_above_seconds = whole.iteration_seconds;
      const SimResult kept = simulate(*s, model, p.cluster, cost, cost.efficiency(), p.loads, options);
      EXPECT_FALSE(kept.gave_up);
      EXPECT_EQ(kept.iteration_seconds, whole.iteration_seconds);
      EXPECT_EQ(kept.peak_memory_bytes, whole.peak_memory_bytes);
      EXPECT_EQ(kept.model_flops, whole.model_flops);
    }
  }
}

// The memo holds no more than its bytes allow (a table grows with a step's micro-batches: on tens of thousands of
// devices 64 of them held gigabytes), always the last table put, and the results stay what they were.
TEST(SimulatorProperties, APassPriceMemoKeepsWithinItsBytes) {
  const ModelSpec model = model_preset("vit-3b+gpt-11b");
  std::mt19937_64 rng(20261128);
  std::deque<RandomPlan> plans;  // alive while the memo may hold their addresses
  std::vector<std::unique_ptr<AnalyticCost>> costs;
  for (int k = 0; k < 12; ++k) {
    plans.push_back(random_plan(model, rng));
    costs.push_back(std::make_unique<AnalyticCost>(plans.back().cluster));
  }
  // One table's bytes, from a memo without a byte bound.
  PassPriceMemo unbounded(64, SIZE_MAX);
  SimOptions options;
  options.memo = &unbounded;
  for (size_t k = 0; k < plans.size(); ++k) {
    simulate(plans[k].schedule, model, plans[k].cluster, *costs[k], costs[k]->efficiency(), plans[k].loads, options);
  }
  ASSERT_EQ(unbounded.tables(), plans.size());
  const size_t all = unbounded.bytes();
  ASSERT_GT(all, 0u);
  // Its bytes are its tables': each alone in a memo of its own, summed.
  size_t sum = 0;
  for (size_t k = 0; k < plans.size(); ++k) {
    PassPriceMemo one(64, SIZE_MAX);
    options.memo = &one;
    simulate(plans[k].schedule, model, plans[k].cluster, *costs[k], costs[k]->efficiency(), plans[k].loads, options);
    sum += one.bytes();
  }
  EXPECT_EQ(all, sum);
  // Taken out and put back, every table is counted once: the same tables, the same bytes.
  options.memo = &unbounded;
  for (size_t k = 0; k < plans.size(); ++k) {
    simulate(plans[k].schedule, model, plans[k].cluster, *costs[k], costs[k]->efficiency(), plans[k].loads, options);
  }
  EXPECT_EQ(unbounded.tables(), plans.size());
  EXPECT_EQ(unbounded.bytes(), all);
  const size_t cap = all / 3;
  PassPriceMemo bounded(64, cap);
  options.memo = &bounded;
  // Plan k through the bounded memo: within its bytes, and the results of a simulation without it.
  auto simulate_bounded = [&](size_t k) {
    const RandomPlan& p = plans[k];
    SCOPED_TRACE(p.description);
    const SimResult memoized = simulate(p.schedule, model, p.cluster, *costs[k], costs[k]->efficiency(), p.loads, options);
    EXPECT_GE(bounded.tables(), 1u);
    EXPECT_TRUE(bounded.bytes() <= cap || bounded.tables() == 1) << bounded.bytes() << " bytes in " << bounded.tables();
    const SimResult plain = simulate(p.schedule, model, p.cluster, *costs[k], costs[k]->efficiency(), p.loads);
    EXPECT_EQ(memoized.iteration_seconds, plain.iteration_seconds);
    EXPECT_EQ(memoized.peak_memory_bytes, plain.peak_memory_bytes);
  };
  for (size_t k = 0; k < plans.size(); ++k) simulate_bounded(k);
  EXPECT_LT(bounded.tables(), plans.size());
  // Again, newest first: the tables still held are taken and put back, the others made again.
  for (size_t k = plans.size(); k-- > 0;) simulate_bounded(k);
  // Nothing bounds a memo of one table: the last put stays, however large.
  PassPriceMemo tiny(64, 1);
  options.memo = &tiny;
  simulate(plans[0].schedule, model, plans[0].cluster, *costs[0], costs[0]->efficiency(), plans[0].loads, options);
  EXPECT_EQ(tiny.tables(), 1u);
}

}  // namespace
}  // namespace fulcrum
