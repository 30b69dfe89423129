#ifndef FULCRUM_MODEL_MODEL_JSON_H_
#define FULCRUM_MODEL_MODEL_JSON_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "fulcrum/model/model_spec.h"

namespace fulcrum {

// The Fulcrum model schema, version 1: a ModelSpec as JSON, for models no preset or Hugging Face config
// describes, and for a model `fulcrum model --json` wrote, edited and read back.
//
//   {"fulcrum": 1, "name": "my-vlm", "components": [
//     {"name": "vision", "role": "encoder", "trainable": true, "tokens_per_item": 1025, "merge": 4,
//      "unused_final_layers": 0, "layers": [
//        {"kind": "patch_embedding", "hidden": 3200, "in_features": 588, "positions": 1025,
//         "class_token": true, "patch_bias": true, "norm": "none"},
//        {"kind": "transformer", "repeat": 45, "hidden": 3200, "ffn": 12800, "heads": 25, ...}]},
//     ...]}
//
// Components: name (unique), role (encoder, projector, llm) and layers are required; trainable (true),
// tokens_per_item (0: dynamic patch tokens), merge (1), unused_final_layers (0) and drops_class_token (false: the
// projector takes every token of an item; true: all but the first, as LLaVA's default) are optional. A layer is
// a kind and the fields of that kind; "repeat": N stands for N identical consecutive layers.
//   transformer      hidden, ffn, heads required; kv_heads (= heads), head_dim (= hidden / heads),
//                    mlp (gelu | swiglu; gelu), norm (none | layernorm | rmsnorm; layernorm), qkv_bias,
//                    linear_bias, layer_scale, qk_norm (false), window_tokens (0: full attention)
//   patch_embedding  hidden, in_features required; positions (0), class_token (false), patch_bias (true),
//                    norm (none)
//   token_embedding  hidden, vocab
//   lm_head          hidden, vocab; tied_to_embedding (false)
//   projector        hidden (output width), in_features required; ffn (between linears), projector_linears
//                    (2), norm (none), linear_bias (false)
//   final_norm       hidden; norm (layernorm)
// A key that does not belong where it stands is an error, so a misspelt field is never silently dropped. The
// results `fulcrum model --json` adds beside the schema are accepted on reading: parameter counts
// ("parameters", "trainable_parameters", a layer's "parameters") must agree with the layers, and the other
// results (FLOPs, memory, head counts, the micro-batch they were computed for) are recomputed, not read.

// The schema of `model`: every field of every layer, consecutive identical layers as one entry with "repeat".
nlohmann::ordered_json model_to_json(const ModelSpec& model);

// Reads the schema. Malformed JSON, a missing "fulcrum": 1, an unknown or misplaced key, a missing field, a
// wrong type, a negative size, an unknown role, layer kind, MLP or norm throws InputError: one line naming
// `file`, the component's index (and name) and the layer entry's index. The model is then checked as every
// source's is (validate_model).
ModelSpec model_from_json(std::string_view text, const std::string& file);

// Whether a parsed document says it is in the Fulcrum schema (has a "fulcrum" key), as opposed to a Hugging
// Face or open_clip config.
bool is_fulcrum_model_json(const nlohmann::json& document);

}  // namespace fulcrum

#endif  // FULCRUM_MODEL_MODEL_JSON_H_
