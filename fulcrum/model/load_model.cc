#include "fulcrum/model/load_model.h"

#include <filesystem>

#include "fulcrum/model/hf_config.h"
#include "fulcrum/model/model_presets.h"

namespace fulcrum {

ModelSpec load_model(const std::string& preset_or_file) {
  const bool json_name = preset_or_file.size() > 5 && preset_or_file.ends_with(".json");
  std::error_code ignored;
  if (json_name || std::filesystem::is_regular_file(preset_or_file, ignored)) return read_hf_config(preset_or_file);
  return model_preset(preset_or_file);
}

}  // namespace fulcrum
