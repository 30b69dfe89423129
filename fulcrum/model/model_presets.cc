#include "fulcrum/model/model_presets.h"

#include <fmt/format.h>

#include <functional>
#include <map>

#include "fulcrum/core/error.h"
#include "fulcrum/model/model_builders.h"

namespace fulcrum {
namespace {

// InternViT-6B-448px-V1-5: 45 blocks of width 3200, 25 heads, MLP 12800, RMSNorm, q/k norms, layer scale,
// 448-px tiles of 14-px patches plus a class token (1,025 tokens).
ComponentSpec internvit_6b(const std::string& name) {
  VitShape s;
  s.layers = 45;
  s.hidden = 3200;
  s.heads = 25;
  s.ffn = 12800;
  s.image_pixels = 448;
  s.norm = NormKind::kRmsNorm;
  s.qkv_bias = false;
  s.layer_scale = true;
  s.qk_norm = true;
  return vision_transformer(name, s);
}

// The ViT family of Optimus's experiments (reference/optimus.md, after ViT-22B): 48 blocks, MLP 4× width,
// 224-px images of 14-px patches, no class token, no q/k/v biases.
ComponentSpec optimus_vit(const std::string& name, int64_t width, int64_t heads) {
  VitShape s;
  s.layers = 48;
  s.hidden = width;
  s.heads = heads;
  s.ffn = 4 * width;
  s.class_token = false;
  s.qkv_bias = false;
  return vision_transformer(name, s);
}

// GPT-3-style decoders: LayerNorm, GELU MLP 4× width with biases, GPT-2 vocabulary, tied embeddings.
ComponentSpec gpt(const std::string& name, int64_t layers, int64_t width, int64_t heads) {
  DecoderShape s;
  s.layers = layers;
  s.hidden = width;
  s.heads = heads;
  s.ffn = 4 * width;
  s.vocab = 50257;
  s.tied_embeddings = true;
  s.mlp = MlpKind::kGelu;
  s.norm = NormKind::kLayerNorm;
  s.qkv_bias = true;
  s.linear_bias = true;
  return decoder_llm(name, s);
}

ComponentSpec llama(const std::string& name, int64_t layers, int64_t width, int64_t heads, int64_t kv_heads,
                    int64_t ffn, int64_t vocab) {
  DecoderShape s;
  s.layers = layers;
  s.hidden = width;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.ffn = ffn;
  s.vocab = vocab;
  return decoder_llm(name, s);
}

ComponentSpec internlm2_20b(const std::string& name, int64_t vocab = 92544) {
  return llama(name, 48, 6144, 48, 8, 16384, vocab);
}
ComponentSpec yi_34b(const std::string& name, int64_t vocab = 64000) {
  return llama(name, 60, 7168, 56, 8, 20480, vocab);
}

// CLIP ViT-L/14 at 336 px, as LLaVA-1.5 uses it: 24 blocks, width 1024, QuickGELU MLP 4096, pre and post norms.
ComponentSpec clip_vit_l_336(const std::string& name) {
  VitShape s;
  s.layers = 24;
  s.hidden = 1024;
  s.heads = 16;
  s.ffn = 4096;
  s.image_pixels = 336;
  s.patch_bias = false;
  s.pre_norm = true;
  s.final_norm = true;
  return vision_transformer(name, s);
}

// InternVL: pixel shuffle 0.5 merges 4 patch tokens into one, then LayerNorm + two linears to the LLM width.
ModelSpec internvl(const std::string& name, ComponentSpec vision, ComponentSpec llm) {
  const int64_t vit_width = vision.layers[0].hidden;
  const int64_t llm_width = llm.layers[0].hidden;
  vision.merge = 4;
  vision.drops_class_token = vision.tokens_per_item > 1;  // InternVL drops the class token before the shuffle
  ModelSpec m{name, {}};
  m.components.push_back(std::move(vision));
  m.components.push_back(mlp_projector("projector", {4 * vit_width, llm_width, llm_width, 2, NormKind::kLayerNorm, true}));
  m.components.push_back(std::move(llm));
  return m;
}

using Builder = std::function<ModelSpec(const std::string&)>;

ModelSpec single(ComponentSpec c) { return ModelSpec{c.name, {std::move(c)}}; }

const std::map<std::string, Builder, std::less<>>& presets() {
  static const auto* table = new std::map<std::string, Builder, std::less<>>{
      {"internvit-6b", [](const std::string& n) { return single(internvit_6b(n)); }},
      {"internlm2-20b", [](const std::string& n) { return single(internlm2_20b(n)); }},
      {"yi-34b", [](const std::string& n) { return single(yi_34b(n)); }},
      {"vit-3b", [](const std::string& n) { return single(optimus_vit(n, 2304, 18)); }},
      {"vit-5b", [](const std::string& n) { return single(optimus_vit(n, 3072, 24)); }},
      {"vit-11b", [](const std::string& n) { return single(optimus_vit(n, 4096, 32)); }},
      {"vit-22b", [](const std::string& n) { return single(optimus_vit(n, 6144, 48)); }},
      {"gpt-11b", [](const std::string& n) { return single(gpt(n, 80, 3072, 24)); }},
      {"gpt-175b", [](const std::string& n) { return single(gpt(n, 96, 12288, 96)); }},
      // LLaMA-2-70B's published dimensions: grouped-query attention with 8 KV heads, SwiGLU 28672.
      {"llama-70b", [](const std::string& n) { return single(llama(n, 80, 8192, 64, 8, 28672, 32000)); }},
      // InternVL-Chat-V1-5: the LLM's vocabulary carries 9 added tokens (92,553).
      {"internvl-chat-1.5",
       [](const std::string& n) { return internvl(n, internvit_6b("vision"), internlm2_20b("llm", 92553)); }},
      // InternVL-Chat-V1-2-Plus: InternViT-6B + Nous-Hermes-2-Yi-34B (vocab 64,000 + 7 added).
      {"internvl-chat-1.5-plus",
       [](const std::string& n) { return internvl(n, internvit_6b("vision"), yi_34b("llm", 64007)); }},
      {"llava-1.5-7b",
       [](const std::string& n) {
         ComponentSpec vision = clip_vit_l_336("vision");
         vision.unused_final_layers = 1;  // LLaVA feeds the second-to-last layer's features
         vision.tokens_per_item = 577;
         vision.drops_class_token = true;  // the projector takes the 576 patch tokens
         ModelSpec m{n, {}};
         m.components.push_back(std::move(vision));
         m.components.push_back(mlp_projector("projector", {1024, 4096, 4096, 2, NormKind::kNone, true}));
         m.components.push_back(llama("llm", 32, 4096, 32, 32, 11008, 32064));
         return m;
       }},
  };
  return *table;
}

}  // namespace

const std::vector<std::string>& model_preset_names() {
  static const auto* names = [] {
    auto* out = new std::vector<std::string>;
    for (const auto& [name, builder] : presets()) out->push_back(name);
    return out;
  }();
  return *names;
}

ModelSpec model_preset(std::string_view name) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    const size_t plus = name.find('+', start);
    parts.push_back(name.substr(start, plus == std::string_view::npos ? std::string_view::npos : plus - start));
    if (plus == std::string_view::npos) break;
    start = plus + 1;
  }
  std::vector<ModelSpec> pieces;
  for (std::string_view part : parts) {
    const auto it = presets().find(part);
    if (it == presets().end()) {
      throw InputError(fmt::format("unknown model '{}'; known: {} (join encoders and an LLM with '+')", part,
                                   fmt::join(model_preset_names(), ", ")));
    }
    pieces.push_back(it->second(std::string(part)));
  }
  if (pieces.size() == 1) return std::move(pieces[0]);

  // Encoders, each with a projector to the LLM's width, then the LLM: the last part.
  ModelSpec llm = std::move(pieces.back());
  pieces.pop_back();
  if (llm.components.size() != 1 || llm.components[0].role != ComponentRole::kLlm) {
    throw InputError(fmt::format("model '{}': the last part of a '+' model must be an LLM", name));
  }
  const int64_t llm_width = llm.components[0].layers[0].hidden;
  ModelSpec out{std::string(name), {}};
  for (ModelSpec& piece : pieces) {
    if (piece.components.size() != 1 || piece.components[0].role != ComponentRole::kEncoder) {
      throw InputError(fmt::format("model '{}': '{}' is not an encoder; only the last part may be an LLM", name,
                                   piece.name));
    }
    ComponentSpec encoder = std::move(piece.components[0]);
    if (out.find(encoder.name)) encoder.name += fmt::format("-{}", out.components.size() / 2 + 1);
    const int64_t width = encoder.layers[0].hidden;
    const std::string projector = encoder.name + "-projector";
    out.components.push_back(std::move(encoder));
    out.components.push_back(mlp_projector(projector, {width, llm_width, llm_width, 2, NormKind::kNone, true}));
  }
  out.components.push_back(std::move(llm.components[0]));
  return out;
}

}  // namespace fulcrum
