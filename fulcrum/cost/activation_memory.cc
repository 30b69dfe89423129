#include "fulcrum/cost/activation_memory.h"

#include <algorithm>

namespace fulcrum {

double activation_bytes(const LayerSpec& l, const TokenBatch& batch, const TensorSharding& sharding,
                        Recompute recompute, bool dropout, Dtype dtype) {
  if (l.kind != LayerKind::kTransformerBlock) return 0;  // embeddings, norms and heads: counted by the caller
  const double cp = std::max(1, sharding.cp);
  const double t = static_cast<double>(batch.tokens) / cp;  // this device's tokens
  const double h = static_cast<double>(l.hidden);
  const double tp = std::max(1, sharding.tp);
  const double outside_tp = sharding.sequence_parallel ? tp : 1;  // what splits the replicated parts
  const double e = activation_element_bytes(dtype);  // 2 in 16-bit
  const double in = matmul_input_bytes(dtype);       // 2 in 16-bit, 1 in fp8
  if (recompute == Recompute::kFull) return e * t * h / outside_tp;

  const double q = static_cast<double>(l.heads * l.head_dim);
  const double kv = static_cast<double>(l.kv_heads * l.head_dim);
  const double f = static_cast<double>(l.ffn);
  const double mask = dropout ? 1 : 0;
  // Replicated across tensor-parallel ranks unless sequence parallel: norm inputs, QKV and MLP inputs, masks.
  const double replicated = 2 * e * t * h + in * t * h + in * t * h + 2 * mask * t * h;
  // Split by tensor parallelism: Q, K, V, the output projection's input, the MLP's inner activations (the
  // activation function's inputs, then its output or the SwiGLU product: the second linear's input).
  const double mlp_inner = (l.mlp == MlpKind::kGelu ? e : 2 * e) * t * f + in * t * f;
  const double split = e * t * q + 2 * e * t * kv + in * t * q + mlp_inner;
  double pairs = static_cast<double>(batch.tokens_squared);
  if (l.window_tokens > 0) {
    pairs = std::min(pairs, static_cast<double>(batch.tokens) * static_cast<double>(l.window_tokens));
  }
  pairs /= cp;  // this device's queries against all keys
  const double attention_core =
      recompute == Recompute::kSelective ? 0 : (2 * e + mask) * static_cast<double>(l.heads) * pairs;
  return replicated / outside_tp + (split + attention_core) / tp;
}

}  // namespace fulcrum
