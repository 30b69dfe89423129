#ifndef FULCRUM_SIM_TEST_PIPELINES_H_
#define FULCRUM_SIM_TEST_PIPELINES_H_

#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/cost/cost_model.h"
#include "fulcrum/model/cluster_spec.h"
#include "fulcrum/model/model_spec.h"
#include "fulcrum/sched/schedule.h"

namespace fulcrum {

// Pipelines whose iteration times tests work out by hand.

// A cost model where every layer's pass takes a fixed time per token: forward `forward`, input gradient
// `backward_input`, weight gradient `backward_weight` seconds; no layer collectives, no recomputation cost. With
// `whole_backward` ≥ 0, a backward that is not split takes that instead of the halves' sum.
class PerTokenCost : public CostModel {
 public:
  PerTokenCost(double forward, double backward_input, double backward_weight, double whole_backward = -1)
      : forward_(forward),
        backward_input_(backward_input),
        backward_weight_(backward_weight),
        whole_backward_(whole_backward) {}
  LayerCost layer_cost(const LayerWork& work) const override;
  bool prices_whole_backward() const override { return whole_backward_ >= 0; }

 private:
  double forward_, backward_input_, backward_weight_, whole_backward_;
};

// An LLM of `blocks` tiny transformer blocks and nothing else.
ModelSpec blocks_only_model(int blocks);

// Devices with free communication and a free optimizer step: links and memory of unbounded speed, no latency.
ClusterSpec instant_cluster(int64_t devices);
DeviceEfficiency instant_efficiency();

// A schedule of `kind` over `blocks_only_model(layers)` split evenly into pp × vpp stages, no recomputation.
Schedule test_schedule(PipelineKind kind, int pp, int vpp, int micro_batches, int layers, int dp = 1,
                       StateSharding sharding = StateSharding::kZero0);

}  // namespace fulcrum

#endif  // FULCRUM_SIM_TEST_PIPELINES_H_
