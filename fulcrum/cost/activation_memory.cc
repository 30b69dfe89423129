#include "fulcrum/cost/activation_memory.h"

#include <algorithm>

namespace fulcrum {

double activation_bytes(const LayerSpec& l, const TokenBatch& batch, const TensorSharding& sharding,
                        Recompute recompute, bool dropout) {
  if (l.kind != LayerKind::kTransformerBlock) return 0;  // embeddings, norms and heads: counted by the caller
  const double t = static_cast<double>(batch.tokens);
  const double h = static_cast<double>(l.hidden);
  const double tp = std::max(1, sharding.tp);
  const double outside_tp = sharding.sequence_parallel ? tp : 1;  // what splits the replicated parts
  if (recompute == Recompute::kFull) return 2 * t * h / outside_tp;

  const double q = static_cast<double>(l.heads * l.head_dim);
  const double kv = static_cast<double>(l.kv_heads * l.head_dim);
  const double f = static_cast<double>(l.ffn);
  const double mask = dropout ? 1 : 0;
  // Replicated across tensor-parallel ranks unless sequence parallel: norm inputs, QKV and MLP inputs, masks.
  const double replicated = 4 * t * h + 2 * t * h + 2 * t * h + 2 * mask * t * h;
  // Split by tensor parallelism: Q, K, V, the output projection's input, the MLP's inner activations.
  const double split = 2 * t * q + 4 * t * kv + 2 * t * q + (l.mlp == MlpKind::kGelu ? 4 : 6) * t * f;
  double pairs = static_cast<double>(batch.tokens_squared);
  if (l.window_tokens > 0) pairs = std::min(pairs, t * static_cast<double>(l.window_tokens));
  const double attention_core = recompute == Recompute::kSelective ? 0 : (4 + mask) * static_cast<double>(l.heads) * pairs;
  return replicated / outside_tp + (split + attention_core) / tp;
}

}  // namespace fulcrum
