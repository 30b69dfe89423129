#include "fulcrum/plan/bubble_scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <iterator>
#include <map>
#include <tuple>

#include "fulcrum/core/error.h"

namespace fulcrum {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr double kEpsilon = 1e-12;

bool is_compute(const Kernel& k) { return k.kind == Kernel::Kind::kCompute; }

// Seconds of [a, b) covered by the sorted, disjoint `intervals` shifted by `shift`.
double overlap_seconds(const std::vector<TimeInterval>& intervals, double shift, double a, double b) {
  double covered = 0;
  auto it = std::lower_bound(intervals.begin(), intervals.end(), a - shift,
                             [](const TimeInterval& t, double x) { return t.end_seconds <= x; });
  for (; it != intervals.end() && it->start_seconds + shift < b; ++it) {
    covered += std::max(0.0, std::min(b, it->end_seconds + shift) - std::max(a, it->start_seconds + shift));
  }
  return covered;
}

// One encoder stage's device: where its compute may still go, and what its collectives must avoid.
class Device {
 public:
  // The idle stretches of `llm` shifted by `shift`, clipped to [from, to).
  Device(const LlmDeviceTimeline& llm, double shift, double from, double to)
      : llm_(&llm), shift_(shift), from_(from) {
    double free_from = 0;
    for (const TimeInterval& busy : llm.compute) {
      add_window(free_from, busy.start_seconds + shift, from, to);
      free_from = busy.end_seconds + shift;
    }
    add_window(free_from, kInfinity, from, to);
  }

  // Earliest start ≥ `cursor` of a compute kernel of `seconds` in one idle stretch, which it then takes; +inf
  // when none is left.
  double place_compute(double cursor, double seconds) {
    if (seconds <= 0) return cursor;  // takes no time from anyone
    auto it = std::lower_bound(free_.begin(), free_.end(), cursor,
                               [](const TimeInterval& w, double x) { return w.end_seconds <= x; });
    for (; it != free_.end(); ++it) {
      const double start = std::max(cursor, it->start_seconds);
      if (start + seconds > it->end_seconds + kEpsilon) continue;
      // What precedes the kernel in its stretch stays free for passes that start earlier (start_backward_phase).
      if (start > it->start_seconds) skipped_.push_back({it->start_seconds, start});
      it->start_seconds = start + seconds;
      return start;
    }
    return kInfinity;
  }

  // Passes on one device are placed in order (a stage's micro-batches one after another), so a stretch a kernel
  // skipped over is of no use to the passes of the same direction after it; the backward passes that follow
  // the forwards may start earlier, and get the skipped stretches back here. Kept apart until then, so that a
  // placement never shifts the free list. Collectives placed from here on go to the second phase's list.
  void start_backward_phase() {
    std::vector<TimeInterval> merged;
    merged.reserve(free_.size() + skipped_.size());
    auto by_start = [](const TimeInterval& a, const TimeInterval& b) { return a.start_seconds < b.start_seconds; };
    std::merge(free_.begin(), free_.end(), skipped_.begin(), skipped_.end(), std::back_inserter(merged), by_start);
    free_.clear();
    for (const TimeInterval& w : merged) {
      if (w.end_seconds > w.start_seconds) free_.push_back(w);
    }
    skipped_.clear();
    phase_ = 1;
  }

  // Earliest start ≥ `cursor` of a collective of `seconds` that meets neither an LLM tensor-parallel collective
  // nor another encoder collective here, ending by `limit`; +inf past it. Records the LLM compute it overlaps.
  double place_collective(double cursor, double seconds, double limit) {
    double start = std::max(cursor, from_);
    if (seconds <= 0) return start;
    for (;;) {
      const double end = start + seconds;
      if (end > limit + kEpsilon) return kInfinity;
      double clash_end = -kInfinity;
      auto it = std::lower_bound(llm_->tensor_comm.begin(), llm_->tensor_comm.end(), start - shift_,
                                 [](const TimeInterval& t, double x) { return t.end_seconds <= x; });
      for (; it != llm_->tensor_comm.end() && it->start_seconds + shift_ < end; ++it) {
        // Compared as shifted, as the caller sees them (the search above compares unshifted, which rounds apart).
        if (it->end_seconds + shift_ > start) clash_end = std::max(clash_end, it->end_seconds + shift_);
      }
      // In each phase's list, the encoder collective starting last before `end` is the only one that can reach
      // into [start, end).
      for (const std::vector<TimeInterval>& placed : collectives_) {
        auto next = std::lower_bound(placed.begin(), placed.end(), end,
                                     [](const TimeInterval& t, double x) { return t.start_seconds < x; });
        if (next != placed.begin() && std::prev(next)->end_seconds > start) {
          clash_end = std::max(clash_end, std::prev(next)->end_seconds);
        }
      }
      if (clash_end == -kInfinity) {
        collectives_[phase_].push_back({start, end});
        contention_seconds_ += overlap_seconds(llm_->compute, shift_, start, end);
        return start;
      }
      start = clash_end;
    }
  }

  double collective_beside_compute_seconds() const { return contention_seconds_; }

 private:
  void add_window(double a, double b, double from, double to) {
    a = std::max(a, from);
    b = std::min(b, to);
    if (b > a) free_.push_back({a, b});
  }

  const LlmDeviceTimeline* llm_;
  double shift_;
  double from_;
  std::vector<TimeInterval> free_;        // sorted, disjoint
  std::vector<TimeInterval> skipped_;     // sorted: placements only move forward in time
  // Encoder collectives placed here, per phase (forward passes, then backward): each sorted, since placements
  // within a phase only move forward in time.
  std::vector<TimeInterval> collectives_[2];
  int phase_ = 0;
  double contention_seconds_ = 0;
};

// Where the head bubble ends.
double first_pass_seconds(const LlmDeviceTimeline& llm) {
  if (llm.first_pass_start_seconds >= 0) return llm.first_pass_start_seconds;
  return llm.compute.empty() ? llm.end_seconds : llm.compute.front().start_seconds;
}

// The head bubble's idle time: up to the first pass, less the compute before it.
double head_idle_seconds(const LlmDeviceTimeline& llm) {
  const double end = first_pass_seconds(llm);
  double idle = end;
  for (const TimeInterval& t : llm.compute) {
    if (t.start_seconds >= end) break;
    idle -= std::min(t.end_seconds, end) - t.start_seconds;
  }
  return idle;
}

// Places a pass's kernels in order from `cursor`, restricted to before `limit`; appends them to `out` (when not
// null). Returns its end, or +inf when a kernel finds no room.
double place_pass(Device& device, const std::vector<Kernel>& kernels, double cursor, double limit,
                  std::vector<PlacedKernel>* out, PlacedKernel tag) {
  for (size_t j = 0; j < kernels.size(); ++j) {
    const double seconds = kernels[j].seconds;
    const double start = is_compute(kernels[j]) ? device.place_compute(cursor, seconds)
                                                : device.place_collective(cursor, seconds, limit);
    if (start + seconds > limit + kEpsilon) return kInfinity;
    cursor = start + seconds;
    if (out) {
      tag.kernel = static_cast<int>(j);
      tag.start_seconds = start;
      tag.end_seconds = cursor;
      out->push_back(tag);
    }
  }
  return cursor;
}

// When the LLM's last gradients are reduced, unshifted: its devices' optimizer steps start then, together.
double llm_gradients_ready_seconds(const BubbleProblem& p) {
  double end = 0, step = 0;
  for (const LlmDeviceTimeline& llm : p.llm_ranks) {
    end = std::max(end, llm.end_seconds);
    step = std::max(step, llm.optimizer_seconds);
  }
  return end - step;
}

// When a stage whose last kernel ends at `work_end` has its gradients reduced: its collectives follow the LLM's
// on the device's collective stream.
double encoder_gradients_ready_seconds(const LlmDeviceTimeline& llm, double shift, double work_end,
                                       double tail_seconds) {
  if (tail_seconds <= 0) return work_end;
  const double queue = llm.collectives_end_seconds > 0 ? llm.collectives_end_seconds + shift : 0.0;  // 0: none
  return std::max(work_end, queue) + tail_seconds;
}

double encoder_optimizer_seconds(const EncoderPipelineWork& w, size_t stage) {
  return w.stage_optimizer_seconds.empty() ? 0.0 : w.stage_optimizer_seconds[stage];
}

// The longest optimizer step of any device: its LLM rank's and the encoder stage's it hosts.
double longest_optimizer_seconds(const BubbleProblem& p) {
  double most = 0;
  for (const LlmDeviceTimeline& llm : p.llm_ranks) most = std::max(most, llm.optimizer_seconds);
  for (const EncoderPipelineWork& w : p.pipelines) {
    for (size_t s = 0; s < w.stage_rank.size(); ++s) {
      most = std::max(most, p.llm_ranks[w.stage_rank[s]].optimizer_seconds + encoder_optimizer_seconds(w, s));
    }
  }
  return most;
}

void check_problem(const BubbleProblem& p) {
  for (size_t r = 0; r < p.llm_ranks.size(); ++r) {
    const LlmDeviceTimeline& llm = p.llm_ranks[r];
    if (!(llm.optimizer_seconds >= 0 && llm.optimizer_seconds <= llm.end_seconds)) {
      throw InputError(fmt::format("LLM rank {}'s optimizer step of {} s does not fit its iteration of {} s", r,
                                   llm.optimizer_seconds, llm.end_seconds));
    }
    if (!(llm.collectives_end_seconds >= 0 && llm.collectives_end_seconds <= llm.end_seconds)) {
      throw InputError(fmt::format("LLM rank {}'s collectives end at {} s, outside its iteration of {} s", r,
                                   llm.collectives_end_seconds, llm.end_seconds));
    }
  }
  const size_t micro_batches = p.dependency.forward_seconds.size();
  if (p.dependency.backward_seconds.size() != micro_batches) {
    throw InputError("the LLM's dependency points need as many B_i as F_i");
  }
  if (p.pipelines.empty()) throw InputError("bubble scheduling needs at least one encoder pipeline");
  size_t total = 0;
  for (size_t j = 0; j < p.pipelines.size(); ++j) {
    const EncoderPipelineWork& w = p.pipelines[j];
    const size_t stages = w.stage_rank.size();
    if (stages == 0 || w.forward.size() != stages || w.backward.size() != stages ||
        w.stage_tail_seconds.size() != stages ||
        (!w.stage_optimizer_seconds.empty() && w.stage_optimizer_seconds.size() != stages)) {
      throw InputError(fmt::format("encoder pipeline {} needs forward, backward and tail work (and optimizer work, "
                                   "if any) for each of its {} stages", j, stages));
    }
    for (size_t s = 0; s < stages; ++s) {
      if (w.stage_rank[s] < 0 || w.stage_rank[s] >= static_cast<int>(p.llm_ranks.size())) {
        throw InputError(fmt::format("encoder pipeline {} stage {} is on LLM rank {}, of {}", j, s, w.stage_rank[s],
                                     p.llm_ranks.size()));
      }
      if (w.forward[s].size() != w.forward[0].size() || w.backward[s].size() != w.forward[0].size()) {
        throw InputError(fmt::format("encoder pipeline {} stage {} does not have a pass for each of its {} "
                                     "micro-batches", j, s, w.forward[0].size()));
      }
    }
    if (w.forward[0].empty()) throw InputError(fmt::format("encoder pipeline {} has no micro-batch", j));
    total += w.forward[0].size();
  }
  if (total != micro_batches) {
    throw InputError(fmt::format("the encoder pipelines carry {} micro-batches, the LLM {}", total, micro_batches));
  }
  if (!p.llm_micro_batch.empty()) {
    std::vector<int> fed(micro_batches, 0);
    bool ok = p.llm_micro_batch.size() == p.pipelines.size();
    for (size_t j = 0; ok && j < p.pipelines.size(); ++j) {
      ok = p.llm_micro_batch[j].size() == p.pipelines[j].forward[0].size();
      for (size_t k = 0; ok && k < p.llm_micro_batch[j].size(); ++k) {
        const int i = p.llm_micro_batch[j][k];
        ok = i >= 0 && i < static_cast<int>(micro_batches) && fed[i]++ == 0;
      }
    }
    if (!ok) throw InputError("the fixed encoder-to-LLM micro-batch map must feed every LLM micro-batch once");
  }
}

// One placement of the whole problem with the LLM shifted by `shift`.
struct Attempt {
  bool feasible = false;
  double violation = 0;  // how far the latest forward misses its F_i (or +inf: no room in coarse mode)
  std::vector<std::vector<Device>> devices;          // [pipeline][stage]
  std::vector<std::vector<double>> forward_ready;    // [pipeline][micro-batch]
  std::vector<std::vector<double>> stage_forward_end;  // [pipeline][stage]: its last forward's end
  std::vector<std::vector<int>> llm_micro_batch;
  std::vector<PlacedKernel> kernels;
};

Attempt place_forward(const BubbleProblem& p, BubbleMode mode, double shift, bool record) {
  Attempt a;
  a.devices.resize(p.pipelines.size());
  a.forward_ready.resize(p.pipelines.size());
  a.stage_forward_end.resize(p.pipelines.size());
  std::vector<std::tuple<double, int, int>> finish;  // (EF, pipeline, micro-batch)
  for (size_t j = 0; j < p.pipelines.size(); ++j) {
    const EncoderPipelineWork& w = p.pipelines[j];
    const int stages = static_cast<int>(w.stage_rank.size());
    const int n = static_cast<int>(w.forward[0].size());
    std::vector<double> limit(stages, kInfinity);
    a.devices[j].reserve(stages);
    for (int s = 0; s < stages; ++s) {
      const LlmDeviceTimeline& llm = p.llm_ranks[w.stage_rank[s]];
      if (mode == BubbleMode::kCoarse) limit[s] = first_pass_seconds(llm) + shift;
      a.devices[j].emplace_back(llm, shift, 0.0, limit[s]);
    }
    a.forward_ready[j].assign(n, 0);
    a.stage_forward_end[j].assign(stages, 0);
    for (int k = 0; k < n; ++k) {
      double ready = 0;
      for (int s = 0; s < stages; ++s) {
        const double cursor = std::max(ready, a.stage_forward_end[j][s]);
        const double end = place_pass(a.devices[j][s], w.forward[s][k], cursor, limit[s], record ? &a.kernels : nullptr,
                                      PlacedKernel{static_cast<int>(j), s, k, false});
        if (end == kInfinity) {
          a.violation = kInfinity;
          return a;
        }
        a.stage_forward_end[j][s] = end;
        ready = end + p.transfer_seconds;
      }
      a.forward_ready[j][k] = ready;
      finish.emplace_back(ready, static_cast<int>(j), k);
    }
  }
  if (!p.llm_micro_batch.empty()) {
    a.llm_micro_batch = p.llm_micro_batch;
    for (size_t j = 0; j < p.pipelines.size(); ++j) {
      for (size_t k = 0; k < a.forward_ready[j].size(); ++k) {
        const int i = p.llm_micro_batch[j][k];
        a.violation = std::max(a.violation, a.forward_ready[j][k] - (p.dependency.forward_seconds[i] + shift));
      }
    }
    a.feasible = a.violation <= kEpsilon;
    return a;
  }
  std::sort(finish.begin(), finish.end());
  a.llm_micro_batch.resize(p.pipelines.size());
  for (size_t j = 0; j < p.pipelines.size(); ++j) a.llm_micro_batch[j].assign(a.forward_ready[j].size(), -1);
  for (size_t i = 0; i < finish.size(); ++i) {
    const auto [ready, j, k] = finish[i];
    a.llm_micro_batch[j][k] = static_cast<int>(i);
    a.violation = std::max(a.violation, ready - (p.dependency.forward_seconds[i] + shift));
  }
  a.feasible = a.violation <= kEpsilon;
  return a;
}

}  // namespace

BubbleSchedule schedule_encoder_bubbles(const BubbleProblem& p, BubbleMode mode) {
  check_problem(p);
  // The least head shift whose forward placement meets every F_i: 0 if that works, else bisection between a
  // failing and a working shift (a placement that works at one shift works, moved along, at any larger one).
  double shift = 0;
  const Attempt unshifted = place_forward(p, mode, 0, false);
  if (!unshifted.feasible) {
    // The first guess: the shift that would absorb the unshifted violation (exact when the late forwards sit in
    // the head, whose growth moves nothing else); doubled until it works.
    double low = 0;
    double high = std::isfinite(unshifted.violation) ? unshifted.violation : 0;
    if (high <= 0) {
      for (const EncoderPipelineWork& w : p.pipelines) {
        for (size_t s = 0; s < w.forward.size(); ++s) {
          for (const auto& pass : w.forward[s]) {
            for (const Kernel& k : pass) high += k.seconds;
          }
          high += p.transfer_seconds;
        }
      }
    }
    high = std::max(high, 1e-9);
    for (int doubling = 0; !place_forward(p, mode, high, false).feasible; ++doubling) {
      if (doubling == 64) throw InputError("the bubble scheduler found no head shift that lets the encoder keep up");
      low = high;
      high *= 2;
    }
    // To a tenth of a microsecond: far below any kernel's time.
    while (high - low > 1e-7 * std::max(1.0, high)) {
      const double mid = 0.5 * (low + high);
      (place_forward(p, mode, mid, false).feasible ? high : low) = mid;
    }
    shift = high;
  }
  Attempt a = place_forward(p, mode, shift, true);
  if (!a.feasible) throw InputError("the bubble scheduler found no placement of the encoder's forward passes");

  BubbleSchedule out;
  out.mode = mode;
  out.head_shift_seconds = shift;
  for (const LlmDeviceTimeline& llm : p.llm_ranks) out.llm_seconds = std::max(out.llm_seconds, llm.end_seconds);
  out.iteration_seconds = out.llm_seconds + shift;
  out.llm_micro_batch = a.llm_micro_batch;
  out.forward_ready_seconds = a.forward_ready;
  out.backward_start_seconds.resize(p.pipelines.size());
  out.pipeline_end_seconds.assign(p.pipelines.size(), out.iteration_seconds);
  // The optimizer steps wait for every gradient, the encoders' too, and the longest ends the iteration.
  const double llm_gradients = llm_gradients_ready_seconds(p);
  const double optimizer = longest_optimizer_seconds(p);

  double outside = 0;
  for (size_t j = 0; j < p.pipelines.size(); ++j) {
    const EncoderPipelineWork& w = p.pipelines[j];
    const int stages = static_cast<int>(w.stage_rank.size());
    const int n = static_cast<int>(w.forward[0].size());
    // Backward devices: in fine mode what forward left (its collectives included), in coarse mode the tail alone;
    // there the forward's collectives are counted apart.
    std::vector<Device> devices;
    devices.reserve(stages);
    std::vector<double> forward_beside(stages, 0);
    for (int s = 0; s < stages; ++s) {
      if (mode == BubbleMode::kCoarse) {
        const LlmDeviceTimeline& llm = p.llm_ranks[w.stage_rank[s]];
        forward_beside[s] = a.devices[j][s].collective_beside_compute_seconds();
        devices.emplace_back(llm, shift, llm.last_pass_end_seconds + shift, kInfinity);
      } else {
        devices.push_back(std::move(a.devices[j][s]));
        devices.back().start_backward_phase();
      }
    }
    std::vector<int> order(n);
    for (int k = 0; k < n; ++k) order[k] = k;
    std::sort(order.begin(), order.end(),
              [&](int x, int y) { return a.llm_micro_batch[j][x] < a.llm_micro_batch[j][y]; });
    std::vector<double> stage_end = a.stage_forward_end[j];
    std::vector<double> stage_cursor(stages, 0);
    out.backward_start_seconds[j].assign(n, 0);
    for (int k : order) {
      const int i = a.llm_micro_batch[j][k];
      double ready = p.dependency.backward_seconds[i] + shift + p.transfer_seconds;
      out.backward_start_seconds[j][k] = ready;
      for (int s = stages - 1; s >= 0; --s) {
        const std::vector<Kernel>& pass = w.backward[s][k];
        if (pass.empty()) continue;
        const double cursor = std::max(ready, stage_cursor[s]);
        const size_t first = a.kernels.size();
        const double end = place_pass(devices[s], pass, cursor, kInfinity, &a.kernels,
                                      PlacedKernel{static_cast<int>(j), s, k, true});
        if (s == stages - 1) out.backward_start_seconds[j][k] = a.kernels[first].start_seconds;
        stage_cursor[s] = end;
        stage_end[s] = std::max(stage_end[s], end);
        ready = end + p.transfer_seconds;
      }
    }
    for (int s = 0; s < stages; ++s) {
      const double contention =
          p.communication_slowdown * (devices[s].collective_beside_compute_seconds() + forward_beside[s]);
      out.contention_seconds = std::max(out.contention_seconds, contention);
      const double gradients_ready =
          std::max(llm_gradients + shift, encoder_gradients_ready_seconds(p.llm_ranks[w.stage_rank[s]], shift,
                                                                          stage_end[s], w.stage_tail_seconds[s]));
      const double device_end = gradients_ready + contention + optimizer;
      out.iteration_seconds = std::max(out.iteration_seconds, device_end);
      out.pipeline_end_seconds[j] = std::max(out.pipeline_end_seconds[j], device_end);
    }
  }
  // Efficiency: compute beyond each device's own head bubble (the part of the head that the shift added) or past
  // the LLM's last gradients (its optimizer steps are compute, not a bubble) lies outside the LLM's bubbles.
  std::map<std::pair<int, int>, double> head_compute;
  for (const PlacedKernel& k : a.kernels) {
    const Kernel& kernel = (k.backward ? p.pipelines[k.pipeline].backward : p.pipelines[k.pipeline].forward)
        [k.stage][k.micro_batch][k.kernel];
    if (!is_compute(kernel)) continue;
    const LlmDeviceTimeline& llm = p.llm_ranks[p.pipelines[k.pipeline].stage_rank[k.stage]];
    const double seconds = k.end_seconds - k.start_seconds;
    out.encoder_compute_seconds += seconds;
    const double head_end = first_pass_seconds(llm) + shift;
    if (k.start_seconds < head_end) head_compute[{k.pipeline, k.stage}] += std::min(k.end_seconds, head_end) - k.start_seconds;
    outside += std::max(0.0, k.end_seconds - std::max(k.start_seconds, llm_gradients + shift));
  }
  for (const auto& [device, seconds] : head_compute) {
    const LlmDeviceTimeline& llm = p.llm_ranks[p.pipelines[device.first].stage_rank[device.second]];
    outside += std::max(0.0, seconds - head_idle_seconds(llm));
  }
  // A share: the two sums add the same kernels in different orders, so a schedule with nothing inside the
  // bubbles could come out a rounding below 0.
  out.efficiency =
      out.encoder_compute_seconds > 0 ? std::clamp(1.0 - outside / out.encoder_compute_seconds, 0.0, 1.0) : 1.0;
  out.kernels = std::move(a.kernels);
  return out;
}

bool forward_fits(const BubbleProblem& problem, BubbleMode mode, double head_shift_seconds) {
  check_problem(problem);
  return place_forward(problem, mode, head_shift_seconds, false).feasible;
}

std::vector<std::string> check_bubble_schedule(const BubbleProblem& p, const BubbleSchedule& sched) {
  check_problem(p);
  std::vector<std::string> errors;
  const double shift = sched.head_shift_seconds;
  const double tol = 1e-9;
  auto kernels_of = [&](const PlacedKernel& k) -> const std::vector<Kernel>& {
    return (k.backward ? p.pipelines[k.pipeline].backward : p.pipelines[k.pipeline].forward)[k.stage][k.micro_batch];
  };
  // Each kernel once.
  std::map<std::tuple<int, int, int, bool, int>, const PlacedKernel*> placed;
  for (const PlacedKernel& k : sched.kernels) {
    if (k.pipeline < 0 || k.pipeline >= static_cast<int>(p.pipelines.size()) || k.stage < 0 ||
        k.stage >= static_cast<int>(p.pipelines[k.pipeline].stage_rank.size()) || k.micro_batch < 0 ||
        k.micro_batch >= static_cast<int>(p.pipelines[k.pipeline].forward[0].size()) || k.kernel < 0 ||
        k.kernel >= static_cast<int>(kernels_of(k).size())) {
      errors.push_back(fmt::format("a placed kernel names pipeline {} stage {} micro-batch {} kernel {}, which does "
                                   "not exist", k.pipeline, k.stage, k.micro_batch, k.kernel));
      continue;
    }
    if (!placed.emplace(std::make_tuple(k.pipeline, k.stage, k.micro_batch, k.backward, k.kernel), &k).second) {
      errors.push_back(fmt::format("pipeline {} stage {} micro-batch {} {} kernel {} is placed twice", k.pipeline,
                                   k.stage, k.micro_batch, k.backward ? "backward" : "forward", k.kernel));
    }
    const double seconds = kernels_of(k)[k.kernel].seconds;
    if (std::abs(k.end_seconds - k.start_seconds - seconds) > tol * std::max(1.0, seconds) || k.start_seconds < -tol) {
      errors.push_back(fmt::format("pipeline {} stage {} micro-batch {} kernel {} lasts {} s, its cost is {} s",
                                   k.pipeline, k.stage, k.micro_batch, k.kernel, k.end_seconds - k.start_seconds,
                                   seconds));
    }
  }
  if (!errors.empty()) return errors;
  // Pass ends, [pipeline][stage][micro-batch]; -inf for a pass without kernels.
  struct PassSpan {
    double start = kInfinity;
    double end = -kInfinity;
  };
  std::vector<std::vector<std::vector<PassSpan>>> fwd(p.pipelines.size()), bwd(p.pipelines.size());
  for (size_t j = 0; j < p.pipelines.size(); ++j) {
    const EncoderPipelineWork& w = p.pipelines[j];
    const size_t stages = w.stage_rank.size();
    const size_t n = w.forward[0].size();
    fwd[j].assign(stages, std::vector<PassSpan>(n));
    bwd[j].assign(stages, std::vector<PassSpan>(n));
    for (size_t s = 0; s < stages; ++s) {
      for (size_t k = 0; k < n; ++k) {
        for (int backward = 0; backward < 2; ++backward) {
          const std::vector<Kernel>& pass = (backward ? w.backward : w.forward)[s][k];
          PassSpan& span = (backward ? bwd : fwd)[j][s][k];
          double previous_end = -kInfinity;
          for (size_t q = 0; q < pass.size(); ++q) {
            const auto it = placed.find(std::make_tuple(int(j), int(s), int(k), bool(backward), int(q)));
            if (it == placed.end()) {
              errors.push_back(fmt::format("pipeline {} stage {} micro-batch {} {} kernel {} is not placed", j, s, k,
                                           backward ? "backward" : "forward", q));
              continue;
            }
            const PlacedKernel& pk = *it->second;
            if (pk.start_seconds < previous_end - tol) {
              errors.push_back(fmt::format("pipeline {} stage {} micro-batch {} {} kernel {} starts before kernel {} "
                                           "ends", j, s, k, backward ? "backward" : "forward", q, q - 1));
            }
            previous_end = pk.end_seconds;
            span.start = std::min(span.start, pk.start_seconds);
            span.end = std::max(span.end, pk.end_seconds);
          }
        }
      }
    }
  }
  if (!errors.empty()) return errors;
  // Devices: compute off the LLM's compute and off each other; collectives off the LLM's and off each other.
  std::map<std::pair<int, int>, std::vector<std::pair<TimeInterval, bool>>> by_device;  // bool: compute
  for (const PlacedKernel& k : sched.kernels) {
    by_device[{k.pipeline, k.stage}].push_back(
        {{k.start_seconds, k.end_seconds}, is_compute(kernels_of(k)[k.kernel])});
  }
  for (auto& [device, list] : by_device) {
    const LlmDeviceTimeline& llm = p.llm_ranks[p.pipelines[device.first].stage_rank[device.second]];
    std::sort(list.begin(), list.end(), [](const auto& x, const auto& y) {
      return std::tie(x.first.start_seconds, x.first.end_seconds) < std::tie(y.first.start_seconds, y.first.end_seconds);
    });
    double last_end[2] = {-kInfinity, -kInfinity};
    for (const auto& [t, compute] : list) {
      const std::vector<TimeInterval>& avoid = compute ? llm.compute : llm.tensor_comm;
      if (t.end_seconds > t.start_seconds && overlap_seconds(avoid, shift, t.start_seconds, t.end_seconds) > tol) {
        errors.push_back(fmt::format("an encoder {} on pipeline {} stage {} at {:.9g} s meets the LLM's {}",
                                     compute ? "compute kernel" : "collective", device.first, device.second,
                                     t.start_seconds, compute ? "compute" : "tensor-parallel collectives"));
      }
      if (t.end_seconds > t.start_seconds && t.start_seconds < last_end[compute] - tol) {
        errors.push_back(fmt::format("two encoder {} overlap on pipeline {} stage {} at {:.9g} s",
                                     compute ? "compute kernels" : "collectives", device.first, device.second,
                                     t.start_seconds));
      }
      if (t.end_seconds > t.start_seconds) last_end[compute] = std::max(last_end[compute], t.end_seconds);
    }
  }
  // Stage order, micro-batch order, dependencies on the LLM.
  const size_t micro_batches = p.dependency.forward_seconds.size();
  std::vector<int> fed(micro_batches, 0);
  struct {
    double seconds;
    std::string who;
  } last_gradients{llm_gradients_ready_seconds(p) + shift, "the LLM's"};
  for (size_t j = 0; j < p.pipelines.size(); ++j) {
    const EncoderPipelineWork& w = p.pipelines[j];
    const size_t stages = w.stage_rank.size();
    const size_t n = w.forward[0].size();
    if (sched.llm_micro_batch.size() != p.pipelines.size() || sched.llm_micro_batch[j].size() != n) {
      errors.push_back(fmt::format("pipeline {}'s micro-batches are not mapped to the LLM's", j));
      return errors;
    }
    if (!p.llm_micro_batch.empty() && sched.llm_micro_batch[j] != p.llm_micro_batch[j]) {
      errors.push_back(fmt::format("pipeline {}'s micro-batches do not feed the LLM micro-batches fixed for them", j));
    }
    for (size_t k = 0; k < n; ++k) {
      for (size_t s = 0; s < stages; ++s) {
        if (s > 0 && fwd[j][s][k].start < fwd[j][s - 1][k].end + p.transfer_seconds - tol) {
          errors.push_back(fmt::format("pipeline {} micro-batch {}: stage {}'s forward starts before stage {}'s "
                                       "output arrives", j, k, s, s - 1));
        }
        if (k > 0 && fwd[j][s][k].start < fwd[j][s][k - 1].end - tol) {
          errors.push_back(fmt::format("pipeline {} stage {}: micro-batch {}'s forward starts before {}'s ends", j, s,
                                       k, k - 1));
        }
        if (s + 1 < stages && bwd[j][s][k].end > -kInfinity && bwd[j][s + 1][k].end > -kInfinity &&
            bwd[j][s][k].start < bwd[j][s + 1][k].end + p.transfer_seconds - tol) {
          errors.push_back(fmt::format("pipeline {} micro-batch {}: stage {}'s backward starts before stage {}'s "
                                       "gradients arrive", j, k, s, s + 1));
        }
      }
      const int i = sched.llm_micro_batch[j][k];
      if (i < 0 || i >= static_cast<int>(micro_batches) || fed[i]++ > 0) {
        errors.push_back(fmt::format("pipeline {} micro-batch {} feeds LLM micro-batch {}, which is not one "
                                     "nobody else feeds", j, k, i));
        continue;
      }
      const double ready = fwd[j][stages - 1][k].end + p.transfer_seconds;
      if (ready > p.dependency.forward_seconds[i] + shift + tol) {
        errors.push_back(fmt::format("pipeline {} micro-batch {} reaches the LLM at {:.9g} s, after F_{} = {:.9g} s", j,
                                     k, ready, i, p.dependency.forward_seconds[i] + shift));
      }
      for (size_t s = 0; s < stages; ++s) {
        if (bwd[j][s][k].end == -kInfinity) continue;
        const double arrives = p.dependency.backward_seconds[i] + shift + p.transfer_seconds;
        if (s + 1 == stages || bwd[j][s + 1][k].end == -kInfinity) {
          if (bwd[j][s][k].start < arrives - tol) {
            errors.push_back(fmt::format("pipeline {} micro-batch {}'s backward starts at {:.9g} s, before B_{}'s "
                                         "gradients arrive at {:.9g} s", j, k, bwd[j][s][k].start, i, arrives));
          }
        }
      }
    }
    // Backward passes of a stage in the order of the LLM micro-batches they serve.
    for (size_t s = 0; s < stages; ++s) {
      std::vector<std::pair<int, PassSpan>> served;
      for (size_t k = 0; k < n; ++k) {
        if (bwd[j][s][k].end > -kInfinity) served.push_back({sched.llm_micro_batch[j][k], bwd[j][s][k]});
      }
      std::sort(served.begin(), served.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
      for (size_t q = 1; q < served.size(); ++q) {
        if (served[q].second.start < served[q - 1].second.end - tol) {
          errors.push_back(fmt::format("pipeline {} stage {}: the backward for LLM micro-batch {} starts before the "
                                       "one for {} ends", j, s, served[q].first, served[q - 1].first));
        }
      }
      double work_end = 0;
      for (size_t k = 0; k < n; ++k) work_end = std::max({work_end, fwd[j][s][k].end, bwd[j][s][k].end});
      const double gradients_ready =
          encoder_gradients_ready_seconds(p.llm_ranks[w.stage_rank[s]], shift, work_end, w.stage_tail_seconds[s]);
      if (gradients_ready > last_gradients.seconds) {
        last_gradients = {gradients_ready, fmt::format("pipeline {} stage {}'s", j, s)};
      }
    }
  }
  // Every optimizer step starts after the last gradients are reduced; the longest ends the iteration.
  const double steps_end = last_gradients.seconds + longest_optimizer_seconds(p);
  if (sched.iteration_seconds < steps_end - tol) {
    errors.push_back(fmt::format("the iteration ends at {:.9g} s, before the optimizer steps that follow {} gradients "
                                 "at {:.9g} s end at {:.9g} s", sched.iteration_seconds, last_gradients.who,
                                 last_gradients.seconds, steps_end));
  }
  // The coarse schedule keeps forward in the head and backward in the tail.
  if (sched.mode == BubbleMode::kCoarse) {
    for (const PlacedKernel& k : sched.kernels) {
      const LlmDeviceTimeline& llm = p.llm_ranks[p.pipelines[k.pipeline].stage_rank[k.stage]];
      if (!k.backward && k.end_seconds > first_pass_seconds(llm) + shift + tol) {
        errors.push_back(fmt::format("coarse: pipeline {} stage {} forward ends after the head bubble", k.pipeline,
                                     k.stage));
      }
      if (k.backward && k.start_seconds < llm.last_pass_end_seconds + shift - tol) {
        errors.push_back(fmt::format("coarse: pipeline {} stage {} backward starts before the tail bubble",
                                     k.pipeline, k.stage));
      }
    }
  }
  return errors;
}

}  // namespace fulcrum
