#include "fulcrum/model/test_layers.h"

namespace fulcrum {

LayerSpec gpt3_block() {
  LayerSpec b;
  b.kind = LayerKind::kTransformerBlock;
  b.hidden = 12288;
  b.heads = b.kv_heads = 96;
  b.head_dim = 128;
  b.ffn = 4 * 12288;
  b.mlp = MlpKind::kGelu;
  return b;
}

LayerSpec tiny_gqa_swiglu_block() {
  LayerSpec b;
  b.kind = LayerKind::kTransformerBlock;
  b.hidden = 8;
  b.heads = 2;
  b.kv_heads = 1;
  b.head_dim = 4;
  b.ffn = 16;
  b.mlp = MlpKind::kSwiGlu;
  b.norm = NormKind::kRmsNorm;
  return b;
}

}  // namespace fulcrum
