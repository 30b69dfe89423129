#include "fulcrum/data/plan_json.h"

#include <fmt/format.h>

#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "fulcrum/core/error.h"
#include "fulcrum/core/json_document.h"

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

namespace {

// An integer field in [low, high]: JSON floats, strings and out-of-range values are refused by name (the JSON
// library would convert a float silently, and a value beyond the target type is undefined).
int64_t integer_field(const nlohmann::json& j, const char* key, int64_t low, int64_t high, const std::string& file) {
  if (!j.contains(key)) throw InputError(fmt::format("{}: the batch plan has no '{}'", file, key));
  const nlohmann::json& v = j[key];
  if (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(high)) {
    const int64_t x = static_cast<int64_t>(v.get<uint64_t>());
    if (x >= low) return x;
  } else if (v.is_number_integer() && !v.is_number_unsigned()) {
    const int64_t x = v.get<int64_t>();
    if (x >= low && x <= high) return x;
  }
  throw InputError(fmt::format("{}: '{}' must be an integer from {} to {}, got {}", file, key, low, high, v.dump()));
}

}  // namespace

BatchPlan plan_from_json(std::string_view text, const std::string& file) {
  constexpr int64_t kMaxCount = int64_t{1} << 40;
  try {
    const nlohmann::json j = parse_json_document(text, file);
    const bool version_one = j.is_object() && j.contains("fulcrum") && j["fulcrum"].is_number_integer() &&
                             j["fulcrum"].get<int64_t>() == 1;
    if (!version_one || !j.contains("kind") || j["kind"] != "batch_plan") {
      throw InputError(fmt::format("{}: not a fulcrum batch plan (version 1)", file));
    }
    if (!j.contains("algo") || !j["algo"].is_string()) {
      throw InputError(fmt::format("{}: 'algo' must be a string", file));
    }
    const std::string packing = j.contains("packing") && j["packing"].is_string() ? j["packing"].get<std::string>() : "";
    if (packing != "packed" && packing != "padded") {
      throw InputError(fmt::format("{}: 'packing' must be \"packed\" or \"padded\"", file));
    }
    BatchPlan plan(j["algo"].get<std::string>(), static_cast<int>(integer_field(j, "dp", 1, 1 << 24, file)),
                   static_cast<int>(integer_field(j, "micro_batches_per_rank", 1, 1 << 24, file)), packing == "padded");
    if (!j.contains("seed") || !j["seed"].is_number_unsigned()) {
      throw InputError(fmt::format("{}: 'seed' must be an integer from 0 to {}", file,
                                   std::numeric_limits<uint64_t>::max()));
    }
    plan.seed = j["seed"].get<uint64_t>();
    plan.epoch = integer_field(j, "epoch", 0, kMaxCount, file);
    plan.samples_in = integer_field(j, "samples_in", 0, kMaxCount, file);
    plan.repeated = integer_field(j, "repeated", 0, kMaxCount, file);
    plan.dropped = integer_field(j, "dropped", 0, kMaxCount, file);
    plan.set_first_step(integer_field(j, "first_step", 0, kMaxCount, file));
    if (!j.contains("steps") || !j["steps"].is_array()) throw InputError(fmt::format("{}: 'steps' must be a list", file));
    size_t s = 0;
    std::vector<uint32_t> ids;
    for (const auto& step : j["steps"]) {
      if (!step.is_array() || step.size() != static_cast<size_t>(plan.dp())) {
        throw InputError(fmt::format("{}: step {}: {} ranks, the plan has dp {}", file, s,
                                     step.is_array() ? step.size() : 0, plan.dp()));
      }
      for (size_t r = 0; r < step.size(); ++r) {
        const auto& rank = step[r];
        if (!rank.is_array() || rank.size() != static_cast<size_t>(plan.micro_batches_per_rank())) {
          throw InputError(fmt::format("{}: step {}: rank {} has {} micro-batches, not {}", file, s, r,
                                       rank.is_array() ? rank.size() : 0, plan.micro_batches_per_rank()));
        }
        for (size_t m = 0; m < rank.size(); ++m) {
          const auto& mb = rank[m];
          if (!mb.is_array()) {
            throw InputError(fmt::format("{}: step {}: rank {}: micro-batch {} is not a list of ids", file, s, r, m));
          }
          ids.clear();
          for (const auto& id : mb) {
            if (!id.is_number_unsigned() || id.get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
              throw InputError(fmt::format("{}: step {}: rank {}: micro-batch {}: sample id {} is not an id", file,
                                           s, r, m, id.dump()));
            }
            ids.push_back(static_cast<uint32_t>(id.get<uint64_t>()));
          }
          plan.add_micro_batch(ids);
        }
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
