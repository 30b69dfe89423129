#ifndef FULCRUM_MODEL_MODEL_SPEC_H_
#define FULCRUM_MODEL_MODEL_SPEC_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fulcrum {

// What a layer is. A transformer block holds its attention, its MLP and their norms: the unit that pipeline
// stages are cut between and that recomputation is decided for.
enum class LayerKind {
  kPatchEmbedding,    // image patches → tokens: a convolution, class token, learned positions
  kTokenEmbedding,    // token ids → vectors: vocab × hidden
  kTransformerBlock,  // attention + MLP (+ norms, layer scale, q/k norms)
  kProjector,         // encoder features → LLM width: optional norm, then an MLP of `projector_linears` linears
  kFinalNorm,         // the norm after the last block
  kLmHead,            // vectors → vocabulary logits: hidden × vocab
};
enum class MlpKind { kGelu, kSwiGlu };  // two weight matrices, or three (gate, up, down)
enum class NormKind { kNone, kLayerNorm, kRmsNorm };

std::string_view layer_kind_name(LayerKind kind);
std::string_view mlp_kind_name(MlpKind kind);
std::string_view norm_kind_name(NormKind kind);

// One layer's shape: enough to count its parameters and, in cost/, its FLOPs, bytes and kernels.
struct LayerSpec {
  LayerKind kind = LayerKind::kTransformerBlock;
  int64_t hidden = 0;    // width of the residual stream (kProjector: its output width)
  int64_t ffn = 0;       // MLP inner width (kProjector: the hidden width between its linears)
  int64_t heads = 0;     // attention heads
  int64_t kv_heads = 0;  // key/value heads (grouped-query attention); = heads for multi-head attention
  int64_t head_dim = 0;  // per head; usually hidden / heads
  MlpKind mlp = MlpKind::kGelu;
  NormKind norm = NormKind::kLayerNorm;
  bool qkv_bias = false;     // biases on q, k, v
  bool linear_bias = false;  // biases on the attention output and MLP linears (and the projector's)
  bool layer_scale = false;  // InternViT's per-channel scales after attention and MLP
  bool qk_norm = false;      // norms over q and k (InternViT-6B's qk_normalization)
  int64_t window_tokens = 0; // attention limited to windows of this many tokens; 0 = full attention
  int64_t vocab = 0;         // kTokenEmbedding, kLmHead
  bool tied_to_embedding = false;  // kLmHead reusing the embedding's weights: it runs, its parameters don't count
  int64_t in_features = 0;   // kProjector: input width; kPatchEmbedding: channels × patch pixels
  int64_t projector_linears = 2;  // kProjector
  int64_t positions = 0;     // kPatchEmbedding: learned position embeddings (0 with rotary positions)
  bool class_token = false;  // kPatchEmbedding
  bool patch_bias = true;    // kPatchEmbedding: bias of the patch convolution

  int64_t parameters() const;
  bool operator==(const LayerSpec&) const = default;
};

enum class ComponentRole { kEncoder, kProjector, kLlm };
std::string_view component_role_name(ComponentRole role);

// A part of the model that gets its own parallel plan: an encoder, the projector, the LLM. Its layers run as a
// chain, in order.
// The most patch tokens one encoder item may be (the largest real tiles are a few thousand): past it a
// micro-batch's Σt² overflows.
inline constexpr int64_t kMostImageTokens = 65536;

struct ComponentSpec {
  std::string name;  // "vision", "projector", "llm", ...
  ComponentRole role = ComponentRole::kLlm;
  bool trainable = true;  // frozen: no weight gradients, no gradient or optimizer memory
  // Encoders: the sequence one item (a 448-px tile) is; 0 when items have a dynamic number of patch tokens
  // (Qwen2-VL), counted per sample as its vision tokens.
  int64_t tokens_per_item = 0;
  // Encoder tokens per LLM token after the projector (pixel shuffle 0.5 or a 2×2 merge: 4; none: 1).
  int64_t merge = 1;
  // The projector takes every token of an item but its first, the class token (LLaVA's "default" feature
  // strategy: 576 of CLIP-L/336's 577).
  bool drops_class_token = false;
  // Final layers whose output the model does not use (LLaVA takes the second-to-last layer): their parameters
  // exist, their compute is skipped.
  int64_t unused_final_layers = 0;
  std::vector<LayerSpec> layers;

  int64_t parameters() const;
  int64_t transformer_blocks() const;
  // Of an encoder with fixed items: the tokens of an item the projector after it takes, merged (0: dynamic).
  int64_t projected_tokens_per_item() const;
  const LayerSpec* first_block() const;  // nullptr without a transformer block
  // The heads that tensor parallelism must divide (of the first transformer block), 0 without one.
  int64_t attention_heads() const;
  int64_t kv_heads() const;
  bool operator==(const ComponentSpec&) const = default;
};

// A whole multimodal model: encoders, then projectors, then the LLM, each a chain of layers.
struct ModelSpec {
  std::string name;
  std::vector<ComponentSpec> components;

  int64_t parameters() const;
  int64_t trainable_parameters() const;
  // nullptr when absent.
  const ComponentSpec* find(std::string_view component) const;
  bool has_encoder() const;  // a component with role kEncoder
  bool operator==(const ModelSpec&) const = default;
};

// One layer of the flattened model (components in order, their layers in order), as schedules number them.
struct FlatLayer {
  int component = 0;
  const LayerSpec* spec = nullptr;  // into the model, which must outlive it
  bool runs = true;                 // not among its component's unused final layers
};
std::vector<FlatLayer> flat_layers(const ModelSpec& model);

// A chain of `count` identical transformer blocks.
std::vector<LayerSpec> transformer_blocks(int64_t count, const LayerSpec& block);

// Checks sizes (positive widths, heads dividing the width unless head_dim is given, kv_heads dividing heads,
// a component with layers); throws InputError naming `where`, the component and the layer.
void validate_model(const ModelSpec& model, const std::string& where);

}  // namespace fulcrum

#endif  // FULCRUM_MODEL_MODEL_SPEC_H_
