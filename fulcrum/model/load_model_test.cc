#include "fulcrum/model/load_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "fulcrum/core/error.h"
#include "fulcrum/model/model_json.h"

namespace fulcrum {
namespace {

constexpr const char* kTwoLlms = R"({"fulcrum": 1, "name": "two", "components": [
  {"name": "vision", "role": "encoder", "layers": [{"kind": "final_norm", "hidden": 8}]},
  {"name": "first", "role": "llm", "layers": [{"kind": "final_norm", "hidden": 8}]},
  {"name": "second", "role": "llm", "layers": [{"kind": "final_norm", "hidden": 8}]}]})";

TEST(LoadModel, AModelFileHoldsOneLlm) {
  // The schema reads it (a task graph's model has a head per task), but a --model's costs take one LLM chain.
  EXPECT_EQ(model_from_json(kTwoLlms, "two.json").components.size(), 3u);
  try {
    model_from_file_text(kTwoLlms, "two.json");
    ADD_FAILURE() << "two llm components accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("two.json: component 'second' is a second llm after 'first'", 0), 0u)
        << e.what();
  }
  std::string one = kTwoLlms;
  one.replace(one.rfind("\"llm\""), 5, "\"encoder\"");
  EXPECT_EQ(model_from_file_text(one, "one.json").components.size(), 3u);
}

// A Hugging Face model folder is read through its config.json; a folder without one is named as such.
TEST(LoadModel, AModelFolderIsReadThroughItsConfig) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("fulcrum_model_folder_" + std::to_string(::getpid()));
  fs::create_directories(dir / "empty");
  std::ofstream(dir / "config.json") << R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 3, "num_attention_heads": 4, "vocab_size": 100})";
  const ModelSpec model = load_model(dir.string() + "/");
  EXPECT_EQ(model.name, dir.filename().string());  // the folder's, as Hugging Face names a model
  EXPECT_GT(model.parameters(), 0);
  try {
    load_model((dir / "empty").string());
    ADD_FAILURE() << "a folder without a config.json accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), (dir / "empty").string() + ": a folder without a config.json");
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fulcrum
