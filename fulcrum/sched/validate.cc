#include "fulcrum/sched/validate.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "fulcrum/core/error.h"

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
    check_deadlock();
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw InputError(fmt::format("{}: {}", where_, fmt::format(format, std::forward<Args>(args)...)));
  }

  std::string describe(int rank, size_t index) const {
    const Instruction& in = s_.programs[rank].instructions[index];
    std::string text = fmt::format("rank {} instruction {} ({} stage {}", rank, index, op_kind_name(in.op), in.stage);
    if (in.micro_batch >= 0) text += fmt::format(" micro-batch {}", in.micro_batch);
    if (in.op == OpKind::kSend || in.op == OpKind::kRecv) {
      text += fmt::format(" {} {} stage {}", payload_name(in.payload), in.op == OpKind::kSend ? "to" : "from",
                          in.peer_stage);
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
    int32_t next = 0;
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
  }

  uint8_t& state(int stage, int micro_batch) {
    return state_[static_cast<size_t>(stage) * s_.micro_batches + micro_batch];
  }

  // Everything that can be checked rank by rank, in program order.
  void check_programs() {
    const ParallelLayout& l = s_.layout;
    const int stages = l.stages();
    std::vector<int64_t> backward_weights(stages, 0);
    std::vector<int32_t> waves_of_rank0;
    for (int r = 0; r < l.pp; ++r) {
      std::vector<int32_t> waves;
      std::vector<int8_t> buffers;  // 0 unseen, 1 allocated, 2 freed
      const auto& program = s_.programs[r].instructions;
      for (size_t i = 0; i < program.size(); ++i) {
        const Instruction& in = program[i];
        if (in.op == OpKind::kWaveBoundary) {
          if (in.wave < 0) fail("{}: a wave number must be ≥ 0", describe(r, i));
          waves.push_back(in.wave);
          continue;
        }
        if (in.stage < 0 || in.stage >= stages) fail("{}: no such stage", describe(r, i));
        if (l.rank_of_stage(in.stage) != r) fail("{}: the stage runs on rank {}", describe(r, i), l.rank_of_stage(in.stage));
        const bool needs_micro_batch = is_compute(in.op) || in.op == OpKind::kSend || in.op == OpKind::kRecv ||
                                       in.op == OpKind::kEncoderKernels;
        if (needs_micro_batch && (in.micro_batch < 0 || in.micro_batch >= s_.micro_batches)) {
          fail("{}: no such micro-batch (the schedule has {})", describe(r, i), s_.micro_batches);
        }
        const int s = in.stage;
        const int j = in.micro_batch;
        switch (in.op) {
          case OpKind::kForward: {
            uint8_t& st = state(s, j);
            if (st & kForwardDone) fail("{}: the forward runs twice", describe(r, i));
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
            if (in.tensor == CollectiveTensor::kGradients && backward_weights[s] != s_.micro_batches) {
              fail("{}: reduces gradients before the stage's last backward", describe(r, i));
            }
            break;
          case OpKind::kEncoderKernels:
            if (in.layer < 0 || in.layer >= s_.model_layers || in.kernel_begin < 0 ||
                in.kernel_end <= in.kernel_begin) {
              fail("{}: names layer {} kernels [{}, {}), which do not exist", describe(r, i), in.layer,
                   in.kernel_begin, in.kernel_end);
            }
            break;
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

  // Runs the programs with receives and wave boundaries as the only waits.
  void check_deadlock() {
    const int pp = s_.layout.pp;
    const int stages = s_.layout.stages();
    // Sent flags per (payload, sending stage, micro-batch).
    std::vector<uint8_t> sent(static_cast<size_t>(2) * stages * s_.micro_batches, 0);
    auto sent_at = [&](Payload p, int stage, int j) -> uint8_t& {
      return sent[(static_cast<size_t>(p == Payload::kGradient) * stages + stage) * s_.micro_batches + j];
    };
    std::vector<size_t> pc(pp, 0);
    std::vector<int> arrived;  // ranks at each wave boundary position, by order of crossing
    std::vector<size_t> crossed(pp, 0);
    arrival_marks_.assign(pp, {});
    bool progress = true;
    while (progress) {
      progress = false;
      for (int r = 0; r < pp; ++r) {
        const auto& program = s_.programs[r].instructions;
        while (pc[r] < program.size()) {
          const Instruction& in = program[pc[r]];
          if (in.op == OpKind::kRecv) {
            if (!sent_at(in.payload, in.peer_stage, in.micro_batch)) break;
          } else if (in.op == OpKind::kWaveBoundary) {
            const size_t k = crossed[r];
            if (arrived.size() <= k) arrived.resize(k + 1, 0);
            if (!arrived_marked(r, k)) {  // count each rank once per boundary
              mark_arrived(r, k);
              ++arrived[k];
              progress = true;
            }
            if (arrived[k] < pp) break;
            ++crossed[r];
          } else if (in.op == OpKind::kSend) {
            sent_at(in.payload, in.stage, in.micro_batch) = 1;
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

  bool arrived_marked(int r, size_t k) const {
    return k < arrival_marks_[r].size() && arrival_marks_[r][k];
  }
  void mark_arrived(int r, size_t k) {
    if (arrival_marks_[r].size() <= k) arrival_marks_[r].resize(k + 1, false);
    arrival_marks_[r][k] = true;
  }

  const Schedule& s_;
  const std::string& where_;
  std::vector<uint8_t> state_;
  std::vector<std::vector<bool>> arrival_marks_;
};

}  // namespace

void validate(const Schedule& schedule, const std::string& where) { Validator(schedule, where).run(); }

}  // namespace fulcrum
