#include "cli/plan_report_builder.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/cost_inputs.h"
#include "cli/warnings.h"
#include "fulcrum/core/error.h"
#include "fulcrum/core/json_document.h"
#include "fulcrum/core/json_reader.h"
#include "fulcrum/core/text_file.h"
#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/cost/model_sample_cost.h"
#include "fulcrum/cost/profiled_cost.h"
#include "fulcrum/data/balance_metrics.h"
#include "fulcrum/data/batcher.h"
#include "fulcrum/data/meta_index.h"
#include "fulcrum/model/load_model.h"
#include "fulcrum/report/html.h"
#include "fulcrum/report/trace_chart.h"
#include "fulcrum/sched/schedule_json.h"
#include "fulcrum/sched/validate.h"

namespace fulcrum {
namespace {

using Json = nlohmann::json;

// What a report needs from a plan file.
struct SavedPlan {
  std::string strategy;
  std::string model, cluster, dtype = "bf16", profile, data, root = ".", command;
  int64_t gbs = 0, image_tokens = 0;
  uint64_t seed = 0;
  std::string batcher;
  int micro_batches = 0;
  double iteration_seconds = 0, epoch_seconds = 0;
  int64_t steps_per_epoch = 0;
  std::string configuration;
  std::string recompute;
  std::optional<double> efficiency_fine;  // with the encoders in bubbles: the share of their compute there
  Schedule schedule;
  MicroBatchLoads detail_loads;
};

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

  SavedPlan read(const std::string& plan_text) const {
    const Json doc = parse_json_document(plan_text, file());
    if (!doc.is_object() || doc.value("kind", "") != "plan") {
      throw InputError(fmt::format("{}: not a plan file (`fulcrum plan --out` writes one)", file()));
    }
    if (doc.contains("fulcrum") && doc["fulcrum"] != 1) {
      throw InputError(fmt::format("{}: unsupported plan file version {}", file(), doc["fulcrum"].dump()));
    }
    SavedPlan p;
    p.strategy = text(doc, "strategy", "plan");
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
    if (p.image_tokens < 0) fail(where, "\"image_tokens\" must be at least 0");
    p.command = text(doc, "command", "plan");
    const Json& plan = member(doc, "plan", "plan");
    p.batcher = text(plan, "batcher", "plan");
    p.micro_batches = static_cast<int>(integer(plan, "micro_batches", "plan"));
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
    }
    p.schedule = schedule_from_json(member(doc, "schedule", "plan").dump(), file());
    validate(p.schedule, file());
    if (p.micro_batches != p.schedule.micro_batches) {
      fail("plan", "{} micro-batches, but its schedule runs {}", p.micro_batches, p.schedule.micro_batches);
    }
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
        for (int k = 0; k < 4; ++k) {
          if (!l[k].is_number_integer() || l[k].get<int64_t>() < 0) {
            fail(fmt::format("{}[{}]", at, j), "expected non-negative integers");
          }
          v[k] = l[k].get<int64_t>();
        }
        replica.push_back({v[0], v[1], v[2], v[3]});
      }
    }
    return p;
  }
};

// Per step, per rank: the predicted seconds of the rank's micro-batches under `batcher`.
RankLoads rank_loads(const Dataset& data, const SampleCost& cost, const std::string& batcher, const SavedPlan& p,
                     int steps) {
  BatchParams params;
  params.dp = p.schedule.layout.dp;
  params.micro_batches = p.micro_batches;
  params.samples_per_step = p.gbs;
  params.seed = p.seed;
  params.oversize = OversizePolicy::kOwnGroup;
  const BatchPlan plan = make_batcher(batcher)->plan(data, params, cost);
  RankLoads out;
  out.batcher = batcher;
  const int64_t shown = std::min<int64_t>(steps, plan.steps());
  for (int64_t s = 0; s < shown; ++s) {
    std::vector<double>& ranks = out.seconds.emplace_back();
    for (int d = 0; d < params.dp; ++d) {
      double sum = 0;
      for (int j = 0; j < params.micro_batches; ++j) {
        sum += cost.micro_batch_seconds(micro_batch_load(data, plan.micro_batch(s, d, j), plan.padded()));
      }
      ranks.push_back(sum);
    }
  }
  return out;
}

}  // namespace

std::string configuration_text(int64_t dp, int64_t tp, int64_t pp, int64_t vpp, int64_t mbs, int64_t micro_batches,
                               const std::string& schedule, const std::string& batcher) {
  return fmt::format("DP {} TP {} PP {} VPP {}, micro-batch {} × {}, {}, {} batches", dp, tp, pp, vpp, mbs,
                     micro_batches, schedule, batcher);
}

std::string plan_report_html(const std::string& plan_text, const std::string& plan_file, const ReportSources& sources) {
  const SavedPlan p = PlanFileReader(plan_file).read(plan_text);
  ModelSpec model = load_model(p.model);
  set_image_tokens(model, p.image_tokens);
  const ClusterSpec cluster = load_cluster(p.cluster);
  const ParallelLayout& layout = p.schedule.layout;
  if (static_cast<int64_t>(layout.dp) * layout.tp * layout.pp != cluster.devices) {
    throw InputError(fmt::format("{}: request: cluster '{}' has {} devices, but the plan's schedule runs on DP {} × "
                                 "TP {} × PP {}", plan_file, p.cluster, cluster.devices, layout.dp, layout.tp,
                                 layout.pp));
  }
  const Dtype dtype = training_dtype(p.dtype, cluster);
  const AnalyticCost analytic(cluster);
  std::optional<ProfiledCost> profiled;
  if (!p.profile.empty()) profiled.emplace(analytic, load_profile(p.profile));
  const CostModel& cost = profiled ? static_cast<const CostModel&>(*profiled) : analytic;

  // Compared plans first: a bad one fails before any work.
  std::vector<ComparedPlan> compared = sources.compared;
  for (const std::string& file : sources.compare_files) {
    const SavedPlan other = PlanFileReader(file).read(read_text_file(file));
    compared.push_back({other.strategy, other.configuration, other.iteration_seconds, other.epoch_seconds});
  }
  std::optional<TimelineChart> measured;
  if (!sources.trace.empty()) measured = trace_chart(read_text_file(sources.trace), sources.trace);

  if (sources.replica >= static_cast<int>(p.detail_loads.per_replica.size())) {
    throw InputError(fmt::format("--replica {}: the plan has data-parallel replicas 0 to {}", sources.replica,
                                 p.detail_loads.per_replica.size() - 1));
  }
  SimOptions options;
  options.timeline = true;
  options.timeline_replica = sources.replica;
  options.dtype = dtype;
  const SimResult simulated = simulate(p.schedule, model, cluster, cost, analytic.efficiency(), p.detail_loads, options);

  PlanReport r;
  r.title = fmt::format("{} on {}: {} plan", model.name, p.cluster, p.strategy);
  r.plan_command = p.command;
  r.report_command = sources.report_command;
  r.name = p.strategy;
  r.configuration = p.configuration;
  r.epoch_seconds = p.epoch_seconds;
  r.model = &model;
  r.schedule = &p.schedule;
  r.simulated = &simulated;
  r.compared = std::move(compared);
  r.measured = std::move(measured);
  r.measured_source = sources.trace;
  const ParallelLayout& l = p.schedule.layout;
  r.summary = {
      {"model", fmt::format("{} ({:.2f} B parameters)", model.name, static_cast<double>(model.parameters()) * 1e-9)},
      {"cluster", fmt::format("{}: {} × {}, {} per node", p.cluster, cluster.devices, cluster.device.kind,
                              cluster.device.devices_per_node)},
      {"global batch", fmt::format("{} samples, {} steps per epoch", p.gbs, p.steps_per_epoch)},
      {"strategy", p.strategy},
      {"configuration", p.configuration},
      {"layout", fmt::format("{} stages over {} pipeline ranks{}", l.stages(), l.pp,
                             l.encoder_tp > 0 ? fmt::format(", encoder TP {}", l.encoder_tp) : std::string())},
      {"recomputation", p.recompute},
      {"iteration", fmt::format("{} (the mean over the simulated steps); the first step, shown here: {}",
                                human_seconds(p.iteration_seconds), human_seconds(simulated.iteration_seconds))},
      {"epoch", human_seconds(p.epoch_seconds)},
      {"MFU", fmt::format("{:.1f}%", 100 * simulated.mfu)},
      {"peak memory", fmt::format("{} of {} usable per device",
                                  human_bytes(*std::max_element(simulated.peak_memory_bytes.begin(),
                                                                simulated.peak_memory_bytes.end())),
                                  human_bytes(simulated.usable_memory_bytes))},
      {"number format", p.dtype},
  };
  if (!p.profile.empty()) r.summary.push_back({"profile", p.profile});
  if (p.schedule.encoder.present()) {
    const EncoderSection& e = p.schedule.encoder;
    std::string text = fmt::format("DP {} PP {} TP {}, {} encoder pipelines per LLM pipeline", e.dp, e.pp, e.tp,
                                   e.pipelines);
    if (p.efficiency_fine) text += fmt::format("; {:.0f}% of their compute in the LLM's bubbles", 100 * *p.efficiency_fine);
    r.summary.push_back({"encoders in bubbles", text});
  }

  const std::string data = sources.data.empty() ? p.data : sources.data;
  const std::string root = sources.data.empty() ? p.root : sources.root;
  if (data.empty()) {
    r.loads_note = "The plan was made without data: every step's samples are alike. Give --data (a length file or "
                   "meta index) to see each rank's load before and after balancing.";
  } else {
    const LoadedData loaded = load_dataset(data, {root, false, &warnings()});
    const ModelSampleCost sample_cost(model, cost, dtype);
    if (model.has_encoder() && sample_cost.vision_unit() != loaded.dataset.vision_unit()) {
      throw InputError(fmt::format("{} counts vision in {}, but model '{}' takes {}", data,
                                   vision_unit_name(loaded.dataset.vision_unit()), model.name,
                                   vision_unit_name(sample_cost.vision_unit())));
    }
    r.before = rank_loads(loaded.dataset, sample_cost, "random", p, sources.load_steps);
    r.after = rank_loads(loaded.dataset, sample_cost, p.batcher, p, sources.load_steps);
  }
  return render_plan_report(r);
}

}  // namespace fulcrum
