#include "fulcrum/model/model_builders.h"

#include <algorithm>

namespace fulcrum {
namespace {

LayerSpec block_of(int64_t hidden, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t ffn, MlpKind mlp,
                   NormKind norm, bool qkv_bias, bool linear_bias) {
  LayerSpec block;
  block.kind = LayerKind::kTransformerBlock;
  block.hidden = hidden;
  block.ffn = ffn;
  block.heads = heads;
  block.kv_heads = kv_heads > 0 ? kv_heads : heads;
  block.head_dim = head_dim > 0 ? head_dim : (heads > 0 ? hidden / heads : 0);
  block.mlp = mlp;
  block.norm = norm;
  block.qkv_bias = qkv_bias;
  block.linear_bias = linear_bias;
  return block;
}

}  // namespace

ComponentSpec decoder_llm(const std::string& name, const DecoderShape& s) {
  ComponentSpec c;
  c.name = name;
  c.role = ComponentRole::kLlm;
  LayerSpec embedding;
  embedding.kind = LayerKind::kTokenEmbedding;
  embedding.hidden = s.hidden;
  embedding.vocab = s.vocab;
  c.layers.push_back(embedding);

  const LayerSpec block =
      block_of(s.hidden, s.heads, s.kv_heads, s.head_dim, s.ffn, s.mlp, s.norm, s.qkv_bias, s.linear_bias);
  const auto blocks = transformer_blocks(s.layers, block);
  c.layers.insert(c.layers.end(), blocks.begin(), blocks.end());

  LayerSpec final_norm;
  final_norm.kind = LayerKind::kFinalNorm;
  final_norm.hidden = s.hidden;
  final_norm.norm = s.norm;
  c.layers.push_back(final_norm);

  LayerSpec head = embedding;
  head.kind = LayerKind::kLmHead;
  head.tied_to_embedding = s.tied_embeddings;
  c.layers.push_back(head);
  return c;
}

ComponentSpec vision_transformer(const std::string& name, const VitShape& s) {
  ComponentSpec c;
  c.name = name;
  c.role = ComponentRole::kEncoder;
  const int64_t side = s.patch_pixels > 0 ? s.image_pixels / s.patch_pixels : 0;
  const int64_t patches = side * side;
  c.tokens_per_item = s.dynamic_resolution ? 0 : patches + (s.class_token ? 1 : 0);

  LayerSpec patch;
  patch.kind = LayerKind::kPatchEmbedding;
  patch.hidden = s.hidden;
  patch.in_features = s.channels * s.temporal_patch * s.patch_pixels * s.patch_pixels;
  patch.class_token = s.class_token;
  patch.positions = s.learned_positions ? patches + (s.class_token ? 1 : 0) : 0;
  patch.patch_bias = s.patch_bias;
  patch.norm = s.pre_norm ? s.norm : NormKind::kNone;
  c.layers.push_back(patch);

  LayerSpec block =
      block_of(s.hidden, s.heads, s.heads, s.head_dim, s.ffn, s.mlp, s.norm, s.qkv_bias, s.linear_bias);
  block.layer_scale = s.layer_scale;
  block.qk_norm = s.qk_norm;
  for (int64_t i = 0; i < s.layers; ++i) {
    LayerSpec b = block;
    const bool full = std::find(s.full_attention_blocks.begin(), s.full_attention_blocks.end(), i) !=
                      s.full_attention_blocks.end();
    b.window_tokens = full ? 0 : s.window_tokens;
    c.layers.push_back(b);
  }
  if (s.final_norm) {
    LayerSpec norm;
    norm.kind = LayerKind::kFinalNorm;
    norm.hidden = s.hidden;
    norm.norm = s.norm;
    c.layers.push_back(norm);
  }
  return c;
}

ComponentSpec mlp_projector(const std::string& name, const ProjectorShape& s) {
  ComponentSpec c;
  c.name = name;
  c.role = ComponentRole::kProjector;
  LayerSpec layer;
  layer.kind = LayerKind::kProjector;
  layer.in_features = s.in_features;
  layer.ffn = s.hidden;
  layer.hidden = s.out_features;
  layer.projector_linears = s.linears;
  layer.norm = s.norm;
  layer.linear_bias = s.bias;
  c.layers.push_back(layer);
  return c;
}

}  // namespace fulcrum
