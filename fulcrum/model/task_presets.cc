// The task-graph presets of the Spindle comparison (reference/spindle.md §11, the paper's Table 1b), with every
// shape and batch the paper leaves open taken from the public model it names, and the source beside it.
#include <fmt/format.h>

#include <functional>
#include <map>
#include <tuple>

#include "fulcrum/core/error.h"
#include "fulcrum/model/model_builders.h"
#include "fulcrum/model/task_graph.h"

namespace fulcrum {
namespace {

// A transformer over one modality's patches: ImageBind's per-modality encoders (a patch embedding, pre-norm
// blocks with GELU MLPs of 4× the width, a final norm). `tokens` is the sequence one item makes, class token
// included; `in_features` what one patch holds.
ComponentSpec patch_encoder(const std::string& name, int64_t layers, int64_t hidden, int64_t heads, int64_t tokens,
                            int64_t in_features) {
  VitShape s;
  s.layers = layers;
  s.hidden = hidden;
  s.heads = heads;
  s.ffn = 4 * hidden;
  s.final_norm = true;
  ComponentSpec c = vision_transformer(name, s);
  c.layers.front().in_features = in_features;
  c.layers.front().positions = tokens;
  c.tokens_per_item = tokens;
  return c;
}

// A text transformer as CLIP's: token embedding, pre-norm GELU blocks, final norm; no LM head.
ComponentSpec text_encoder(const std::string& name, int64_t layers, int64_t hidden, int64_t heads, int64_t vocab,
                           int64_t context) {
  DecoderShape s;
  s.layers = layers;
  s.hidden = hidden;
  s.heads = heads;
  s.ffn = 4 * hidden;
  s.vocab = vocab;
  s.mlp = MlpKind::kGelu;
  s.norm = NormKind::kLayerNorm;
  s.qkv_bias = true;
  s.linear_bias = true;
  ComponentSpec c = decoder_llm(name, s);
  c.layers.pop_back();  // the LM head: CLIP's text tower ends at its final norm
  c.role = ComponentRole::kEncoder;
  c.tokens_per_item = context;
  return c;
}

// Multitask-CLIP, "with the ImageBind structure" (Table 1b: 1.20B parameters, 6 modalities, 10 tasks, each task
// two encoders under a contrastive loss). The encoders are ImageBind-Huge's (Girdhar et al., CVPR 2023, and its
// released imagebind_huge configuration):
//   vision   ViT-H/14: 32 blocks, width 1280, 16 heads, 224-px images → 256 patches + class token = 257 tokens
//   text     OpenCLIP ViT-H text tower: 24 blocks, width 1024, 16 heads, vocabulary 49,408, context 77 tokens
//   audio    ViT-B: 12 blocks, width 768, 12 heads; 128 mel bins × 204 frames in 16×16 patches at stride 10
//            → 12 × 19 = 228 patches + class token = 229 tokens, one channel (256 values a patch)
//   depth    ViT-S: 12 blocks, width 384, 8 heads, 224-px single-channel images in 16-px patches → 197 tokens
//   thermal  ViT-B: 12 blocks, width 768, 12 heads, 224-px single-channel images in 16-px patches → 197 tokens
//   imu      6 blocks, width 512, 8 heads; 2,000 samples × 6 channels in windows of 8 → 250 + 1 = 251 tokens
// Together 1.19B parameters (the paper: 1.20B). The contrastive loss and ImageBind's small projection heads are
// left out (they cost nothing next to the towers).
// Tasks. The paper names neither the ten modality pairs nor their batches. ImageBind binds every modality to
// images, which gives five pairs; the other five pair text with the non-image modalities and audio with IMU:
//   1 vision-text  2 vision-audio  3 vision-depth  4 vision-thermal  5 vision-imu
//   6 text-audio   7 text-depth    8 text-thermal  9 text-imu       10 audio-imu
// multitask-clip-7 is tasks 1–7 and multitask-clip-4 tasks 1–4. Every task trains 256 pairs an iteration (a
// choice: with equal batches the heterogeneity is the towers' own, as in the paper's Fig. 3 and 4).
ModelSpec imagebind_huge() {
  ModelSpec m;
  m.name = "imagebind-huge";
  m.components.push_back(patch_encoder("vision", 32, 1280, 16, 257, 3 * 14 * 14));
  m.components.push_back(text_encoder("text", 24, 1024, 16, 49408, 77));
  m.components.push_back(patch_encoder("audio", 12, 768, 12, 229, 16 * 16));
  m.components.push_back(patch_encoder("depth", 12, 384, 8, 197, 16 * 16));
  m.components.push_back(patch_encoder("thermal", 12, 768, 12, 197, 16 * 16));
  m.components.push_back(patch_encoder("imu", 6, 512, 8, 251, 6 * 8));
  return m;
}

TaskGraph multitask_clip(const std::string& name, int tasks) {
  static const std::pair<const char*, const char*> kPairs[] = {
      {"vision", "text"},  {"vision", "audio"}, {"vision", "depth"}, {"vision", "thermal"}, {"vision", "imu"},
      {"text", "audio"},   {"text", "depth"},   {"text", "thermal"}, {"text", "imu"},      {"audio", "imu"}};
  TaskGraph g;
  g.name = name;
  ModelSpec all = imagebind_huge();
  // Only the components the chosen tasks run.
  std::vector<bool> used(all.components.size(), false);
  for (int t = 0; t < tasks; ++t) {
    used[all.find(kPairs[t].first) - all.components.data()] = true;
    used[all.find(kPairs[t].second) - all.components.data()] = true;
  }
  g.model.name = all.name;
  for (size_t c = 0; c < all.components.size(); ++c) {
    if (used[c]) g.model.components.push_back(all.components[c]);
  }
  for (int t = 0; t < tasks; ++t) {
    Task task;
    task.name = fmt::format("{}-{}", kPairs[t].first, kPairs[t].second);
    task.batch = 256;
    for (const char* modality : {kPairs[t].first, kPairs[t].second}) {
      const ComponentSpec* c = g.model.find(modality);
      task.nodes.push_back({modality, static_cast<int>(c - g.model.components.data()), c->tokens_per_item, 1, {}});
    }
    g.tasks.push_back(std::move(task));
  }
  return g;
}

// OFASys (Table 1b: 0.66B parameters, 6 modalities — text, vision, audio, motion, box, structure — 7 tasks, an
// encoder-decoder LM). The paper names neither the architecture nor the tasks beyond examples (captioning,
// grounding, ASR, text-to-SQL). Shapes from the OFASys repository (OFA-Sys/OFASys):
//   encoder, decoder  its `large` architecture (ofasys/model/ofa.py), the largest below the paper's count: 12 + 12
//             pre-norm blocks of width 1024, 16 heads, GELU MLP 4096. A decoder block's cross-attention (query
//             and output projections on the target, key and value on the source: 4 × 1024² more parameters) is
//             taken as 2 × 1024 more MLP width (6144), which carries its parameters and, for sources as long as
//             targets, its FLOPs; attention over the source is left out
//   text      the shared embedding of GPT-2's 50,257 BPE tokens, a mask token, 1,000 location bins and 8,192 image
//             codes (59,450 rows, width 1024); boxes (4 location tokens) and structures (tables and databases
//             linearised, ofasys/preprocessor/default/struct.py) enter through it; the LM head is tied to it
//   vision    a ResNet-152 cut after stage 3 (stride 16, 1,024 channels) and a linear to the width, on 480-px
//             images → 30 × 30 = 900 tokens (512-px grounding images → 1,024). Taken as a patch embedding of
//             16 × 16 × 3 pixels with 900 learned positions and a chain of 36 MLPs 1024 → 720 → 1024, one per
//             bottleneck of stage 3, whose FLOPs together match the three stages' (about 95 GFLOPs an image at
//             480 px; their 53M parameters against the ResNet's ~27M)
//   audio     80 fbank bins a 10 ms frame, subsampled 4× by a convolution stem (Conv2dSubsampling4), taken as a
//             patch embedding of 4 frames × 80 bins (the stem's channel count is not given: its compute is left
//             out); 12 s of speech → 300 tokens
//   motion    the 6D-rotation adaptor: each frame's 6 + 6 × joints values zero-padded to 512, a two-layer MLP to
//             the width (ofasys/adaptor/motion_6d.py); HumanML3D clips of 196 frames (9.8 s at 20 fps)
// Together 0.47B parameters against the paper's 0.66B (OFA-Large's 0.47B; the paper does not say what it counts).
// Tasks (a choice; the first four are the paper's examples, so ofasys-4 is tasks 1–4), lengths in tokens:
//   1 captioning       image (900) + prompt (8) → encoder 908 → decoder 30 (OFASys' max_tgt_length)
//   2 grounding        512-px image (1,024) + referring text (20) → 1,044 → 5 (a box and end of sequence)
//   3 asr              12 s of speech (300) + prompt (8) → 308 → 40
//   4 text-to-sql      a database (512, the README's Spider example allows 876) + question (30) → 542 → 64
//   5 text-to-motion   text (30) → 30 → a clip of 196 frames through the motion adaptor into the decoder
//   6 grounded-caption image (900) + a box (4) + prompt (8) → 912 → 30
//   7 vqa              image (900) + question (20) → 920 → 5
// Every task trains 256 samples an iteration, as multitask-clip's.
TaskGraph ofasys(const std::string& name, int tasks) {
  constexpr int64_t kWidth = 1024, kHeads = 16, kVocab = 50257 + 1 + 1000 + 8192;
  TaskGraph g;
  g.name = name;
  g.model.name = "ofasys-large";
  auto block = [&](int64_t ffn) {
    LayerSpec b;
    b.kind = LayerKind::kTransformerBlock;
    b.hidden = kWidth;
    b.ffn = ffn;
    b.heads = kHeads;
    b.kv_heads = kHeads;
    b.head_dim = kWidth / kHeads;
    b.qkv_bias = true;
    b.linear_bias = true;
    return b;
  };
  auto layer = [](LayerKind kind) {
    LayerSpec l;
    l.kind = kind;
    l.hidden = kWidth;
    return l;
  };
  auto component = [&](const std::string& n, ComponentRole role, std::vector<LayerSpec> layers) {
    ComponentSpec c;
    c.name = n;
    c.role = role;
    c.layers = std::move(layers);
    g.model.components.push_back(std::move(c));
    return static_cast<int>(g.model.components.size()) - 1;
  };
  LayerSpec embedding = layer(LayerKind::kTokenEmbedding);
  embedding.vocab = kVocab;
  const int text = component("text", ComponentRole::kEncoder, {embedding});
  LayerSpec stem = layer(LayerKind::kPatchEmbedding);
  stem.in_features = 3 * 16 * 16;
  stem.positions = 900;
  LayerSpec bottleneck = layer(LayerKind::kProjector);
  bottleneck.in_features = kWidth;
  bottleneck.ffn = 720;
  bottleneck.linear_bias = true;
  std::vector<LayerSpec> vision_layers{stem};
  vision_layers.insert(vision_layers.end(), 36, bottleneck);
  const int vision = component("vision", ComponentRole::kEncoder, std::move(vision_layers));
  LayerSpec fbank = layer(LayerKind::kPatchEmbedding);
  fbank.in_features = 4 * 80;
  const int audio = component("audio", ComponentRole::kEncoder, {fbank});
  LayerSpec motion_mlp = layer(LayerKind::kProjector);
  motion_mlp.in_features = 512;
  motion_mlp.ffn = kWidth;
  motion_mlp.linear_bias = true;
  const int motion = component("motion", ComponentRole::kEncoder, {motion_mlp});
  std::vector<LayerSpec> encoder_layers(12, block(4 * kWidth));
  encoder_layers.push_back(layer(LayerKind::kFinalNorm));
  const int encoder = component("encoder", ComponentRole::kEncoder, std::move(encoder_layers));
  std::vector<LayerSpec> decoder_layers(12, block(4 * kWidth + 2 * kWidth));
  decoder_layers.push_back(layer(LayerKind::kFinalNorm));
  LayerSpec head = layer(LayerKind::kLmHead);
  head.vocab = kVocab;
  head.tied_to_embedding = true;
  decoder_layers.push_back(head);
  const int decoder = component("decoder", ComponentRole::kLlm, std::move(decoder_layers));
  // One task: its input nodes (name, component, tokens), the encoder over all of them, the decoder on `target`
  // tokens (and, for a motion target, the motion adaptor's frames).
  auto task = [&](const char* n, std::vector<std::tuple<const char*, int, int64_t>> inputs, int64_t target,
                  int64_t motion_frames = 0) {
    Task t{n, 256, 1, {}};
    int64_t source = 0;
    std::vector<int> into_encoder;
    for (const auto& [node, c, tokens] : inputs) {
      t.nodes.push_back({node, c, tokens, 1, {}});
      into_encoder.push_back(static_cast<int>(t.nodes.size()) - 1);
      source += tokens;
    }
    t.nodes.push_back({"encoder", encoder, source, 1, into_encoder});
    std::vector<int> into_decoder{static_cast<int>(t.nodes.size()) - 1};
    if (motion_frames > 0) {
      t.nodes.push_back({"motion", motion, motion_frames, 1, {}});
      into_decoder.push_back(static_cast<int>(t.nodes.size()) - 1);
    }
    t.nodes.push_back({"decoder", decoder, motion_frames > 0 ? motion_frames : target, 1, into_decoder});
    return t;
  };
  const std::vector<Task> all{
      task("captioning", {{"image", vision, 900}, {"prompt", text, 8}}, 30),
      task("grounding", {{"image", vision, 1024}, {"text", text, 20}}, 5),
      task("asr", {{"speech", audio, 300}, {"prompt", text, 8}}, 40),
      task("text-to-sql", {{"database-and-question", text, 512 + 30}}, 64),
      task("text-to-motion", {{"text", text, 30}}, 0, 196),
      task("grounded-caption", {{"image", vision, 900}, {"box-and-prompt", text, 4 + 8}}, 30),
      task("vqa", {{"image", vision, 900}, {"question", text, 20}}, 5),
  };
  g.tasks.assign(all.begin(), all.begin() + tasks);
  // Only the components the chosen tasks run.
  std::vector<bool> used(g.model.components.size(), false);
  for (const Task& t : g.tasks) {
    for (const TaskNode& n : t.nodes) used[n.component] = true;
  }
  std::vector<int> index(g.model.components.size(), -1);
  ModelSpec kept;
  kept.name = g.model.name;
  for (size_t c = 0; c < g.model.components.size(); ++c) {
    if (!used[c]) continue;
    index[c] = static_cast<int>(kept.components.size());
    kept.components.push_back(g.model.components[c]);
  }
  for (Task& t : g.tasks) {
    for (TaskNode& n : t.nodes) n.component = index[n.component];
  }
  g.model = std::move(kept);
  return g;
}

// QWen-VAL (Table 1b: 9.25B parameters; the QWen-VL and QWen-Audio encoders feeding the QWen LLM; vision-language,
// audio-language and vision-audio-language tasks). Shapes from the released models:
//   vision    QWen-VL's ViT-bigG/14 (Bai et al., 2023): 48 blocks, width 1664, 16 heads, MLP 8192, 448-px
//             images → 1,024 patches (no class token)
//   v-adapter QWen-VL's position-aware cross-attention resampler to 256 queries, taken as a projector from
//             width 1664 to the LLM's 4096 on the 256 query tokens (its attention over the patches is left out)
//   audio     QWen-Audio's Whisper-large-v2 encoder (Chu et al., 2023): 32 blocks, width 1280, 20 heads, MLP
//             5120, 30 s of audio → 1,500 frames (the 2× convolution stem taken as a patch embedding)
//   a-adapter the pooling and linear to the LLM's width, as a projector on 750 tokens
//   llm       Qwen-7B: 32 blocks, width 4096, 32 heads, SwiGLU MLP 11008, vocabulary 151,936
// Together 10.1B parameters against the paper's 9.25B (the paper does not say which parts it counts).
// Tasks and batches (the paper gives neither): every sample carries 512 text tokens; a VL sample adds its image's
// 256 tokens, an AL sample its clip's 750, a VAL sample both (1,518 LLM tokens). Batches 128 (VL), 64 (AL) and
// 32 (VAL) samples an iteration: image-text data is the most plentiful, as in QWen-VL's pre-training mix.
// The simulated scale-up (Appendix E, 256 GPUs) names QWen-VAL 30B and 70B without their LLMs: qwen-val-30b takes
// Qwen1.5-32B (64 blocks, width 5120, 40 heads with 8 key/value heads, SwiGLU MLP 27392, vocabulary 152,064),
// the public Qwen nearest 30B; qwen-val-70b takes Qwen-72B (80 blocks, width 8192, 64 heads, MLP 24576,
// vocabulary 152,064). Their batches are 8× qwen-val's, for 8× the 32 GPUs qwen-val is measured on.
TaskGraph qwen_val(const std::string& name, const DecoderShape& q, int64_t batch_scale) {
  TaskGraph g;
  g.name = name;
  g.model.name = "qwen-val";
  VitShape v;
  v.layers = 48;
  v.hidden = 1664;
  v.heads = 16;
  v.ffn = 8192;
  v.image_pixels = 448;
  v.patch_pixels = 14;
  v.class_token = false;
  g.model.components.push_back(vision_transformer("vision", v));
  g.model.components.push_back(mlp_projector("v-adapter", {1664, 4096, 4096, 2, NormKind::kLayerNorm, true}));
  g.model.components.push_back(patch_encoder("audio", 32, 1280, 20, 1500, 80 * 3 * 2));
  g.model.components.push_back(mlp_projector("a-adapter", {1280, 4096, 4096, 2, NormKind::kLayerNorm, true}));
  g.model.components.push_back(decoder_llm("llm", q));
  for (ComponentSpec& c : g.model.components) {
    if (c.name.ends_with("adapter")) c.role = ComponentRole::kProjector;
  }
  const int vision = 0, v_adapter = 1, audio = 2, a_adapter = 3, llm = 4;
  Task vl{"vision-language", 128 * batch_scale, 1, {}};
  vl.nodes = {{"vision", vision, 1024, 1, {}}, {"v-adapter", v_adapter, 256, 1, {0}}, {"llm", llm, 512 + 256, 1, {1}}};
  Task al{"audio-language", 64 * batch_scale, 1, {}};
  al.nodes = {{"audio", audio, 1500, 1, {}}, {"a-adapter", a_adapter, 750, 1, {0}}, {"llm", llm, 512 + 750, 1, {1}}};
  Task val{"vision-audio-language", 32 * batch_scale, 1, {}};
  val.nodes = {{"vision", vision, 1024, 1, {}},
               {"v-adapter", v_adapter, 256, 1, {0}},
               {"audio", audio, 1500, 1, {}},
               {"a-adapter", a_adapter, 750, 1, {2}},
               {"llm", llm, 512 + 256 + 750, 1, {1, 3}}};
  g.tasks = {vl, al, val};
  return g;
}

DecoderShape qwen(int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t ffn, int64_t vocab) {
  DecoderShape q;
  q.layers = layers;
  q.hidden = hidden;
  q.heads = heads;
  q.kv_heads = kv_heads;
  q.ffn = ffn;
  q.vocab = vocab;
  q.qkv_bias = true;
  return q;
}

using Builder = std::function<TaskGraph(const std::string&)>;

const std::vector<std::pair<std::string, Builder>>& presets() {
  static const auto* table = new std::vector<std::pair<std::string, Builder>>{
      {"multitask-clip-10", [](const std::string& n) { return multitask_clip(n, 10); }},
      {"multitask-clip-7", [](const std::string& n) { return multitask_clip(n, 7); }},
      {"multitask-clip-4", [](const std::string& n) { return multitask_clip(n, 4); }},
      {"ofasys-7", [](const std::string& n) { return ofasys(n, 7); }},
      {"ofasys-4", [](const std::string& n) { return ofasys(n, 4); }},
      {"qwen-val", [](const std::string& n) { return qwen_val(n, qwen(32, 4096, 32, 0, 11008, 151936), 1); }},
      {"qwen-val-30b", [](const std::string& n) { return qwen_val(n, qwen(64, 5120, 40, 8, 27392, 152064), 8); }},
      {"qwen-val-70b", [](const std::string& n) { return qwen_val(n, qwen(80, 8192, 64, 0, 24576, 152064), 8); }},
  };
  return *table;
}

}  // namespace

std::vector<std::string> task_graph_preset_names() {
  std::vector<std::string> out;
  for (const auto& [name, build] : presets()) out.push_back(name);
  return out;
}

TaskGraph task_graph_preset(std::string_view name) {
  for (const auto& [preset, build] : presets()) {
    if (preset == name) return build(preset);
  }
  throw InputError(fmt::format("unknown task preset '{}': use {}", name, fmt::join(task_graph_preset_names(), ", ")));
}

}  // namespace fulcrum
