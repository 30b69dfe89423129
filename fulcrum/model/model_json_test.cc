#include "fulcrum/model/model_json.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <string>

#include "fulcrum/core/error.h"
#include "fulcrum/model/hf_config.h"
#include "fulcrum/model/load_model.h"
#include "fulcrum/model/model_presets.h"

namespace fulcrum {
namespace {

ModelSpec round_trip(const ModelSpec& m) { return model_from_json(model_to_json(m).dump(2), "m.json"); }

TEST(ModelJson, EveryPresetReadsBackIdentical) {
  std::vector<std::string> names = model_preset_names();
  names.push_back("vit-22b+gpt-175b");
  names.push_back("vit-22b+vit-5b+gpt-175b");
  for (const std::string& name : names) {
    const ModelSpec m = model_preset(name);
    const ModelSpec back = round_trip(m);
    EXPECT_EQ(back.parameters(), m.parameters()) << name;
    EXPECT_TRUE(back == m) << name;  // every field of every layer, component and the name
  }
}

TEST(ModelJson, EveryBundledConfigReadsBackIdentical) {
  const std::filesystem::path dir = std::filesystem::path(FULCRUM_SOURCE_DIR) / "data/modelcfg";
  int read = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string file = entry.path().filename().string();
    if (!file.ends_with("config.json") || file.find("preprocessor") != std::string::npos) continue;
    const ModelSpec m = read_hf_config(entry.path().string());
    EXPECT_TRUE(round_trip(m) == m) << file;
    ++read;
  }
  EXPECT_GE(read, 12);
}

TEST(ModelJson, RepeatsAreWrittenCompactly) {
  const nlohmann::ordered_json j = model_to_json(model_preset("internvit-6b"));
  const auto& layers = j["components"][0]["layers"];
  ASSERT_EQ(layers.size(), 2u);  // the patch embedding, then 45 identical blocks as one entry
  EXPECT_EQ(layers[0]["kind"], "patch_embedding");
  EXPECT_FALSE(layers[0].contains("repeat"));
  EXPECT_EQ(layers[1]["kind"], "transformer");
  EXPECT_EQ(layers[1]["repeat"], 45);
  EXPECT_EQ(layers[1]["heads"], 25);
  EXPECT_FALSE(layers[1].contains("vocab"));  // only the fields of the layer's kind
}

// A small hand-written model: defaults fill what is left out.
const char* kTiny = R"({"fulcrum": 1, "name": "tiny", "components": [
  {"name": "llm", "role": "llm", "layers": [
    {"kind": "token_embedding", "hidden": 8, "vocab": 100},
    {"kind": "transformer", "repeat": 3, "hidden": 8, "ffn": 16, "heads": 2, "mlp": "swiglu", "norm": "rmsnorm"},
    {"kind": "final_norm", "hidden": 8, "norm": "rmsnorm"},
    {"kind": "lm_head", "hidden": 8, "vocab": 100}]}]})";

TEST(ModelJson, HandWrittenModelWithDefaults) {
  const ModelSpec m = model_from_json(kTiny, "tiny.json");
  ASSERT_EQ(m.components.size(), 1u);
  const ComponentSpec& llm = m.components[0];
  EXPECT_EQ(llm.role, ComponentRole::kLlm);
  EXPECT_TRUE(llm.trainable);
  EXPECT_EQ(llm.merge, 1);
  ASSERT_EQ(llm.layers.size(), 6u);
  EXPECT_EQ(llm.transformer_blocks(), 3);
  const LayerSpec& block = llm.layers[2];
  EXPECT_EQ(block.kv_heads, 2);  // = heads
  EXPECT_EQ(block.head_dim, 4);  // = hidden / heads
  EXPECT_EQ(block.mlp, MlpKind::kSwiGlu);
  // Embedding 800 + 3 blocks × (attention 4·64 + SwiGLU 3·8·16 + two RMSNorms 16 = 656) + norm 8 + head 800.
  EXPECT_EQ(m.parameters(), 800 + 3 * 656 + 8 + 800);
}

TEST(ModelJson, StatedParameterCountsMustAgree) {
  nlohmann::ordered_json j = model_to_json(model_preset("llava-1.5-7b"));
  j["parameters"] = model_preset("llava-1.5-7b").parameters();
  j["components"][1]["parameters"] = model_preset("llava-1.5-7b").components[1].parameters();
  j["components"][1]["flops"] = {{"unit", "token"}};  // a result: recomputed, not read
  EXPECT_NO_THROW(model_from_json(j.dump(), "m.json"));
  j["components"][1]["parameters"] = 5;
  try {
    model_from_json(j.dump(), "m.json");
    FAIL() << "a wrong parameter count was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("m.json: component 1 ('projector'): parameters is 5 but the layers hold"),
              std::string::npos)
        << e.what();
  }
}

struct Bad {
  const char* name;
  std::string text;
  std::string message;  // the error's whole prefix and reason, or a part of it
};

// `edit` applied to kTiny's JSON.
std::string tiny_with(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(kTiny);
  edit(j);
  return j.dump();
}

TEST(ModelJson, BadInputNamesTheFileComponentAndLayer) {
  const Bad cases[] = {
      {"malformed", "{\"fulcrum\": 1,", "bad.json: malformed JSON"},
      {"no_version", tiny_with([](auto& j) { j.erase("fulcrum"); }), "bad.json: not a Fulcrum model"},
      {"version_2", tiny_with([](auto& j) { j["fulcrum"] = 2; }), "bad.json: unsupported Fulcrum model version 2"},
      {"top_unknown", tiny_with([](auto& j) { j["nmae"] = "x"; }), "bad.json: unknown key 'nmae'"},
      {"no_components", tiny_with([](auto& j) { j.erase("components"); }), "bad.json: components is missing"},
      {"component_unknown", tiny_with([](auto& j) { j["components"][0]["trainabel"] = true; }),
       "bad.json: component 0 ('llm'): unknown key 'trainabel'"},
      {"unknown_role", tiny_with([](auto& j) { j["components"][0]["role"] = "decoder"; }),
       "bad.json: component 0 ('llm'): unknown role 'decoder'; known: encoder, projector, llm"},
      {"missing_role", tiny_with([](auto& j) { j["components"][0].erase("role"); }),
       "bad.json: component 0: role is missing"},
      {"trainable_type", tiny_with([](auto& j) { j["components"][0]["trainable"] = "yes"; }),
       "bad.json: component 0 ('llm'): trainable must be true or false"},
      {"class_token_of_an_llm", tiny_with([](auto& j) { j["components"][0]["drops_class_token"] = true; }),
       "bad.json: component 'llm': drops_class_token needs an encoder of fixed items of at least 2 tokens"},
      {"layer_unknown", tiny_with([](auto& j) { j["components"][0]["layers"][1]["hiddn"] = 8; }),
       "bad.json: component 0 ('llm'): layer 1: unknown key 'hiddn'"},
      {"layer_misplaced", tiny_with([](auto& j) { j["components"][0]["layers"][0]["heads"] = 2; }),
       "bad.json: component 0 ('llm'): layer 0: 'heads' does not belong to a token_embedding layer"},
      {"missing_field", tiny_with([](auto& j) { j["components"][0]["layers"][1].erase("ffn"); }),
       "bad.json: component 0 ('llm'): layer 1: ffn is missing"},
      {"wrong_type", tiny_with([](auto& j) { j["components"][0]["layers"][1]["heads"] = "2"; }),
       "bad.json: component 0 ('llm'): layer 1: heads must be a positive integer, got \"2\""},
      {"negative_size", tiny_with([](auto& j) { j["components"][0]["layers"][3]["vocab"] = -100; }),
       "bad.json: component 0 ('llm'): layer 3: vocab must be a positive integer, got -100"},
      {"fractional", tiny_with([](auto& j) { j["components"][0]["layers"][1]["hidden"] = 8.5; }),
       "layer 1: hidden must be a positive integer"},
      {"unknown_kind", tiny_with([](auto& j) { j["components"][0]["layers"][2]["kind"] = "moe"; }),
       "bad.json: component 0 ('llm'): layer 2: unknown kind 'moe'"},
      {"unknown_mlp", tiny_with([](auto& j) { j["components"][0]["layers"][1]["mlp"] = "relu"; }),
       "layer 1: unknown mlp 'relu'; known: gelu, swiglu"},
      {"zero_repeat", tiny_with([](auto& j) { j["components"][0]["layers"][1]["repeat"] = 0; }),
       "layer 1: repeat must be a positive integer"},
      {"huge_repeat", tiny_with([](auto& j) { j["components"][0]["layers"][1]["repeat"] = 1e9; }),
       "layer 1: repeat must be a positive integer"},
      {"too_many_layers", tiny_with([](auto& j) { j["components"][0]["layers"][1]["repeat"] = 1000000000; }),
       "layer 1: more than 131072 layers"},
      {"uneven_heads", tiny_with([](auto& j) { j["components"][0]["layers"][1]["heads"] = 3; }),
       "layer 1: head_dim is missing and heads (3) does not divide hidden (8)"},
      {"kv_heads", tiny_with([](auto& j) { j["components"][0]["layers"][1]["kv_heads"] = 3; }),
       "bad.json: component 'llm' layer 1: kv_heads must divide heads"},
      {"duplicate_name", tiny_with([](auto& j) { j["components"].push_back(j["components"][0]); }),
       "bad.json: component 1 ('llm'): another component has the same name"},
      {"no_layers", tiny_with([](auto& j) { j["components"][0]["layers"] = nlohmann::json::array(); }),
       "bad.json: component 0 ('llm'): layers is empty"},
      {"layer_not_object", tiny_with([](auto& j) { j["components"][0]["layers"][1] = 5; }),
       "bad.json: component 0 ('llm'): layer 1: a layer must be a JSON object"},
  };
  for (const Bad& c : cases) {
    try {
      model_from_json(c.text, "bad.json");
      ADD_FAILURE() << c.name << ": accepted";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(c.message), std::string::npos) << c.name << ": " << what;
      EXPECT_EQ(what.rfind("bad.json: ", 0), 0u) << c.name << ": " << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << c.name << ": " << what;
    }
  }
}

TEST(ModelJson, ModelFilesAreToldApartByTheFulcrumKey) {
  EXPECT_EQ(model_from_file_text(kTiny, "tiny.json").name, "tiny");
  // A Hugging Face config has no "fulcrum" key.
  const ModelSpec hf = model_from_file_text(R"({"model_type": "llama", "num_hidden_layers": 2})", "config.json");
  EXPECT_EQ(hf.components[0].transformer_blocks(), 2);
  EXPECT_TRUE(is_fulcrum_model_json(nlohmann::json::parse(kTiny)));
  EXPECT_FALSE(is_fulcrum_model_json(nlohmann::json::parse("[1]")));
}

}  // namespace
}  // namespace fulcrum
