#include "fulcrum/sched/validate_multitask.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <vector>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/training_state_memory.h"

namespace fulcrum {
namespace {

class MultitaskValidator {
 public:
  MultitaskValidator(const Schedule& s, const std::string& where) : s_(s), t_(s.tasks), where_(where) {}

  void run() {
    check_layout();
    check_programs();
    check_transfers();
    check_deadlock();
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw InputError(fmt::format("{}: {}", where_, fmt::format(format, std::forward<Args>(args)...)));
  }

  std::string describe(int rank, size_t index) const {
    const Instruction& in = s_.programs[rank].instructions[index];
    std::string text = fmt::format("device {} instruction {} ({}", rank, index, op_kind_name(in.op));
    if (in.op == OpKind::kCollective) return text + fmt::format(" sync group {})", in.stage);
    if (in.op == OpKind::kWaveBoundary) return text + fmt::format(" {})", in.wave);
    text += fmt::format(" slice {}", in.stage);
    if (in.op == OpKind::kSend || in.op == OpKind::kRecv) {
      text += fmt::format(" {} {} slice {}", payload_name(in.payload), in.op == OpKind::kSend ? "to" : "from",
                          in.peer_stage);
    }
    return text + ")";
  }

  bool holds(const std::vector<int32_t>& devices, int device) const {
    return std::binary_search(devices.begin(), devices.end(), device);
  }

  void check_sorted_devices(const std::vector<int32_t>& devices, const std::string& what) const {
    for (size_t i = 0; i < devices.size(); ++i) {
      if (devices[i] < 0 || devices[i] >= s_.layout.pp) fail("{} names device {}, of {}", what, devices[i], s_.layout.pp);
      if (i > 0 && devices[i] <= devices[i - 1]) fail("{}: its devices must be distinct and sorted", what);
    }
  }

  void check_layout() {
    const ParallelLayout& l = s_.layout;
    if (l.pp < 1 || l.dp != 1 || l.tp != 1 || l.vpp != 1) {
      fail("a multitask schedule has one program per device: pp devices, dp, tp and vpp 1 (dp {}, tp {}, pp {}, "
           "vpp {})", l.dp, l.tp, l.pp, l.vpp);
    }
    if (!s_.stages.empty()) fail("a multitask schedule has slices, not pipeline stages");
    // What the slices and sync groups do not say and the simulator would otherwise take from the layout: the
    // gradients are all-reduced in full, parameters stay whole on their devices, no sequence is split.
    if (l.state_sharding != StateSharding::kZero0 && l.state_sharding != StateSharding::kZero1) {
      fail("a multitask schedule all-reduces its gradients in full and keeps its parameters whole: state_sharding "
           "zero-0 or zero-1, not {}", state_sharding_name(l.state_sharding));
    }
    if (l.sequence_parallel || l.encoder_tp != 0) {
      fail("a multitask schedule's slices set their own tensor parallelism: sequence_parallel false, encoder_tp 0");
    }
    if (s_.kind != PipelineKind::kCustom) {
      fail("a multitask schedule is pipeline 'custom', not '{}'", pipeline_kind_name(s_.kind));
    }
    if (s_.micro_batches != 1) fail("a multitask schedule runs its slices' micro-batches inside them: micro_batches 1");
    if (s_.encoder.present()) fail("a multitask schedule has no encoder section");
    if (static_cast<int64_t>(s_.programs.size()) != l.pp) fail("{} programs for {} devices", s_.programs.size(), l.pp);
    if (static_cast<int64_t>(s_.recompute.size()) != s_.model_layers) {
      fail("{} recompute entries for {} layers", s_.recompute.size(), s_.model_layers);
    }
    if (t_.waves < 1) fail("a multitask schedule needs at least one wave");
    for (size_t i = 0; i < t_.slices.size(); ++i) {
      const TaskSlice& sl = t_.slices[i];
      const std::string what = fmt::format("slice {}", i);
      if (sl.layers < 1 || sl.first_layer < 0 || sl.micro_batches < 1 || sl.dp < 1 || sl.tp < 1 ||
          sl.sequences < 1 || sl.tokens < 1) {
        fail("{}: layers, micro-batches, dp, tp, sequences and tokens must be positive", what);
      }
      if (sl.wave < 0 || sl.wave >= t_.waves) fail("{} runs in wave {}, of {}", what, sl.wave, t_.waves);
      if (static_cast<int64_t>(sl.devices.size()) != static_cast<int64_t>(sl.dp) * sl.tp) {
        fail("{}: {} devices for dp {} × tp {}", what, sl.devices.size(), sl.dp, sl.tp);
      }
      if (sl.sequences % sl.dp != 0) fail("{}: {} sequences do not split {} ways", what, sl.sequences, sl.dp);
      check_sorted_devices(sl.devices, what);
    }
    // Each group's gradients are whole once the backward of the earliest forward wave holding its layers is over.
    ready_boundary_.assign(t_.sync_groups.size(), 0);
    for (size_t g = 0; g < t_.sync_groups.size(); ++g) {
      const SyncGroupSpec& group = t_.sync_groups[g];
      check_sorted_devices(group.devices, fmt::format("sync group {}", g));
      if (group.tp < 1 || group.devices.size() % static_cast<size_t>(group.tp) != 0) {
        fail("sync group {}: {} devices do not hold {} tensor-parallel shards", g, group.devices.size(), group.tp);
      }
      int earliest = t_.waves;
      for (const auto& [component, layer] : group.layers) {
        int first = t_.waves;
        for (size_t i = 0; i < t_.slices.size(); ++i) {
          const TaskSlice& sl = t_.slices[i];
          if (sl.component == component && sl.first_layer <= layer && layer < int64_t{sl.first_layer} + sl.layers) {
            first = std::min(first, sl.wave);
            // The group's shards are whole shards of every slice's: the slice splits them further or not at all.
            if (sl.tp % group.tp != 0) {
              fail("sync group {} all-reduces 1/{} shards of layer {} that slice {} splits {} ways", g, group.tp,
                   layer, i, sl.tp);
            }
          }
        }
        if (first == t_.waves) fail("sync group {} synchronises layer {} of component {}, which no slice runs", g, layer, component);
        earliest = std::min(earliest, first);
      }
      ready_boundary_[g] = 2 * t_.waves - earliest;
    }
    // A bound before per-device state: each slice's forward and backward on each of its devices.
    int64_t needed = 0;
    for (const TaskSlice& sl : t_.slices) needed += 2 * static_cast<int64_t>(sl.devices.size());
    if (needed > s_.instruction_count()) {
      fail("{} instructions cannot hold a forward and a backward of every slice on each of its devices",
           s_.instruction_count());
    }
  }

  void check_programs() {
    const int slices = static_cast<int>(t_.slices.size());
    const int boundaries = 2 * t_.waves;
    sync_before_.assign(t_.sync_groups.size(), {});
    for (int r = 0; r < s_.layout.pp; ++r) {
      const auto& program = s_.programs[r].instructions;
      int crossed = 0;
      int previous_sync = -1;
      std::set<int> forward, backward;
      std::set<std::tuple<int, int, int>> recv_seen, send_seen;
      for (size_t i = 0; i < program.size(); ++i) {
        const Instruction& in = program[i];
        if (in.encoder_pipeline != -1 || in.peer_encoder_pipeline != -1) fail("{}: names an encoder pipeline", describe(r, i));
        if (in.op == OpKind::kWaveBoundary) {
          if (in.wave != crossed) fail("{}: boundary {} comes next", describe(r, i), crossed);
          ++crossed;
          continue;
        }
        if (in.op == OpKind::kCollective) {
          if (in.group != DeviceGroup::kSync || in.stage < 0 || in.stage >= static_cast<int>(t_.sync_groups.size())) {
            fail("{}: no such sync group (the schedule has {})", describe(r, i), t_.sync_groups.size());
          }
          if (!holds(t_.sync_groups[in.stage].devices, r)) fail("{}: this device is not in the group", describe(r, i));
          // What a sync group does, and what the simulator and the runtime run: an all-reduce of its gradients.
          if (in.collective != CollectiveKind::kAllReduce || in.tensor != CollectiveTensor::kGradients) {
            fail("{}: a sync group all-reduces gradients, not {} {}", describe(r, i),
                 collective_kind_name(in.collective), collective_tensor_name(in.tensor));
          }
          if (crossed < ready_boundary_[in.stage]) {
            fail("{}: runs before backward wave {}, which completes its gradients, is over", describe(r, i),
                 ready_boundary_[in.stage] - 1);
          }
          if (!sync_seen_.insert({in.stage, r}).second) fail("{}: the group synchronises twice here", describe(r, i));
          if (previous_sync >= 0) sync_before_[previous_sync].push_back(in.stage);
          previous_sync = in.stage;
          continue;
        }
        if (in.stage < 0 || in.stage >= slices) fail("{}: no such slice (the schedule has {})", describe(r, i), slices);
        const TaskSlice& sl = t_.slices[in.stage];
        if (!holds(sl.devices, r)) fail("{}: the slice does not run on this device", describe(r, i));
        if (in.micro_batch != 0) fail("{}: slices run micro-batch 0", describe(r, i));
        const int backward_wave = boundaries - 1 - sl.wave;
        switch (in.op) {
          case OpKind::kForward:
            if (crossed != sl.wave) fail("{}: runs in wave {}, its slice's is {}", describe(r, i), crossed, sl.wave);
            if (!forward.insert(in.stage).second) fail("{}: the forward runs twice", describe(r, i));
            ran_forward_.insert({in.stage, r});
            break;
          case OpKind::kBackward:
            if (crossed != backward_wave) {
              fail("{}: runs in wave {}, its slice's backward wave is {}", describe(r, i), crossed, backward_wave);
            }
            if (!forward.count(in.stage)) fail("{}: runs before the forward", describe(r, i));
            if (!backward.insert(in.stage).second) fail("{}: the backward runs twice", describe(r, i));
            ran_backward_.insert({in.stage, r});
            break;
          case OpKind::kSend:
          case OpKind::kRecv: {
            if (in.peer_stage < 0 || in.peer_stage >= slices || in.peer_stage == in.stage) {
              fail("{}: no such peer slice", describe(r, i));
            }
            const bool activation = in.payload == Payload::kActivation;
            const int sender = in.op == OpKind::kSend ? in.stage : in.peer_stage;
            const int receiver = in.op == OpKind::kSend ? in.peer_stage : in.stage;
            // Activations go to a slice of a later wave, gradients back to one of an earlier wave; within one
            // wave only between slices on the same devices (the rows split another way between DP and TP).
            const int ws = t_.slices[sender].wave, wr = t_.slices[receiver].wave;
            const bool same_devices = t_.slices[sender].devices == t_.slices[receiver].devices;
            if (activation ? (ws > wr || (ws == wr && !same_devices)) : (ws < wr || (ws == wr && !same_devices))) {
              fail("{}: {}s go to a slice of an {} wave (of the same wave only on the same devices)", describe(r, i),
                   payload_name(in.payload), activation ? "later" : "earlier");
            }
            const std::tuple<int, int, int> key{activation ? 0 : 1, sender, receiver};
            if (in.op == OpKind::kSend) {
              const bool made = activation ? forward.count(in.stage) : backward.count(in.stage);
              if (!made) fail("{}: sends what is not computed yet", describe(r, i));
              if (!send_seen.insert(key).second) fail("{}: sent twice", describe(r, i));
              ++sends_[key];
            } else {
              const bool used = activation ? forward.count(in.stage) : backward.count(in.stage);
              if (used) fail("{}: received after the pass that needs it", describe(r, i));
              if (!recv_seen.insert(key).second) fail("{}: received twice", describe(r, i));
              ++recvs_[key];
            }
            break;
          }
          default:
            fail("{}: not an instruction a multitask schedule runs", describe(r, i));
        }
      }
      if (crossed != boundaries) fail("device {} crosses {} wave boundaries, not {}", r, crossed, boundaries);
    }
    check_sync_order();
    // Every slice ran on each of its devices, forward and backward.
    for (int sidx = 0; sidx < slices; ++sidx) {
      for (int d : t_.slices[sidx].devices) {
        if (!ran_forward_.count({sidx, d})) fail("device {}: slice {} has no forward", d, sidx);
        if (!ran_backward_.count({sidx, d})) fail("device {}: slice {} has no backward", d, sidx);
      }
    }
    for (size_t g = 0; g < t_.sync_groups.size(); ++g) {
      for (int d : t_.sync_groups[g].devices) {
        if (!sync_seen_.count({static_cast<int>(g), d})) fail("sync group {} is missing on device {}", g, d);
      }
    }
  }

  void check_transfers() {
    for (const auto& [key, count] : sends_) {
      const auto [payload, sender, receiver] = key;
      const size_t from = t_.slices[sender].devices.size(), to = t_.slices[receiver].devices.size();
      if (static_cast<size_t>(count) != from) {
        fail("slice {} sends its {} to slice {} from {} of its {} devices", sender, payload ? "gradient" : "activation",
             receiver, count, from);
      }
      const auto it = recvs_.find(key);
      if (it == recvs_.end() || static_cast<size_t>(it->second) != to) {
        fail("slice {}'s {} to slice {} is received on {} of its {} devices", sender, payload ? "gradient" : "activation",
             receiver, it == recvs_.end() ? 0 : it->second, to);
      }
    }
    for (const auto& [key, count] : recvs_) {
      if (!sends_.count(key)) {
        fail("slice {} receives from slice {} what is never sent", std::get<2>(key), std::get<1>(key));
      }
    }
  }

  // Collectives of different groups issued in different orders on two devices they share can each wait for the
  // other (NCCL runs a device's collectives in issue order): the order "a before b on some device" must be acyclic.
  void check_sync_order() {
    const size_t groups = t_.sync_groups.size();
    std::vector<int> incoming(groups, 0);
    for (const auto& next : sync_before_) {
      for (int b : next) ++incoming[b];
    }
    std::vector<int> ready;
    for (size_t g = 0; g < groups; ++g) {
      if (incoming[g] == 0) ready.push_back(static_cast<int>(g));
    }
    size_t ordered = 0;
    while (!ready.empty()) {
      const int g = ready.back();
      ready.pop_back();
      ++ordered;
      for (int b : sync_before_[g]) {
        if (--incoming[b] == 0) ready.push_back(b);
      }
    }
    if (ordered != groups) {
      for (size_t g = 0; g < groups; ++g) {
        if (incoming[g] > 0) fail("deadlock: sync group {} is issued before and after another on different devices", g);
      }
    }
  }

  // The programs run with receives waiting for every sending device; a boundary waits for nothing.
  void check_deadlock() {
    const int pp = s_.layout.pp;
    std::map<std::tuple<int, int, int>, int> sent;
    std::vector<size_t> pc(pp, 0);
    bool progress = true;
    while (progress) {
      progress = false;
      for (int r = 0; r < pp; ++r) {
        const auto& program = s_.programs[r].instructions;
        while (pc[r] < program.size()) {
          const Instruction& in = program[pc[r]];
          if (in.op == OpKind::kRecv) {
            const std::tuple<int, int, int> key{in.payload == Payload::kActivation ? 0 : 1, in.peer_stage, in.stage};
            const auto it = sent.find(key);
            if (it == sent.end() || it->second < static_cast<int>(t_.slices[in.peer_stage].devices.size())) break;
          } else if (in.op == OpKind::kSend) {
            ++sent[{in.payload == Payload::kActivation ? 0 : 1, in.stage, in.peer_stage}];
          }
          ++pc[r];
          progress = true;
        }
      }
    }
    for (int r = 0; r < pp; ++r) {
      if (pc[r] < s_.programs[r].instructions.size()) fail("deadlock: {} waits forever", describe(r, pc[r]));
    }
  }

  const Schedule& s_;
  const MultitaskSection& t_;
  const std::string& where_;
  std::map<std::tuple<int, int, int>, int> sends_, recvs_;  // (payload, sender, receiver) → devices
  std::set<std::pair<int, int>> sync_seen_;                 // (group, device)
  std::vector<int> ready_boundary_;                         // per group: boundaries crossed before it may run
  std::vector<std::vector<int>> sync_before_;               // group → groups issued right after it somewhere
  std::set<std::pair<int, int>> ran_forward_, ran_backward_;  // (slice, device)
};

}  // namespace

void validate_multitask(const Schedule& schedule, const std::string& where) {
  MultitaskValidator(schedule, where).run();
}

}  // namespace fulcrum
