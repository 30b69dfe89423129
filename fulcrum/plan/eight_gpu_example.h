#ifndef FULCRUM_PLAN_EIGHT_GPU_EXAMPLE_H_
#define FULCRUM_PLAN_EIGHT_GPU_EXAMPLE_H_

#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/model/cluster_spec.h"
#include "fulcrum/model/model_presets.h"
#include "fulcrum/plan/optimus.h"

namespace fulcrum {

// For tests: Optimus's 8-GPU example (Fig. 5 of the paper), ViT-3B + GPT-11B on 8 H100s with the LLM on DP 1,
// PP 4, TP 2 (sequence parallel); 8 micro-batches of 2 samples of 2,048 tokens and `images` 256-token images
// each; 1F1B, or interleaved with `vpp` chunks. Kernels priced by the roofline alone, as the paper's figure
// draws them, unless `launch_seconds` bounds each pass by the host's time to issue its operators.
inline ClusterSpec eight_h100s(double launch_seconds) {
  ClusterSpec c = cluster_preset("h100:8");
  c.device.kernel_launch_seconds = launch_seconds;
  return c;
}

struct EightGpuExample {
  ModelSpec model = model_preset("vit-3b+gpt-11b");
  ClusterSpec cluster;
  AnalyticCost cost;
  OptimusInputs in;

  explicit EightGpuExample(int images = 1, PipelineKind kind = PipelineKind::kOneFOneB, int vpp = 1,
                           double launch_seconds = 0)
      : cluster(eight_h100s(launch_seconds)), cost(cluster) {
    in.model = &model;
    in.cluster = &cluster;
    in.cost = &cost;
    in.efficiency = cost.efficiency();
    in.llm_layout.dp = 1;
    in.llm_layout.pp = 4;
    in.llm_layout.tp = 2;
    in.llm_layout.vpp = vpp;
    in.llm_layout.sequence_parallel = true;
    in.llm_schedule = kind;
    in.micro_batches = 8;
    in.loads = uniform_loads(8, 2, 2048, images);
  }
  // The fixture points into itself.
  EightGpuExample(const EightGpuExample&) = delete;
  EightGpuExample& operator=(const EightGpuExample&) = delete;
};

}  // namespace fulcrum

#endif  // FULCRUM_PLAN_EIGHT_GPU_EXAMPLE_H_
