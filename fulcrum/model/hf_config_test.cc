#include "fulcrum/model/hf_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "fulcrum/core/error.h"

namespace fulcrum {
namespace {

std::string config_path(const std::string& name) { return std::string(FULCRUM_SOURCE_DIR) + "/data/modelcfg/" + name; }

struct RealConfig {
  const char* file;
  double published;  // parameters, as the model card or paper gives them
  int64_t vision_blocks;
  int64_t llm_blocks;  // 0 for a vision tower alone
};

// data/modelcfg/PROVENANCE.md says where each file was published. Sizes: the model cards (Hugging Face's count
// of the checkpoint), and for the open_clip towers the EVA-CLIP papers' image-encoder sizes.
const RealConfig kRealConfigs[] = {
    {"internvit_6b_448px_v1_5.config.json", 5.54e9, 45, 0},
    {"internlm2_20b.config.json", 19.86e9, 0, 48},
    {"internvl2_1b.config.json", 0.94e9, 24, 24},
    {"llava_1_5_7b_hf.config.json", 7.06e9, 24, 32},
    {"llava_1_5_13b_hf_awq_copy.config.json", 13.35e9, 24, 40},
    {"qwen2_vl_2b_instruct.config.json", 2.21e9, 32, 28},
    {"qwen2_vl_7b_arch_llamafactory_sft_resaved.config.json", 8.29e9, 32, 28},
    {"qwen2_5_vl_3b_instruct.config.json", 3.75e9, 32, 36},
    {"eva_clip_18b.open_clip_config.json", 17.5e9, 48, 0},
    {"eva_clip_8b.open_clip_config.json", 7.5e9, 32, 0},
    {"eva02_clip_bigE_14_plus.open_clip_config.json", 4.4e9, 64, 0},
    {"eva01_clip_g_14.open_clip_config.json", 1.0e9, 40, 0},
    {"eva02_clip_l_14_336.open_clip_config.json", 0.304e9, 24, 0},
};

TEST(HfConfig, EveryRealConfigReadsWithin3PercentOfItsPublishedSize) {
  for (const RealConfig& c : kRealConfigs) {
    SCOPED_TRACE(c.file);
    const ModelSpec m = read_hf_config(config_path(c.file));
    EXPECT_NEAR(static_cast<double>(m.parameters()) / c.published, 1.0, 0.03) << m.parameters();
    const ComponentSpec* vision = m.find("vision");
    const ComponentSpec* llm = m.find("llm");
    EXPECT_EQ(vision ? vision->transformer_blocks() : 0, c.vision_blocks);
    EXPECT_EQ(llm ? llm->transformer_blocks() : 0, c.llm_blocks);
  }
}

TEST(HfConfig, QuirksOfTheRealFiles) {
  // LLaVA's text_config leaves out the dimensions: LlamaConfig's defaults (32 × 4096, 32 heads, 11008).
  const ModelSpec llava = read_hf_config(config_path("llava_1_5_7b_hf.config.json"));
  const LayerSpec& block = llava.find("llm")->layers[1];
  EXPECT_EQ(block.hidden, 4096);
  EXPECT_EQ(block.heads, 32);
  EXPECT_EQ(block.ffn, 11008);
  EXPECT_EQ(llava.find("llm")->layers[0].vocab, 32064);  // added tokens included
  EXPECT_EQ(llava.find("vision")->unused_final_layers, 1);  // vision_feature_layer -2
  EXPECT_EQ(llava.find("vision")->tokens_per_item, 577);
  // vision_feature_select_strategy "default": the projector takes the 576 patch tokens, not the class token.
  EXPECT_TRUE(llava.find("vision")->drops_class_token);
  EXPECT_EQ(llava.find("vision")->projected_tokens_per_item(), 576);

  // A re-saved Qwen2-VL whose vision_config kept three keys: Qwen2VLVisionConfig's 32 × 1280, 16 heads.
  const ModelSpec qwen7 = read_hf_config(config_path("qwen2_vl_7b_arch_llamafactory_sft_resaved.config.json"));
  EXPECT_EQ(qwen7.find("vision")->layers[1].hidden, 1280);
  EXPECT_EQ(qwen7.find("vision")->attention_heads(), 16);
  EXPECT_EQ(qwen7.find("vision")->merge, 4);
  EXPECT_EQ(qwen7.find("vision")->tokens_per_item, 0);  // dynamic resolution
  EXPECT_EQ(qwen7.find("llm")->kv_heads(), 4);
  // The merger's norm runs over each 1,280-wide patch token before four are joined: the checkpoints' exact sizes
  // (Hugging Face's counts of Qwen2-VL-7B-Instruct and Qwen2-VL-2B-Instruct) hold only with it at that width.
  EXPECT_EQ(qwen7.parameters(), 8'291'375'616);
  EXPECT_EQ(read_hf_config(config_path("qwen2_vl_2b_instruct.config.json")).parameters(), 2'208'985'600);

  // InternViT-6B's file has no norm_type: RMSNorm, the 6B tower's default. InternVL2-1B's says layer_norm.
  EXPECT_EQ(read_hf_config(config_path("internvit_6b_448px_v1_5.config.json")).components[0].layers[1].norm,
            NormKind::kRmsNorm);
  const ModelSpec internvl = read_hf_config(config_path("internvl2_1b.config.json"));
  EXPECT_EQ(internvl.find("vision")->layers[1].norm, NormKind::kLayerNorm);
  EXPECT_EQ(internvl.find("vision")->merge, 4);  // downsample_ratio 0.5
  // extract_feature drops the class token, then shuffles 32 × 32 patches into 256 tokens.
  EXPECT_TRUE(internvl.find("vision")->drops_class_token);
  EXPECT_EQ(internvl.find("vision")->projected_tokens_per_item(), 256);
  // The chat model keeps its own LM head although the LLM's config ties it: counted, as in the checkpoint.
  EXPECT_FALSE(internvl.find("llm")->layers.back().tied_to_embedding);

  // Qwen2.5-VL: windowed attention (112 px = 8 × 8 patches) except the full-attention blocks 7, 15, 23, 31.
  const ModelSpec qwen25 = read_hf_config(config_path("qwen2_5_vl_3b_instruct.config.json"));
  const ComponentSpec& v = *qwen25.find("vision");
  EXPECT_EQ(v.layers[1].window_tokens, 64);
  EXPECT_EQ(v.layers[1 + 7].window_tokens, 0);
  EXPECT_EQ(v.layers[1 + 31].window_tokens, 0);
  EXPECT_EQ(v.layers[1].mlp, MlpKind::kSwiGlu);
  EXPECT_TRUE(qwen25.find("llm")->layers.back().tied_to_embedding);
}

// LLaVA's "full" feature strategy keeps the class token: the projector takes all 577 tokens of a tile.
TEST(HfConfig, LlavasFullFeatureStrategyKeepsTheClassToken) {
  const std::string text = R"({"model_type": "llava", "vision_feature_select_strategy": "full",
      "vision_config": {"hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 16,
                        "num_hidden_layers": 24, "image_size": 336, "patch_size": 14},
      "text_config": {"model_type": "llama"}})";
  const ModelSpec full = model_from_hf_config(text, "full.json");
  EXPECT_FALSE(full.find("vision")->drops_class_token);
  EXPECT_EQ(full.find("vision")->projected_tokens_per_item(), 577);
}

TEST(HfConfig, BadInputIsOneLineNamingFileAndKey) {
  const struct {
    const char* text;
    const char* expected;
  } cases[] = {
      {"{\"model_type\": \"llama\", \"hidden_size\": ", "cfg.json: malformed JSON"},
      {"[1, 2]", "cfg.json: (object) must be a JSON object"},
      {"{}", "cfg.json: model_type is missing"},
      {"{\"model_type\": \"mamba\"}", "cfg.json: model_type names an architecture Fulcrum cannot read: 'mamba'"},
      {"{\"model_type\": \"llama\", \"hidden_size\": -4096}", "cfg.json: hidden_size must be positive, got -4096"},
      {"{\"model_type\": \"llama\", \"num_hidden_layers\": \"32\"}", "cfg.json: num_hidden_layers must be an integer"},
      {"{\"model_type\": \"llava\", \"text_config\": {}}", "cfg.json: vision_config is missing"},
      {"{\"model_type\": \"llava\", \"vision_config\": {\"hidden_size\": 0}, \"text_config\": {}}",
       "cfg.json: vision_config.hidden_size must be positive, got 0"},
      {"{\"model_type\": \"internvl_chat\", \"vision_config\": {}, \"llm_config\": {\"architectures\": [\"Foo\"]}}",
       "cfg.json: llm_config.model_type is missing and the architecture is not one Fulcrum reads"},
      {"{\"vision_cfg\": {\"width\": 1024}}", "cfg.json: vision_cfg.layers is missing"},
      {"{\"model_type\": \"llama\", \"num_attention_heads\": 32, \"num_key_value_heads\": 5}",
       "cfg.json: component 'llm' layer 1: kv_heads must divide heads"},
      // Found by fuzzing: a layer count that would allocate gigabytes, and widths whose products overflow.
      {"{\"model_type\": \"llama\", \"num_hidden_layers\": 100000000}",
       "cfg.json: num_hidden_layers is implausibly large: 100000000 (at most 100000)"},
      {"{\"model_type\": \"internvl_chat\", \"downsample_ratio\": 0.01, \"vision_config\": {\"hidden_size\": "
       "16777216}, \"llm_config\": {\"model_type\": \"llama\", \"hidden_size\": 16777216}}",
       "cfg.json: downsample_ratio must be between 1/64 and 1"},
      {"{\"model_type\": \"internvl_chat\", \"downsample_ratio\": 0.02, \"vision_config\": {\"hidden_size\": 16777216, "
       "\"intermediate_size\": 16777216, \"num_attention_heads\": 1}, \"llm_config\": {\"model_type\": \"llama\", "
       "\"hidden_size\": 16777216, \"intermediate_size\": 16777216, \"num_attention_heads\": 1}}",
       "cfg.json: component 'projector' layer 0: a size is implausibly large"},
      {"{\"model_type\": \"llama\", \"num_hidden_layers\": 100000, \"hidden_size\": 16777216, "
       "\"intermediate_size\": 16777216, \"num_attention_heads\": 1}",
       "cfg.json: 1.97e+20 parameters is implausibly many"},
      // The layer counted from the end is negated: the most negative integer has no negation (undefined behaviour),
      // and an unsigned one past int64_t wrapped to it.
      {"{\"model_type\": \"llava\", \"vision_feature_layer\": -9223372036854775808, \"vision_config\": {}, "
       "\"text_config\": {}}",
       "cfg.json: vision_feature_layer is out of range"},
      {"{\"model_type\": \"llava\", \"vision_feature_layer\": 9223372036854775808, \"vision_config\": {}, "
       "\"text_config\": {}}",
       "cfg.json: vision_feature_layer is out of range"},
      {"{\"model_type\": \"llava\", \"vision_feature_select_strategy\": \"cls\", \"vision_config\": {}, "
       "\"text_config\": {}}",
       "cfg.json: vision_feature_select_strategy must be \"default\" or \"full\""},
      {"{\"model_type\": \"llama\", \"hidden_size\": 9223372036854775808}",
       "cfg.json: hidden_size is implausibly large: 9223372036854775808"},
  };
  for (const auto& c : cases) {
    try {
      model_from_hf_config(c.text, "cfg.json");
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), ::testing::StartsWith(c.expected)) << c.text;
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
  EXPECT_THROW(read_hf_config(config_path("no-such-file.json")), InputError);
}

}  // namespace
}  // namespace fulcrum
