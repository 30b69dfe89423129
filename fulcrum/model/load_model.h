#ifndef FULCRUM_MODEL_LOAD_MODEL_H_
#define FULCRUM_MODEL_LOAD_MODEL_H_

#include <string>

#include "fulcrum/model/model_spec.h"

namespace fulcrum {

// What a `--model` argument names: a preset (or presets joined with '+'), or, when it ends in .json or names
// an existing file, a Hugging Face / open_clip config. Throws InputError otherwise.
ModelSpec load_model(const std::string& preset_or_file);

}  // namespace fulcrum

#endif  // FULCRUM_MODEL_LOAD_MODEL_H_
