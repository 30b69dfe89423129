#ifndef FULCRUM_MODEL_MODEL_BUILDERS_H_
#define FULCRUM_MODEL_MODEL_BUILDERS_H_

#include <cstdint>
#include <string>

#include "fulcrum/model/model_spec.h"

namespace fulcrum {

// The architectures that presets and Hugging Face configs are made of, each from its few defining numbers.

// A decoder-only LLM: token embedding, `layers` blocks of grouped-query attention and a SwiGLU MLP with
// RMSNorm (LLaMA, InternLM2, Qwen2, Yi), final norm, LM head (counted again unless tied to the embedding).
struct DecoderShape {
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;  // 0 = heads
  int64_t head_dim = 0;  // 0 = hidden / heads
  int64_t ffn = 0;
  int64_t vocab = 0;
  bool tied_embeddings = false;
  bool qkv_bias = false;        // Qwen2
  MlpKind mlp = MlpKind::kSwiGlu;  // GPT-style models: kGelu with LayerNorm and biases
  NormKind norm = NormKind::kRmsNorm;
  bool linear_bias = false;
};
ComponentSpec decoder_llm(const std::string& name, const DecoderShape& shape);

// A vision transformer over image tiles: patch embedding (with class token and learned positions, or rotary
// positions), `layers` blocks, optional final norm.
struct VitShape {
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;  // 0 = hidden / heads
  int64_t ffn = 0;
  int64_t image_pixels = 224;  // side of a tile
  int64_t patch_pixels = 14;
  int64_t channels = 3;
  int64_t temporal_patch = 1;  // Qwen2-VL embeds 2 frames per patch
  bool class_token = true;
  bool learned_positions = true;
  bool dynamic_resolution = false;  // Qwen2-VL: items are patch tokens, not fixed tiles
  MlpKind mlp = MlpKind::kGelu;
  NormKind norm = NormKind::kLayerNorm;
  bool qkv_bias = true;
  bool linear_bias = true;
  bool layer_scale = false;
  bool qk_norm = false;
  bool patch_bias = true;
  bool pre_norm = false;    // CLIP's norm after the patch embedding
  bool final_norm = false;  // a norm after the last block (CLIP's post_layernorm)
  int64_t window_tokens = 0;  // windowed attention in the blocks below
  std::vector<int64_t> full_attention_blocks;  // blocks that keep full attention when windowed
};
ComponentSpec vision_transformer(const std::string& name, const VitShape& shape);

// An MLP from encoder features (`in_features`, already merged `merge`-to-1 where the projector does so) to
// the LLM's width: optional norm, then `linears` linears with GELU between, widths in → hidden → ... → out.
struct ProjectorShape {
  int64_t in_features = 0;
  int64_t hidden = 0;  // between linears
  int64_t out_features = 0;
  int64_t linears = 2;
  NormKind norm = NormKind::kNone;
  bool bias = true;
};
ComponentSpec mlp_projector(const std::string& name, const ProjectorShape& shape);

}  // namespace fulcrum

#endif  // FULCRUM_MODEL_MODEL_BUILDERS_H_
