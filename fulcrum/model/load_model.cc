#include "fulcrum/model/load_model.h"

#include <fmt/format.h>

#include <filesystem>

#include "fulcrum/core/error.h"
#include "fulcrum/core/json_document.h"
#include "fulcrum/core/text_file.h"
#include "fulcrum/model/hf_config.h"
#include "fulcrum/model/model_json.h"
#include "fulcrum/model/model_presets.h"

namespace fulcrum {

namespace {

// Costs, partitions and schedules of a --model take its LLM as one chain that every encoder feeds. (A task
// graph's model may hold several, one per task; it is read by task_graph.h.)
ModelSpec with_one_llm(ModelSpec model, const std::string& file) {
  const ComponentSpec* llm = nullptr;
  for (const ComponentSpec& c : model.components) {
    if (c.role != ComponentRole::kLlm) continue;
    if (llm != nullptr) {
      throw InputError(fmt::format("{}: component '{}' is a second llm after '{}'; a model has one llm (join "
                                   "their layers, or give several tasks' models to fulcrum multitask --tasks)",
                                   file, c.name, llm->name));
    }
    llm = &c;
  }
  return model;
}

}  // namespace

ModelSpec model_from_file_text(std::string_view text, const std::string& file) {
  // The Fulcrum schema says so with its "fulcrum" key; no Hugging Face or open_clip config has one.
  if (is_fulcrum_model_json(parse_json_document(text, file))) return with_one_llm(model_from_json(text, file), file);
  return with_one_llm(model_from_hf_config(text, file), file);
}

ModelSpec load_model(const std::string& preset_or_file) {
  const bool json_name = preset_or_file.size() > 5 && preset_or_file.ends_with(".json");
  std::error_code ignored;
  if (std::filesystem::is_directory(preset_or_file, ignored)) {
    // A Hugging Face model folder: its config.json.
    const std::string config = (std::filesystem::path(preset_or_file) / "config.json").string();
    if (!std::filesystem::is_regular_file(config, ignored)) {
      throw InputError(fmt::format("{}: a folder without a config.json", preset_or_file));
    }
    ModelSpec model = model_from_file_text(read_text_file(config), config);
    const std::filesystem::path folder = std::filesystem::path(preset_or_file).lexically_normal();
    model.name = (folder.has_filename() ? folder : folder.parent_path()).filename().string();  // not "config"
    return model;
  }
  if (!json_name && !std::filesystem::is_regular_file(preset_or_file, ignored)) return model_preset(preset_or_file);
  return model_from_file_text(read_text_file(preset_or_file), preset_or_file);
}

}  // namespace fulcrum
