#ifndef FULCRUM_MODEL_HF_CONFIG_H_
#define FULCRUM_MODEL_HF_CONFIG_H_

#include <string>
#include <string_view>

#include "fulcrum/model/model_spec.h"

namespace fulcrum {

// Reads a Hugging Face `config.json` or an open_clip model config into a ModelSpec:
//   internvl_chat       vision_config (InternViT) + pixel-shuffle MLP projector + llm_config
//   llava               vision_config (CLIP) + MLP projector + text_config
//   qwen2_vl            vision_config (dynamic patches, 2×2 merger) + the LLM's keys at the top level
//   qwen2_5_vl          as qwen2_vl, with SwiGLU/RMSNorm vision blocks and windowed attention
//   intern_vit_6b, clip_vision_model   a vision tower alone
//   llama, internlm2, qwen2, mistral, yi   a decoder LLM alone
//   open_clip / EVA     "vision_cfg": the vision tower (the text tower is not used by a VLM)
// Keys a file leaves out take the defaults of the model class that reads it (LlamaConfig's 32 layers of
// 4096 for LLaVA's text_config, Qwen2VLVisionConfig's for a reduced vision_config, RMSNorm for InternViT-6B).
// Malformed JSON, an unknown architecture, a wrong type or a non-positive size throws InputError naming
// `file` and the key.
ModelSpec model_from_hf_config(std::string_view text, const std::string& file);
ModelSpec read_hf_config(const std::string& path);

}  // namespace fulcrum

#endif  // FULCRUM_MODEL_HF_CONFIG_H_
