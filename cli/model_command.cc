// `fulcrum model`: what a model is made of — components, layers, parameters.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "fulcrum/core/error.h"
#include "fulcrum/cost/layer_flops.h"
#include "fulcrum/cost/training_state_memory.h"
#include "fulcrum/model/load_model.h"
#include "fulcrum/model/model_json.h"
#include "fulcrum/model/model_presets.h"

namespace fulcrum {
namespace {

struct ModelOptions {
  std::string model;
  std::vector<std::string> trainable;
  bool json = false;
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

// The model in the Fulcrum schema (model_json.h), with results beside it: parameter counts, FLOPs and
// memory. Reading it back checks the counts and recomputes the rest.
nlohmann::ordered_json model_json(const ModelSpec& m) {
  const nlohmann::ordered_json schema = model_to_json(m);
  nlohmann::ordered_json out;
  out["fulcrum"] = schema["fulcrum"];
  out["name"] = schema["name"];
  out["parameters"] = m.parameters();
  out["trainable_parameters"] = m.trainable_parameters();
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
    comp["layers"] = schema["components"][i]["layers"];
    size_t layer = 0;  // the first layer of each entry
    for (auto& entry : comp["layers"]) {
      entry["parameters"] = c.layers[layer].parameters();
      layer += entry.contains("repeat") ? entry["repeat"].get<size_t>() : 1;
    }
    out["components"].push_back(std::move(comp));
  }
  return out;
}

void print_text(const ModelSpec& m) {
  std::cout << fmt::format("{}: {:.3f}B parameters ({:.3f}B trainable)\n", m.name, m.parameters() / 1e9,
                           m.trainable_parameters() / 1e9);
  for (const ComponentSpec& c : m.components) {
    std::cout << fmt::format("  {} ({}{}): {:.4f}B parameters, {} transformer blocks", c.name,
                             component_role_name(c.role), c.trainable ? "" : ", frozen", c.parameters() / 1e9,
                             c.transformer_blocks());
    if (c.role == ComponentRole::kEncoder) {
      std::cout << (c.tokens_per_item ? fmt::format(", {} tokens per tile", c.tokens_per_item)
                                      : std::string(", dynamic patch tokens"))
                << fmt::format(", {} per LLM token", c.merge);
      if (c.unused_final_layers) std::cout << fmt::format(", last {} block(s) unused", c.unused_final_layers);
    }
    const ComponentFlops flops = flops_of(c);
    std::cout << fmt::format("\n    {:.3g} FLOPs per {} forward+backward{}; weights, gradients and Adam state {:.1f} GiB "
                             "unsharded\n",
                             flops.per_unit, flops.unit,
                             flops.attention_per_token_squared > 0
                                 ? fmt::format(" (+ {:.3g}·t² attention per sequence of t)", flops.attention_per_token_squared)
                                 : std::string(),
                             training_state_bytes(c.parameters(), 1, StateSharding::kZero0, c.trainable).total() /
                                 (1024.0 * 1024 * 1024));
    for (const LayerRun& run : layer_runs(c)) {
      std::cout << fmt::format("    {:>3} × {:<16} {:>14L} params each   {}\n", run.count,
                               layer_kind_name(run.layer->kind), run.layer->parameters(), describe(*run.layer));
    }
  }
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
      std::cout << model_json(model).dump(2) << "\n";
    } else {
      print_text(model);
    }
  };
}

}  // namespace fulcrum
