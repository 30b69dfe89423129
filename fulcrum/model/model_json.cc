#include "fulcrum/model/model_json.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "fulcrum/core/error.h"
#include "fulcrum/core/json_document.h"

namespace fulcrum {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// Repeat counts expand into one LayerSpec each: a bound keeps a few bytes of input from asking for gigabytes.
constexpr int64_t kMaxLayers = int64_t{1} << 17;

// The fields each layer kind is made of, in the order they are written.
struct KindFields {
  LayerKind kind;
  std::vector<std::string_view> required;
  std::vector<std::string_view> optional;
};

const std::vector<KindFields>& kind_fields() {
  static const auto* table = new std::vector<KindFields>{
      {LayerKind::kTransformerBlock,
       {"hidden", "ffn", "heads"},
       {"kv_heads", "head_dim", "mlp", "norm", "qkv_bias", "linear_bias", "layer_scale", "qk_norm", "window_tokens"}},
      {LayerKind::kPatchEmbedding, {"hidden", "in_features"}, {"positions", "class_token", "patch_bias", "norm"}},
      {LayerKind::kTokenEmbedding, {"hidden", "vocab"}, {}},
      {LayerKind::kLmHead, {"hidden", "vocab"}, {"tied_to_embedding"}},
      {LayerKind::kProjector, {"hidden", "in_features"}, {"ffn", "projector_linears", "norm", "linear_bias"}},
      {LayerKind::kFinalNorm, {"hidden"}, {"norm"}},
  };
  return *table;
}

const KindFields& fields_of(LayerKind kind) {
  for (const KindFields& f : kind_fields()) {
    if (f.kind == kind) return f;
  }
  return kind_fields().front();
}

// Component keys that `fulcrum model --json` writes as results: recomputed, never read.
bool is_component_result(std::string_view key) {
  return key == "transformer_blocks" || key == "attention_heads" || key == "kv_heads" || key == "flops" ||
         key == "training_state_bytes_unsharded" || key == "activation_bytes";
}

ordered_json layer_json(const LayerSpec& l, int64_t repeat) {
  ordered_json out;
  out["kind"] = layer_kind_name(l.kind);
  if (repeat > 1) out["repeat"] = repeat;
  const KindFields& fields = fields_of(l.kind);
  for (const auto* list : {&fields.required, &fields.optional}) {
    for (std::string_view key : *list) {
      const std::string k(key);
      if (key == "hidden") out[k] = l.hidden;
      else if (key == "ffn") out[k] = l.ffn;
      else if (key == "heads") out[k] = l.heads;
      else if (key == "kv_heads") out[k] = l.kv_heads;
      else if (key == "head_dim") out[k] = l.head_dim;
      else if (key == "mlp") out[k] = mlp_kind_name(l.mlp);
      else if (key == "norm") out[k] = norm_kind_name(l.norm);
      else if (key == "qkv_bias") out[k] = l.qkv_bias;
      else if (key == "linear_bias") out[k] = l.linear_bias;
      else if (key == "layer_scale") out[k] = l.layer_scale;
      else if (key == "qk_norm") out[k] = l.qk_norm;
      else if (key == "window_tokens") out[k] = l.window_tokens;
      else if (key == "vocab") out[k] = l.vocab;
      else if (key == "tied_to_embedding") out[k] = l.tied_to_embedding;
      else if (key == "in_features") out[k] = l.in_features;
      else if (key == "projector_linears") out[k] = l.projector_linears;
      else if (key == "positions") out[k] = l.positions;
      else if (key == "class_token") out[k] = l.class_token;
      else if (key == "patch_bias") out[k] = l.patch_bias;
    }
  }
  return out;
}

[[noreturn]] void fail(const std::string& where, std::string_view what) {
  throw InputError(fmt::format("{}: {}", where, what));
}

int64_t integer(const json& v, const std::string& where, std::string_view key, int64_t min) {
  const bool too_big = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()};
  if (!v.is_number_integer() || too_big || v.get<int64_t>() < min) {
    fail(where, fmt::format("{} must be {} integer, got {}", key, min > 0 ? "a positive" : "a non-negative",
                            v.dump().substr(0, 40)));
  }
  return v.get<int64_t>();
}

bool boolean(const json& v, const std::string& where, std::string_view key) {
  if (!v.is_boolean()) fail(where, fmt::format("{} must be true or false, got {}", key, v.dump().substr(0, 40)));
  return v.get<bool>();
}

const std::string& string_value(const json& v, const std::string& where, std::string_view key) {
  if (!v.is_string()) fail(where, fmt::format("{} must be a string, got {}", key, v.dump().substr(0, 40)));
  return v.get_ref<const std::string&>();
}

// One of `names`, by the name each enumerator prints as.
template <typename Enum, size_t N>
Enum named(const json& v, const std::string& where, std::string_view key, const Enum (&values)[N],
           std::string_view (*name_of)(Enum)) {
  const std::string& name = string_value(v, where, key);
  std::vector<std::string_view> known;
  for (Enum e : values) {
    if (name_of(e) == name) return e;
    known.push_back(name_of(e));
  }
  fail(where, fmt::format("unknown {} '{}'; known: {}", key, name.substr(0, 40), fmt::join(known, ", ")));
}

constexpr LayerKind kKinds[] = {LayerKind::kPatchEmbedding, LayerKind::kTokenEmbedding, LayerKind::kTransformerBlock,
                                LayerKind::kProjector,      LayerKind::kFinalNorm,      LayerKind::kLmHead};
constexpr MlpKind kMlps[] = {MlpKind::kGelu, MlpKind::kSwiGlu};
constexpr NormKind kNorms[] = {NormKind::kNone, NormKind::kLayerNorm, NormKind::kRmsNorm};
constexpr ComponentRole kRoles[] = {ComponentRole::kEncoder, ComponentRole::kProjector, ComponentRole::kLlm};

void set_field(LayerSpec& l, std::string_view key, const json& v, const std::string& where) {
  if (key == "hidden") l.hidden = integer(v, where, key, 1);
  else if (key == "ffn") l.ffn = integer(v, where, key, l.kind == LayerKind::kTransformerBlock ? 1 : 0);
  else if (key == "heads") l.heads = integer(v, where, key, 1);
  else if (key == "kv_heads") l.kv_heads = integer(v, where, key, 1);
  else if (key == "head_dim") l.head_dim = integer(v, where, key, 1);
  else if (key == "mlp") l.mlp = named(v, where, key, kMlps, mlp_kind_name);
  else if (key == "norm") l.norm = named(v, where, key, kNorms, norm_kind_name);
  else if (key == "qkv_bias") l.qkv_bias = boolean(v, where, key);
  else if (key == "linear_bias") l.linear_bias = boolean(v, where, key);
  else if (key == "layer_scale") l.layer_scale = boolean(v, where, key);
  else if (key == "qk_norm") l.qk_norm = boolean(v, where, key);
  else if (key == "window_tokens") l.window_tokens = integer(v, where, key, 0);
  else if (key == "vocab") l.vocab = integer(v, where, key, 1);
  else if (key == "tied_to_embedding") l.tied_to_embedding = boolean(v, where, key);
  else if (key == "in_features") l.in_features = integer(v, where, key, 1);
  else if (key == "projector_linears") l.projector_linears = integer(v, where, key, 1);
  else if (key == "positions") l.positions = integer(v, where, key, 0);
  else if (key == "class_token") l.class_token = boolean(v, where, key);
  else if (key == "patch_bias") l.patch_bias = boolean(v, where, key);
}

bool listed(const std::vector<std::string_view>& keys, std::string_view key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

// A parameter count the file states, checked against the layers once they are known to be sane.
struct StatedCount {
  std::string where;
  int64_t stated;
  size_t layer;  // the first layer of the entry
};

LayerSpec read_layer(const json& j, const std::string& where, int64_t& repeat,
                     std::optional<int64_t>& stated_parameters) {
  if (!j.is_object()) fail(where, "a layer must be a JSON object");
  if (!j.contains("kind")) fail(where, "kind is missing");
  LayerSpec l;
  l.kind = named(j["kind"], where, "kind", kKinds, layer_kind_name);
  const KindFields& fields = fields_of(l.kind);
  // Defaults that differ from LayerSpec's: a patch embedding and a projector have no norm unless told.
  if (l.kind == LayerKind::kPatchEmbedding || l.kind == LayerKind::kProjector) l.norm = NormKind::kNone;
  for (const auto& [key, value] : j.items()) {
    if (key == "kind") continue;
    if (key == "repeat") {
      repeat = integer(value, where, key, 1);
    } else if (key == "parameters") {
      stated_parameters = integer(value, where, key, 0);
    } else if (key == "activation_bytes") {
      // A result of `fulcrum model --json`, for the micro-batch it states: recomputed, not read.
    } else if (listed(fields.required, key) || listed(fields.optional, key)) {
      set_field(l, key, value, where);
    } else {
      bool elsewhere = false;
      for (const KindFields& other : kind_fields()) elsewhere |= listed(other.required, key) || listed(other.optional, key);
      fail(where, elsewhere ? fmt::format("'{}' does not belong to a {} layer", key, layer_kind_name(l.kind))
                            : fmt::format("unknown key '{}'", key.substr(0, 40)));
    }
  }
  for (std::string_view key : fields.required) {
    if (!j.contains(key)) fail(where, fmt::format("{} is missing", key));
  }
  if (l.kind == LayerKind::kTransformerBlock) {
    if (!j.contains("kv_heads")) l.kv_heads = l.heads;
    if (!j.contains("head_dim")) {
      if (l.hidden % l.heads != 0) {
        fail(where, fmt::format("head_dim is missing and heads ({}) does not divide hidden ({})", l.heads, l.hidden));
      }
      l.head_dim = l.hidden / l.heads;
    }
  }
  return l;
}

ComponentSpec read_component(const json& j, const std::string& component_where, int64_t& total_layers,
                             std::vector<StatedCount>& stated, std::optional<int64_t>& stated_parameters) {
  std::string where = component_where;
  if (!j.is_object()) fail(where, "a component must be a JSON object");
  for (const char* key : {"name", "role", "layers"}) {
    if (!j.contains(key)) fail(where, fmt::format("{} is missing", key));
  }
  ComponentSpec c;
  c.name = string_value(j["name"], where, "name");
  if (c.name.empty()) fail(where, "name must not be empty");
  where += fmt::format(" ('{}')", c.name.substr(0, 60));
  for (const auto& [key, value] : j.items()) {
    if (key == "name" || key == "layers") continue;
    if (key == "role") c.role = named(value, where, key, kRoles, component_role_name);
    else if (key == "trainable") c.trainable = boolean(value, where, key);
    else if (key == "tokens_per_item") c.tokens_per_item = integer(value, where, key, 0);
    else if (key == "merge") c.merge = integer(value, where, key, 1);
    else if (key == "drops_class_token") c.drops_class_token = boolean(value, where, key);
    else if (key == "unused_final_layers") c.unused_final_layers = integer(value, where, key, 0);
    else if (key == "parameters") stated_parameters = integer(value, where, key, 0);
    else if (!is_component_result(key)) fail(where, fmt::format("unknown key '{}'", key.substr(0, 40)));
  }
  const json& layers = j["layers"];
  if (!layers.is_array()) fail(where, "layers must be an array of layers");
  if (layers.empty()) fail(where, "layers is empty");
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string layer_where = fmt::format("{}: layer {}", where, i);
    int64_t repeat = 1;
    std::optional<int64_t> layer_parameters;
    const LayerSpec layer = read_layer(layers[i], layer_where, repeat, layer_parameters);
    if (repeat > kMaxLayers - total_layers) {
      fail(layer_where, fmt::format("more than {} layers in the model", kMaxLayers));
    }
    total_layers += repeat;
    if (layer_parameters) {
      stated.push_back({layer_where, *layer_parameters, c.layers.size()});
    }
    c.layers.insert(c.layers.end(), static_cast<size_t>(repeat), layer);
  }
  return c;
}

}  // namespace

ordered_json model_to_json(const ModelSpec& model) {
  ordered_json out;
  out["fulcrum"] = 1;
  out["name"] = model.name;
  out["components"] = ordered_json::array();
  for (const ComponentSpec& c : model.components) {
    ordered_json comp;
    comp["name"] = c.name;
    comp["role"] = component_role_name(c.role);
    comp["trainable"] = c.trainable;
    comp["tokens_per_item"] = c.tokens_per_item;
    comp["merge"] = c.merge;
    if (c.drops_class_token) comp["drops_class_token"] = true;
    comp["unused_final_layers"] = c.unused_final_layers;
    comp["layers"] = ordered_json::array();
    for (size_t i = 0; i < c.layers.size();) {
      size_t end = i + 1;
      while (end < c.layers.size() && c.layers[end] == c.layers[i]) ++end;
      comp["layers"].push_back(layer_json(c.layers[i], static_cast<int64_t>(end - i)));
      i = end;
    }
    out["components"].push_back(std::move(comp));
  }
  return out;
}

bool is_fulcrum_model_json(const json& document) {
  return document.is_object() && document.contains("fulcrum");
}

ModelSpec model_from_json(std::string_view text, const std::string& file) {
  const json doc = parse_json_document(text, file);
  if (!doc.is_object()) fail(file, "a Fulcrum model is a JSON object");
  if (!doc.contains("fulcrum")) fail(file, "not a Fulcrum model: the \"fulcrum\": 1 key is missing");
  if (doc["fulcrum"] != 1) {
    fail(file, fmt::format("unsupported Fulcrum model version {} (this reads version 1)", doc["fulcrum"].dump().substr(0, 40)));
  }
  for (const char* key : {"name", "components"}) {
    if (!doc.contains(key)) fail(file, fmt::format("{} is missing", key));
  }
  ModelSpec model;
  model.name = string_value(doc["name"], file, "name");
  std::optional<int64_t> stated_model, stated_trainable;
  for (const auto& [key, value] : doc.items()) {
    if (key == "fulcrum" || key == "name" || key == "components" || key == "micro_batch") continue;
    if (key == "parameters") stated_model = integer(value, file, key, 0);
    else if (key == "trainable_parameters") stated_trainable = integer(value, file, key, 0);
    else fail(file, fmt::format("unknown key '{}'", key.substr(0, 40)));
  }
  const json& components = doc["components"];
  if (!components.is_array()) fail(file, "components must be an array of components");
  if (components.empty()) fail(file, "components is empty");

  struct ComponentCounts {
    std::string where;
    std::optional<int64_t> parameters;
    std::vector<StatedCount> layers;
  };
  std::vector<ComponentCounts> counts;
  std::set<std::string> names;
  int64_t total_layers = 0;
  for (size_t i = 0; i < components.size(); ++i) {
    ComponentCounts count;
    count.where = fmt::format("{}: component {}", file, i);
    ComponentSpec c = read_component(components[i], count.where, total_layers, count.layers, count.parameters);
    count.where += fmt::format(" ('{}')", c.name.substr(0, 60));
    if (!names.insert(c.name).second) fail(count.where, "another component has the same name");
    model.components.push_back(std::move(c));
    counts.push_back(std::move(count));
  }
  validate_model(model, file);

  // Stated parameter counts (results of `fulcrum model --json`) must agree with the layers just read.
  auto check = [](const std::string& where, std::string_view key, int64_t stated, int64_t counted) {
    if (stated != counted) {
      fail(where, fmt::format("{} is {} but the layers hold {}", key, stated, counted));
    }
  };
  for (size_t i = 0; i < counts.size(); ++i) {
    const ComponentSpec& c = model.components[i];
    if (counts[i].parameters) check(counts[i].where, "parameters", *counts[i].parameters, c.parameters());
    for (const StatedCount& s : counts[i].layers) check(s.where, "parameters", s.stated, c.layers[s.layer].parameters());
  }
  if (stated_model) check(file, "parameters", *stated_model, model.parameters());
  if (stated_trainable) check(file, "trainable_parameters", *stated_trainable, model.trainable_parameters());
  return model;
}

}  // namespace fulcrum
