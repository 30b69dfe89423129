#include "fulcrum/sched/schedule_json.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "fulcrum/core/error.h"
#include "fulcrum/core/json_reader.h"
#include "fulcrum/core/json_document.h"

namespace fulcrum {
namespace {

using Json = nlohmann::json;

constexpr int64_t kMaxDegree = 1 << 20;  // a million devices in any one dimension

const char* pass_name(Pass p) {
  switch (p) {
    case Pass::kForward: return "forward";
    case Pass::kBackwardInput: return "backward_input";
    case Pass::kBackwardWeight: return "backward_weight";
    case Pass::kRecompute: return "recompute";
    case Pass::kBackward: return "backward";
  }
  return "?";
}

const char* compute_name(OpKind op) {
  switch (op) {
    case OpKind::kForward: return "F";
    case OpKind::kBackward: return "B";
    case OpKind::kBackwardInput: return "BI";
    case OpKind::kBackwardWeight: return "W";
    default: return nullptr;
  }
}

Json instruction_json(const Instruction& in) {
  if (const char* name = compute_name(in.op)) return Json::array({name, in.stage, in.micro_batch});
  switch (in.op) {
    case OpKind::kSend:
    case OpKind::kRecv: {
      Json j = Json::array({in.op == OpKind::kSend ? "send" : "recv", payload_name(in.payload), in.stage,
                            in.micro_batch, in.peer_stage});
      // An encoder's side of the transfer names both pipelines (-1: the LLM); LLM to LLM keeps the short form.
      if (in.encoder_pipeline >= 0 || in.peer_encoder_pipeline >= 0) {
        j.push_back(in.encoder_pipeline);
        j.push_back(in.peer_encoder_pipeline);
      }
      return j;
    }
    case OpKind::kCollective: {
      Json j = Json::array({"collective", collective_kind_name(in.collective), collective_tensor_name(in.tensor), in.stage});
      if (in.encoder_pipeline >= 0) j.push_back(in.encoder_pipeline);  // over the encoder's data-parallel group
      return j;
    }
    case OpKind::kEncoderKernels:
      return Json::array({"encoder", in.encoder_pipeline, in.stage, in.micro_batch, in.layer, pass_name(in.pass),
                          in.kernel_begin, in.kernel_end, in.inside_pass ? "inside_pass" : "after_pass"});
    case OpKind::kWaveBoundary:
      return Json::array({"wave", in.wave});
    case OpKind::kAllocate:
      return Json::array({"allocate", in.stage, in.buffer, in.bytes});
    case OpKind::kFree:
      return Json::array({"free", in.stage, in.buffer});
    default:
      return Json::array();
  }
}

// Reading: every error names the file and where in it.
class Reader : public JsonReader {
 public:
  using JsonReader::JsonReader;

  int64_t integer(const Json& j, const std::string& where, int64_t low, int64_t high) const {
    if (!j.is_number_integer()) fail(where, "expected an integer");
    // Read as int64_t, an unsigned value past its range would wrap: compared unsigned first.
    if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(high)) {
      fail(where, "{} is out of range [{}, {}]", j.get<uint64_t>(), low, high);
    }
    const int64_t v = j.get<int64_t>();
    if (v < low || v > high) fail(where, "{} is out of range [{}, {}]", v, low, high);
    return v;
  }
  int32_t int32(const Json& j, const std::string& where, int64_t low = 0) const {
    return static_cast<int32_t>(integer(j, where, low, std::numeric_limits<int32_t>::max()));
  }
  std::string string(const Json& j, const std::string& where) const {
    if (!j.is_string()) fail(where, "expected a string");
    return j.get<std::string>();
  }

  Instruction instruction(const Json& j, const std::string& where) const {
    if (!j.is_array() || j.empty()) fail(where, "expected an instruction array");
    const std::string name = string(j[0], where + "[0]");
    auto arity = [&](size_t n) {
      if (j.size() != n) fail(where, "\"{}\" takes {} fields, not {}", name, n, j.size());
    };
    auto at = [&](size_t i) { return fmt::format("{}[{}]", where, i); };
    Instruction in;
    for (OpKind op : {OpKind::kForward, OpKind::kBackward, OpKind::kBackwardInput, OpKind::kBackwardWeight}) {
      if (name == compute_name(op)) {
        arity(3);
        in.op = op;
        in.stage = int32(j[1], at(1));
        in.micro_batch = int32(j[2], at(2));
        return in;
      }
    }
    if (name == "send" || name == "recv") {
      if (j.size() != 5 && j.size() != 7) {
        fail(where, "\"{}\" takes 5 fields (7 with encoder pipelines), not {}", name, j.size());
      }
      in.op = name == "send" ? OpKind::kSend : OpKind::kRecv;
      const std::string payload = string(j[1], at(1));
      if (payload != "activation" && payload != "gradient") fail(at(1), "payload '{}': activation or gradient", payload);
      in.payload = payload == "activation" ? Payload::kActivation : Payload::kGradient;
      in.stage = int32(j[2], at(2));
      in.micro_batch = int32(j[3], at(3));
      in.peer_stage = int32(j[4], at(4));
      if (j.size() == 7) {
        in.encoder_pipeline = int32(j[5], at(5), -1);
        in.peer_encoder_pipeline = int32(j[6], at(6), -1);
        if (in.encoder_pipeline < 0 && in.peer_encoder_pipeline < 0) {
          fail(where, "both sides are the LLM's (encoder pipelines -1): use the 5-field form");
        }
      }
      return in;
    }
    if (name == "collective") {
      if (j.size() != 4 && j.size() != 5) {
        fail(where, "\"collective\" takes 4 fields (5 with an encoder pipeline), not {}", j.size());
      }
      in.op = OpKind::kCollective;
      const std::string kind = string(j[1], at(1));
      bool found = false;
      for (CollectiveKind k : {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter, CollectiveKind::kAllGather}) {
        if (kind == collective_kind_name(k)) in.collective = k, found = true;
      }
      if (!found) fail(at(1), "collective '{}': all_reduce, reduce_scatter or all_gather", kind);
      const std::string tensor = string(j[2], at(2));
      if (tensor != "gradients" && tensor != "parameters") fail(at(2), "tensor '{}': gradients or parameters", tensor);
      in.tensor = tensor == "gradients" ? CollectiveTensor::kGradients : CollectiveTensor::kParameters;
      in.stage = int32(j[3], at(3));
      if (j.size() == 5) {
        in.encoder_pipeline = int32(j[4], at(4));
        in.group = DeviceGroup::kEncoderData;
      }
      return in;
    }
    if (name == "encoder") {
      arity(9);
      in.op = OpKind::kEncoderKernels;
      in.encoder_pipeline = int32(j[1], at(1));
      in.stage = int32(j[2], at(2));
      in.micro_batch = int32(j[3], at(3));
      in.layer = int32(j[4], at(4));
      const std::string pass = string(j[5], at(5));
      bool found = false;
      for (Pass p : {Pass::kForward, Pass::kBackward, Pass::kBackwardInput, Pass::kBackwardWeight, Pass::kRecompute}) {
        if (pass == pass_name(p)) in.pass = p, found = true;
      }
      if (!found) fail(at(5), "pass '{}': forward, backward, backward_input, backward_weight or recompute", pass);
      in.kernel_begin = int32(j[6], at(6));
      in.kernel_end = int32(j[7], at(7));
      const std::string placement = string(j[8], at(8));
      if (placement != "inside_pass" && placement != "after_pass") {
        fail(at(8), "placement '{}': inside_pass or after_pass", placement);
      }
      in.inside_pass = placement == "inside_pass";
      return in;
    }
    if (name == "wave") {
      arity(2);
      in.op = OpKind::kWaveBoundary;
      in.wave = int32(j[1], at(1));
      return in;
    }
    if (name == "allocate") {
      arity(4);
      in.op = OpKind::kAllocate;
      in.stage = int32(j[1], at(1));
      in.buffer = int32(j[2], at(2));
      in.bytes = integer(j[3], at(3), 0, int64_t{1} << 50);  // a petabyte: beyond any device
      return in;
    }
    if (name == "free") {
      arity(3);
      in.op = OpKind::kFree;
      in.stage = int32(j[1], at(1));
      in.buffer = int32(j[2], at(2));
      return in;
    }
    fail(at(0), "unknown instruction '{}'", name);
  }

  // The "encoder" object: Optimus's encoder plan. Whether its counts fit the layout is validate()'s to check.
  EncoderSection encoder(const Json& j) const {
    only_keys(j, {"dp", "pp", "tp", "pipelines", "stages", "llm_micro_batch", "collective_slowdown"}, "encoder");
    EncoderSection e;
    e.dp = static_cast<int>(integer(member(j, "dp", "encoder"), "encoder.dp", 1, kMaxDegree));
    e.pp = static_cast<int>(integer(member(j, "pp", "encoder"), "encoder.pp", 1, kMaxDegree));
    e.tp = static_cast<int>(integer(member(j, "tp", "encoder"), "encoder.tp", 1, kMaxDegree));
    e.pipelines = static_cast<int>(integer(member(j, "pipelines", "encoder"), "encoder.pipelines", 1, kMaxDegree));

    const Json& stages = member(j, "stages", "encoder");
    if (!stages.is_array()) fail("encoder.stages", "expected an array of stages");
    for (size_t s = 0; s < stages.size(); ++s) {
      const std::string where = fmt::format("encoder.stages[{}]", s);
      if (!stages[s].is_array()) fail(where, "expected an array of [first_layer, end_layer]");
      std::vector<StageLayers> ranges;
      for (size_t i = 0; i < stages[s].size(); ++i) {
        const std::string range = fmt::format("{}[{}]", where, i);
        const Json& pair = stages[s][i];
        if (!pair.is_array() || pair.size() != 2) fail(range, "expected [first_layer, end_layer]");
        ranges.push_back({int32(pair[0], range + "[0]"), int32(pair[1], range + "[1]")});
      }
      e.stages.push_back(std::move(ranges));
    }

    const Json& map = member(j, "llm_micro_batch", "encoder");
    if (!map.is_array()) fail("encoder.llm_micro_batch", "expected an array per encoder pipeline");
    for (size_t p = 0; p < map.size(); ++p) {
      const std::string where = fmt::format("encoder.llm_micro_batch[{}]", p);
      if (!map[p].is_array()) fail(where, "expected an array of LLM micro-batches");
      std::vector<int32_t> micro_batches;
      micro_batches.reserve(map[p].size());
      for (size_t k = 0; k < map[p].size(); ++k) micro_batches.push_back(int32(map[p][k], fmt::format("{}[{}]", where, k)));
      e.llm_micro_batch.push_back(std::move(micro_batches));
    }

    const Json& slowdown = member(j, "collective_slowdown", "encoder");
    if (!slowdown.is_number()) fail("encoder.collective_slowdown", "expected a number");
    e.collective_slowdown = slowdown.get<double>();
    if (!std::isfinite(e.collective_slowdown) || e.collective_slowdown < 0) {
      fail("encoder.collective_slowdown", "{} is not a finite number ≥ 0", e.collective_slowdown);
    }
    return e;
  }

  // The "tasks" object: Spindle's slices, waves and sync groups. Whether they fit the layout and each other
  // (device ids, dp × tp devices, waves) is validate()'s to check.
  MultitaskSection tasks(const Json& j) const {
    only_keys(j, {"waves", "slices", "sync_groups"}, "tasks");
    MultitaskSection t;
    t.waves = static_cast<int32_t>(integer(member(j, "waves", "tasks"), "tasks.waves", 1, kMaxDegree));

    const Json& slices = member(j, "slices", "tasks");
    if (!slices.is_array()) fail("tasks.slices", "expected an array of slices");
    if (slices.empty()) fail("tasks.slices", "expected at least one slice");
    for (size_t i = 0; i < slices.size(); ++i) {
      const std::string where = fmt::format("tasks.slices[{}]", i);
      const Json& f = slices[i];
      if (!f.is_array() || (f.size() != 11 && f.size() != 12)) {
        fail(where, "expected [task, component, first_layer, layers, sequences, tokens, micro_batches, dp, tp, wave, "
                    "[device, ...], input_gradient (optional, 1)] (11 or 12 fields{})",
             f.is_array() ? fmt::format(", not {}", f.size()) : std::string());
      }
      auto at = [&](size_t k) { return fmt::format("{}[{}]", where, k); };
      TaskSlice slice;
      slice.task = int32(f[0], at(0));
      slice.component = int32(f[1], at(1));
      slice.first_layer = int32(f[2], at(2));
      slice.layers = int32(f[3], at(3), 1);
      slice.sequences = integer(f[4], at(4), 1, int64_t{1} << 40);
      slice.tokens = integer(f[5], at(5), 1, int64_t{1} << 40);
      // As a task graph's nodes: attention's sequences × tokens² within 2^53, where it stays exact.
      if (static_cast<double>(slice.sequences) * static_cast<double>(slice.tokens) * static_cast<double>(slice.tokens) >
          0x1p53) {
        fail(where, "{} sequences of {} tokens is too large (sequences × tokens² at most 2^53)", slice.sequences,
             slice.tokens);
      }
      slice.micro_batches = int32(f[6], at(6), 1);
      slice.dp = static_cast<int32_t>(integer(f[7], at(7), 1, kMaxDegree));
      slice.tp = static_cast<int32_t>(integer(f[8], at(8), 1, kMaxDegree));
      slice.wave = int32(f[9], at(9));
      slice.devices = device_list(f[10], at(10));
      if (f.size() == 12) slice.input_gradient = integer(f[11], at(11), 0, 1) == 1;
      t.slices.push_back(std::move(slice));
    }

    const Json& groups = member(j, "sync_groups", "tasks");
    if (!groups.is_array()) fail("tasks.sync_groups", "expected an array of sync groups");
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::string where = fmt::format("tasks.sync_groups[{}]", g);
      only_keys(groups[g], {"devices", "tp", "layers"}, where);
      SyncGroupSpec group;
      group.devices = device_list(member(groups[g], "devices", where), where + ".devices");
      if (groups[g].contains("tp")) group.tp = int32(groups[g]["tp"], where + ".tp", 1);
      const Json& layers = member(groups[g], "layers", where);
      if (!layers.is_array()) fail(where + ".layers", "expected an array of [component, layer]");
      group.layers.reserve(layers.size());
      for (size_t k = 0; k < layers.size(); ++k) {
        const std::string pair_at = fmt::format("{}.layers[{}]", where, k);
        const Json& pair = layers[k];
        if (!pair.is_array() || pair.size() != 2) fail(pair_at, "expected [component, layer]");
        group.layers.emplace_back(int32(pair[0], pair_at + "[0]"), int32(pair[1], pair_at + "[1]"));
      }
      t.sync_groups.push_back(std::move(group));
    }
    return t;
  }

  std::vector<int32_t> device_list(const Json& j, const std::string& where) const {
    if (!j.is_array()) fail(where, "expected an array of device ids");
    std::vector<int32_t> devices;
    devices.reserve(j.size());
    for (size_t k = 0; k < j.size(); ++k) devices.push_back(int32(j[k], fmt::format("{}[{}]", where, k)));
    return devices;
  }

  Schedule read(const Json& doc) const {
    only_keys(doc, {"fulcrum", "kind", "pipeline", "layout", "micro_batches", "model_layers", "stages", "recompute",
                    "encoder", "tasks", "programs"}, "schedule");
    if (integer(member(doc, "fulcrum", "schedule"), "fulcrum", 1, 1) != 1) fail("fulcrum", "version 1 expected");
    if (string(member(doc, "kind", "schedule"), "kind") != "schedule") fail("kind", "expected \"schedule\"");
    Schedule s;
    const std::string pipeline = string(member(doc, "pipeline", "schedule"), "pipeline");
    try {
      s.kind = parse_pipeline_kind(pipeline);
    } catch (const InputError&) {
      fail("pipeline", "'{}': gpipe, 1f1b, interleaved, zb-h1 or custom", pipeline);
    }

    const Json& layout = member(doc, "layout", "schedule");
    only_keys(layout, {"dp", "tp", "pp", "vpp", "encoder_tp", "sequence_parallel", "state_sharding"}, "layout");
    s.layout.dp = static_cast<int>(integer(member(layout, "dp", "layout"), "layout.dp", 1, kMaxDegree));
    s.layout.tp = static_cast<int>(integer(member(layout, "tp", "layout"), "layout.tp", 1, kMaxDegree));
    s.layout.pp = static_cast<int>(integer(member(layout, "pp", "layout"), "layout.pp", 1, kMaxDegree));
    s.layout.vpp = static_cast<int>(integer(member(layout, "vpp", "layout"), "layout.vpp", 1, kMaxDegree));
    if (layout.contains("encoder_tp")) {
      s.layout.encoder_tp = static_cast<int>(integer(layout["encoder_tp"], "layout.encoder_tp", 0, kMaxDegree));
    }
    if (layout.contains("sequence_parallel")) {
      if (!layout["sequence_parallel"].is_boolean()) fail("layout.sequence_parallel", "expected true or false");
      s.layout.sequence_parallel = layout["sequence_parallel"].get<bool>();
    }
    const std::string sharding = string(member(layout, "state_sharding", "layout"), "layout.state_sharding");
    bool found = false;
    for (StateSharding k : {StateSharding::kZero0, StateSharding::kZero1, StateSharding::kZero2, StateSharding::kZero3,
                            StateSharding::kMegatronDistributedOptimizer}) {
      if (sharding == state_sharding_name(k)) s.layout.state_sharding = k, found = true;
    }
    if (!found) fail("layout.state_sharding", "'{}': zero-0 … zero-3 or distributed-optimizer", sharding);

    s.micro_batches = int32(member(doc, "micro_batches", "schedule"), "micro_batches", 1);
    // A model's flattened layers (its JSON caps each component at 2^17): the recompute runs fill one entry each,
    // so a count past any model would allocate gigabytes from a few bytes of text.
    s.model_layers =
        static_cast<int32_t>(integer(member(doc, "model_layers", "schedule"), "model_layers", 1, kMostModelLayers));

    const Json& stages = member(doc, "stages", "schedule");
    if (!stages.is_array()) fail("stages", "expected an array");
    for (size_t i = 0; i < stages.size(); ++i) {
      const std::string where = fmt::format("stages[{}]", i);
      if (!stages[i].is_array() || stages[i].size() != 2) fail(where, "expected [first_layer, end_layer]");
      s.stages.push_back({int32(stages[i][0], where + "[0]"), int32(stages[i][1], where + "[1]")});
    }

    const Json& recompute = member(doc, "recompute", "schedule");
    if (!recompute.is_array()) fail("recompute", "expected an array of [mode, layers]");
    for (size_t i = 0; i < recompute.size(); ++i) {
      const std::string where = fmt::format("recompute[{}]", i);
      if (!recompute[i].is_array() || recompute[i].size() != 2) fail(where, "expected [mode, layers]");
      const std::string mode = string(recompute[i][0], where + "[0]");
      Recompute r;
      if (mode == "none") {
        r = Recompute::kNone;
      } else if (mode == "selective") {
        r = Recompute::kSelective;
      } else if (mode == "full") {
        r = Recompute::kFull;
      } else {
        fail(where + "[0]", "mode '{}': none, selective or full", mode);
      }
      const int64_t count = integer(recompute[i][1], where + "[1]", 1, s.model_layers);
      if (static_cast<int64_t>(s.recompute.size()) + count > s.model_layers) {
        fail(where, "more layers than the model's {}", s.model_layers);
      }
      s.recompute.insert(s.recompute.end(), static_cast<size_t>(count), r);
    }

    if (auto it = doc.find("encoder"); it != doc.end()) s.encoder = encoder(*it);
    if (auto it = doc.find("tasks"); it != doc.end()) s.tasks = tasks(*it);

    const Json& programs = member(doc, "programs", "schedule");
    if (!programs.is_array()) fail("programs", "expected an array of programs");
    for (size_t r = 0; r < programs.size(); ++r) {
      const std::string where = fmt::format("programs[{}]", r);
      if (!programs[r].is_array()) fail(where, "expected an array of instructions");
      Program p;
      p.instructions.reserve(programs[r].size());
      for (size_t i = 0; i < programs[r].size(); ++i) {
        p.instructions.push_back(instruction(programs[r][i], fmt::format("{}[{}]", where, i)));
      }
      s.programs.push_back(std::move(p));
    }
    // In a multitask schedule the 4-field collective runs over a sync group (its `stage` names the group).
    if (s.tasks.present()) {
      for (Program& p : s.programs) {
        for (Instruction& in : p.instructions) {
          if (in.op == OpKind::kCollective && in.group == DeviceGroup::kData) in.group = DeviceGroup::kSync;
        }
      }
    }
    return s;
  }

};

}  // namespace

std::string schedule_to_json(const Schedule& s) {
  Json stages = Json::array();
  for (const StageLayers& st : s.stages) stages.push_back({st.first_layer, st.end_layer});
  Json recompute = Json::array();
  for (size_t i = 0; i < s.recompute.size();) {
    size_t j = i;
    while (j < s.recompute.size() && s.recompute[j] == s.recompute[i]) ++j;
    recompute.push_back({std::string(recompute_name(s.recompute[i])), j - i});
    i = j;
  }
  // One line per program keeps the file readable without a JSON viewer.
  std::string programs = "[";
  for (size_t r = 0; r < s.programs.size(); ++r) {
    Json program = Json::array();
    for (const Instruction& in : s.programs[r].instructions) program.push_back(instruction_json(in));
    programs += fmt::format("{}\n  {}", r ? "," : "", program.dump());
  }
  programs += "\n]";
  std::string encoder;  // its own line, when the schedule has an encoder section
  if (s.encoder.present()) {
    const EncoderSection& e = s.encoder;
    nlohmann::ordered_json stages_of_encoder = nlohmann::ordered_json::array();
    for (const std::vector<StageLayers>& ranges : e.stages) {
      nlohmann::ordered_json stage = nlohmann::ordered_json::array();
      for (const StageLayers& range : ranges) stage.push_back({range.first_layer, range.end_layer});
      stages_of_encoder.push_back(std::move(stage));
    }
    const nlohmann::ordered_json section{{"dp", e.dp},
                                         {"pp", e.pp},
                                         {"tp", e.tp},
                                         {"pipelines", e.pipelines},
                                         {"stages", std::move(stages_of_encoder)},
                                         {"llm_micro_batch", e.llm_micro_batch},
                                         {"collective_slowdown", e.collective_slowdown}};
    encoder = fmt::format("\"encoder\": {},\n", section.dump());
  }
  std::string tasks;  // its own line, when the schedule has a multitask section
  if (s.tasks.present()) {
    using Ordered = nlohmann::ordered_json;
    Ordered slices = Ordered::array();
    for (const TaskSlice& t : s.tasks.slices) {
      slices.push_back(Ordered::array({t.task, t.component, t.first_layer, t.layers, t.sequences, t.tokens,
                                       t.micro_batches, t.dp, t.tp, t.wave, Ordered(t.devices)}));
      if (!t.input_gradient) slices.back().push_back(0);  // written only where it is not the default
    }
    Ordered groups = Ordered::array();
    for (const SyncGroupSpec& g : s.tasks.sync_groups) {
      Ordered layers = Ordered::array();
      for (const auto& [component, layer] : g.layers) layers.push_back(Ordered::array({component, layer}));
      groups.push_back(Ordered{{"devices", Ordered(g.devices)}, {"tp", g.tp}, {"layers", std::move(layers)}});
    }
    const Ordered section{{"waves", s.tasks.waves}, {"slices", std::move(slices)}, {"sync_groups", std::move(groups)}};
    tasks = fmt::format("\"tasks\": {},\n", section.dump());
  }
  const nlohmann::ordered_json layout{{"dp", s.layout.dp},
                    {"tp", s.layout.tp},
                    {"pp", s.layout.pp},
                    {"vpp", s.layout.vpp},
                    {"encoder_tp", s.layout.encoder_tp},
                    {"sequence_parallel", s.layout.sequence_parallel},
                    {"state_sharding", state_sharding_name(s.layout.state_sharding)}};
  return fmt::format(
      "{{\"fulcrum\": 1, \"kind\": \"schedule\", \"pipeline\": \"{}\",\n\"layout\": {},\n\"micro_batches\": {}, "
      "\"model_layers\": {},\n\"stages\": {},\n\"recompute\": {},\n{}{}\"programs\": {}}}\n",
      pipeline_kind_name(s.kind), layout.dump(), s.micro_batches, s.model_layers, stages.dump(), recompute.dump(),
      encoder, tasks, programs);
}

Schedule schedule_from_json(std::string_view text, const std::string& file) {
  const Json doc = parse_json_document(text, file);
  try {
    return Reader(file).read(doc);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: {}", file, e.what()));
  }
}

}  // namespace fulcrum
