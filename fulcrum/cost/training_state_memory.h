#ifndef FULCRUM_COST_TRAINING_STATE_MEMORY_H_
#define FULCRUM_COST_TRAINING_STATE_MEMORY_H_

#include <cstdint>

namespace fulcrum {

// How parameters, gradients and Adam's optimizer state are kept across the `dp` data-parallel replicas.
enum class StateSharding {
  kZero0,  // DDP: everything replicated
  kZero1,  // optimizer state sharded
  kZero2,  // optimizer state and gradients sharded
  kZero3,  // parameters too (FSDP full shard)
  kMegatronDistributedOptimizer,  // Megatron-LM --use-distributed-optimizer: fp32 grads, sharded fp32 state
};

// "zero-0" … "zero-3", "distributed-optimizer".
const char* state_sharding_name(StateSharding sharding);

// Bytes per device for `parameters` parameters held by this device (after tensor and pipeline parallelism),
// mixed-precision Adam: 16-bit parameters (2 bytes) and gradients (2), fp32 master copy, momentum and variance
// (12), as Rajbhandari et al. 2020 (ZeRO) count them; Megatron's distributed optimizer keeps fp32 gradients
// (4) and shards the 12 bytes: 6 + 12/dp per parameter. A frozen parameter holds only its 2 bytes.
struct TrainingStateBytes {
  double parameters = 0;
  double gradients = 0;
  double optimizer = 0;
  double total() const { return parameters + gradients + optimizer; }
};
TrainingStateBytes training_state_bytes(int64_t parameters, int64_t dp, StateSharding sharding, bool trainable = true);

// Device-memory traffic of Adam's step per parameter of the device's shard: read the fp32 master weight,
// gradient, momentum and variance (16 bytes), write master, momentum, variance (12) and the 16-bit weight (2).
// The step is memory-bound, so its time is this over the memory bandwidth.
inline constexpr double kOptimizerStepBytesPerParameter = 30;

}  // namespace fulcrum

#endif  // FULCRUM_COST_TRAINING_STATE_MEMORY_H_
