#ifndef FULCRUM_COST_COST_MODEL_H_
#define FULCRUM_COST_COST_MODEL_H_

#include <string>
#include <vector>

#include "fulcrum/cost/activation_memory.h"
#include "fulcrum/cost/dtype.h"
#include "fulcrum/cost/layer_flops.h"
#include "fulcrum/model/model_spec.h"

namespace fulcrum {

// One kernel of a layer's pass on one device: compute (a matmul, the attention core, elementwise work) or
// communication (a collective of the tensor-parallel group, the context-parallel ring's exchanges). Optimus
// places encoder work in LLM bubbles kernel by kernel, and the simulator overlaps communication with compute,
// so the two are kept apart.
struct Kernel {
  enum class Kind { kCompute, kCommunication };
  // "qkv", "attention", "out_proj", "mlp_in", "mlp_out", "elementwise", "tp_all_reduce", "cp_kv_exchange", ...
  std::string name;
  Kind kind = Kind::kCompute;
  double flops = 0;                // on this device
  double memory_bytes = 0;         // device-memory traffic on this device
  double communication_bytes = 0;  // bytes this device sends in the collective (or point-to-point ring)
  double seconds = 0;
  // The operators the host issues for it, one device kernel each: a fused kernel is 1, a norm-add-activation
  // group its parts. The host's own time per operator bounds how short a pass can be (analytic_cost.h).
  int launches = 1;
};

// What a layer's pass costs on one device of its tensor- and context-parallel group.
struct LayerCost {
  double seconds = 0;  // the kernels one after another
  double flops = 0;    // on this device
  std::vector<Kernel> kernels;
};

// One pass of one layer, as a schedule runs it: which layer, on which tokens, sharded how, recomputing what.
struct LayerWork {
  const LayerSpec* layer = nullptr;
  Pass pass = Pass::kForward;
  TokenBatch batch;
  TensorSharding sharding;
  bool trainable = true;
  Recompute recompute = Recompute::kNone;  // for Pass::kRecompute
  Dtype dtype = Dtype::kBf16;              // the number format it computes in (dtype.h)
};

// Time and kernels of layer work on a device. Implementations: AnalyticCost (a roofline over the device's
// rates), and a profiled table that overrides it where measurements exist. Layer kinds may grow (expert-
// parallel MoE layers would add all-to-all kernels); callers must not assume the kernel list's shape.
class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual LayerCost layer_cost(const LayerWork& work) const = 0;
  // Whether a whole backward (Pass::kBackward) may cost other than its two halves; when false, callers may
  // add the halves instead of asking.
  virtual bool prices_whole_backward() const { return false; }
};

// The halves' kernels one after another: a whole backward that costs what its halves do.
inline LayerCost joined_backward(const CostModel& cost, LayerWork work) {
  work.pass = Pass::kBackwardInput;
  LayerCost out = cost.layer_cost(work);
  work.pass = Pass::kBackwardWeight;
  const LayerCost weight = cost.layer_cost(work);
  out.seconds += weight.seconds;
  out.flops += weight.flops;
  out.kernels.insert(out.kernels.end(), weight.kernels.begin(), weight.kernels.end());
  return out;
}

// A layer's whole backward as a schedule without the split runs it: its own price where the model has one, else
// its halves one after another.
inline LayerCost backward_cost(const CostModel& cost, LayerWork work) {
  if (cost.prices_whole_backward()) {
    work.pass = Pass::kBackward;
    return cost.layer_cost(work);
  }
  return joined_backward(cost, work);
}

inline double backward_seconds(const CostModel& cost, const LayerWork& work) {
  return backward_cost(cost, work).seconds;
}

}  // namespace fulcrum

#endif  // FULCRUM_COST_COST_MODEL_H_
