#ifndef FULCRUM_SCHED_SCHEDULE_JSON_H_
#define FULCRUM_SCHED_SCHEDULE_JSON_H_

#include <string>
#include <string_view>

#include "fulcrum/sched/schedule.h"

namespace fulcrum {

// The versioned JSON form of a Schedule:
//   {"fulcrum": 1, "kind": "schedule", "pipeline": "interleaved",
//    "layout": {"dp": 24, "tp": 8, "pp": 8, "vpp": 12, "encoder_tp": 0, "sequence_parallel": true,
//               "state_sharding": "distributed-optimizer"},
//    "micro_batches": 32, "model_layers": 149,
//    "stages": [[0, 6], [6, 7], ...],              first and end layer of each virtual stage
//    "recompute": [["selective", 149]],            runs of [mode, layers] in layer order
//    "encoder": {"dp": 96, "pp": 2, "tp": 4, "pipelines": 8,    optional: an Optimus encoder section
//                "stages": [[[0, 25]], [[25, 50], [50, 53]]],   its stages' layer ranges
//                "llm_micro_batch": [[0, 9, ...], ...],         [pipeline][k] → the LLM micro-batch fed
//                "collective_slowdown": 0.15},
//    "tasks": {"waves": 2,                          optional: a Spindle multitask section
//              "slices": [[task, component, first_layer, layers, sequences, tokens, micro_batches, dp, tp, wave,
//                          [device, ...]], ...],    at least one
//              "sync_groups": [{"devices": [0, 1, 2, 3], "layers": [[component, layer], ...]}, ...]},
//    "programs": [[instruction, ...], ...]}        one per pipeline rank (with "tasks": one per device)
// Instructions are short arrays, so a 16,384-device schedule stays a few megabytes:
//   ["F", stage, mb]  ["B", stage, mb]  ["BI", stage, mb]  ["W", stage, mb]
//   ["send", "activation"|"gradient", stage, mb, peer_stage]   ["recv", ..., stage, mb, peer_stage]
//   ["collective", "all_reduce"|"reduce_scatter"|"all_gather", "gradients"|"parameters", stage]
//   ["wave", wave]   ["allocate", stage, buffer, bytes]   ["free", stage, buffer]
// and with an encoder section (an encoder pipeline, or -1 for the LLM's side of a transfer):
//   ["encoder", pipeline, stage, mb, layer, "forward"|"backward"|"backward_input"|..., first, end,
//    "inside_pass"|"after_pass"]
//   ["send"|"recv", payload, stage, mb, peer_stage, pipeline, peer_pipeline]
//   ["collective", kind, tensor, stage, pipeline]   over the encoder stage's data-parallel group
// and with a tasks section, `stage` names a slice in compute, send and recv, and the 4-field collective
//   ["collective", kind, tensor, group]   runs over sync group `group` (read as DeviceGroup::kSync; there the
//                                         4-field form means nothing else, and without "tasks" it is never kSync)
// state_sharding is "zero-0" … "zero-3" or "distributed-optimizer".
std::string schedule_to_json(const Schedule& schedule);

// Reads the form above. Throws InputError "<file>: <where>: <what>" for malformed JSON, unknown keys or
// instruction names, wrong types and numbers out of range (model_layers at most kMostModelLayers); it does not
// check the schedule can run (validate()).
inline constexpr int64_t kMostModelLayers = int64_t{1} << 20;
Schedule schedule_from_json(std::string_view text, const std::string& file);

}  // namespace fulcrum

#endif  // FULCRUM_SCHED_SCHEDULE_JSON_H_
