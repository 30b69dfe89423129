#include "fulcrum/sched/validate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/training_state_memory.h"
#include "fulcrum/sched/validate_multitask.h"

namespace fulcrum {
namespace {

// Bits per (stage, micro-batch) of what has happened, for the checks in program order.
enum : uint8_t {
  kForwardDone = 1,
  kBackwardInputDone = 2,  // kBackward or kBackwardInput
  kBackwardWeightDone = 4, // kBackward or kBackwardWeight
  kActivationReceived = 8,
  kGradientReceived = 16,
  kActivationSent = 32,
  kGradientSent = 64,
};

class Validator {
 public:
  Validator(const Schedule& s, const std::string& where) : s_(s), where_(where) {}

  void run() {
    check_layout();
    check_programs();
    check_encoder_coverage();
    check_deadlock();
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw InputError(fmt::format("{}: {}", where_, fmt::format(format, std::forward<Args>(args)...)));
  }

  std::string describe(int rank, size_t index) const {
    const Instruction& in = s_.programs[rank].instructions[index];
    std::string text = fmt::format("rank {} instruction {} ({}{} stage {}", rank, index, op_kind_name(in.op),
                                   in.encoder_pipeline >= 0 ? fmt::format(" encoder pipeline {}", in.encoder_pipeline)
                                                            : std::string(),
                                   in.stage);
    if (in.micro_batch >= 0) text += fmt::format(" micro-batch {}", in.micro_batch);
    if (in.op == OpKind::kSend || in.op == OpKind::kRecv) {
      text += fmt::format(" {} {}{} stage {}", payload_name(in.payload), in.op == OpKind::kSend ? "to" : "from",
                          in.peer_encoder_pipeline >= 0 ? fmt::format(" encoder pipeline {}", in.peer_encoder_pipeline)
                                                        : std::string(),
                          in.peer_stage);
    }
    if (in.op == OpKind::kEncoderKernels) {
      text += fmt::format(" layer {} kernels [{}, {})", in.layer, in.kernel_begin, in.kernel_end);
    }
    if (in.op == OpKind::kWaveBoundary) text += fmt::format(" wave {}", in.wave);
    return text + ")";
  }

  void check_layout() {
    const ParallelLayout& l = s_.layout;
    if (l.dp < 1 || l.tp < 1 || l.pp < 1 || l.vpp < 1) {
      fail("parallel degrees must be at least 1 (dp {}, tp {}, pp {}, vpp {})", l.dp, l.tp, l.pp, l.vpp);
    }
    if (s_.micro_batches < 1) fail("at least one micro-batch is needed, not {}", s_.micro_batches);
    if (static_cast<int64_t>(s_.stages.size()) != static_cast<int64_t>(l.pp) * l.vpp) {
      fail("{} stages for pp {} × vpp {}", s_.stages.size(), l.pp, l.vpp);
    }
    if (static_cast<int64_t>(s_.programs.size()) != l.pp) fail("{} programs for {} pipeline ranks", s_.programs.size(), l.pp);
    if (static_cast<int64_t>(s_.recompute.size()) != s_.model_layers) {
      fail("{} recompute entries for {} layers", s_.recompute.size(), s_.model_layers);
    }
    int32_t next = check_encoder_layout();
    for (size_t i = 0; i < s_.stages.size(); ++i) {
      const StageLayers& st = s_.stages[i];
      if (st.first_layer != next) fail("stage {} starts at layer {}, not at layer {}", i, st.first_layer, next);
      if (st.end_layer <= st.first_layer) fail("stage {} is empty: it holds no layers", i);
      next = st.end_layer;
    }
    if (next != s_.model_layers) fail("the stages cover {} of the model's {} layers", next, s_.model_layers);
    for (int r = 0; r < l.pp; ++r) {
      if (s_.programs[r].instructions.empty()) fail("pipeline rank {} has an empty program", r);
    }
    // Each (stage, micro-batch) needs a forward and a backward: a cheap bound before allocating per-pair state.
    const int64_t pairs = static_cast<int64_t>(s_.stages.size()) * s_.micro_batches;
    if (2 * pairs > s_.instruction_count()) {
      fail("{} instructions cannot hold a forward and a backward for each of {} stages × {} micro-batches",
           s_.instruction_count(), s_.stages.size(), s_.micro_batches);
    }
    state_.assign(static_cast<size_t>(pairs), 0);
    check_encoder_map();
  }

  // The encoder section's shape; returns the first layer the LLM's stages must start at.
  int32_t check_encoder_layout() {
    const EncoderSection& e = s_.encoder;
    if (!e.present()) {
      if (e.pipelines < 0) fail("the encoder section has {} pipelines", e.pipelines);
      return 0;
    }
    const ParallelLayout& l = s_.layout;
    if (e.pp < 1 || e.tp < 1 || l.pp % e.pp != 0 || l.tp % e.tp != 0) {
      fail("encoder pp {} and tp {} must divide the LLM's pp {} and tp {}", e.pp, e.tp, l.pp, l.tp);
    }
    // The simulator prices encoder layers at the layout's encoder tensor parallelism and places them by the
    // section's: the two must be one.
    if (l.component_tp(true) != e.tp) {
      fail("the layout's encoder_tp {} is not the encoder plan's tp {}", l.component_tp(true), e.tp);
    }
    const int64_t pipelines = static_cast<int64_t>(l.pp / e.pp) * (l.tp / e.tp);
    if (e.pipelines != pipelines) fail("{} encoder pipelines, but pp and tp give {}", e.pipelines, pipelines);
    if (static_cast<int64_t>(e.dp) != pipelines * l.dp) {
      fail("encoder dp {} is not its {} pipelines × the LLM's dp {}", e.dp, e.pipelines, l.dp);
    }
    if (!std::isfinite(e.collective_slowdown) || e.collective_slowdown < 0) {
      fail("encoder collective slowdown {} must be a finite number ≥ 0", e.collective_slowdown);
    }
    if (static_cast<int>(e.stages.size()) != e.pp) fail("{} encoder stages for encoder pp {}", e.stages.size(), e.pp);
    std::vector<std::pair<int32_t, int32_t>> ranges;
    for (size_t st = 0; st < e.stages.size(); ++st) {
      if (e.stages[st].empty()) fail("encoder stage {} holds no layers", st);
      for (const StageLayers& r : e.stages[st]) {
        if (r.first_layer < 0 || r.end_layer <= r.first_layer || r.end_layer > s_.model_layers) {
          fail("encoder stage {} names layers [{}, {}), not a range of the model's {}", st, r.first_layer, r.end_layer,
               s_.model_layers);
        }
        ranges.emplace_back(r.first_layer, r.end_layer);
      }
    }
    std::sort(ranges.begin(), ranges.end());
    int32_t next = 0;
    for (const auto& [first, end] : ranges) {
      if (first != next) fail("the encoder stages leave out or repeat layer {}", std::min(first, next));
      next = end;
    }
    if (static_cast<int>(e.llm_micro_batch.size()) != e.pipelines) {
      fail("the encoder map has {} pipelines, not {}", e.llm_micro_batch.size(), e.pipelines);
    }
    return next;
  }

  // The map from encoder to LLM micro-batches, a permutation; after the bound on micro-batches in check_layout,
  // so what is allocated here grows with the schedule's instructions.
  void check_encoder_map() {
    const EncoderSection& e = s_.encoder;
    if (!e.present()) return;
    feeder_.assign(static_cast<size_t>(s_.micro_batches), {-1, -1});
    encoder_offset_.assign(static_cast<size_t>(e.pipelines) + 1, 0);
    for (int j = 0; j < e.pipelines; ++j) {
      if (e.llm_micro_batch[j].empty()) fail("encoder pipeline {} has no micro-batch", j);
      for (int k = 0; k < e.micro_batches(j); ++k) {
        const int i = e.llm_micro_batch[j][k];
        if (i < 0 || i >= s_.micro_batches) {
          fail("encoder pipeline {} micro-batch {} feeds LLM micro-batch {}, which does not exist", j, k, i);
        }
        if (feeder_[i].first >= 0) fail("LLM micro-batch {} is fed by two encoder micro-batches", i);
        feeder_[i] = {j, k};
      }
      encoder_offset_[j + 1] = encoder_offset_[j] + static_cast<size_t>(e.micro_batches(j));
    }
    for (int i = 0; i < s_.micro_batches; ++i) {
      if (feeder_[i].first < 0) fail("no encoder micro-batch feeds LLM micro-batch {}", i);
    }
    encoder_state_.assign(encoder_offset_.back() * static_cast<size_t>(e.pp), 0);
  }

  // Pipeline j's encoder micro-batch that feeds LLM micro-batch i, or -1.
  int encoder_of_llm(int j, int i) const { return feeder_[i].first == j ? feeder_[i].second : -1; }

  // Where (pipeline, stage, micro-batch) is in the encoder's per-pass arrays.
  size_t encoder_index(int pipeline, int stage, int k) const {
    return encoder_offset_[pipeline] * static_cast<size_t>(s_.encoder.pp) +
           static_cast<size_t>(stage) * s_.encoder.micro_batches(pipeline) + k;
  }
  uint8_t& encoder_state(int pipeline, int stage, int k) { return encoder_state_[encoder_index(pipeline, stage, k)]; }

  // A collective of gradients reduces them (all-reduce or reduce-scatter): gathering them leaves each replica's own.
  void check_reduces(const Instruction& in, int r, size_t i) {
    if (in.collective == CollectiveKind::kAllGather) {
      fail("{}: gathers gradients, which a step must reduce (all_reduce or reduce_scatter)", describe(r, i));
    }
  }

  // The checks of an encoder instruction in program order (those of check_programs, for the encoder side).
  void check_encoder_instruction(int r, size_t i) {
    const Instruction& in = s_.programs[r].instructions[i];
    const EncoderSection& e = s_.encoder;
    const ParallelLayout& l = s_.layout;
    if (!e.present()) fail("{}: names an encoder pipeline, but the schedule has no encoder section", describe(r, i));
    const int j = in.encoder_pipeline;
    if (j >= e.pipelines) fail("{}: no such encoder pipeline (the section has {})", describe(r, i), e.pipelines);
    if (in.stage < 0 || in.stage >= e.pp) fail("{}: no such encoder stage", describe(r, i));
    if (e.rank_of(l, j, in.stage) != r) {
      fail("{}: the encoder stage runs on rank {}", describe(r, i), e.rank_of(l, j, in.stage));
    }
    const int st = in.stage;
    const bool whole_stage = in.op == OpKind::kCollective;
    if (!whole_stage && (in.micro_batch < 0 || in.micro_batch >= e.micro_batches(j))) {
      fail("{}: no such micro-batch (the encoder pipeline has {})", describe(r, i), e.micro_batches(j));
    }
    const int k = in.micro_batch;
    switch (in.op) {
      case OpKind::kEncoderKernels: {
        bool in_stage = false;
        for (const StageLayers& range : e.stages[st]) {
          in_stage = in_stage || (in.layer >= range.first_layer && in.layer < range.end_layer);
        }
        if (!in_stage) fail("{}: layer {} is not in encoder stage {}", describe(r, i), in.layer, st);
        if (in.kernel_begin < 0 || in.kernel_end <= in.kernel_begin) {
          fail("{}: kernels [{}, {}) is not a range", describe(r, i), in.kernel_begin, in.kernel_end);
        }
        const bool forward = in.pass == Pass::kForward;
        const bool recompute = in.pass == Pass::kRecompute;
        if (!forward && !recompute && in.pass != Pass::kBackward && in.pass != Pass::kBackwardInput) {
          fail("{}: an encoder runs forward, recompute, backward or input-gradient passes", describe(r, i));
        }
        // A layer's mode says whether it recomputes: the simulator keeps its input alone from the forward and
        // prices the recomputation's kernels, which must then run, just before the backward they serve.
        const Recompute mode = static_cast<size_t>(in.layer) < s_.recompute.size() ? s_.recompute[in.layer]
                                                                                   : Recompute::kNone;
        if (recompute && mode == Recompute::kNone) {
          fail("{}: layer {} recomputes, but its recompute mode is none", describe(r, i), in.layer);
        }
        // Inside the LLM pass before it: nothing that waits may stand between them.
        if (in.inside_pass && !pass_open_) fail("{}: runs inside an LLM pass, but follows none", describe(r, i));
        uint8_t& state = encoder_state(j, st, k);
        // A pass whose result has left (its output sent on, its gradients sent back or reduced) is over.
        if (forward ? (state & kActivationSent) : ((state & kGradientSent) || reduced_.count({j, st}))) {
          fail("{}: runs after its pass's result was sent", describe(r, i));
        }
        const uint8_t received = forward ? kActivationReceived : kGradientReceived;
        const bool needs_input = forward ? st > 0 : true;
        if (needs_input && !(state & received)) {
          fail("{}: runs before its {} is received", describe(r, i), forward ? "input" : "output gradient");
        }
        if (!forward && !(state & kForwardDone)) fail("{}: runs before the forward", describe(r, i));
        // Passes of a stage in micro-batch order; a layer's kernels in order from the first; layers downstream
        // in the forward, upstream in the backward.
        // A pass runs whole before the stage's next one begins: forwards in micro-batch order, backwards in the
        // order their gradients come (that of the LLM micro-batches they fed).
        auto& current = (forward ? forward_order_ : backward_order_)[{j, st}];
        if (current != k + 1) {
          if (current > 0 && forward && k < current - 1) {
            fail("{}: runs after micro-batch {}'s pass began", describe(r, i), current - 1);
          }
          if (!closed_passes_.insert({j, st, k, forward}).second) {
            fail("{}: the pass resumes after another pass of the stage began", describe(r, i));
          }
          current = k + 1;
        }
        auto& next = next_kernel_[{j, k, in.layer, static_cast<int>(in.pass)}];
        if (in.kernel_begin != next) {
          fail("{}: starts at kernel {}, but the layer's pass has run up to kernel {}", describe(r, i), in.kernel_begin,
               next);
        }
        next = in.kernel_end;
        auto& last_layer = (forward ? last_forward_layer_ : last_backward_layer_)[{j, st, k}];
        Pass& last_pass = last_pass_[{j, st, k, forward}];
        // The backward of a recomputing layer follows its recomputation; anything else starts a new layer.
        const bool after_own_recompute = !forward && !recompute && last_layer.second &&
                                         in.layer == last_layer.first && last_pass == Pass::kRecompute;
        if (in.kernel_begin == 0) {
          if (!forward && !recompute && mode != Recompute::kNone && !after_own_recompute) {
            fail("{}: layer {}'s backward runs before its recomputation", describe(r, i), in.layer);
          }
          if (!after_own_recompute && last_layer.second &&
              (forward ? in.layer <= last_layer.first : in.layer >= last_layer.first)) {
            fail("{}: layer {} after layer {} runs against the {} order", describe(r, i), in.layer, last_layer.first,
                 forward ? "forward" : "backward");
          }
          ++(forward ? forward_layers_ : backward_layers_)[{j, st, k}];
        } else if (!last_layer.second || in.layer != last_layer.first || in.pass != last_pass) {
          fail("{}: continues a layer pass that is not the one running", describe(r, i));
        }
        last_layer = {in.layer, true};
        last_pass = in.pass;
        if (recompute) break;  // nothing computed for the stage's neighbours yet
        if (!forward && !(state & kBackwardInputDone)) ++backwards_begun_[{j, st}];
        state |= forward ? kForwardDone : kBackwardInputDone;
        break;
      }
      case OpKind::kSend:
      case OpKind::kRecv: {
        const bool activation = in.payload == Payload::kActivation;
        const bool to_llm = in.peer_encoder_pipeline < 0;
        bool fits;
        if (to_llm) {
          // The last encoder stage and the LLM's first: activations to it, gradients from it.
          fits = st == e.pp - 1 && in.peer_stage == 0 && activation == (in.op == OpKind::kSend);
        } else {
          fits = in.peer_encoder_pipeline == j && in.peer_stage - st == ((in.op == OpKind::kSend) == activation ? 1 : -1);
        }
        if (!fits) {
          fail("{}: encoder activations go to the next encoder stage and from the last to the LLM's first stage, "
               "gradients back the same way", describe(r, i));
        }
        uint8_t& state = encoder_state(j, st, k);
        if (in.op == OpKind::kSend) {
          const uint8_t produced = activation ? kForwardDone : kBackwardInputDone;
          const uint8_t sent = activation ? kActivationSent : kGradientSent;
          if (!(state & produced)) fail("{}: sends what is not computed yet", describe(r, i));
          if (state & sent) fail("{}: sent twice", describe(r, i));
          state |= sent;
        } else {
          const uint8_t received = activation ? kActivationReceived : kGradientReceived;
          if (state & received) fail("{}: received twice", describe(r, i));
          state |= received;
        }
        break;
      }
      case OpKind::kCollective:
        if (in.group != DeviceGroup::kEncoderData) {
          fail("{}: an encoder collective runs over the encoder's data-parallel group", describe(r, i));
        }
        if (in.tensor == CollectiveTensor::kGradients) {
          check_reduces(in, r, i);
          if (backwards_begun_[{j, st}] != e.micro_batches(j)) {
            fail("{}: reduces gradients before the backward of every micro-batch", describe(r, i));
          }
          reduced_.insert({j, st});
        }
        encoder_collectives_[{j, st}].push_back({in.collective, in.tensor});
        break;
      default:
        fail("{}: not an instruction an encoder runs", describe(r, i));
    }
  }

  // The LLM's side of the encoder's sends and receives: its first stage receives micro-batch i's input from
  // the encoder micro-batch that feeds it and sends the gradient back after its backward.
  void check_llm_encoder_transfer(int r, size_t i) {
    const Instruction& in = s_.programs[r].instructions[i];
    const EncoderSection& e = s_.encoder;
    if (!e.present()) fail("{}: names an encoder pipeline, but the schedule has no encoder section", describe(r, i));
    const int j = in.peer_encoder_pipeline;
    if (j >= e.pipelines) fail("{}: no such encoder pipeline (the section has {})", describe(r, i), e.pipelines);
    const bool activation = in.payload == Payload::kActivation;
    if (in.stage != 0 || in.peer_stage != e.pp - 1 || activation != (in.op == OpKind::kRecv)) {
      fail("{}: the LLM's first stage receives its inputs from the last encoder stage and sends their gradients "
           "back", describe(r, i));
    }
    if (encoder_of_llm(j, in.micro_batch) < 0) {
      fail("{}: encoder pipeline {} does not feed LLM micro-batch {}", describe(r, i), j, in.micro_batch);
    }
    uint8_t& st = state(0, in.micro_batch);
    if (in.op == OpKind::kRecv) {
      if (st & kActivationReceived) fail("{}: received twice", describe(r, i));
      st |= kActivationReceived;
    } else {
      if (!(st & kBackwardInputDone)) fail("{}: sends what is not computed yet", describe(r, i));
      if (st & kGradientSent) fail("{}: sent twice", describe(r, i));
      st |= kGradientSent;
    }
  }

  uint8_t& state(int stage, int micro_batch) {
    return state_[static_cast<size_t>(stage) * s_.micro_batches + micro_batch];
  }

  // Everything that can be checked rank by rank, in program order.
  void check_programs() {
    const ParallelLayout& l = s_.layout;
    const int stages = l.stages();
    std::vector<int64_t> backward_weights(stages, 0);
    std::vector<int> gradient_reductions(stages, 0);
    std::vector<int32_t> waves_of_rank0;
    for (int r = 0; r < l.pp; ++r) {
      std::vector<int32_t> waves;
      std::vector<int8_t> buffers;  // 0 unseen, 1 allocated, 2 freed
      // Sharded state: a stage's parameters are gathered before it computes (ZeRO-3: before each pass).
      std::vector<int> gathers_pending(stages, 0);
      std::vector<bool> gathered(stages, false);
      const bool replicated = l.dp > 1;
      const StateSharding sharding = l.state_sharding;
      const auto& program = s_.programs[r].instructions;
      pass_open_ = false;
      for (size_t i = 0; i < program.size(); ++i) {
        const Instruction& in = program[i];
        if (i > 0) {
          // An LLM pass stays open to encoder kernels through encoder instructions and the LLM's sends after it.
          const Instruction& prev = program[i - 1];
          if (is_compute(prev.op) && prev.encoder_pipeline < 0) {
            pass_open_ = true;
          } else if (prev.encoder_pipeline < 0 && prev.op != OpKind::kSend) {
            pass_open_ = false;
          }
        }
        if (in.op == OpKind::kWaveBoundary) {
          if (in.wave < 0) fail("{}: a wave number must be ≥ 0", describe(r, i));
          waves.push_back(in.wave);
          continue;
        }
        if (in.encoder_pipeline >= 0) {
          check_encoder_instruction(r, static_cast<int>(i));
          continue;
        }
        if (in.encoder_pipeline < -1 || in.peer_encoder_pipeline < -1) fail("{}: no such encoder pipeline", describe(r, i));
        if (in.stage < 0 || in.stage >= stages) fail("{}: no such stage", describe(r, i));
        if (l.rank_of_stage(in.stage) != r) fail("{}: the stage runs on rank {}", describe(r, i), l.rank_of_stage(in.stage));
        const bool needs_micro_batch = is_compute(in.op) || in.op == OpKind::kSend || in.op == OpKind::kRecv ||
                                       in.op == OpKind::kEncoderKernels;
        if (needs_micro_batch && (in.micro_batch < 0 || in.micro_batch >= s_.micro_batches)) {
          fail("{}: no such micro-batch (the schedule has {})", describe(r, i), s_.micro_batches);
        }
        const int s = in.stage;
        const int j = in.micro_batch;
        if ((in.op == OpKind::kSend || in.op == OpKind::kRecv) && in.peer_encoder_pipeline >= 0) {
          check_llm_encoder_transfer(r, i);
          continue;
        }
        if (is_compute(in.op) && replicated && sharding != StateSharding::kZero0) {
          if (sharding == StateSharding::kZero3 ? gathers_pending[s]-- == 0 : !gathered[s]) {
            fail("{}: runs before the stage's parameters are gathered ({} shards them over the data-parallel group{})",
                 describe(r, i), state_sharding_name(sharding),
                 sharding == StateSharding::kZero3 ? ", gathered before each pass" : ", gathered once a step");
          }
        }
        switch (in.op) {
          case OpKind::kForward: {
            uint8_t& st = state(s, j);
            if (st & kForwardDone) fail("{}: the forward runs twice", describe(r, i));
            if (s == 0 && s_.encoder.present() && !(st & kActivationReceived)) {
              fail("{}: runs before its input is received from the encoder", describe(r, i));
            }
            if (s > 0) {
              const bool local = l.rank_of_stage(s - 1) == r;
              if (local ? !(state(s - 1, j) & kForwardDone) : !(st & kActivationReceived)) {
                fail("{}: runs before its input {}", describe(r, i),
                     local ? fmt::format("(stage {}'s forward on this rank)", s - 1) : std::string("is received"));
              }
            }
            st |= kForwardDone;
            break;
          }
          case OpKind::kBackward:
          case OpKind::kBackwardInput: {
            uint8_t& st = state(s, j);
            if (!(st & kForwardDone)) fail("{}: runs before the forward", describe(r, i));
            if (st & kBackwardInputDone) fail("{}: the backward runs twice", describe(r, i));
            if (s + 1 < stages) {
              const bool local = l.rank_of_stage(s + 1) == r;
              if (local ? !(state(s + 1, j) & kBackwardInputDone) : !(st & kGradientReceived)) {
                fail("{}: runs before its output gradient {}", describe(r, i),
                     local ? fmt::format("(stage {}'s backward on this rank)", s + 1) : std::string("is received"));
              }
            }
            st |= kBackwardInputDone;
            if (in.op == OpKind::kBackward) {
              st |= kBackwardWeightDone;
              ++backward_weights[s];
            }
            break;
          }
          case OpKind::kBackwardWeight: {
            uint8_t& st = state(s, j);
            if (!(st & kBackwardInputDone)) fail("{}: runs before the input-gradient half", describe(r, i));
            if (st & kBackwardWeightDone) fail("{}: the weight gradient runs twice", describe(r, i));
            st |= kBackwardWeightDone;
            ++backward_weights[s];
            break;
          }
          case OpKind::kSend:
          case OpKind::kRecv: {
            const bool activation = in.payload == Payload::kActivation;
            // Activations flow to the next stage, gradients to the previous one.
            const int sender = in.op == OpKind::kSend ? s : in.peer_stage;
            const int receiver = in.op == OpKind::kSend ? in.peer_stage : s;
            if (receiver - sender != (activation ? 1 : -1) || in.peer_stage < 0 || in.peer_stage >= stages) {
              fail("{}: {}s go from a stage to the {} one", describe(r, i), payload_name(in.payload),
                   activation ? "next" : "previous");
            }
            if (l.rank_of_stage(in.peer_stage) == r) fail("{}: both stages are on this rank", describe(r, i));
            if (in.op == OpKind::kSend) {
              uint8_t& st = state(s, j);
              const uint8_t produced = activation ? kForwardDone : kBackwardInputDone;
              const uint8_t sent = activation ? kActivationSent : kGradientSent;
              if (!(st & produced)) fail("{}: sends what is not computed yet", describe(r, i));
              if (st & sent) fail("{}: sent twice", describe(r, i));
              st |= sent;
            } else {
              uint8_t& st = state(receiver, j);
              const uint8_t received = activation ? kActivationReceived : kGradientReceived;
              if (st & received) fail("{}: received twice", describe(r, i));
              st |= received;
            }
            break;
          }
          case OpKind::kCollective:
            if (in.group != DeviceGroup::kData) fail("{}: an LLM collective runs over its data-parallel group", describe(r, i));
            if (in.tensor == CollectiveTensor::kParameters) {
              if (!replicated || sharding == StateSharding::kZero0) {
                fail("{}: gathers parameters that every data-parallel replica holds whole", describe(r, i));
              }
              if (in.collective != CollectiveKind::kAllGather) fail("{}: parameters are all-gathered", describe(r, i));
              ++gathers_pending[s];
              gathered[s] = true;
            }
            if (in.tensor == CollectiveTensor::kGradients) {
              check_reduces(in, r, i);
              if (sharding == StateSharding::kZero0 && in.collective == CollectiveKind::kReduceScatter) {
                fail("{}: reduce-scatters gradients, but under zero-0 every replica updates the whole state from "
                     "them (all_reduce)", describe(r, i));
              }
              if (backward_weights[s] != s_.micro_batches) {
                fail("{}: reduces gradients before the stage's last backward", describe(r, i));
              }
              ++gradient_reductions[s];
            }
            break;
          case OpKind::kEncoderKernels:
            fail("{}: encoder kernels name no encoder pipeline", describe(r, i));
          case OpKind::kAllocate:
          case OpKind::kFree: {
            if (in.buffer < 0 || in.buffer > 1'000'000) fail("{}: buffer {} is out of range", describe(r, i), in.buffer);
            if (buffers.size() <= static_cast<size_t>(in.buffer)) buffers.resize(in.buffer + 1, 0);
            int8_t& b = buffers[in.buffer];
            if (in.op == OpKind::kAllocate) {
              if (b != 0) fail("{}: buffer {} is allocated twice", describe(r, i), in.buffer);
              if (in.bytes < 0) fail("{}: negative size", describe(r, i));
              b = 1;
            } else {
              if (b != 1) fail("{}: frees buffer {}, which is not allocated", describe(r, i), in.buffer);
              b = 2;
            }
            break;
          }
          case OpKind::kWaveBoundary:
            break;
        }
      }
      for (size_t b = 0; b < buffers.size(); ++b) {
        if (buffers[b] == 1) fail("rank {}: buffer {} is never freed", r, b);
      }
      if (r == 0) {
        waves_of_rank0 = waves;
      } else if (waves != waves_of_rank0) {
        fail("rank {} crosses wave boundaries {} but rank 0 crosses {}", r, fmt::join(waves, ","),
             fmt::join(waves_of_rank0, ","));
      }
    }
    // Data-parallel replicas stay equal only if each stage's gradients are reduced over them once a step.
    for (int s = 0; l.dp > 1 && s < stages; ++s) {
      if (gradient_reductions[s] != 1) {
        fail("rank {}: stage {} reduces its gradients over its {} data-parallel replicas {} times a step, not once",
             l.rank_of_stage(s), s, l.dp, gradient_reductions[s]);
      }
    }
    // Every micro-batch through every stage, sends matched by receives.
    for (int s = 0; s < stages; ++s) {
      for (int j = 0; j < s_.micro_batches; ++j) {
        const uint8_t st = state(s, j);
        const int rank = l.rank_of_stage(s);
        if (!(st & kForwardDone)) fail("rank {}: stage {} has no forward of micro-batch {}", rank, s, j);
        if (!(st & kBackwardInputDone)) fail("rank {}: stage {} has no backward of micro-batch {}", rank, s, j);
        if (!(st & kBackwardWeightDone)) {
          fail("rank {}: stage {} has no weight gradient of micro-batch {}", rank, s, j);
        }
        if (s + 1 < stages && l.rank_of_stage(s + 1) != rank) {
          const bool sent = st & kActivationSent, received = state(s + 1, j) & kActivationReceived;
          if (sent != received) {
            fail("stage {} micro-batch {}: the activation to stage {} is {}", s, j, s + 1,
                 sent ? "sent but never received" : "received but never sent");
          }
          const bool gsent = state(s + 1, j) & kGradientSent, greceived = st & kGradientReceived;
          if (gsent != greceived) {
            fail("stage {} micro-batch {}: the gradient to stage {} is {}", s + 1, j, s,
                 gsent ? "sent but never received" : "received but never sent");
          }
        }
      }
    }
  }

  // Every encoder micro-batch through every encoder stage, forward and (where the stage trains) backward, its
  // transfers matched by receives; the same layers for every micro-batch of a stage.
  void check_encoder_coverage() {
    const EncoderSection& e = s_.encoder;
    if (!e.present()) return;
    // The copies of each encoder stage run the same collectives in the same order, and a stage that trains
    // reduces its gradients over its copies once a step.
    const auto text = [](const std::vector<std::pair<CollectiveKind, CollectiveTensor>>& list) {
      std::vector<std::string> names;
      for (const auto& [kind, tensor] : list) {
        names.push_back(fmt::format("{} {}", collective_kind_name(kind), collective_tensor_name(tensor)));
      }
      return names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "));
    };
    for (int st = 0; st < e.pp; ++st) {
      const auto& first = encoder_collectives_[{0, st}];
      for (int j = 0; j < e.pipelines; ++j) {
        const auto& these = encoder_collectives_[{j, st}];
        if (these != first) {
          fail("rank {}: encoder pipeline {} stage {} runs the collectives [{}] but pipeline 0's copy of the stage runs "
               "[{}]: copies pair their collectives in order", e.rank_of(s_.layout, j, st), j, st, text(these),
               text(first));
        }
      }
    }
    for (int st = 0; st < e.pp; ++st) {
      for (int j = 0; j < e.pipelines; ++j) {
        const auto& these = encoder_collectives_[{j, st}];
        const auto reductions = std::count_if(these.begin(), these.end(), [](const auto& c) {
          return c.second == CollectiveTensor::kGradients;
        });
        if (e.dp > 1 && backwards_begun_[{j, st}] > 0 && reductions != 1) {
          fail("rank {}: encoder pipeline {} stage {} reduces its gradients over its {} copies {} times a step, not once",
               e.rank_of(s_.layout, j, st), j, st, e.dp, reductions);
        }
      }
    }
    for (int j = 0; j < e.pipelines; ++j) {
      for (int st = 0; st < e.pp; ++st) {
        const int rank = e.rank_of(s_.layout, j, st);
        for (int k = 0; k < e.micro_batches(j); ++k) {
          const uint8_t now = encoder_state(j, st, k);
          if (!(now & kForwardDone)) fail("rank {}: encoder pipeline {} stage {} has no forward of micro-batch {}", rank, j, st, k);
          for (const auto* count : {&forward_layers_, &backward_layers_}) {
            const auto first = count->find({j, st, 0});
            const auto here = count->find({j, st, k});
            const int a = first == count->end() ? 0 : first->second, b = here == count->end() ? 0 : here->second;
            if (a != b) {
              fail("rank {}: encoder pipeline {} stage {} runs {} layers' {} for micro-batch {} but {} for micro-batch 0",
                   rank, j, st, b, count == &forward_layers_ ? "forward" : "backward", k, a);
            }
          }
          const int i = e.llm_micro_batch[j][k];
          const bool last = st + 1 == e.pp;
          // Activations downstream: to the next encoder stage, or from the last into the LLM.
          const bool sent = now & kActivationSent;
          const bool received = last ? (state(0, i) & kActivationReceived) : (encoder_state(j, st + 1, k) & kActivationReceived);
          if (sent != received) {
            fail("encoder pipeline {} stage {} micro-batch {}: the activation to {} is {}", j, st, k,
                 last ? fmt::format("the LLM's micro-batch {}", i) : fmt::format("encoder stage {}", st + 1),
                 sent ? "sent but never received" : "received but never sent");
          }
          // Gradients upstream.
          const bool gsent = last ? (state(0, i) & kGradientSent) : (encoder_state(j, st + 1, k) & kGradientSent);
          const bool greceived = now & kGradientReceived;
          if (gsent != greceived) {
            fail("encoder pipeline {} stage {} micro-batch {}: the gradient from {} is {}", j, st, k,
                 last ? fmt::format("the LLM's micro-batch {}", i) : fmt::format("encoder stage {}", st + 1),
                 gsent ? "sent but never received" : "received but never sent");
          }
        }
      }
    }
  }

  // Runs the programs with receives as the only waits.
  void check_deadlock() {
    const int pp = s_.layout.pp;
    const int stages = s_.layout.stages();
    // Sent flags per (payload, sending stage, micro-batch).
    std::vector<uint8_t> sent(static_cast<size_t>(2) * stages * s_.micro_batches, 0);
    auto sent_at = [&](Payload p, int stage, int j) -> uint8_t& {
      return sent[(static_cast<size_t>(p == Payload::kGradient) * stages + stage) * s_.micro_batches + j];
    };
    // Encoder transfers by (payload, pipeline, sending encoder stage, encoder micro-batch); between the encoder
    // and the LLM, the LLM's first stage's gradient slot (it has no previous LLM stage to send to).
    const EncoderSection& enc = s_.encoder;
    std::vector<uint8_t> encoder_sent(2 * encoder_state_.size(), 0);
    auto encoder_sent_at = [&](Payload p, int pipeline, int stage, int k) -> uint8_t& {
      return encoder_sent[static_cast<size_t>(p == Payload::kGradient) * encoder_state_.size() +
                          encoder_index(pipeline, stage, k)];
    };
    auto slot_of = [&](const Instruction& in) -> uint8_t& {
      const bool send = in.op == OpKind::kSend;
      if (in.encoder_pipeline >= 0) {
        if (send || in.peer_encoder_pipeline >= 0) {
          return send ? encoder_sent_at(in.payload, in.encoder_pipeline, in.stage, in.micro_batch)
                      : encoder_sent_at(in.payload, in.peer_encoder_pipeline, in.peer_stage, in.micro_batch);
        }
        return sent_at(in.payload, in.peer_stage, enc.llm_micro_batch[in.encoder_pipeline][in.micro_batch]);
      }
      if (in.peer_encoder_pipeline >= 0 && !send) {
        return encoder_sent_at(in.payload, in.peer_encoder_pipeline, in.peer_stage,
                               encoder_of_llm(in.peer_encoder_pipeline, in.micro_batch));
      }
      return send ? sent_at(in.payload, in.stage, in.micro_batch) : sent_at(in.payload, in.peer_stage, in.micro_batch);
    };
    std::vector<size_t> pc(pp, 0);
    bool progress = true;
    while (progress) {
      progress = false;
      for (int r = 0; r < pp; ++r) {
        const auto& program = s_.programs[r].instructions;
        while (pc[r] < program.size()) {
          const Instruction& in = program[pc[r]];
          if (in.op == OpKind::kRecv) {
            if (!slot_of(in)) break;
          } else if (in.op == OpKind::kSend) {
            slot_of(in) = 1;
          }
          ++pc[r];
          progress = true;
        }
      }
    }
    std::vector<std::string> waiting;
    for (int r = 0; r < pp; ++r) {
      if (pc[r] < s_.programs[r].instructions.size()) waiting.push_back(describe(r, pc[r]));
    }
    if (!waiting.empty()) {
      const size_t shown = std::min<size_t>(waiting.size(), 4);
      fail("deadlock: {} rank(s) wait forever: {}{}", waiting.size(),
           fmt::join(waiting.begin(), waiting.begin() + static_cast<std::ptrdiff_t>(shown), "; "),
           shown < waiting.size() ? "; ..." : "");
    }
  }

  const Schedule& s_;
  const std::string& where_;
  std::vector<uint8_t> state_;
  // Encoder section: [pipeline][LLM micro-batch] → its encoder micro-batch or -1; state per (pipeline, stage,
  // micro-batch); pass order per (pipeline, stage); the next kernel of each (pipeline, micro-batch, layer,
  // pass); the last layer run and the layers begun per (pipeline, stage, micro-batch).
  std::vector<std::pair<int, int>> feeder_;  // [LLM micro-batch] → (pipeline, its micro-batch)
  std::vector<size_t> encoder_offset_;       // [pipeline]: micro-batches of the pipelines before it
  std::vector<uint8_t> encoder_state_;
  bool pass_open_ = false;  // the instruction being checked may run inside the LLM pass before it
  std::map<std::pair<int, int>, int> forward_order_, backward_order_;  // the running pass's micro-batch + 1
  std::set<std::tuple<int, int, int, bool>> closed_passes_;  // passes begun
  std::map<std::tuple<int, int, int, int>, int> next_kernel_;
  std::map<std::tuple<int, int, int>, std::pair<int, bool>> last_forward_layer_, last_backward_layer_;
  std::map<std::tuple<int, int, int>, int> forward_layers_, backward_layers_;
  std::map<std::tuple<int, int, int, bool>, Pass> last_pass_;  // of the layer last begun, per (..., forward)
  std::map<std::pair<int, int>, int> backwards_begun_;  // (pipeline, stage) → micro-batches whose backward began
  std::set<std::pair<int, int>> reduced_;               // (pipeline, stage) whose gradients were reduced
  // (pipeline, stage) → its collectives in program order: the copies of a stage run the same ones, which the
  // simulator (and NCCL) pairs by position.
  std::map<std::pair<int, int>, std::vector<std::pair<CollectiveKind, CollectiveTensor>>> encoder_collectives_;
};

}  // namespace

void validate(const Schedule& schedule, const std::string& where) {
  if (schedule.tasks.present()) {
    validate_multitask(schedule, where);
    return;
  }
  Validator(schedule, where).run();
}

void validate_planned(const Schedule& schedule, const std::string& where) {
  try {
    validate(schedule, where);
  } catch (const InputError& e) {
    throw InternalError(e.what());
  }
}

}  // namespace fulcrum
