// `fulcrum model`: what a model is made of — components, layers, parameters, FLOPs and memory.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/output_file.h"
#include "fulcrum/core/error.h"
#include "fulcrum/cost/activation_memory.h"
#include "fulcrum/cost/dtype.h"
#include "fulcrum/cost/layer_flops.h"
#include "fulcrum/cost/training_state_memory.h"
#include "fulcrum/model/load_model.h"
#include "fulcrum/model/model_json.h"
#include "fulcrum/model/model_presets.h"

namespace fulcrum {
namespace {

// The micro-batch activation memory is shown for: `sequences` LLM sequences of `tokens` tokens, each with
// `items` encoder items (a tile of tokens_per_item tokens, or `patch_tokens` for dynamic-resolution encoders).
struct MicroBatch {
  int64_t tokens = 2048;
  int64_t sequences = 1;
  int64_t items = 1;
  int64_t patch_tokens = 1024;
  int tp = 1;
  bool sequence_parallel = false;
  int cp = 1;
  std::string recompute = "none";
  std::string dtype = "bf16";
};

struct ModelOptions {
  std::string model;
  std::vector<std::string> trainable;
  bool json = false;
  MicroBatch micro_batch;
};

// Runs of identical consecutive layers, so 45 equal blocks print as one line.
struct LayerRun {
  const LayerSpec* layer;
  int64_t count;
};

bool same_shape(const LayerSpec& a, const LayerSpec& b) {
  return a.kind == b.kind && a.hidden == b.hidden && a.ffn == b.ffn && a.heads == b.heads &&
         a.kv_heads == b.kv_heads && a.head_dim == b.head_dim && a.mlp == b.mlp && a.norm == b.norm &&
         a.window_tokens == b.window_tokens && a.vocab == b.vocab && a.in_features == b.in_features &&
         a.parameters() == b.parameters();
}

std::vector<LayerRun> layer_runs(const ComponentSpec& c) {
  std::vector<LayerRun> runs;
  for (const LayerSpec& layer : c.layers) {
    if (!runs.empty() && same_shape(*runs.back().layer, layer)) {
      ++runs.back().count;
    } else {
      runs.push_back({&layer, 1});
    }
  }
  return runs;
}

std::string describe(const LayerSpec& l) {
  switch (l.kind) {
    case LayerKind::kTransformerBlock:
      return fmt::format("hidden {}, heads {}/{} kv × {}, {} MLP {}, {}{}", l.hidden, l.heads, l.kv_heads,
                         l.head_dim, mlp_kind_name(l.mlp), l.ffn, norm_kind_name(l.norm),
                         l.window_tokens ? fmt::format(", window {} tokens", l.window_tokens) : "");
    case LayerKind::kPatchEmbedding:
      return fmt::format("{} → {}, {} positions{}", l.in_features, l.hidden, l.positions,
                         l.class_token ? ", class token" : "");
    case LayerKind::kTokenEmbedding:
      return fmt::format("vocab {} × {}", l.vocab, l.hidden);
    case LayerKind::kLmHead:
      return fmt::format("{} → vocab {}{}", l.hidden, l.vocab, l.tied_to_embedding ? " (tied to the embedding)" : "");
    case LayerKind::kProjector:
      return fmt::format("{} → {} in {} linears{}", l.in_features, l.hidden, l.projector_linears,
                         l.norm != NormKind::kNone ? fmt::format(", {} first", norm_kind_name(l.norm)) : "");
    case LayerKind::kFinalNorm:
      return fmt::format("{} {}", norm_kind_name(l.norm), l.hidden);
  }
  return "";
}

// Forward + backward model FLOPs of a component for one sequence of `tokens` tokens.
double component_flops(const ComponentSpec& c, int64_t tokens, bool with_attention) {
  const TokenBatch batch{1, tokens, with_attention ? tokens * tokens : 0};
  double total = 0;
  // Layers whose output the model does not use are not run.
  const size_t used = c.layers.size() - static_cast<size_t>(c.unused_final_layers);
  for (size_t i = 0; i < used; ++i) total += model_flops(c.layers[i], batch, c.trainable);
  return total;
}

// What one unit of a component's input costs: a tile for a fixed-size encoder, a token otherwise; plus the
// attention term per squared sequence length, for packing.
struct ComponentFlops {
  std::string unit;
  double per_unit = 0;
  double attention_per_token_squared = 0;
};

ComponentFlops flops_of(const ComponentSpec& c) {
  constexpr int64_t kProbe = 1000;
  const double linear = component_flops(c, kProbe, false);
  const double attention = (component_flops(c, kProbe, true) - linear) / (static_cast<double>(kProbe) * kProbe);
  if (c.role == ComponentRole::kEncoder && c.tokens_per_item > 0) {
    return {"tile", component_flops(c, c.tokens_per_item, true), 0};  // a tile is one fixed-length sequence
  }
  return {c.role == ComponentRole::kEncoder ? "patch token" : "token", linear / kProbe, attention};
}

// Activation memory of a component's transformer blocks for the stated micro-batch, on one device.
struct ComponentActivations {
  TokenBatch batch;
  int tp = 1;  // the stated degree, or 1 where it does not divide the component's heads (replicated)
  std::vector<double> per_layer;  // bytes each layer keeps; 0 for layers other than blocks and unused ones
  double total = 0;
};

ComponentActivations activations_of(const ComponentSpec& c, const MicroBatch& mb) {
  ComponentActivations out;
  int64_t length = mb.tokens, count = mb.sequences;
  if (c.role == ComponentRole::kEncoder) {
    length = c.tokens_per_item > 0 ? c.tokens_per_item : mb.patch_tokens;
    count = mb.sequences * mb.items;  // each item is a sequence of its own
  }
  // Keeps Σt² exact in 64 bits (the options and model sizes are bounded, their product is not).
  if (static_cast<double>(count) * static_cast<double>(length) * static_cast<double>(length) > 1e18) {
    throw InputError(fmt::format("component '{}': {} sequences of {} tokens is an implausibly large micro-batch",
                                 c.name, count, length));
  }
  out.batch = {count, count * length, count * length * length};
  const int64_t heads = c.attention_heads(), kv = c.kv_heads();
  out.tp = heads > 0 && (heads % mb.tp != 0 || (kv % mb.tp != 0 && mb.tp % kv != 0)) ? 1 : mb.tp;
  const TensorSharding sharding{out.tp, mb.sequence_parallel, mb.cp};
  const size_t used = c.layers.size() - static_cast<size_t>(c.unused_final_layers);
  for (size_t i = 0; i < c.layers.size(); ++i) {
    const double bytes = i < used ? activation_bytes(c.layers[i], out.batch, sharding, parse_recompute(mb.recompute, "--recompute"),
                                                     /*dropout=*/false, parse_dtype(mb.dtype))
                                  : 0;
    out.per_layer.push_back(bytes);
    out.total += bytes;
  }
  return out;
}

std::string memory_text(double bytes) {
  constexpr double kMiB = 1024.0 * 1024;
  return bytes >= 1024 * kMiB ? fmt::format("{:.2f} GiB", bytes / (1024 * kMiB)) : fmt::format("{:.1f} MiB", bytes / kMiB);
}

// The model in the Fulcrum schema (model_json.h), with results beside it: parameter counts, FLOPs and
// memory. Reading it back checks the counts and recomputes the rest.
nlohmann::ordered_json model_json(const ModelSpec& m, const MicroBatch& mb) {
  const nlohmann::ordered_json schema = model_to_json(m);
  nlohmann::ordered_json out;
  out["fulcrum"] = schema["fulcrum"];
  out["name"] = schema["name"];
  out["parameters"] = m.parameters();
  out["trainable_parameters"] = m.trainable_parameters();
  // What the activation memory below is for.
  out["micro_batch"] = {{"sequences", mb.sequences},       {"tokens_per_sequence", mb.tokens},
                        {"items_per_sequence", mb.items},   {"patch_tokens_per_item", mb.patch_tokens},
                        {"tp", mb.tp},                      {"sequence_parallel", mb.sequence_parallel},
                        {"cp", mb.cp},                      {"recompute", mb.recompute},
                        {"dtype", mb.dtype}};
  out["components"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < m.components.size(); ++i) {
    const ComponentSpec& c = m.components[i];
    nlohmann::ordered_json comp;
    for (const auto& [key, value] : schema["components"][i].items()) {
      if (key != "layers") comp[key] = value;
    }
    comp["parameters"] = c.parameters();
    comp["transformer_blocks"] = c.transformer_blocks();
    comp["attention_heads"] = c.attention_heads();
    comp["kv_heads"] = c.kv_heads();
    const ComponentFlops flops = flops_of(c);
    // Forward and backward, no recomputation (the model-FLOPs convention); a tile includes its attention.
    comp["flops"] = {{"unit", flops.unit}, {"per_unit", flops.per_unit},
                     {"attention_per_token_squared", flops.attention_per_token_squared}};
    comp["training_state_bytes_unsharded"] =
        training_state_bytes(c.parameters(), 1, StateSharding::kZero0, c.trainable).total();
    const ComponentActivations act = activations_of(c, mb);
    // Bytes its transformer blocks keep for the backward pass, on one device of its tensor-parallel group.
    comp["activation_bytes"] = {{"sequences", act.batch.sequences}, {"tokens", act.batch.tokens},
                                {"tp", act.tp}, {"transformer_blocks", act.total}};
    comp["layers"] = schema["components"][i]["layers"];
    size_t layer = 0;  // the first layer of each entry
    for (auto& entry : comp["layers"]) {
      entry["parameters"] = c.layers[layer].parameters();
      if (c.layers[layer].kind == LayerKind::kTransformerBlock) entry["activation_bytes"] = act.per_layer[layer];
      layer += entry.contains("repeat") ? entry["repeat"].get<size_t>() : 1;
    }
    out["components"].push_back(std::move(comp));
  }
  return out;
}

// Printed whole once every figure is made: a component that cannot be sized leaves stdout empty.
void print_text(const ModelSpec& m, const MicroBatch& mb) {
  std::ostringstream out;
  out << fmt::format("{}: {:.3f}B parameters ({:.3f}B trainable)\n", m.name, m.parameters() / 1e9,
                     m.trainable_parameters() / 1e9);
  out << fmt::format("  activations kept by the transformer blocks for a micro-batch of {} × {} tokens, {} "
                     "item(s) per sequence; tp {}{}, cp {}, recompute {}, {}; per device\n",
                     mb.sequences, mb.tokens, mb.items, mb.tp, mb.sequence_parallel ? " with sp" : "", mb.cp,
                     mb.recompute, mb.dtype);
  for (const ComponentSpec& c : m.components) {
    out << fmt::format("  {} ({}{}): {:.4f}B parameters, {} transformer blocks", c.name,
                       component_role_name(c.role), c.trainable ? "" : ", frozen", c.parameters() / 1e9,
                       c.transformer_blocks());
    if (c.role == ComponentRole::kEncoder) {
      out << (c.tokens_per_item ? fmt::format(", {} tokens per tile", c.tokens_per_item)
                                : std::string(", dynamic patch tokens"))
          << fmt::format(", {} per LLM token", c.merge);
      if (c.drops_class_token) out << ", class token dropped before the projector";
      if (c.unused_final_layers) out << fmt::format(", last {} block(s) unused", c.unused_final_layers);
    }
    const ComponentFlops flops = flops_of(c);
    out << fmt::format("\n    {:.3g} FLOPs per {} forward+backward{}; weights, gradients and Adam state {:.1f} GiB "
                       "unsharded\n",
                       flops.per_unit, flops.unit,
                       flops.attention_per_token_squared > 0
                           ? fmt::format(" (+ {:.3g}·t² attention per sequence of t)", flops.attention_per_token_squared)
                           : std::string(),
                       training_state_bytes(c.parameters(), 1, StateSharding::kZero0, c.trainable).total() /
                           (1024.0 * 1024 * 1024));
    const ComponentActivations act = activations_of(c, mb);
    if (c.transformer_blocks() > 0) {
      out << fmt::format("    activations {} for {} sequence(s), {} tokens{}\n", memory_text(act.total),
                         act.batch.sequences, act.batch.tokens,
                         act.tp != mb.tp ? fmt::format(" (replicated: tp {} does not divide its heads)", mb.tp)
                                         : std::string());
    }
    size_t layer = 0;
    for (const LayerRun& run : layer_runs(c)) {
      out << fmt::format("    {:>3} × {:<16} {:>14L} params each   {}{}\n", run.count,
                         layer_kind_name(run.layer->kind), run.layer->parameters(), describe(*run.layer),
                         run.layer->kind == LayerKind::kTransformerBlock
                             ? fmt::format("; activations {} each", memory_text(act.per_layer[layer]))
                             : std::string());
      layer += static_cast<size_t>(run.count);
    }
  }
  std::cout << out.str();
}

}  // namespace

std::function<void()> add_model_command(CLI::App& app) {
  auto options = std::make_shared<ModelOptions>();
  CLI::App* cmd = app.add_subcommand("model", "Show a model's components, layers and parameters");
  cmd->add_option("--model", options->model,
                  "a preset (" + fmt::format("{}", fmt::join(model_preset_names(), ", ")) +
                      "; join encoders and an LLM with '+'), a Fulcrum model JSON (as --json writes it), or a Hugging "
                      "Face / open_clip config.json")
      ->required();
  cmd->add_option("--trainable", options->trainable,
                  "train only these components (e.g. projector for LLaVA's first stage); the rest are frozen")
      ->delimiter(',');
  cmd->add_flag("--json", options->json, "print one JSON object");
  MicroBatch& mb = options->micro_batch;
  constexpr int64_t kMaxTokens = int64_t{1} << 24, kMaxCount = int64_t{1} << 16;
  cmd->add_option("--seq", mb.tokens, "activations: tokens per LLM sequence")
      ->check(CLI::Range(int64_t{1}, kMaxTokens))->capture_default_str();
  cmd->add_option("--mbs", mb.sequences, "activations: sequences per micro-batch")
      ->check(CLI::Range(int64_t{1}, kMaxCount))->capture_default_str();
  cmd->add_option("--images", mb.items, "activations: encoder items (tiles, images) per sequence")
      ->check(CLI::Range(int64_t{0}, kMaxCount))->capture_default_str();
  cmd->add_option("--patch-tokens", mb.patch_tokens,
                  "activations: patch tokens per item for dynamic-resolution encoders (Qwen2-VL)")
      ->check(CLI::Range(int64_t{1}, kMaxTokens))->capture_default_str();
  cmd->add_option("--tp", mb.tp, "activations: tensor parallelism (a component whose heads it does not divide is "
                                 "shown replicated)")
      ->check(CLI::Range(1, 1 << 16))->capture_default_str();
  cmd->add_flag("--sp", mb.sequence_parallel, "activations: with sequence parallelism");
  cmd->add_option("--cp", mb.cp, "activations: context parallelism")
      ->check(CLI::Range(1, 1 << 16))->capture_default_str();
  cmd->add_option("--recompute", mb.recompute, "activations: none | selective | full")
      ->check(CLI::IsMember({"none", "selective", "full"}))->capture_default_str();
  cmd->add_option("--dtype", mb.dtype, "activations: bf16 | fp16 | fp8 | fp32")
      ->check(CLI::IsMember({"bf16", "fp16", "fp8", "fp32"}))->capture_default_str();
  return [options] {
    ModelSpec model = load_model(options->model);
    if (!options->trainable.empty()) {
      const std::set<std::string> chosen(options->trainable.begin(), options->trainable.end());
      for (const std::string& name : chosen) {
        if (!model.find(name)) {
          std::vector<std::string> names;
          for (const ComponentSpec& c : model.components) names.push_back(c.name);
          throw InputError(fmt::format("--trainable: {} has no component '{}'; it has {}", model.name, name,
                                       fmt::join(names, ", ")));
        }
      }
      for (ComponentSpec& c : model.components) c.trainable = chosen.count(c.name) > 0;
    }
    if (options->json) {
      std::cout << json_text(model_json(model, options->micro_batch), 2) << "\n";
    } else {
      print_text(model, options->micro_batch);
    }
  };
}

}  // namespace fulcrum
