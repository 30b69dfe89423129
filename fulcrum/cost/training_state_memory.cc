#include "fulcrum/cost/training_state_memory.h"

#include <algorithm>

namespace fulcrum {

const char* state_sharding_name(StateSharding sharding) {
  switch (sharding) {
    case StateSharding::kZero0: return "zero-0";
    case StateSharding::kZero1: return "zero-1";
    case StateSharding::kZero2: return "zero-2";
    case StateSharding::kZero3: return "zero-3";
    case StateSharding::kMegatronDistributedOptimizer: return "distributed-optimizer";
  }
  return "?";
}

TrainingStateBytes training_state_bytes(int64_t parameters, int64_t dp, StateSharding sharding, bool trainable) {
  const double p = static_cast<double>(parameters);
  const double n = static_cast<double>(std::max<int64_t>(1, dp));
  const bool params_sharded = sharding == StateSharding::kZero3;
  TrainingStateBytes bytes;
  bytes.parameters = 2 * p / (params_sharded ? n : 1);
  if (!trainable) return bytes;
  switch (sharding) {
    case StateSharding::kZero0:
      bytes.gradients = 2 * p;
      bytes.optimizer = 12 * p;
      break;
    case StateSharding::kZero1:
      bytes.gradients = 2 * p;
      bytes.optimizer = 12 * p / n;
      break;
    case StateSharding::kZero2:
    case StateSharding::kZero3:
      bytes.gradients = 2 * p / n;
      bytes.optimizer = 12 * p / n;
      break;
    case StateSharding::kMegatronDistributedOptimizer:
      bytes.gradients = 4 * p;
      bytes.optimizer = 12 * p / n;
      break;
  }
  return bytes;
}

}  // namespace fulcrum
