#include "fulcrum/sim/test_pipelines.h"

#include "fulcrum/model/test_layers.h"
#include "fulcrum/sched/pipeline_schedules.h"

namespace fulcrum {

LayerCost PerTokenCost::layer_cost(const LayerWork& work) const {
  const double tokens = static_cast<double>(work.batch.tokens);
  LayerCost out;
  switch (work.pass) {
    case Pass::kForward: out.seconds = forward_ * tokens; break;
    case Pass::kBackwardInput: out.seconds = backward_input_ * tokens; break;
    case Pass::kBackwardWeight: out.seconds = backward_weight_ * tokens; break;
    case Pass::kRecompute: out.seconds = 0; break;
    case Pass::kBackward:
      out.seconds = (whole_backward_ >= 0 ? whole_backward_ : backward_input_ + backward_weight_) * tokens;
      break;
  }
  return out;
}

ModelSpec blocks_only_model(int blocks) {
  ModelSpec m;
  m.name = "blocks";
  ComponentSpec llm;
  llm.name = "llm";
  llm.role = ComponentRole::kLlm;
  llm.layers = transformer_blocks(blocks, tiny_gqa_swiglu_block());
  m.components.push_back(llm);
  return m;
}

ClusterSpec instant_cluster(int64_t devices) {
  ClusterSpec c;
  c.device.kind = "instant";
  c.device.bf16_flops_per_second = 1e15;
  c.device.memory_bytes = 1e12;
  c.device.memory_bytes_per_second = 1e300;
  c.device.intra_node_bytes_per_second = 1e300;
  c.device.inter_node_bytes_per_second = 1e300;
  c.devices = devices;
  return c;
}

DeviceEfficiency instant_efficiency() { return {1, 1, 1, 1, 0}; }

Schedule test_schedule(PipelineKind kind, int pp, int vpp, int micro_batches, int layers, int dp,
                       StateSharding sharding) {
  ParallelLayout layout;
  layout.pp = pp;
  layout.vpp = vpp;
  layout.dp = dp;
  layout.state_sharding = sharding;
  const ModelSpec model = blocks_only_model(layers);
  return make_pipeline_schedule(kind, layout, micro_batches,
                                partition_layers(model, pp * vpp, EncoderPlacement::kFirstStage),
                                std::vector<Recompute>(layers, Recompute::kNone));
}

}  // namespace fulcrum
