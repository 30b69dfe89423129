// Speed of the simulator at the scale of Optimus's experiments and beyond: ViT-22B + GPT-175B, TP 8, PP 8,
// 12 chunks per rank, with every data-parallel replica's micro-batches bound from a `fulcrum` BatchPlan of
// the bundled InternVL lengths (so every replica is simulated), and the schedule generator and validator.
#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include <string>

#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/cost/model_sample_cost.h"
#include "fulcrum/data/balance_metrics.h"
#include "fulcrum/data/batcher.h"
#include "fulcrum/data/meta_index.h"
#include "fulcrum/model/model_presets.h"
#include "fulcrum/plan/partition.h"
#include "fulcrum/sched/pipeline_schedules.h"
#include "fulcrum/sched/validate.h"
#include "fulcrum/sim/simulator.h"

namespace fulcrum {
namespace {

struct Setup {
  ModelSpec model = model_preset("vit-22b+gpt-175b");
  ClusterSpec cluster;
  Schedule schedule;
  MicroBatchLoads loads;
};

// `devices` H100s, global batch `gbs` in micro-batches of 2.
Setup make_setup(int64_t devices, int64_t gbs) {
  Setup s;
  s.cluster = cluster_preset(fmt::format("h100:{}", devices));
  ParallelLayout layout;
  layout.tp = 8;
  layout.pp = 8;
  layout.vpp = 12;
  layout.dp = static_cast<int>(devices / 64);
  layout.sequence_parallel = true;
  const int m = static_cast<int>(gbs / (2 * layout.dp));
  s.schedule = make_pipeline_schedule(PipelineKind::kInterleaved, layout, m,
                                      partition_layers(s.model, layout.stages(), EncoderPlacement::kFirstStage),
                                      std::vector<Recompute>(flattened_layers(s.model), Recompute::kFull));
  const Dataset data = load_dataset(std::string(FULCRUM_SOURCE_DIR) + "/data/internvl_sft_1.2M.json",
                                    {FULCRUM_SOURCE_DIR, false, nullptr})
                           .dataset;
  BatchParams params;
  params.dp = layout.dp;
  params.micro_batches = m;
  params.samples_per_step = gbs;
  const ModelSampleCost cost(s.model, AnalyticCost(s.cluster));
  const BatchPlan plan = make_batcher("fulcrum")->plan(data, params, cost);
  s.loads.per_replica.resize(layout.dp);
  for (int d = 0; d < layout.dp; ++d) {
    for (int j = 0; j < m; ++j) s.loads.per_replica[d].push_back(micro_batch_load(data, plan.micro_batch(0, d, j), false));
  }
  return s;
}

void BM_SimulateWithPlanLoads(benchmark::State& state) {
  const Setup s = make_setup(state.range(0), state.range(1));
  const AnalyticCost cost(s.cluster);
  int64_t events = 0;
  for (auto _ : state) {
    const SimResult r = simulate(s.schedule, s.model, s.cluster, cost, cost.efficiency(), s.loads);
    events = r.events;
    benchmark::DoNotOptimize(r.iteration_seconds);
  }
  state.counters["simulated_devices"] = static_cast<double>(s.schedule.layout.dp * s.schedule.layout.pp);
  state.counters["events"] = static_cast<double>(events);
}
// Optimus's 3,072 GPUs (DP 48, 16 micro-batches per replica), and 16,384 GPUs (DP 256).
BENCHMARK(BM_SimulateWithPlanLoads)->Args({3072, 1536})->Args({16384, 8192})->Unit(benchmark::kMillisecond);

void BM_GenerateAndValidate(benchmark::State& state) {
  const ModelSpec model = model_preset("vit-22b+gpt-175b");
  ParallelLayout layout;
  layout.tp = 8;
  layout.pp = 8;
  layout.vpp = 12;
  layout.dp = 48;
  for (auto _ : state) {
    const Schedule s = make_pipeline_schedule(PipelineKind::kInterleaved, layout, 16,
                                              partition_layers(model, layout.stages(), EncoderPlacement::kFirstStage),
                                              std::vector<Recompute>(flattened_layers(model), Recompute::kFull));
    validate(s);
    benchmark::DoNotOptimize(s.programs.size());
  }
}
BENCHMARK(BM_GenerateAndValidate)->Unit(benchmark::kMillisecond);

// Issue 12's scale target: a 1,000-layer chain cut exactly into 64 stages (O(layers² · stages)).
void BM_MinMaxPartition1000Layers(benchmark::State& state) {
  LayerChain chain;
  for (int i = 0; i < 1000; ++i) {
    chain.layer_seconds.push_back(i < 300 ? 1.0 + (i % 7) * 0.1 : 3.0 + (i % 5) * 0.2);  // encoder, then LLM
    if (i + 1 < 1000) chain.boundary_seconds.push_back(i < 300 ? 0.5 : 0.2);
  }
  for (auto _ : state) benchmark::DoNotOptimize(min_max_partition(chain, static_cast<int>(state.range(0))).max_stage_seconds);
}
BENCHMARK(BM_MinMaxPartition1000Layers)->Arg(16)->Arg(64)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fulcrum

BENCHMARK_MAIN();
