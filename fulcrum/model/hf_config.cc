#include "fulcrum/model/hf_config.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "fulcrum/core/error.h"
#include "fulcrum/core/json_document.h"
#include "fulcrum/core/text_file.h"
#include "fulcrum/model/model_builders.h"

namespace fulcrum {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxWidth = int64_t{1} << 24;  // widths, heads, vocabularies, pixels
constexpr int64_t kMaxLayers = 100000;

// Typed access to one JSON object of a config, naming file and key path in every error.
class Keys {
 public:
  Keys(const json& object, const std::string& file, std::string path)
      : object_(object), file_(file), path_(std::move(path)) {
    if (!object_.is_object()) fail("", "must be a JSON object");
  }

  bool has(const char* key) const { return object_.contains(key) && !object_.at(key).is_null(); }

  // A positive integer up to `max`; `fallback` is the model class's default when the key is absent.
  int64_t size(const char* key, std::optional<int64_t> fallback = std::nullopt, int64_t max = kMaxWidth) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail(key, "is missing");
    }
    const json& v = object_.at(key);
    if (!v.is_number_integer()) fail(key, "must be an integer");
    // Read as int64_t, an unsigned value past its range would wrap to a negative one.
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max)) {
      fail(key, fmt::format("is implausibly large: {} (at most {})", v.get<uint64_t>(), max));
    }
    const int64_t value = v.get<int64_t>();
    if (value <= 0) fail(key, fmt::format("must be positive, got {}", value));
    if (value > max) fail(key, fmt::format("is implausibly large: {} (at most {})", value, max));
    return value;
  }
  // Layer counts: a chain of LayerSpecs is built from them.
  int64_t layers(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    return size(key, fallback, kMaxLayers);
  }

  // An integer of magnitude up to 2^53 (no setting read this way is larger; callers may negate it).
  int64_t integer(const char* key, int64_t fallback) const {
    if (!has(key)) return fallback;
    const json& v = object_.at(key);
    if (!v.is_number_integer()) fail(key, "must be an integer");
    constexpr int64_t kMost = int64_t{1} << 53;
    if ((v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(kMost)) ||
        (!v.is_number_unsigned() && (v.get<int64_t>() > kMost || v.get<int64_t>() < -kMost))) {
      fail(key, "is out of range (magnitude at most 2^53)");
    }
    return v.get<int64_t>();
  }

  double number(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    if (!object_.at(key).is_number()) fail(key, "must be a number");
    const double value = object_.at(key).get<double>();
    if (!(value > 0) || !std::isfinite(value)) fail(key, "must be a positive number");
    return value;
  }

  bool flag(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!object_.at(key).is_boolean()) fail(key, "must be true or false");
    return object_.at(key).get<bool>();
  }

  std::string text(const char* key, const std::string& fallback = "") const {
    if (!has(key)) return fallback;
    if (!object_.at(key).is_string()) fail(key, "must be a string");
    return object_.at(key).get<std::string>();
  }

  std::vector<int64_t> integers(const char* key, std::vector<int64_t> fallback) const {
    if (!has(key)) return fallback;
    const json& v = object_.at(key);
    if (!v.is_array()) fail(key, "must be an array of integers");
    std::vector<int64_t> out;
    for (const json& item : v) {
      if (!item.is_number_integer()) fail(key, "must be an array of integers");
      out.push_back(item.get<int64_t>());
    }
    return out;
  }

  Keys child(const char* key) const {
    if (!has(key)) fail(key, "is missing");
    return Keys(object_.at(key), file_, path_ + key + ".");
  }

  // The first architecture named, or "".
  std::string architecture() const {
    if (!has("architectures")) return "";
    const json& v = object_.at("architectures");
    if (!v.is_array() || v.empty() || !v[0].is_string()) fail("architectures", "must be an array of names");
    return v[0].get<std::string>();
  }

  [[noreturn]] void fail(std::string_view key, std::string_view what) const {
    throw InputError(fmt::format("{}: {}{} {}", file_, path_, key.empty() ? "(object)" : key, what));
  }
  const std::string& file() const { return file_; }

 private:
  const json& object_;
  const std::string& file_;
  std::string path_;
};

NormKind norm_named(const Keys& k, const char* key, NormKind fallback) {
  const std::string name = k.text(key, "");
  if (name.empty()) return fallback;
  if (name == "rms_norm" || name == "rmsnorm") return NormKind::kRmsNorm;
  if (name == "layer_norm" || name == "layernorm") return NormKind::kLayerNorm;
  k.fail(key, fmt::format("names an unknown norm '{}'", name));
}

// Decoder LLMs by model_type, with their configuration class's defaults for absent keys.
ComponentSpec decoder_from(const Keys& k, const std::string& name, const std::string& model_type,
                           std::optional<bool> tied_override = std::nullopt) {
  DecoderShape s;
  int64_t vocab = 32000, hidden = 4096, ffn = 11008, layers = 32, heads = 32;
  std::optional<int64_t> kv;
  bool tied = false;
  if (model_type == "llama" || model_type == "yi") {
    // LlamaConfig defaults (LLaVA's text_config leaves them out).
  } else if (model_type == "mistral") {
    ffn = 14336;
    kv = 8;
  } else if (model_type == "qwen2" || model_type == "qwen2_vl" || model_type == "qwen2_5_vl" ||
             model_type == "qwen2_vl_text" || model_type == "qwen2_5_vl_text") {
    vocab = 151936;
    ffn = 22016;
    s.qkv_bias = true;
  } else if (model_type == "internlm2") {
    vocab = 103168;
    s.qkv_bias = k.flag("bias", true);
  } else {
    k.fail("model_type", fmt::format("names an architecture Fulcrum cannot read: '{}'", model_type));
  }
  s.vocab = k.size("vocab_size", vocab);
  s.hidden = k.size("hidden_size", hidden);
  s.ffn = k.size("intermediate_size", ffn);
  s.layers = k.layers("num_hidden_layers", layers);
  s.heads = k.size("num_attention_heads", heads);
  s.kv_heads = k.size("num_key_value_heads", kv.value_or(s.heads));
  if (k.has("head_dim")) s.head_dim = k.size("head_dim");
  s.tied_embeddings = tied_override ? *tied_override : k.flag("tie_word_embeddings", tied);
  return decoder_llm(name, s);
}

// The LLM's model_type: its own key, else its architecture's name.
std::string llm_type(const Keys& k) {
  std::string type = k.text("model_type");
  if (!type.empty()) return type;
  const std::string arch = k.architecture();
  if (arch.rfind("InternLM2", 0) == 0) return "internlm2";
  if (arch.rfind("Qwen2", 0) == 0) return "qwen2";
  if (arch.rfind("Llama", 0) == 0) return "llama";
  if (arch.rfind("Mistral", 0) == 0) return "mistral";
  k.fail("model_type", "is missing and the architecture is not one Fulcrum reads");
}

// InternViT (InternVisionConfig's defaults are the 6B tower's, with RMSNorm).
ComponentSpec internvit_from(const Keys& k, const std::string& name, int64_t image_pixels) {
  VitShape s;
  s.layers = k.layers("num_hidden_layers", 48);
  s.hidden = k.size("hidden_size", 3200);
  s.heads = k.size("num_attention_heads", 25);
  s.ffn = k.size("intermediate_size", 12800);
  s.image_pixels = image_pixels > 0 ? image_pixels : k.size("image_size", 224);
  s.patch_pixels = k.size("patch_size", 14);
  s.channels = k.size("num_channels", 3, 64);
  s.norm = norm_named(k, "norm_type", NormKind::kRmsNorm);
  s.qkv_bias = k.flag("qkv_bias", false);
  s.qk_norm = k.flag("qk_normalization", true);
  s.layer_scale = true;
  return vision_transformer(name, s);
}

// CLIPVisionConfig's defaults.
ComponentSpec clip_from(const Keys& k, const std::string& name) {
  VitShape s;
  s.layers = k.layers("num_hidden_layers", 12);
  s.hidden = k.size("hidden_size", 768);
  s.heads = k.size("num_attention_heads", 12);
  s.ffn = k.size("intermediate_size", 3072);
  s.image_pixels = k.size("image_size", 224);
  s.patch_pixels = k.size("patch_size", 32);
  s.channels = k.size("num_channels", 3, 64);
  s.patch_bias = false;
  s.pre_norm = true;
  s.final_norm = true;
  return vision_transformer(name, s);
}

// Qwen2-VL / Qwen2.5-VL vision towers: dynamic resolution, 2-frame 14-px patches, rotary positions, and a
// merger to the LLM's width. The merger's norm (ln_q) runs over each patch token before 2×2 tokens are joined,
// so it is the tower's final norm at the tower's width; the projector is the two linears over merged tokens.
void add_qwen_vision(ModelSpec& m, const Keys& v, bool v2_5, int64_t llm_hidden) {
  VitShape s;
  s.layers = v.layers("depth", 32);
  s.patch_pixels = v.size("patch_size", v.size("spatial_patch_size", 14));
  s.temporal_patch = v.size("temporal_patch_size", 2, 64);
  s.channels = v.size("in_chans", v.size("in_channels", 3, 64), 64);
  s.heads = v.size("num_heads", 16);
  s.class_token = false;
  s.learned_positions = false;
  s.dynamic_resolution = true;
  s.patch_bias = false;
  s.final_norm = true;
  int64_t out_width;
  if (v2_5) {
    s.hidden = v.size("hidden_size", 1280);
    s.ffn = v.size("intermediate_size", 3420);
    s.mlp = MlpKind::kSwiGlu;
    s.norm = NormKind::kRmsNorm;
    const int64_t window_patches = v.size("window_size", 112) / s.patch_pixels;
    s.window_tokens = window_patches * window_patches;
    s.full_attention_blocks = v.integers("fullatt_block_indexes", {7, 15, 23, 31});
    out_width = v.size("out_hidden_size", llm_hidden);
  } else {
    s.hidden = v.size("embed_dim", 1280);
    const double ffn = static_cast<double>(s.hidden) * v.number("mlp_ratio", 4.0);
    if (ffn < 1 || ffn > static_cast<double>(kMaxWidth)) v.fail("mlp_ratio", "gives an MLP width out of range");
    s.ffn = std::llround(ffn);
    out_width = v.size("hidden_size", llm_hidden);
  }
  const int64_t merge_side = v.size("spatial_merge_size", 2, 64);
  ComponentSpec vision = vision_transformer("vision", s);
  vision.merge = merge_side * merge_side;
  const int64_t merged = s.hidden * vision.merge;
  m.components.push_back(std::move(vision));
  m.components.push_back(mlp_projector("projector", {merged, merged, out_width, 2, NormKind::kNone, true}));
}

ModelSpec from_config(const Keys& root, const std::string& name) {
  ModelSpec m;
  m.name = name;
  if (root.has("vision_cfg")) {  // open_clip / EVA-CLIP: the vision tower
    const Keys v = root.child("vision_cfg");
    VitShape s;
    s.layers = v.layers("layers");
    s.hidden = v.size("width");
    s.heads = s.hidden / v.size("head_width", 64);
    if (s.heads <= 0 || s.hidden % v.size("head_width", 64) != 0) v.fail("head_width", "must divide width");
    const bool swiglu = v.flag("naiveswiglu", false) || v.flag("swiglu", false);
    const double ffn = static_cast<double>(s.hidden) * v.number("mlp_ratio", 4.0);
    if (ffn < 1 || ffn > static_cast<double>(kMaxWidth)) v.fail("mlp_ratio", "gives an MLP width out of range");
    s.ffn = static_cast<int64_t>(ffn);
    s.mlp = swiglu ? MlpKind::kSwiGlu : MlpKind::kGelu;
    s.norm = v.flag("use_rms_norm", false) ? NormKind::kRmsNorm : NormKind::kLayerNorm;
    s.qkv_bias = v.flag("qkv_bias", true);
    s.image_pixels = v.size("image_size", 224);
    s.patch_pixels = v.size("patch_size", 16);
    s.final_norm = true;
    m.components.push_back(vision_transformer("vision", s));
    return m;
  }

  const std::string type = root.text("model_type");
  if (type == "internvl_chat") {
    const Keys v = root.child("vision_config");
    const Keys l = root.child("llm_config");
    // InternVL resizes tiles to force_image_size when it is given (0: the tower's own image_size).
    const int64_t image = root.has("force_image_size") ? root.size("force_image_size") : 0;
    ComponentSpec vision = internvit_from(v, "vision", image);
    const double ratio = root.number("downsample_ratio", 0.5);
    if (ratio > 1 || ratio < 1.0 / 64) root.fail("downsample_ratio", "must be between 1/64 and 1");
    vision.merge = std::llround(1.0 / (ratio * ratio));
    vision.drops_class_token = vision.tokens_per_item > 1;  // extract_feature drops it before the pixel shuffle
    vision.unused_final_layers = -root.integer("select_layer", -1) - 1;
    if (vision.unused_final_layers < 0 || vision.unused_final_layers >= vision.transformer_blocks()) {
      root.fail("select_layer", "must name one of the vision layers from the end (-1, -2, ...)");
    }
    const int64_t vit_width = vision.layers[0].hidden;
    // InternVLChatModel ties weights by its own config, not the LLM's: the head is kept unless it says so.
    ComponentSpec llm = decoder_from(l, "llm", llm_type(l), root.flag("tie_word_embeddings", false));
    const int64_t llm_width = llm.layers[0].hidden;
    m.components.push_back(std::move(vision));
    m.components.push_back(mlp_projector("projector", {vit_width * (std::llround(1.0 / (ratio * ratio))),
                                                        llm_width, llm_width, 2, NormKind::kLayerNorm, true}));
    m.components.push_back(std::move(llm));
  } else if (type == "llava") {
    ComponentSpec vision = clip_from(root.child("vision_config"), "vision");
    vision.unused_final_layers = -root.integer("vision_feature_layer", -2) - 1;
    if (vision.unused_final_layers < 0 || vision.unused_final_layers >= vision.transformer_blocks()) {
      root.fail("vision_feature_layer", "must name one of the vision layers from the end (-1, -2, ...)");
    }
    // "default" drops the class token before the projector, "full" keeps it.
    const std::string strategy = root.text("vision_feature_select_strategy", "default");
    if (strategy != "default" && strategy != "full") {
      root.fail("vision_feature_select_strategy", "must be \"default\" or \"full\"");
    }
    vision.drops_class_token = strategy == "default" && vision.tokens_per_item > 1;
    const Keys t = root.child("text_config");
    ComponentSpec llm = decoder_from(t, "llm", t.text("model_type", "llama"));
    const int64_t vision_width = vision.layers[0].hidden;
    const int64_t llm_width = llm.layers[0].hidden;
    m.components.push_back(std::move(vision));
    m.components.push_back(mlp_projector("projector", {vision_width, llm_width, llm_width, 2, NormKind::kNone, true}));
    m.components.push_back(std::move(llm));
  } else if (type == "qwen2_vl" || type == "qwen2_5_vl") {
    // The LLM's keys sit at the top level, or in text_config in newer saves.
    const Keys l = root.has("text_config") ? root.child("text_config") : root;
    ComponentSpec llm = decoder_from(l, "llm", "qwen2", root.flag("tie_word_embeddings", l.flag("tie_word_embeddings", false)));
    add_qwen_vision(m, root.child("vision_config"), type == "qwen2_5_vl", llm.layers[0].hidden);
    m.components.push_back(std::move(llm));
  } else if (type == "intern_vit_6b") {
    m.components.push_back(internvit_from(root, "vision", 0));
  } else if (type == "clip_vision_model") {
    m.components.push_back(clip_from(root, "vision"));
  } else if (type.empty()) {
    root.fail("model_type", "is missing: not a Hugging Face model config or an open_clip config");
  } else {
    m.components.push_back(decoder_from(root, "llm", type));
  }
  return m;
}

}  // namespace

ModelSpec model_from_hf_config(std::string_view text, const std::string& file) {
  const json doc = parse_json_document(text, file);
  std::string name = file;
  const size_t slash = name.find_last_of('/');
  if (slash != std::string::npos) name = name.substr(slash + 1);
  for (const char* suffix : {".config.json", ".open_clip_config.json", ".json"}) {
    const std::string_view s(suffix);
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      name.resize(name.size() - s.size());
      break;
    }
  }
  try {
    ModelSpec model = from_config(Keys(doc, file, ""), name);
    validate_model(model, file);
    return model;
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: {}", file, e.what()));
  }
}

ModelSpec read_hf_config(const std::string& path) {
  return model_from_hf_config(read_text_file(path), path);
}

}  // namespace fulcrum
