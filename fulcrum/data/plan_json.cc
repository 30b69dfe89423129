#include "fulcrum/data/plan_json.h"

#include <fmt/format.h>

#include <iterator>
#include <nlohmann/json.hpp>
#include <vector>

#include "fulcrum/core/error.h"

namespace fulcrum {

std::string plan_to_json(const BatchPlan& plan) {
  // Written directly: a million ids through a JSON tree would cost several times the plan's memory.
  std::string out;
  out.reserve(plan.sample_ids().size() * 8 + 256);
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 "{{\"fulcrum\":1,\"kind\":\"batch_plan\",\"algo\":{},\"dp\":{},\"micro_batches_per_rank\":{},"
                 "\"packing\":\"{}\",\"seed\":{},\"epoch\":{},\"first_step\":{},\"samples_in\":{},\"repeated\":{},"
                 "\"dropped\":{},\"steps\":[",
                 nlohmann::json(plan.algo()).dump(), plan.dp(), plan.micro_batches_per_rank(),
                 plan.padded() ? "padded" : "packed", plan.seed, plan.epoch, plan.first_step(), plan.samples_in,
                 plan.repeated, plan.dropped);
  for (int64_t s = 0; s < plan.steps(); ++s) {
    out += s ? ",\n[" : "\n[";
    for (int r = 0; r < plan.dp(); ++r) {
      out += r ? ",[" : "[";
      for (int j = 0; j < plan.micro_batches_per_rank(); ++j) {
        out += j ? ",[" : "[";
        fmt::format_to(it, "{}", fmt::join(plan.micro_batch(s, r, j), ","));
        out += ']';
      }
      out += ']';
    }
    out += ']';
  }
  out += "]}\n";
  return out;
}

BatchPlan plan_from_json(std::string_view text, const std::string& file) {
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (j.value("fulcrum", 0) != 1 || j.value("kind", "") != "batch_plan") {
      throw InputError(fmt::format("{}: not a fulcrum batch plan (version 1)", file));
    }
    BatchPlan plan(j.at("algo").get<std::string>(), j.at("dp").get<int>(), j.at("micro_batches_per_rank").get<int>(),
                   j.at("packing").get<std::string>() == "padded");
    plan.seed = j.at("seed").get<uint64_t>();
    plan.epoch = j.at("epoch").get<int64_t>();
    plan.samples_in = j.at("samples_in").get<int64_t>();
    plan.repeated = j.at("repeated").get<int64_t>();
    plan.dropped = j.at("dropped").get<int64_t>();
    plan.set_first_step(j.at("first_step").get<int64_t>());
    size_t s = 0;
    for (const auto& step : j.at("steps")) {
      if (step.size() != static_cast<size_t>(plan.dp())) {
        throw InputError(fmt::format("{}: step {}: {} ranks, the plan has dp {}", file, s, step.size(), plan.dp()));
      }
      for (const auto& rank : step) {
        if (rank.size() != static_cast<size_t>(plan.micro_batches_per_rank())) {
          throw InputError(fmt::format("{}: step {}: a rank has {} micro-batches, not {}", file, s, rank.size(),
                                       plan.micro_batches_per_rank()));
        }
        for (const auto& mb : rank) plan.add_micro_batch(mb.get<std::vector<uint32_t>>());
      }
      ++s;
    }
    return plan;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: malformed batch plan ({})", file, e.what()));
  } catch (const std::invalid_argument& e) {
    throw InputError(fmt::format("{}: malformed batch plan ({})", file, e.what()));
  }
}

}  // namespace fulcrum
