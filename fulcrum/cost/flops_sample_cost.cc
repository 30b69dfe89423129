#include "fulcrum/cost/flops_sample_cost.h"

#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "fulcrum/core/error.h"
#include "fulcrum/core/json_document.h"
#include "fulcrum/core/text_file.h"

namespace fulcrum {

FlopsSampleCost::FlopsSampleCost(VisionUnit unit, FlopsCoefficients coefficients)
    : coefficients_(coefficients),
      vision_flops_(unit == VisionUnit::kTiles ? coefficients.vit_tile_flops : coefficients.vision_token_flops) {}

double FlopsSampleCost::micro_batch_flops(const MicroBatchLoad& load) const {
  return vision_flops_ * static_cast<double>(load.vision) +
         coefficients_.llm_token_flops * static_cast<double>(load.llm_tokens) +
         coefficients_.llm_attention_flops_per_token_squared * static_cast<double>(load.llm_tokens_squared);
}

double FlopsSampleCost::micro_batch_seconds(const MicroBatchLoad& load) const {
  return micro_batch_flops(load) / coefficients_.device_flops_per_second;
}

FlopsCoefficients parse_flops_coefficients(std::string_view text, const std::string& file) {
  const nlohmann::json json = parse_json_document(text, file);
  if (!json.is_object()) throw InputError(fmt::format("{}: expected a JSON object of coefficients", file));
  FlopsCoefficients c;
  const std::pair<const char*, double*> fields[] = {
      {"vit_tile_flops", &c.vit_tile_flops},
      {"vision_token_flops", &c.vision_token_flops},
      {"llm_token_flops", &c.llm_token_flops},
      {"llm_attention_flops_per_token_squared", &c.llm_attention_flops_per_token_squared},
      {"device_flops_per_second", &c.device_flops_per_second},
  };
  // Far past any model's work per unit (a 22B tower's tile is about 3e13 FLOPs) and any device's rate (1e15 for an
  // H100), yet small enough that no sum over a plan's samples overflows.
  constexpr double kMostFlops = 1e18, kLeastRate = 1e6, kMostRate = 1e18;
  for (const auto& [key, value] : json.items()) {
    if (key == "fulcrum") {  // the schema version key
      if (!value.is_number_integer() || value.get<int64_t>() != 1) {
        throw InputError(fmt::format("{}: fulcrum must be 1, the schema version this reads", file));
      }
      continue;
    }
    bool known = false;
    for (const auto& [name, slot] : fields) {
      if (key != name) continue;
      known = true;
      const bool rate = slot == &c.device_flops_per_second;
      const double least = rate ? kLeastRate : 0.0, most = rate ? kMostRate : kMostFlops;
      if (!value.is_number() || !(value.get<double>() >= least && value.get<double>() <= most)) {
        throw InputError(fmt::format("{}: {} must be a number from {:g} to {:g}, got {}", file, key, least, most,
                                     value.dump()));
      }
      *slot = value.get<double>();
    }
    if (!known) throw InputError(fmt::format("{}: unknown coefficient '{}'", file, key));
  }
  // Every sample would cost nothing: balancing would have nothing to balance, and caps in FLOPs nothing to cap.
  if (!(c.vit_tile_flops + c.vision_token_flops + c.llm_token_flops + c.llm_attention_flops_per_token_squared > 0)) {
    throw InputError(fmt::format("{}: every coefficient is zero, so every sample would cost nothing", file));
  }
  if (!(c.device_flops_per_second > 0.0)) {
    throw InputError(fmt::format("{}: device_flops_per_second must be positive", file));
  }
  return c;
}

FlopsCoefficients read_flops_coefficients(const std::string& path) {
  return parse_flops_coefficients(read_text_file(path), path);
}

}  // namespace fulcrum
