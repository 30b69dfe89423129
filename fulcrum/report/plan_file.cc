#include "fulcrum/report/plan_file.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "fulcrum/core/error.h"
#include "fulcrum/core/json_document.h"
#include "fulcrum/core/json_reader.h"
#include "fulcrum/data/batcher.h"
#include "fulcrum/model/model_spec.h"
#include "fulcrum/plan/planner.h"
#include "fulcrum/sched/schedule_json.h"
#include "fulcrum/sched/validate.h"

namespace fulcrum {
namespace {

using Json = nlohmann::json;

class PlanFileReader : public JsonReader {
 public:
  using JsonReader::JsonReader;

  std::string text(const Json& object, const char* key, const std::string& where) const {
    const Json& v = member(object, key, where);
    if (!v.is_string()) fail(where, "\"{}\" must be a string", key);
    return v.get<std::string>();
  }
  int64_t integer(const Json& object, const char* key, const std::string& where) const {
    const Json& v = member(object, key, where);
    if (!v.is_number_integer()) fail(where, "\"{}\" must be an integer", key);
    return v.get<int64_t>();
  }
  double real(const Json& object, const char* key, const std::string& where) const {
    const Json& v = member(object, key, where);
    if (!v.is_number()) fail(where, "\"{}\" must be a number", key);
    return v.get<double>();
  }

  // A plan file states its configuration twice: in its summary ("plan", what the report shows in words) and in
  // its schedule (what the report simulates). An edit that changed one alone would show one plan and time another.
  void check_agrees_with_schedule(const Json& doc, const Json& plan, const PlanFile& p) const {
    const ParallelLayout& l = p.schedule.layout;
    const std::pair<const char*, int64_t> sizes[] = {
        {"dp", l.dp}, {"tp", l.tp}, {"pp", l.pp}, {"vpp", l.vpp}, {"encoder_tp", l.encoder_tp}};
    for (const auto& [key, value] : sizes) {
      const int64_t stated = integer(plan, key, "plan");
      if (stated != value) fail("plan", "\"{}\" is {}, but its schedule's layout has {}", key, stated, value);
    }
    const Json& sp = member(plan, "sequence_parallel", "plan");
    if (!sp.is_boolean() || sp.get<bool>() != l.sequence_parallel) {
      fail("plan", "\"sequence_parallel\" is {}, but its schedule's layout has {}", sp.dump(), l.sequence_parallel);
    }
    const std::string pipeline = text(plan, "schedule", "plan");
    if (pipeline != pipeline_kind_name(p.schedule.kind)) {
      fail("plan", "\"schedule\" is '{}', but its schedule runs '{}'", pipeline, pipeline_kind_name(p.schedule.kind));
    }
    Json stages = Json::array();
    for (const StageLayers& st : p.schedule.stages) stages.push_back({st.first_layer, st.end_layer});
    if (member(plan, "stages", "plan") != stages) fail("plan", "\"stages\" differ from its schedule's stages");
    if (p.recompute != recompute_summary(p.schedule)) {
      fail("plan", "\"recompute\" is '{}', but its schedule recomputes {}", p.recompute, recompute_summary(p.schedule));
    }
    const double epoch = p.iteration_seconds * static_cast<double>(p.steps_per_epoch);
    if (std::abs(p.epoch_seconds - epoch) > 1e-9 * epoch) {
      fail("plan", "\"epoch_seconds\" is {}, but {} steps of {} s take {}", p.epoch_seconds, p.steps_per_epoch,
           p.iteration_seconds, epoch);
    }
    const std::vector<std::string> batchers = batcher_names();
    if (std::find(batchers.begin(), batchers.end(), p.batcher) == batchers.end()) {
      fail("plan", "unknown batcher '{}' (one of: {})", p.batcher, fmt::join(batchers, ", "));
    }
    try {
      parse_strategy(p.strategy);
    } catch (const InputError& e) {
      fail("plan", "{}", e.what());
    }
    if (p.efficiency_fine && !p.schedule.encoder.present()) {
      fail("optimus", "the plan puts encoders in bubbles, but its schedule has no encoder section");
    }
    // The global batch is the micro-batch size times the micro-batches and the replicas: a report shows the three.
    const int64_t mbs = p.mbs;
    if (mbs < 1 || mbs > p.gbs || static_cast<double>(mbs) * p.micro_batches * l.dp != static_cast<double>(p.gbs)) {
      fail("plan", "\"mbs\" {} × {} micro-batches × DP {} is not the request's global batch {}", mbs,
           p.micro_batches, l.dp, p.gbs);
    }
    // The same request is written at the top for a reader's eye; it must be the one the plan was made for.
    const Json& request = member(doc, "request", "plan");
    for (const char* key : {"cluster", "gbs", "dtype"}) {
      if (doc.contains(key) && doc[key] != request[key]) {
        fail("plan", "\"{}\" is {}, but the request's is {}", key, doc[key].dump(), request[key].dump());
      }
    }
  }

  PlanFile read(std::string_view plan_text) const {
    const Json doc = parse_json_document(plan_text, file());
    // Compared as JSON values: a "kind" that is not a string is not a plan file either.
    if (!doc.is_object() || !doc.contains("kind") || doc["kind"] != "plan") {
      throw InputError(fmt::format("{}: not a plan file (`fulcrum plan --out` writes one)", file()));
    }
    if (doc.contains("fulcrum") && doc["fulcrum"] != 1) {
      throw InputError(fmt::format("{}: unsupported plan file version {}", file(), doc["fulcrum"].dump()));
    }
    PlanFile p;
    p.strategy = text(doc, "strategy", "plan");
    if (doc.contains("model")) p.model_name = text(doc, "model", "plan");
    const Json& request = member(doc, "request", "plan");
    const std::string where = "request";
    p.model = text(request, "model", where);
    p.cluster = text(request, "cluster", where);
    p.dtype = text(request, "dtype", where);
    p.profile = text(request, "profile", where);
    p.data = text(request, "data", where);
    p.root = text(request, "root", where);
    p.gbs = integer(request, "gbs", where);
    p.image_tokens = integer(request, "image_tokens", where);
    p.seed = static_cast<uint64_t>(integer(request, "seed", where));
    if (p.gbs < 1) fail(where, "\"gbs\" must be at least 1");
    if (p.image_tokens < 0 || p.image_tokens > kMostImageTokens) {
      fail(where, "\"image_tokens\" must be from 0 to {}", kMostImageTokens);
    }
    p.command = text(doc, "command", "plan");
    const Json& plan = member(doc, "plan", "plan");
    p.batcher = text(plan, "batcher", "plan");
    const int64_t micro_batches = integer(plan, "micro_batches", "plan");
    if (micro_batches > (int64_t{1} << 24)) fail("plan", "\"micro_batches\" must be at most 2^24");
    p.micro_batches = static_cast<int>(micro_batches);
    p.iteration_seconds = real(plan, "iteration_seconds", "plan");
    p.epoch_seconds = real(plan, "epoch_seconds", "plan");
    p.steps_per_epoch = integer(plan, "steps_per_epoch", "plan");
    if (p.micro_batches < 1 || p.steps_per_epoch < 1) {
      fail("plan", "\"micro_batches\" and \"steps_per_epoch\" must be at least 1");
    }
    if (!(p.iteration_seconds > 0 && p.iteration_seconds < 1e9 && p.epoch_seconds >= p.iteration_seconds &&
          p.epoch_seconds < 1e12)) {
      fail("plan", "\"iteration_seconds\" and \"epoch_seconds\" must be positive, an epoch at least an iteration");
    }
    p.samples_per_step = real(plan, "samples_per_step", "plan");
    if (!(p.samples_per_step > 0 && p.samples_per_step <= static_cast<double>(p.gbs) * (1 << 20))) {
      fail("plan", "\"samples_per_step\" must be positive");
    }
    if (plan.contains("batch_caps")) {
      const Json& caps = plan["batch_caps"];
      const std::string at = "plan.batch_caps";
      if (!caps.is_object()) fail(at, "must be an object");
      IsfParams c;
      c.vision_cap = integer(caps, "vision_cap", at);
      c.token_cap = integer(caps, "token_cap", at);
      c.vision_full = integer(caps, "vision_full", at);
      c.text_full = integer(caps, "text_full", at);
      constexpr int64_t kMost = int64_t{1} << 40;
      for (int64_t v : {c.vision_cap, c.token_cap, c.vision_full, c.text_full}) {
        if (v < 1 || v > kMost) fail(at, "caps and full thresholds must be from 1 to 2^40");
      }
      if (c.vision_full > c.vision_cap || c.text_full > c.token_cap) {
        fail(at, "a full threshold must not exceed its cap");
      }
      p.batch_caps = c;
    }
    if (doc.contains("predicted")) {
      const Json& predicted = doc["predicted"];
      if (!predicted.is_object()) fail("predicted", "must be an object");
      p.mfu = real(predicted, "mfu", "predicted");
      if (!(*p.mfu >= 0 && *p.mfu <= 1)) fail("predicted", "\"mfu\" must be between 0 and 1, got {}", *p.mfu);
      const Json& peaks = member(predicted, "peak_memory_bytes", "predicted");
      if (!peaks.is_array() || peaks.empty()) fail("predicted", "\"peak_memory_bytes\" must be a list of numbers");
      double most = 0;
      for (const Json& b : peaks) {
        if (!b.is_number() || !(b.get<double>() >= 0 && b.get<double>() < 1e18)) {
          fail("predicted", "\"peak_memory_bytes\" must be a list of byte counts");
        }
        most = std::max(most, b.get<double>());
      }
      p.peak_memory_bytes = most;
    }
    p.mbs = integer(plan, "mbs", "plan");
    p.recompute = text(plan, "recompute", "plan");
    p.configuration = configuration_text(integer(plan, "dp", "plan"), integer(plan, "tp", "plan"),
                                         integer(plan, "pp", "plan"), integer(plan, "vpp", "plan"),
                                         integer(plan, "mbs", "plan"), p.micro_batches, text(plan, "schedule", "plan"),
                                         p.batcher);
    if (doc.contains("optimus")) {
      const Json& optimus = doc["optimus"];
      if (!optimus.is_object() || !optimus.value("efficiency_fine", Json()).is_number()) {
        fail("optimus", "\"efficiency_fine\" must be a number");
      }
      p.efficiency_fine = optimus["efficiency_fine"].get<double>();
      if (!(*p.efficiency_fine >= 0 && *p.efficiency_fine <= 1)) {
        fail("optimus", "\"efficiency_fine\" must be between 0 and 1, got {}", *p.efficiency_fine);
      }
    }
    const std::string schedule_name = fmt::format("{}: schedule", file());  // errors name the record
    p.schedule = schedule_from_json(member(doc, "schedule", "plan").dump(), schedule_name);
    validate(p.schedule, schedule_name);
    if (p.micro_batches != p.schedule.micro_batches) {
      fail("plan", "{} micro-batches, but its schedule runs {}", p.micro_batches, p.schedule.micro_batches);
    }
    check_agrees_with_schedule(doc, plan, p);
    const Json& loads = member(doc, "detail_loads", "plan");
    if (!loads.is_array() || static_cast<int>(loads.size()) != p.schedule.layout.dp) {
      fail("detail_loads", "expected a list of {} replicas' micro-batches", p.schedule.layout.dp);
    }
    for (size_t d = 0; d < loads.size(); ++d) {
      const std::string at = fmt::format("detail_loads[{}]", d);
      if (!loads[d].is_array() || static_cast<int>(loads[d].size()) != p.schedule.micro_batches) {
        fail(at, "expected {} micro-batches", p.schedule.micro_batches);
      }
      std::vector<MicroBatchLoad>& replica = p.detail_loads.per_replica.emplace_back();
      for (size_t j = 0; j < loads[d].size(); ++j) {
        const Json& l = loads[d][j];
        if (!l.is_array() || l.size() != 4) fail(fmt::format("{}[{}]", at, j), "expected [vision, tokens, tokens², sequences]");
        int64_t v[4];
        // Counts no micro-batch reaches (2^40 tokens; tokens² to 2^62), so the simulator's products of them fit.
        constexpr int64_t kMost[4] = {int64_t{1} << 40, int64_t{1} << 40, int64_t{1} << 62, int64_t{1} << 40};
        for (int k = 0; k < 4; ++k) {
          if (!l[k].is_number_integer() || l[k].get<int64_t>() < 0 || l[k].get<int64_t>() > kMost[k]) {
            fail(fmt::format("{}[{}]", at, j), "expected integers from 0 to 2^40 (tokens²: 2^62)");
          }
          v[k] = l[k].get<int64_t>();
        }
        replica.push_back({v[0], v[1], v[2], v[3]});
      }
    }
    return p;
  }
};

}  // namespace

PlanFile read_plan_file(std::string_view text, const std::string& file) { return PlanFileReader(file).read(text); }

std::string recompute_summary(const Schedule& schedule) {
  int64_t counts[3] = {0, 0, 0};
  for (Recompute r : schedule.recompute) ++counts[static_cast<int>(r)];
  return fmt::format("{} none, {} selective, {} full", counts[0], counts[1], counts[2]);
}

std::string configuration_text(int64_t dp, int64_t tp, int64_t pp, int64_t vpp, int64_t mbs, int64_t micro_batches,
                               const std::string& schedule, const std::string& batcher) {
  return fmt::format("DP {} TP {} PP {} VPP {}, micro-batch {} × {}, {}, {} batches", dp, tp, pp, vpp, mbs,
                     micro_batches, schedule, batcher);
}

}  // namespace fulcrum
