// fulcrum._core: the C++ core as seen from Python. Lengths and plans cross as numpy arrays over the C++
// columns (no per-sample Python objects); long calls release the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fulcrum/core/batch_plan.h"
#include "fulcrum/core/dataset.h"
#include "fulcrum/core/error.h"
#include "fulcrum/cost/flops_sample_cost.h"
#include "fulcrum/data/balance_metrics.h"
#include "fulcrum/data/batcher.h"
#include "fulcrum/data/isf.h"
#include "fulcrum/data/meta_index.h"
#include "fulcrum/cost/profiled_cost.h"
#include "fulcrum/data/plan_audit.h"
#include "fulcrum/sched/pipeline_schedules.h"
#include "fulcrum/sched/schedule_json.h"
#include "fulcrum/sched/validate.h"

namespace py = pybind11;

namespace fulcrum {
namespace {

// A read-only numpy view of a C++ vector owned by `owner` (kept alive by the array).
template <typename T>
py::array_t<T> column_view(const std::vector<T>& column, py::handle owner) {
  py::array_t<T> view({static_cast<py::ssize_t>(column.size())}, {static_cast<py::ssize_t>(sizeof(T))},
                      column.data(), owner);
  py::detail::array_proxy(view.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return view;
}

// Integer counts from any array-like (numpy array, list, torch tensor via __array__), each from 0 to `most`;
// floats and booleans are refused rather than truncated or counted as 1.
template <typename T>
std::vector<T> to_vector(const py::object& given, const char* name,
                         int64_t most = static_cast<int64_t>(std::numeric_limits<T>::max())) {
  const py::array array = py::array::ensure(given);
  if (!array) throw InputError(std::string(name) + " must be an array of integers");
  const char kind = array.dtype().kind();
  if (kind != 'i' && kind != 'u' && !(kind == 'O' && array.size() == 0)) {
    throw InputError(std::string(name) + " must hold integers, got dtype " + std::string(py::str(array.dtype())));
  }
  if (array.ndim() != 1) throw InputError(std::string(name) + " must be a one-dimensional array");
  std::vector<T> out(static_cast<size_t>(array.size()));
  const auto check = [&](size_t i, auto value, bool in_range) {
    if (!in_range) {
      throw InputError(std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(value) +
                       " is out of range (0 to " + std::to_string(most) + ")");
    }
    out[i] = static_cast<T>(value);
  };
  if (kind == 'u') {  // unsigned: read as such, so that values past 2^63 are not read as negative
    const py::array_t<uint64_t, py::array::c_style | py::array::forcecast> as_unsigned(array);
    const uint64_t* values = as_unsigned.data();
    for (size_t i = 0; i < out.size(); ++i) check(i, values[i], values[i] <= static_cast<uint64_t>(most));
  } else {
    const py::array_t<int64_t, py::array::c_style | py::array::forcecast> as_int(array);
    const int64_t* values = as_int.data();
    for (size_t i = 0; i < out.size(); ++i) check(i, values[i], values[i] >= 0 && values[i] <= most);
  }
  return out;
}

// Builds a dataset from columns: tokens (required, > 0), vision (tiles or patch tokens, ≥ 0, default 0),
// images (default: vision for tiles, 1 per image sample for patch tokens).
std::shared_ptr<Dataset> dataset_from_arrays(const py::object& tokens, const std::optional<py::object>& vision,
                                             const std::optional<py::object>& images,
                                             const std::string& vision_unit) {
  VisionUnit unit;
  if (vision_unit == "tiles") {
    unit = VisionUnit::kTiles;
  } else if (vision_unit == "patch_tokens") {
    unit = VisionUnit::kPatchTokens;
  } else {
    throw InputError("vision_unit must be \"tiles\" or \"patch_tokens\", got \"" + vision_unit + "\"");
  }
  // The caps a length file's records have: counts past 2^31 - 1 are no sample's.
  constexpr int64_t kMost = std::numeric_limits<int32_t>::max();
  const std::vector<uint32_t> token_column = to_vector<uint32_t>(tokens, "tokens", kMost);
  std::vector<uint32_t> vision_column(token_column.size(), 0);
  if (vision) vision_column = to_vector<uint32_t>(*vision, "vision", kMost);
  std::vector<int32_t> image_column;
  if (images) image_column = to_vector<int32_t>(*images, "images");
  if (vision_column.size() != token_column.size() ||
      (images && image_column.size() != token_column.size())) {
    throw InputError("tokens, vision and images must have the same length");
  }
  auto data = std::make_shared<Dataset>(unit);
  data->reserve(token_column.size());
  for (size_t i = 0; i < token_column.size(); ++i) {
    if (token_column[i] == 0) throw InputError("tokens[" + std::to_string(i) + "] must be positive");
    const int32_t image_count =
        images ? image_column[i] : (unit == VisionUnit::kTiles ? static_cast<int32_t>(vision_column[i])
                                                                : (vision_column[i] > 0 ? 1 : 0));
    data->add(vision_column[i], token_column[i], image_count);
  }
  return data;
}

// Paths as os.fspath takes them: str, pathlib.Path or any os.PathLike.
std::string path_text(const py::object& path) {
  return py::module_::import("os").attr("fspath")(path).cast<std::string>();
}

std::shared_ptr<Dataset> load(const py::object& given_path, const py::object& given_root, bool strict) {
  const std::string path = path_text(given_path), root = path_text(given_root);
  std::ostringstream warnings;
  LoadedData loaded;
  {
    py::gil_scoped_release release;
    loaded = load_dataset(path, {root, strict, &warnings});
  }
  // Skipped index entries are reported through Python's warnings, one per entry.
  std::istringstream lines(warnings.str());
  for (std::string line; std::getline(lines, line);) {
    constexpr std::string_view kPrefix = "fulcrum: warning: ";
    if (line.rfind(kPrefix, 0) == 0) line.erase(0, kPrefix.size());
    // Level 1: the warning names the caller's line (from C there is no frame of this function to skip).
    if (!line.empty() && PyErr_WarnEx(PyExc_UserWarning, line.c_str(), 1) != 0) throw py::error_already_set();
  }
  return std::make_shared<Dataset>(std::move(loaded.dataset));
}

OversizePolicy oversize_policy(const std::string& name) {
  if (name == "error") return OversizePolicy::kError;
  if (name == "own-group" || name == "own_group") return OversizePolicy::kOwnGroup;
  throw InputError("oversize must be \"error\" or \"own-group\", got \"" + name + "\"");
}

FlopsCoefficients coefficients_from(const std::optional<std::string>& cost_file) {
  return cost_file ? read_flops_coefficients(*cost_file) : FlopsCoefficients{};
}

std::shared_ptr<BatchPlan> make_plan(const Dataset& data, const std::string& algo, int dp, int micro_batches,
                                     int64_t samples_per_step, int window, int64_t vision_cap, int64_t token_cap,
                                     int64_t text_full, int64_t vision_full, int passes, bool search,
                                     const std::string& oversize, bool drop_last, uint64_t seed, int64_t epoch,
                                     int64_t first_step, const std::optional<std::string>& cost_file) {
  BatchParams params;
  params.dp = dp;
  params.micro_batches = micro_batches;
  params.samples_per_step = samples_per_step;
  params.window_steps = window;
  params.vision_cap = vision_cap;
  params.token_cap = token_cap;
  params.text_full = text_full;
  params.vision_full = vision_full;
  params.passes = passes;
  params.search = search;
  params.oversize = oversize_policy(oversize);
  params.drop_last = drop_last;
  params.seed = seed;
  params.epoch = epoch;
  // Python's names for the parameters (a window of 0 would divide by zero inside the batcher).
  const BatchParamNames names{"dp",     "micro_batches", "samples_per_step", "window", "passes",
                               "vision_cap, token_cap, text_full and vision_full", "vision_cap", "search=True"};
  check_params(params, data, names);
  if (algo == "isf") check_isf_caps(params, data, names);
  if (first_step < 0) throw InputError("first_step must not be negative");
  const std::unique_ptr<Batcher> batcher = make_batcher(algo);
  const FlopsSampleCost cost(data.vision_unit(), coefficients_from(cost_file));
  py::gil_scoped_release release;
  return std::make_shared<BatchPlan>(batcher->plan(data, params, cost, first_step));
}

py::dict balance_dict(const Balance& b) {
  py::dict out;
  out["dist_ratio_vit"] = b.dist_ratio_vit;
  out["dist_ratio_llm"] = b.dist_ratio_llm;
  out["dist_ratio_vit_floor"] = b.dist_ratio_vit_floor;
  out["dist_ratio_llm_floor"] = b.dist_ratio_llm_floor;
  out["time_imbalance"] = b.time_imbalance;
  return out;
}

py::dict measure(const BatchPlan& plan, const Dataset& data, const std::optional<std::string>& cost_file) {
  const std::vector<uint32_t>& ids = plan.sample_ids();
  if (!ids.empty() && *std::max_element(ids.begin(), ids.end()) >= data.size()) {
    throw InputError("measure: the plan holds sample ids beyond the dataset's " + std::to_string(data.size()) +
                     " samples; measure a plan with the dataset it was made from");
  }
  const FlopsSampleCost cost(data.vision_unit(), coefficients_from(cost_file));
  PlanMetrics m;
  {
    py::gil_scoped_release release;
    m = measure_plan(plan, data, cost);
  }
  py::dict out = balance_dict(m.per_step);
  out["pad_ratio"] = m.pad_ratio;
  out["per_microbatch"] = balance_dict(m.per_micro_batch);
  return out;
}

// A generated pipeline schedule in its JSON form (the runtime's input), validated.
std::string pipeline_schedule(const std::string& kind, int micro_batches,
                              const std::vector<std::pair<int64_t, int64_t>>& stages,
                              const std::vector<std::string>& recompute, int dp, int pp, int vpp) {
  ParallelLayout layout;
  layout.dp = dp;
  layout.pp = pp;
  layout.vpp = vpp;
  layout.state_sharding = StateSharding::kZero0;
  std::vector<StageLayers> cut;
  for (const auto& [first, end] : stages) {
    // Layer indices are 32-bit in a schedule: a bound past that would be cut to another layer, not refused.
    if (first < 0 || end < 0 || first > std::numeric_limits<int32_t>::max() ||
        end > std::numeric_limits<int32_t>::max()) {
      throw InputError("stage (" + std::to_string(first) + ", " + std::to_string(end) +
                       ") is outside the layers a schedule can index");
    }
    cut.push_back({static_cast<int32_t>(first), static_cast<int32_t>(end)});
  }
  std::vector<Recompute> modes;
  for (const std::string& r : recompute) {
    if (r == "none") {
      modes.push_back(Recompute::kNone);
    } else if (r == "selective") {
      modes.push_back(Recompute::kSelective);
    } else if (r == "full") {
      modes.push_back(Recompute::kFull);
    } else {
      throw InputError("recompute must be none, selective or full, got \"" + r + "\"");
    }
  }
  Schedule schedule = make_pipeline_schedule(parse_pipeline_kind(kind), layout, micro_batches, std::move(cut),
                                             std::move(modes));
  validate(schedule, "generated schedule");
  return schedule_to_json(schedule);
}

// Reads and validates a schedule's JSON text; InputError (ValueError) naming `where` when it cannot run.
void check_schedule(const std::string& text, const std::string& where) { validate(schedule_from_json(text, where), where); }

// Reads a profile table as the simulator does; returns its entry count.
size_t check_profile(const std::string& text, const std::string& where) {
  return parse_profile_table(text, where).entries.size();
}

}  // namespace
}  // namespace fulcrum

PYBIND11_MODULE(_core, m) {
  using namespace fulcrum;
  m.doc() = "Fulcrum's C++ core: length files, batchers and balance metrics.";
  // Bad input (a malformed file, an impossible parameter) is a ValueError with the core's one-line message.
  py::register_exception<InputError>(m, "InputError", PyExc_ValueError);

  py::class_<Dataset, std::shared_ptr<Dataset>>(m, "Dataset",
                                                "Per-sample lengths of a training set, column by column.")
      .def_static("load", &load, py::arg("path"), py::arg("root") = ".", py::arg("strict") = false,
                  "Reads a length file (JSON array, JSON Lines, CSV) or an InternVL-style meta index. As the CLI does, "
                  "a meta index entry whose length file is missing is skipped with a warning unless strict=True "
                  "(BalancedBatchSampler, given a path, is strict by default).")
      .def_static("from_arrays", &dataset_from_arrays, py::arg("tokens"), py::arg("vision") = py::none(),
                  py::arg("images") = py::none(), py::arg("vision_unit") = "tiles")
      .def("__len__", &Dataset::size)
      .def_property_readonly("vision_unit", [](const Dataset& d) { return std::string(vision_unit_name(d.vision_unit())); })
      .def_property_readonly("tokens", [](py::object self) { return column_view(self.cast<const Dataset&>().tokens_column(), self); })
      .def_property_readonly("vision", [](py::object self) { return column_view(self.cast<const Dataset&>().vision_column(), self); })
      .def_property_readonly("images", [](const Dataset& d) {
        py::array_t<int32_t> out(static_cast<py::ssize_t>(d.size()));
        auto w = out.mutable_unchecked<1>();
        for (size_t i = 0; i < d.size(); ++i) w(static_cast<py::ssize_t>(i)) = d.images(static_cast<uint32_t>(i));
        return out;
      })
      .def_property_readonly("sources", [](const Dataset& d) {
        py::list out;
        for (const DatasetSource& s : d.sources()) {
          py::dict entry;
          entry["name"] = s.name;
          entry["path"] = s.path;
          entry["first_id"] = s.first_id;
          entry["samples"] = s.samples;
          entry["records"] = s.records;
          entry["repeat_time"] = s.repeat_time;
          out.append(entry);
        }
        return out;
      })
      .def("subset", [](const Dataset& d, const py::object& ids) {
        const std::vector<uint32_t> chosen = to_vector<uint32_t>(ids, "ids");
        return std::make_shared<Dataset>(d.subset(chosen));
      }, py::arg("ids"), "The samples `ids`, in that order, renumbered from 0.")
      .def("describe_sample", &Dataset::describe_sample, py::arg("id"));

  py::class_<BatchPlan, std::shared_ptr<BatchPlan>>(m, "BatchPlan",
      "One epoch cut into steps; every rank has the same number of micro-batches per step. Flat arrays in "
      "step → rank → micro-batch order: micro-batch i holds sample_ids[begins[i]:begins[i + 1]].")
      .def_property_readonly("algo", &BatchPlan::algo)
      .def_property_readonly("dp", &BatchPlan::dp)
      .def_property_readonly("micro_batches_per_rank", &BatchPlan::micro_batches_per_rank)
      .def_property_readonly("padded", &BatchPlan::padded)
      .def_property_readonly("steps", &BatchPlan::steps)
      .def_property_readonly("first_step", &BatchPlan::first_step)
      .def_readonly("samples_in", &BatchPlan::samples_in)
      .def_readonly("repeated", &BatchPlan::repeated)
      .def_readonly("dropped", &BatchPlan::dropped)
      .def_readonly("seed", &BatchPlan::seed)
      .def_readonly("epoch", &BatchPlan::epoch)
      .def_property_readonly("sample_ids", [](py::object self) { return column_view(self.cast<const BatchPlan&>().sample_ids(), self); })
      .def_property_readonly("begins", [](py::object self) { return column_view(self.cast<const BatchPlan&>().micro_batch_begins(), self); })
      .def("tail", [](const BatchPlan& p, int64_t step) {
             if (step < 0 || step > p.steps()) {
               throw InputError("step " + std::to_string(step) + " is outside the plan's " +
                                std::to_string(p.steps()) + " steps");
             }
             return std::make_shared<BatchPlan>(p.tail(step));
           }, py::arg("step"))
      .def("audit", [](const BatchPlan& p, const Dataset& d) {
        const PlanAudit a = audit_plan(p, d);
        py::dict out;
        out["samples_out"] = a.samples_out;
        out["missing"] = a.missing;
        out["extra"] = a.extra;
        out["duplicated"] = a.duplicated;
        out["empty_micro_batches"] = a.empty_micro_batches;
        out["out_of_range"] = a.out_of_range;
        out["ok"] = a.ok(p);
        return out;
      }, py::arg("dataset"));

  m.def("plan", &make_plan, py::arg("dataset"), py::kw_only(), py::arg("algo") = "fulcrum", py::arg("dp") = 1,
        py::arg("micro_batches") = 1, py::arg("samples_per_step") = 0, py::arg("window") = 8,
        py::arg("vision_cap") = 0, py::arg("token_cap") = 0, py::arg("text_full") = 0, py::arg("vision_full") = 0,
        py::arg("passes") = 50, py::arg("search") = false, py::arg("oversize") = "error",
        py::arg("drop_last") = false, py::arg("seed") = 0, py::arg("epoch") = 0, py::arg("first_step") = 0,
        py::arg("cost") = py::none(),
        "Plans one epoch with a batcher (random, random-packed, length-grouped, isf, fulcrum).");
  m.def("measure", &measure, py::arg("plan"), py::arg("dataset"), py::arg("cost") = py::none(),
        "Pad Ratio, Dist Ratios with their floors and time imbalance of a plan, per step and per micro-batch.");
  m.def("batcher_names", &batcher_names);
  // The batchers' ceilings (batcher.h), for the sampler to check its arguments against when it is made.
  m.attr("MOST_RANKS") = kMostRanks;
  m.attr("MOST_MICRO_BATCHES") = kMostMicroBatches;
  m.attr("MOST_MICRO_BATCHES_PER_STEP") = kMostMicroBatchesPerStep;
  m.attr("MOST_WINDOW_STEPS") = kMostWindowSteps;
  m.attr("MOST_PASSES") = kMostPasses;
  m.def("pipeline_schedule", &pipeline_schedule, py::arg("kind"), py::arg("micro_batches"), py::arg("stages"),
        py::arg("recompute"), py::kw_only(), py::arg("dp") = 1, py::arg("pp") = 1, py::arg("vpp") = 1,
        "A generated, validated pipeline schedule (gpipe, 1f1b, interleaved, zb-h1) as Fulcrum's schedule JSON: "
        "stages are [first, end) layer ranges, pp × vpp of them; recompute is one mode per layer.");
  m.def("check_schedule", &check_schedule, py::arg("text"), py::arg("where") = "schedule",
        "Reads and validates a schedule's JSON text; ValueError naming `where` when it cannot run.");
  m.def("check_profile", &check_profile, py::arg("text"), py::arg("where") = "profile",
        "Reads a profile table as the simulator does; its entry count, or ValueError naming `where` and the entry.");
}
