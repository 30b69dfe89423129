#include "fulcrum/model/load_model.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace fulcrum
