// Speed of one bubble schedule at the size of Optimus's 1536-GPU ViT-22B + GPT-175B job: 8 LLM pipeline ranks,
// each running the forward and backward of 32 micro-batches × 12 chunks back to back, every pass cut by two
// tensor-parallel collectives (1,536 collectives and about as many idle stretches per rank), and m = 4 encoder
// pipelines of 2 stages of 24 ViT-22B layers, each layer pass 7 kernels (5 compute, 2 collectives). The timeline
// is synthetic with the profiled kernel times the paper quotes (1.4 ms a ViT-22B layer forward, 2.0 ms backward;
// TP bubbles of about 0.3 ms); the search over plans and splits runs this per candidate.
#include <benchmark/benchmark.h>

#include "fulcrum/core/rng.h"
#include "fulcrum/plan/bubble_scheduler.h"

namespace fulcrum {
namespace {

constexpr int kLlmRanks = 8;
constexpr int kMicroBatches = 32;
constexpr int kChunks = 12;
constexpr int kLayersPerChunk = 1;  // 96 GPT-175B layers over 8 ranks × 12 chunks
constexpr int kEncoderPipelines = 4;
constexpr int kEncoderStages = 2;
constexpr int kEncoderLayersPerStage = 24;

Kernel kernel(double seconds, bool compute) {
  return Kernel{compute ? "gemm" : "tp_all_reduce",
                compute ? Kernel::Kind::kCompute : Kernel::Kind::kCommunication, 0, 0, 0, seconds};
}

std::vector<Kernel> vit_layer(double scale) {
  return {kernel(0.30e-3 * scale, true), kernel(0.25e-3 * scale, true), kernel(0.15e-3 * scale, true),
          kernel(0.10e-3 * scale, false), kernel(0.35e-3 * scale, true), kernel(0.35e-3 * scale, true),
          kernel(0.10e-3 * scale, false)};
}

BubbleProblem problem() {
  Rng rng(3);
  auto jitter = [&] { return 1.0 + 0.2 * (rng.below(1000) / 1000.0 - 0.5); };
  BubbleProblem p;
  double llm_end = 0;
  for (int r = 0; r < kLlmRanks; ++r) {
    LlmDeviceTimeline t;
    double clock = 0.05 * r;  // warm-up: later ranks start later
    // Forward and backward passes of every micro-batch and chunk, each layer: compute, TP gap, compute, TP gap.
    for (int pass = 0; pass < 2 * kMicroBatches * kChunks; ++pass) {
      const double layer_seconds = (pass % 2 == 0 ? 4.0e-3 : 8.0e-3) * jitter();
      for (int l = 0; l < kLayersPerChunk; ++l) {
        for (int half = 0; half < 2; ++half) {
          t.compute.push_back({clock, clock + layer_seconds / 2});
          clock += layer_seconds / 2;
          const double gap = 0.3e-3 * jitter();
          t.tensor_comm.push_back({clock, clock + gap});
          clock += gap;
        }
      }
      if (rng.below(8) == 0) clock += 2e-3 * jitter();  // pipeline bubbles in the steady state
    }
    t.last_pass_end_seconds = clock;
    clock += 0.05 * (kLlmRanks - r);  // cool-down, then the gradient reduce-scatter
    t.optimizer_seconds = 0.02;        // after every gradient is reduced
    t.end_seconds = clock + 0.02;
    llm_end = std::max(llm_end, t.end_seconds);
    p.llm_ranks.push_back(t);
  }
  for (LlmDeviceTimeline& t : p.llm_ranks) t.end_seconds = llm_end;
  for (int i = 0; i < kMicroBatches; ++i) {
    p.dependency.forward_seconds.push_back(0.02 * i);
    p.dependency.backward_seconds.push_back(0.5 + 0.03 * i);
  }
  std::vector<Kernel> forward, backward;
  for (int l = 0; l < kEncoderLayersPerStage; ++l) {
    for (const Kernel& k : vit_layer(1.0)) forward.push_back(k);
    for (const Kernel& k : vit_layer(1.43)) backward.push_back(k);
  }
  const int per_pipeline = kMicroBatches / kEncoderPipelines;
  for (int j = 0; j < kEncoderPipelines; ++j) {
    EncoderPipelineWork w;
    for (int s = 0; s < kEncoderStages; ++s) {
      w.stage_rank.push_back(s * (kLlmRanks / kEncoderStages) + j % (kLlmRanks / kEncoderStages));
      w.forward.emplace_back(per_pipeline, forward);
      w.backward.emplace_back(per_pipeline, backward);
      w.stage_tail_seconds.push_back(0.01);
    }
    p.pipelines.push_back(w);
  }
  p.transfer_seconds = 0.2e-3;
  p.communication_slowdown = 0.1;
  return p;
}

void BM_BubbleSchedule(benchmark::State& state) {
  const BubbleProblem p = problem();
  const BubbleMode mode = state.range(0) == 0 ? BubbleMode::kCoarse : BubbleMode::kFine;
  BubbleSchedule s;
  for (auto _ : state) {
    s = schedule_encoder_bubbles(p, mode);
    benchmark::DoNotOptimize(s.iteration_seconds);
  }
  state.counters["kernels"] = static_cast<double>(s.kernels.size());
  state.counters["efficiency"] = s.efficiency;
  state.counters["head_shift_ms"] = s.head_shift_seconds * 1e3;
  state.SetLabel(mode == BubbleMode::kCoarse ? "coarse" : "fine");
}
BENCHMARK(BM_BubbleSchedule)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fulcrum

BENCHMARK_MAIN();
