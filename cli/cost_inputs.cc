#include "cli/cost_inputs.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/model_sample_cost.h"

namespace fulcrum {

ClusterSpec load_cluster(const std::string& preset_or_file) {
  if (!preset_or_file.ends_with(".json") && !std::filesystem::is_regular_file(preset_or_file)) {
    return cluster_preset(preset_or_file);
  }
  return cluster_from_json(read_text_file(preset_or_file), preset_or_file);
}

ProfileTable load_profile(const std::string& path) { return parse_profile_table(read_text_file(path), path); }

void set_image_tokens(ModelSpec& model, int64_t tokens) {
  if (tokens < 0 || tokens > kMostImageTokens) {
    throw InputError(fmt::format("--image-tokens must be from 0 to {}, got {}", kMostImageTokens, tokens));
  }
  if (tokens == 0) return;
  for (ComponentSpec& c : model.components) {
    if (c.role != ComponentRole::kEncoder || c.tokens_per_item <= 0) continue;
    c.tokens_per_item = tokens;
    c.drops_class_token = c.drops_class_token && tokens > 1;  // an item of one token keeps it
  }
}

void check_image_tokens_apply(const ModelSpec& model, int64_t tokens, bool data_given) {
  if (tokens == 0) return;
  if (!model.has_encoder()) {
    throw InputError(fmt::format("--image-tokens: model '{}' has no encoder", model.name));
  }
  if (data_given && vision_unit_of(model) == VisionUnit::kPatchTokens) {
    throw InputError(fmt::format("--image-tokens shapes synthetic samples for model '{}', whose encoders take each "
                                 "sample's own patch tokens from --data",
                                 model.name));
  }
}

void check_data_fits_the_model(const Dataset& data, const std::string& data_name, const ModelSpec& model,
                               const std::string& model_name) {
  if (model.has_encoder()) {
    if (vision_unit_of(model) != data.vision_unit()) {
      throw InputError(fmt::format("{}: counts vision in {}, but model '{}' takes {}", data_name,
                                   vision_unit_text(data.vision_unit()), model_name,
                                   vision_unit_text(vision_unit_of(model))));
    }
    return;
  }
  const auto& vision = data.vision_column();
  const size_t with_images = static_cast<size_t>(
      std::count_if(vision.begin(), vision.end(), [](uint32_t v) { return v > 0; }));
  if (with_images > 0) {
    throw InputError(fmt::format("{}: {} of its {} samples carry images, but model '{}' has no encoder to take them",
                                 data_name, with_images, data.size(), model_name));
  }
}

void check_global_batch(int64_t gbs, int64_t devices) {
  constexpr int64_t kMostSamplesPerDevice = 65536;
  if (gbs < 1) throw InputError(fmt::format("--gbs must be at least 1, got {}", gbs));
  if (gbs / std::max<int64_t>(1, devices) > kMostSamplesPerDevice) {
    throw InputError(fmt::format("--gbs {} is more than {} samples for each of the {} devices", gbs,
                                 kMostSamplesPerDevice, devices));
  }
}

Dtype training_dtype(const std::string& name, const ClusterSpec& cluster) {
  const Dtype dtype = parse_dtype(name);
  matmul_peak_flops_per_second(cluster.device, dtype);  // throws for fp8 on devices without it
  return dtype;
}

int profile_entries_applied(const ProfileTable& table, const ModelSpec& model, const ParallelLayout& layout,
                            const std::vector<Recompute>& recompute, Dtype dtype) {
  std::vector<bool> applied(table.entries.size(), false);
  size_t flat = 0;
  for (const ComponentSpec& c : model.components) {
    TensorSharding sharding;
    sharding.tp = layout.component_tp(c.role != ComponentRole::kLlm);
    sharding.sequence_parallel = layout.sequence_parallel && sharding.tp > 1;
    const size_t used = c.layers.size() - static_cast<size_t>(c.unused_final_layers);
    for (size_t i = 0; i < c.layers.size(); ++i, ++flat) {
      if (i >= used) continue;
      LayerWork work;
      work.layer = &c.layers[i];
      work.sharding = sharding;
      work.trainable = c.trainable;
      work.dtype = dtype;
      work.recompute = flat < recompute.size() ? recompute[flat] : Recompute::kNone;
      for (Pass pass :
           {Pass::kForward, Pass::kBackward, Pass::kBackwardInput, Pass::kBackwardWeight, Pass::kRecompute}) {
        if ((pass == Pass::kBackwardWeight && !c.trainable) ||
            (pass == Pass::kRecompute && work.recompute == Recompute::kNone)) {
          continue;
        }
        work.pass = pass;
        // Every entry of the pass: which of them prices a micro-batch depends on its sequences. (A whole backward
        // is asked for where a schedule does not split it.)
        for (size_t e = 0; e < table.entries.size(); ++e) {
          if (table.entries[e].matches(*work.layer, work)) applied[e] = true;
        }
      }
    }
  }
  return static_cast<int>(std::count(applied.begin(), applied.end(), true));
}

std::string profile_unused_warning(const std::string& path, const ProfileTable& table, int applied, Dtype dtype) {
  if (table.entries.empty()) {
    return fmt::format("fulcrum: warning: {}: the profile has no entries; every time is the analytic model's\n", path);
  }
  if (applied > 0) return {};
  return fmt::format("fulcrum: warning: {}: none of its {} entries matches a layer pass of this run (layer shape, "
                     "tensor parallelism, sequence parallelism, dtype {}); every time is the analytic model's\n",
                     path, table.entries.size(), dtype_name(dtype));
}

}  // namespace fulcrum
