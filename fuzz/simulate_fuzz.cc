// libFuzzer target: any schedule the JSON reader makes and validate() accepts (what `fulcrum simulate
// --load-schedule` and `fulcrum multitask --load-schedule` run) simulates to a result or an InputError, never a
// crash or a hang, on every model preset and task graph preset's components with its layer count, on GPUs and on
// cores that communication shares with compute (the cpu kind). The busy bound a planner gives up by is never
// above the iteration, a simulation given up just under it reports the whole simulation's memory, and every
// interval of the timeline lies inside the iteration.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/analytic_cost.h"
#include "fulcrum/model/cluster_spec.h"
#include "fulcrum/model/model_presets.h"
#include "fulcrum/model/task_graph.h"
#include "fulcrum/sched/pipeline_schedules.h"
#include "fulcrum/sched/schedule_json.h"
#include "fulcrum/sched/validate.h"
#include "fulcrum/sim/simulator.h"

namespace {

// Flattened layer count → the models that have it: every single preset, the encoder + LLM pairs the tests and
// benchmarks use (an Optimus schedule's encoder section needs a model with an encoder) and every task graph
// preset's shared components (what a multitask schedule's slices run).
const std::map<int64_t, std::vector<fulcrum::ModelSpec>>& presets_by_layers() {
  static const auto* presets = [] {
    auto* out = new std::map<int64_t, std::vector<fulcrum::ModelSpec>>;
    std::vector<std::string> names = fulcrum::model_preset_names();
    names.insert(names.end(), {"vit-3b+gpt-11b", "vit-22b+gpt-175b", "vit-5b+llama-70b"});
    for (const std::string& name : names) {
      fulcrum::ModelSpec model = fulcrum::model_preset(name);
      (*out)[fulcrum::flattened_layers(model)].push_back(std::move(model));
    }
    for (const std::string& name : fulcrum::task_graph_preset_names()) {
      fulcrum::ModelSpec model = fulcrum::task_graph_preset(name).model;
      (*out)[fulcrum::flattened_layers(model)].push_back(std::move(model));
    }
    return out;
  }();
  return *presets;
}

// Uneven replicas, from the replica and micro-batch numbers alone: 1–3 samples of 200–2,899 tokens and 0–2 images.
fulcrum::MicroBatchLoads loads_for(const fulcrum::Schedule& s) {
  fulcrum::MicroBatchLoads loads;
  loads.per_replica.resize(static_cast<size_t>(s.layout.dp));
  for (int r = 0; r < s.layout.dp; ++r) {
    for (int j = 0; j < s.micro_batches; ++j) {
      fulcrum::MicroBatchLoad load;
      for (int k = 0; k <= (r + j) % 3; ++k) {
        const auto images = static_cast<uint32_t>((r * 7 + j * 3 + k) % 3);
        const auto tokens = 200 + static_cast<uint32_t>((r * 911 + j * 577 + k * 131) % 2700);
        load.add_packed(images, tokens);
      }
      loads.per_replica[static_cast<size_t>(r)].push_back(load);
    }
  }
  return loads;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fulcrum;
  try {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const Schedule schedule = schedule_from_json(text, "fuzz.json");
    validate(schedule, "fuzz.json");
    // Small enough to run thousands of inputs a second: a big layout says nothing a small one does not.
    if (schedule.layout.devices() > 256 || schedule.layout.dp > 16 || schedule.micro_batches > 64) return 0;
    const auto& presets = presets_by_layers();
    const auto same_layers = presets.find(schedule.model_layers);
    if (same_layers == presets.end()) return 0;
    const MicroBatchLoads loads = loads_for(schedule);
    for (const char* kind : {"a100:", "cpu:"}) {
      const ClusterSpec cluster = cluster_preset(kind + std::to_string(schedule.layout.devices()));
      const AnalyticCost cost(cluster);
      // On every model with the schedule's layer count (gpt-11b and llama-70b share one, say).
      for (const ModelSpec& model : same_layers->second) {
        SimResult whole;
        SimOptions with_timeline;
        with_timeline.timeline = true;
        try {
          whole = simulate(schedule, model, cluster, cost, cost.efficiency(), loads, with_timeline);
        } catch (const InputError&) {  // refused by this model: the next may take it
          continue;
        }
        const double slack = 1e-9 * (1 + whole.iteration_seconds);
        for (const TimelineEvent& e : whole.timeline) {
          if (!(e.start_seconds >= -slack && e.start_seconds <= e.end_seconds &&
                e.end_seconds <= whole.iteration_seconds + slack)) {
            std::abort();
          }
        }
        // What the planner does with a schedule that simulates: neither may refuse it.
        try {
          const double bound = iteration_lower_bound(schedule, model, cluster, cost, cost.efficiency(), loads);
          if (!(bound >= 0) || !(bound <= whole.iteration_seconds)) std::abort();  // a NaN iteration fails too
          if (bound > 0) {
            SimOptions options;
            options.give_up_above_seconds = bound * (1 - 1e-6);
            const SimResult stopped = simulate(schedule, model, cluster, cost, cost.efficiency(), loads, options);
            if (!stopped.gave_up || stopped.peak_memory_bytes != whole.peak_memory_bytes || stopped.oom != whole.oom) {
              std::abort();
            }
          }
        } catch (const InputError&) {
          std::abort();
        }
      }
    }
  } catch (const InputError&) {
  }
  return 0;
}
