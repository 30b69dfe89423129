#include "fulcrum/cost/layer_flops.h"

#include <fmt/format.h>

#include <algorithm>

#include "fulcrum/core/error.h"

namespace fulcrum {
namespace {

// Forward matmul FLOPs per token.
double matmul_flops_per_token(const LayerSpec& l) {
  switch (l.kind) {
    case LayerKind::kTransformerBlock: {
      const double q = static_cast<double>(l.heads * l.head_dim);
      const double kv = static_cast<double>(l.kv_heads * l.head_dim);
      const double h = static_cast<double>(l.hidden);
      const double mlp_matrices = l.mlp == MlpKind::kGelu ? 2 : 3;
      return 2 * (h * (q + 2 * kv) + q * h + mlp_matrices * h * static_cast<double>(l.ffn));
    }
    case LayerKind::kPatchEmbedding:
      return 2.0 * static_cast<double>(l.in_features) * static_cast<double>(l.hidden);
    case LayerKind::kProjector: {
      double flops = 0;
      double in = static_cast<double>(l.in_features);
      for (int64_t i = 0; i < l.projector_linears; ++i) {
        const double out = static_cast<double>(i + 1 == l.projector_linears ? l.hidden : l.ffn);
        flops += 2 * in * out;
        in = out;
      }
      return flops;
    }
    case LayerKind::kLmHead:
      return 2.0 * static_cast<double>(l.hidden) * static_cast<double>(l.vocab);
    case LayerKind::kTokenEmbedding:
    case LayerKind::kFinalNorm:
      return 0;
  }
  return 0;
}

double attention_forward_flops(const LayerSpec& l, const TokenBatch& b) {
  if (l.kind != LayerKind::kTransformerBlock) return 0;
  const double width = static_cast<double>(l.heads * l.head_dim);
  double pairs = static_cast<double>(b.tokens_squared);
  if (l.window_tokens > 0) pairs = std::min(pairs, static_cast<double>(b.tokens) * static_cast<double>(l.window_tokens));
  return 4 * pairs * width;
}

}  // namespace

LayerFlops layer_flops(const LayerSpec& layer, Pass pass, const TokenBatch& batch, bool trainable,
                       Recompute recompute) {
  const double matmul = matmul_flops_per_token(layer) * static_cast<double>(batch.tokens);
  const double attention = attention_forward_flops(layer, batch);
  switch (pass) {
    case Pass::kForward:
      return {matmul, attention};
    case Pass::kBackwardInput:
      return {matmul, 2 * attention};
    case Pass::kBackwardWeight:
      return {trainable ? matmul : 0, 0};
    case Pass::kBackward:
      return {(trainable ? 2 : 1) * matmul, 2 * attention};
    case Pass::kRecompute:
      if (recompute == Recompute::kFull) return {matmul, attention};
      if (recompute == Recompute::kSelective) return {0, attention};
      return {};
  }
  return {};
}

double model_flops(const LayerSpec& layer, const TokenBatch& batch, bool trainable) {
  return layer_flops(layer, Pass::kForward, batch).total() + layer_flops(layer, Pass::kBackwardInput, batch).total() +
         layer_flops(layer, Pass::kBackwardWeight, batch, trainable).total();
}

double hardware_flops(const LayerSpec& layer, const TokenBatch& batch, Recompute recompute, bool trainable) {
  return model_flops(layer, batch, trainable) +
         layer_flops(layer, Pass::kRecompute, batch, trainable, recompute).total();
}

std::string_view recompute_name(Recompute mode) {
  switch (mode) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "?";
}

Recompute parse_recompute(std::string_view name, std::string_view what) {
  for (Recompute mode : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    if (name == recompute_name(mode)) return mode;
  }
  throw InputError(fmt::format("{} {}: use none, selective or full", what, name));
}

}  // namespace fulcrum
