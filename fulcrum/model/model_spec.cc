#include "fulcrum/model/model_spec.h"

#include <algorithm>

#include <fmt/format.h>

#include "fulcrum/core/error.h"

namespace fulcrum {

std::string_view layer_kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::kPatchEmbedding: return "patch_embedding";
    case LayerKind::kTokenEmbedding: return "token_embedding";
    case LayerKind::kTransformerBlock: return "transformer";
    case LayerKind::kProjector: return "projector";
    case LayerKind::kFinalNorm: return "final_norm";
    case LayerKind::kLmHead: return "lm_head";
  }
  return "?";
}

std::string_view mlp_kind_name(MlpKind kind) { return kind == MlpKind::kGelu ? "gelu" : "swiglu"; }

std::string_view norm_kind_name(NormKind kind) {
  switch (kind) {
    case NormKind::kNone: return "none";
    case NormKind::kLayerNorm: return "layernorm";
    case NormKind::kRmsNorm: return "rmsnorm";
  }
  return "?";
}

std::string_view component_role_name(ComponentRole role) {
  switch (role) {
    case ComponentRole::kEncoder: return "encoder";
    case ComponentRole::kProjector: return "projector";
    case ComponentRole::kLlm: return "llm";
  }
  return "?";
}

namespace {

// A norm over `width` channels: LayerNorm has a weight and a bias, RMSNorm a weight.
int64_t norm_parameters(NormKind norm, int64_t width) {
  switch (norm) {
    case NormKind::kNone: return 0;
    case NormKind::kLayerNorm: return 2 * width;
    case NormKind::kRmsNorm: return width;
  }
  return 0;
}

int64_t block_parameters(const LayerSpec& l) {
  const int64_t q_width = l.heads * l.head_dim;
  const int64_t kv_width = l.kv_heads * l.head_dim;
  int64_t attention = l.hidden * (q_width + 2 * kv_width) + q_width * l.hidden;
  if (l.qkv_bias) attention += q_width + 2 * kv_width;
  if (l.linear_bias) attention += l.hidden;
  if (l.qk_norm) attention += norm_parameters(l.norm, q_width) + norm_parameters(l.norm, kv_width);
  const int64_t matrices = l.mlp == MlpKind::kGelu ? 2 : 3;
  int64_t mlp = matrices * l.hidden * l.ffn;
  if (l.linear_bias) mlp += (matrices - 1) * l.ffn + l.hidden;
  int64_t extras = 2 * norm_parameters(l.norm, l.hidden);
  if (l.layer_scale) extras += 2 * l.hidden;
  return attention + mlp + extras;
}

int64_t projector_parameters(const LayerSpec& l) {
  int64_t total = norm_parameters(l.norm, l.in_features);
  int64_t in = l.in_features;
  for (int64_t i = 0; i < l.projector_linears; ++i) {
    const int64_t out = i + 1 == l.projector_linears ? l.hidden : l.ffn;
    total += in * out + (l.linear_bias ? out : 0);
    in = out;
  }
  return total;
}

}  // namespace

int64_t LayerSpec::parameters() const {
  switch (kind) {
    case LayerKind::kPatchEmbedding:
      return in_features * hidden + (patch_bias ? hidden : 0) + (class_token ? hidden : 0) + positions * hidden +
             norm_parameters(norm, hidden);
    case LayerKind::kTokenEmbedding:
      return vocab * hidden;
    case LayerKind::kLmHead:
      return tied_to_embedding ? 0 : vocab * hidden;
    case LayerKind::kTransformerBlock:
      return block_parameters(*this);
    case LayerKind::kProjector:
      return projector_parameters(*this);
    case LayerKind::kFinalNorm:
      return norm_parameters(norm, hidden);
  }
  return 0;
}

int64_t ComponentSpec::parameters() const {
  int64_t total = 0;
  for (const LayerSpec& layer : layers) total += layer.parameters();
  return total;
}

int64_t ComponentSpec::projected_tokens_per_item() const {
  if (tokens_per_item <= 0) return 0;
  return std::max<int64_t>(1, (tokens_per_item - (drops_class_token ? 1 : 0)) / std::max<int64_t>(1, merge));
}

int64_t ComponentSpec::transformer_blocks() const {
  int64_t count = 0;
  for (const LayerSpec& layer : layers) count += layer.kind == LayerKind::kTransformerBlock;
  return count;
}

const LayerSpec* ComponentSpec::first_block() const {
  for (const LayerSpec& layer : layers) {
    if (layer.kind == LayerKind::kTransformerBlock) return &layer;
  }
  return nullptr;
}

int64_t ComponentSpec::attention_heads() const { return first_block() ? first_block()->heads : 0; }

int64_t ComponentSpec::kv_heads() const { return first_block() ? first_block()->kv_heads : 0; }

bool ModelSpec::has_encoder() const {
  for (const ComponentSpec& c : components) {
    if (c.role == ComponentRole::kEncoder) return true;
  }
  return false;
}

std::vector<FlatLayer> flat_layers(const ModelSpec& model) {
  std::vector<FlatLayer> out;
  for (int c = 0; c < static_cast<int>(model.components.size()); ++c) {
    const ComponentSpec& comp = model.components[c];
    const size_t used = comp.layers.size() - static_cast<size_t>(std::max<int64_t>(0, comp.unused_final_layers));
    for (size_t i = 0; i < comp.layers.size(); ++i) out.push_back({c, &comp.layers[i], i < used});
  }
  return out;
}

int64_t ModelSpec::parameters() const {
  int64_t total = 0;
  for (const ComponentSpec& c : components) total += c.parameters();
  return total;
}

int64_t ModelSpec::trainable_parameters() const {
  int64_t total = 0;
  for (const ComponentSpec& c : components) total += c.trainable ? c.parameters() : 0;
  return total;
}

const ComponentSpec* ModelSpec::find(std::string_view component) const {
  for (const ComponentSpec& c : components) {
    if (c.name == component) return &c;
  }
  return nullptr;
}

std::vector<LayerSpec> transformer_blocks(int64_t count, const LayerSpec& block) {
  return std::vector<LayerSpec>(static_cast<size_t>(count), block);
}

namespace {

void require(bool ok, const std::string& where, const ComponentSpec& c, size_t layer, std::string_view what) {
  if (!ok) {
    throw InputError(fmt::format("{}: component '{}' layer {}: {}", where, c.name, layer, what));
  }
}

}  // namespace

namespace {

// Bounds that keep every parameter count exact in 64 bits: each layer's product of two widths stays below 2^56.
constexpr int64_t kMaxWidth = int64_t{1} << 24;
constexpr int64_t kMaxFeatures = int64_t{1} << 32;
constexpr double kMaxParameters = 1e15;

bool within(int64_t value, int64_t max) { return value >= 0 && value <= max; }

}  // namespace

void validate_model(const ModelSpec& model, const std::string& where) {
  if (model.components.empty()) throw InputError(fmt::format("{}: the model has no components", where));
  double total = 0;
  for (const ComponentSpec& c : model.components) {
    if (c.layers.empty()) throw InputError(fmt::format("{}: component '{}' has no layers", where, c.name));
    if (c.tokens_per_item < 0 || c.merge < 1 || c.unused_final_layers < 0 ||
        c.unused_final_layers >= static_cast<int64_t>(c.layers.size())) {
      throw InputError(fmt::format("{}: component '{}': tokens_per_item must be ≥ 0, merge ≥ 1, and fewer "
                                   "unused final layers than layers", where, c.name));
    }
    if (c.drops_class_token && (c.role != ComponentRole::kEncoder || c.tokens_per_item < 2)) {
      throw InputError(fmt::format("{}: component '{}': drops_class_token needs an encoder of fixed items of at "
                                   "least 2 tokens", where, c.name));
    }
    for (size_t i = 0; i < c.layers.size(); ++i) {
      const LayerSpec& l = c.layers[i];
      require(l.hidden > 0, where, c, i, "hidden must be positive");
      require(within(l.hidden, kMaxWidth) && within(l.ffn, kMaxWidth) && within(l.heads, kMaxWidth) &&
                  within(l.kv_heads, kMaxWidth) && within(l.head_dim, kMaxWidth) &&
                  within(l.heads * l.head_dim, kMaxWidth) && within(l.vocab, kMaxFeatures) &&
                  within(l.in_features, kMaxFeatures) && within(l.positions, kMaxFeatures) &&
                  within(l.projector_linears, 64),
              where, c, i, "a size is implausibly large");
      total += static_cast<double>(l.parameters());
      switch (l.kind) {
        case LayerKind::kTransformerBlock:
          require(l.ffn > 0 && l.heads > 0 && l.kv_heads > 0 && l.head_dim > 0, where, c, i,
                  "ffn, heads, kv_heads and head_dim must be positive");
          require(l.heads % l.kv_heads == 0, where, c, i, "kv_heads must divide heads");
          require(l.window_tokens >= 0, where, c, i, "window_tokens must not be negative");
          break;
        case LayerKind::kTokenEmbedding:
        case LayerKind::kLmHead:
          require(l.vocab > 0, where, c, i, "vocab must be positive");
          break;
        case LayerKind::kProjector:
          require(l.in_features > 0 && l.projector_linears >= 1 && (l.projector_linears == 1 || l.ffn > 0), where,
                  c, i, "in_features, ffn and projector_linears must be positive");
          break;
        case LayerKind::kPatchEmbedding:
          require(l.in_features > 0 && l.positions >= 0, where, c, i,
                  "in_features must be positive and positions not negative");
          break;
        case LayerKind::kFinalNorm:
          break;
      }
    }
  }
  if (total > kMaxParameters) {
    throw InputError(fmt::format("{}: {:.3g} parameters is implausibly many (at most 1e15)", where, total));
  }
}

}  // namespace fulcrum
