#ifndef FULCRUM_MODEL_LOAD_MODEL_H_
#define FULCRUM_MODEL_LOAD_MODEL_H_

#include <string>
#include <string_view>

#include "fulcrum/model/model_spec.h"

namespace fulcrum {

// What a `--model` argument names: a preset (or presets joined with '+'); when it ends in .json or names an
// existing file, a model file; when it names a folder, the Hugging Face model in it (its config.json). Throws
// InputError otherwise.
ModelSpec load_model(const std::string& preset_or_file);

// A model file's text: the Fulcrum model schema when it has a "fulcrum" key (model_json.h), else a Hugging
// Face / open_clip config (hf_config.h). One component at most is the llm.
ModelSpec model_from_file_text(std::string_view text, const std::string& file);

}  // namespace fulcrum

#endif  // FULCRUM_MODEL_LOAD_MODEL_H_
