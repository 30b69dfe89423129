#ifndef FULCRUM_MODEL_MODEL_PRESETS_H_
#define FULCRUM_MODEL_MODEL_PRESETS_H_

#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/model/model_spec.h"

namespace fulcrum {

// A named model: a single encoder or LLM ("internvit-6b", "gpt-175b"), a published multimodal model
// ("internvl-chat-1.5", "llava-1.5-7b"), or encoders and one LLM joined with '+' ("vit-22b+vit-5b+gpt-175b"),
// each encoder followed by a two-linear MLP projector to the LLM's width. Throws InputError for an unknown
// name, listing the known ones.
ModelSpec model_preset(std::string_view name);

// Every single name model_preset() knows, in a fixed order.
const std::vector<std::string>& model_preset_names();

}  // namespace fulcrum

#endif  // FULCRUM_MODEL_MODEL_PRESETS_H_
