#include "fulcrum/plan/optimus_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>

#include "fulcrum/core/error.h"
#include "fulcrum/sched/pipeline_schedules.h"

namespace fulcrum {
namespace {

// An encoder instruction and where it goes in its rank's program: `group` 0 before the LLM's first pass,
// 2n + 1 inside its n-th pass, 2n + 2 after it; then planned time, then the order it was made in.
struct Item {
  int64_t group = 0;
  double seconds = 0;
  int64_t order = 0;
  Instruction instruction;
};

// A rank's LLM passes as the fine schedule saw them: shifted by the head shift, in program order.
struct RankPasses {
  std::vector<TimeInterval> passes;

  int64_t group_at(double seconds) const {
    const auto it = std::upper_bound(passes.begin(), passes.end(), seconds,
                                     [](double t, const TimeInterval& p) { return t < p.start_seconds; });
    if (it == passes.begin()) return 0;
    const int64_t n = (it - passes.begin()) - 1;
    return seconds < passes[n].end_seconds ? 2 * n + 1 : 2 * n + 2;
  }
  // As group_at, for work that takes no time: at the instant a pass starts it goes before that pass, not in it
  // (a pass that waits on it would otherwise wait forever).
  int64_t group_of_instant(double seconds) const {
    const auto it = std::lower_bound(passes.begin(), passes.end(), seconds,
                                     [](const TimeInterval& p, double t) { return p.start_seconds < t; });
    if (it == passes.begin()) return 0;
    const int64_t n = (it - passes.begin()) - 1;
    return seconds < passes[n].end_seconds ? 2 * n + 1 : 2 * n + 2;
  }
};

Instruction transfer(OpKind op, Payload payload, int pipeline, int stage, int micro_batch, int peer_pipeline,
                     int peer_stage) {
  Instruction in;
  in.op = op;
  in.payload = payload;
  in.encoder_pipeline = pipeline;
  in.stage = stage;
  in.micro_batch = micro_batch;
  in.peer_encoder_pipeline = peer_pipeline;
  in.peer_stage = peer_stage;
  return in;
}

class Builder {
 public:
  Builder(const OptimusInputs& in, const OptimusPlan& plan) : in_(in), plan_(plan), ep_(plan.encoder_plan) {}

  Schedule build() {
    const ModelSpec& model = *in_.model;
    const Schedule& llm = plan_.llm.schedule;
    encoder_layers_ = encoder_side_layers(model);
    Schedule s;
    s.kind = llm.kind;
    s.layout = llm.layout;
    s.layout.encoder_tp = ep_.tp;
    s.micro_batches = llm.micro_batches;
    s.model_layers = flattened_layers(model);
    for (const StageLayers& st : llm.stages) {
      s.stages.push_back({st.first_layer + encoder_layers_, st.end_layer + encoder_layers_});
    }
    s.recompute.assign(static_cast<size_t>(encoder_layers_), Recompute::kNone);
    s.recompute.insert(s.recompute.end(), llm.recompute.begin(), llm.recompute.end());
    EncoderSection& e = s.encoder;
    e.dp = ep_.dp;
    e.pp = ep_.pp;
    e.tp = ep_.tp;
    e.pipelines = ep_.pipelines;
    for (const EncoderStage& st : ep_.stages) e.stages.push_back(st.ranges);
    for (const std::vector<int>& feeds : plan_.fine.llm_micro_batch) e.llm_micro_batch.emplace_back(feeds.begin(), feeds.end());
    e.collective_slowdown = encoder_collective_slowdown(*in_.cluster);
    section_ = &e;
    layout_ = s.layout;

    passes_ = encoder_stage_passes(model, ep_);
    for (const EncoderStagePasses& sp : passes_) {
      for (const EncoderLayerPass& lp : sp.backward) {
        if (lp.pass == Pass::kRecompute) s.recompute.at(lp.layer) = ep_.recompute;
      }
    }
    count_kernels();
    collect_rank_passes();
    items_.assign(layout_.pp, {});
    transfer_seconds_ = encoder_work(in_, ep_, plan_.llm.result.timeline_replica).transfer_seconds;
    place_passes();
    for (int r = 0; r < layout_.pp; ++r) s.programs.push_back(merge(r, llm.programs[r]));
    return s;
  }

 private:
  static int32_t encoder_side_layers(const ModelSpec& model) {
    int32_t layers = 0;
    bool llm_seen = false;
    for (const ComponentSpec& c : model.components) {
      if (c.role == ComponentRole::kLlm) {
        llm_seen = true;
      } else if (llm_seen) {
        throw InputError(fmt::format("model '{}': component '{}' comes after the LLM; an Optimus schedule needs the "
                                     "encoders and projectors first", model.name, c.name));
      } else {
        layers += static_cast<int32_t>(c.layers.size());
      }
    }
    return layers;
  }

  // Kernels of each layer pass, the same on every step: those of one image.
  void count_kernels() {
    const std::vector<FlatLayer> layers = flat_layers(*in_.model);
    MicroBatchLoad one;
    one.add_packed(1, 1);
    TensorSharding sharding;
    sharding.tp = ep_.tp;
    sharding.sequence_parallel = layout_.sequence_parallel && ep_.tp > 1;
    auto count = [&](const EncoderLayerPass& lp) {
      const FlatLayer& fl = layers[lp.layer];
      LayerWork w;
      w.layer = fl.spec;
      w.pass = lp.pass;
      w.batch = component_batch(*in_.model, fl.component, one);
      w.sharding = sharding;
      w.trainable = in_.model->components[fl.component].trainable;
      w.recompute = lp.pass == Pass::kRecompute ? ep_.recompute : Recompute::kNone;
      w.dtype = in_.dtype;
      const LayerCost c = lp.pass == Pass::kBackward ? backward_cost(*in_.cost, w) : in_.cost->layer_cost(w);
      return std::max<int>(1, static_cast<int>(c.kernels.size()));
    };
    for (const EncoderStagePasses& sp : passes_) {
      std::vector<int> f, b;
      for (const EncoderLayerPass& lp : sp.forward) f.push_back(count(lp));
      for (const EncoderLayerPass& lp : sp.backward) b.push_back(count(lp));
      forward_kernels_.push_back(std::move(f));
      backward_kernels_.push_back(std::move(b));
    }
  }

  void collect_rank_passes() {
    rank_passes_.assign(layout_.pp, {});
    const double shift = plan_.fine.head_shift_seconds;
    for (const TimelineEvent& ev : plan_.llm.result.timeline) {
      if (ev.stream != TimelineEvent::Stream::kCompute || !is_compute(ev.op)) continue;
      rank_passes_.at(ev.rank).passes.push_back({ev.start_seconds + shift, ev.end_seconds + shift});
    }
    for (RankPasses& rp : rank_passes_) {
      std::stable_sort(rp.passes.begin(), rp.passes.end(),
                       [](const TimeInterval& a, const TimeInterval& b) { return a.start_seconds < b.start_seconds; });
    }
  }

  // Every pass of every encoder micro-batch, as kernel ranges with their transfers, into its rank's items.
  void place_passes() {
    // (pipeline, stage, micro-batch, backward) → its placed kernels by index.
    std::map<std::tuple<int, int, int, bool>, std::vector<const PlacedKernel*>> placed;
    for (const PlacedKernel& k : plan_.fine.kernels) placed[{k.pipeline, k.stage, k.micro_batch, k.backward}].push_back(&k);
    for (auto& [key, kernels] : placed) {
      std::sort(kernels.begin(), kernels.end(), [](const PlacedKernel* a, const PlacedKernel* b) { return a->kernel < b->kernel; });
    }
    const int stages = ep_.pp;
    for (int j = 0; j < ep_.pipelines; ++j) {
      const int n = section_->micro_batches(j);
      // Forward: stage by stage downstream, micro-batches in order.
      std::vector<double> previous_stage_end(n, 0);
      for (int e = 0; e < stages; ++e) {
        double stage_cursor = 0;
        for (int k = 0; k < n; ++k) {
          const auto it = placed.find({j, e, k, false});
          const double earliest = std::max(stage_cursor, e > 0 ? previous_stage_end[k] + transfer_seconds_ : 0.0);
          const double end = place_pass(j, e, k, false, it == placed.end() ? nullptr : &it->second, earliest);
          stage_cursor = end;
          previous_stage_end[k] = end;
        }
      }
      // Backward: upstream, in the order the gradients come back (that of the LLM micro-batches fed).
      if (passes_.back().backward.empty()) continue;
      std::vector<int> order(n);
      for (int k = 0; k < n; ++k) order[k] = k;
      std::sort(order.begin(), order.end(), [&](int x, int y) {
        return section_->llm_micro_batch[j][x] < section_->llm_micro_batch[j][y];
      });
      std::vector<double> stage_cursor(stages, 0);
      for (int k : order) {
        double ready = plan_.fine.backward_start_seconds.at(j).at(k);
        for (int e = stages - 1; e >= 0 && !passes_[e].backward.empty(); --e) {
          const auto it = placed.find({j, e, k, true});
          const double end = place_pass(j, e, k, true, it == placed.end() ? nullptr : &it->second,
                                        std::max(ready, stage_cursor[e]));
          stage_cursor[e] = end;
          ready = end + transfer_seconds_;
        }
      }
    }
  }

  // One pass's items; returns its planned end. A pass with no kernels placed (no images on the planned step)
  // runs whole at `earliest`.
  double place_pass(int j, int e, int k, bool backward, const std::vector<const PlacedKernel*>* kernels,
                    double earliest) {
    const int rank = section_->rank_of(layout_, j, e);
    const RankPasses& rp = rank_passes_[rank];
    const std::vector<EncoderLayerPass>& lps = backward ? passes_[e].backward : passes_[e].forward;
    const std::vector<int>& counts = backward ? backward_kernels_[e] : forward_kernels_[e];
    int total = 0;
    for (int c : counts) total += c;
    if (kernels && static_cast<int>(kernels->size()) != total) {
      throw InputError(fmt::format("encoder pipeline {} stage {} micro-batch {}: the bubble schedule placed {} {} "
                                   "kernels, the stage's layers have {}", j, e, k, kernels->size(),
                                   backward ? "backward" : "forward", total));
    }
    std::vector<Item>& items = items_[rank];
    const int stages = ep_.pp;
    auto add = [&](int64_t group, double seconds, const Instruction& in) {
      items.push_back({group, seconds, next_order_++, in});
    };
    // Where a kernel runs: a kernel that takes no time (a pass's host_wait when the host keeps up) runs where the
    // kernel before it does, not in an LLM pass that starts the instant that one ends.
    auto start_of = [&](size_t i) {
      while (i > 0 && (*kernels)[i]->end_seconds <= (*kernels)[i]->start_seconds) --i;
      return (*kernels)[i]->start_seconds;
    };
    const double first_seconds = kernels ? kernels->front()->start_seconds : earliest;
    const double last_seconds = kernels ? start_of(kernels->size() - 1) : earliest;
    auto group_of = [&](double seconds) { return kernels ? rp.group_at(seconds) : rp.group_of_instant(seconds); };
    // Its input: from the previous encoder stage, or the gradient from the next one or from the LLM.
    if (!backward && e > 0) {
      add(group_of(first_seconds), first_seconds,
          transfer(OpKind::kRecv, Payload::kActivation, j, e, k, j, e - 1));
    } else if (backward) {
      const bool last = e == stages - 1;
      add(group_of(first_seconds), first_seconds,
          transfer(OpKind::kRecv, Payload::kGradient, j, e, k, last ? -1 : j, last ? 0 : e + 1));
    }
    // Its kernel ranges: one per layer pass and group.
    size_t index = 0;
    for (size_t l = 0; l < lps.size(); ++l) {
      Instruction range;
      range.op = OpKind::kEncoderKernels;
      range.encoder_pipeline = j;
      range.stage = e;
      range.micro_batch = k;
      range.layer = lps[l].layer;
      range.pass = lps[l].pass;
      if (!kernels) {
        // Nothing to run on this step: where the pass would begin, costing nothing there.
        range.kernel_begin = 0;
        range.kernel_end = counts[l];
        range.inside_pass = group_of(earliest) % 2 == 1;
        add(group_of(earliest), earliest, range);
        continue;
      }
      for (int kk = 0; kk < counts[l];) {
        const double at = start_of(index + kk);
        const int64_t group = rp.group_at(at);
        int end = kk + 1;
        while (end < counts[l] && rp.group_at(start_of(index + end)) == group) ++end;
        range.kernel_begin = kk;
        range.kernel_end = end;
        range.inside_pass = group % 2 == 1;
        add(group, at, range);
        kk = end;
      }
      index += static_cast<size_t>(counts[l]);
    }
    // Its output: to the next encoder stage or the LLM, or the gradient to the previous stage if that trains.
    if (!backward) {
      const bool last = e == stages - 1;
      add(group_of(last_seconds), last_seconds,
          transfer(OpKind::kSend, Payload::kActivation, j, e, k, last ? -1 : j, last ? 0 : e + 1));
    } else if (e > 0 && !passes_[e - 1].backward.empty()) {
      add(group_of(last_seconds), last_seconds, transfer(OpKind::kSend, Payload::kGradient, j, e, k, j, e - 1));
    }
    return kernels ? kernels->back()->end_seconds : earliest;
  }

  // The rank's LLM program with its encoder items in place.
  Program merge(int rank, const Program& llm) {
    std::vector<Item>& items = items_[rank];
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
      return std::tie(a.group, a.seconds, a.order) < std::tie(b.group, b.seconds, b.order);
    });
    // [LLM micro-batch] → the pipeline feeding it.
    std::vector<int> feeder(static_cast<size_t>(plan_.llm.schedule.micro_batches), -1);
    for (int j = 0; j < section_->pipelines; ++j) {
      for (int i : section_->llm_micro_batch[j]) feeder[i] = j;
    }
    const bool gradients_back = !passes_.back().backward.empty();
    Program out;
    size_t next = 0;
    auto emit_through = [&](int64_t group) {
      while (next < items.size() && items[next].group <= group) out.instructions.push_back(items[next++].instruction);
    };
    int64_t passes = 0;
    for (const Instruction& in : llm.instructions) {
      const bool compute = is_compute(in.op);
      if (compute || in.op == OpKind::kRecv || in.op == OpKind::kWaveBoundary) emit_through(2 * passes);
      if (rank == 0 && in.op == OpKind::kForward && in.stage == 0) {
        out.instructions.push_back(
            transfer(OpKind::kRecv, Payload::kActivation, -1, 0, in.micro_batch, feeder[in.micro_batch], ep_.pp - 1));
      }
      out.instructions.push_back(in);
      if (compute) {
        ++passes;
        emit_through(2 * passes - 1);
      }
      if (rank == 0 && gradients_back && in.stage == 0 &&
          (in.op == OpKind::kBackward || in.op == OpKind::kBackwardInput)) {
        out.instructions.push_back(
            transfer(OpKind::kSend, Payload::kGradient, -1, 0, in.micro_batch, feeder[in.micro_batch], ep_.pp - 1));
      }
    }
    if (passes != static_cast<int64_t>(rank_passes_[rank].passes.size())) {
      throw InputError(fmt::format("LLM rank {}: {} passes in its program, {} in its simulated timeline", rank, passes,
                                   rank_passes_[rank].passes.size()));
    }
    emit_through(std::numeric_limits<int64_t>::max());
    append_collectives(rank, out);
    return out;
  }

  // After its last backward, each encoder stage on the rank reduces its gradients over the encoder's replicas
  // (and gathers its parameters back, under a sharded optimizer).
  void append_collectives(int rank, Program& out) const {
    if (ep_.dp <= 1) return;
    const int e = section_->stage_on_rank(layout_, rank);
    bool trains = false;
    for (const StageLayers& range : ep_.stages[e].ranges) {
      for (int32_t l = range.first_layer; l < range.end_layer; ++l) {
        const FlatLayer fl = flat_layers_at(l);
        trains = trains || (in_.model->components[fl.component].trainable && fl.spec->parameters() > 0);
      }
    }
    if (!trains) return;
    const bool sharded = layout_.state_sharding != StateSharding::kZero0;
    for (int b = 0; b < section_->slices(layout_); ++b) {
      Instruction c;
      c.op = OpKind::kCollective;
      c.group = DeviceGroup::kEncoderData;
      c.encoder_pipeline = section_->pipeline_on(layout_, rank, b);
      c.stage = e;
      c.collective = sharded ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce;
      c.tensor = CollectiveTensor::kGradients;
      out.instructions.push_back(c);
      if (sharded) {
        c.collective = CollectiveKind::kAllGather;
        c.tensor = CollectiveTensor::kParameters;
        out.instructions.push_back(c);
      }
    }
  }

  FlatLayer flat_layers_at(int32_t layer) const {
    if (flat_.empty()) flat_ = flat_layers(*in_.model);
    return flat_.at(layer);
  }

  const OptimusInputs& in_;
  const OptimusPlan& plan_;
  const EncoderPlan& ep_;
  int32_t encoder_layers_ = 0;
  const EncoderSection* section_ = nullptr;
  ParallelLayout layout_;
  std::vector<EncoderStagePasses> passes_;
  std::vector<std::vector<int>> forward_kernels_, backward_kernels_;  // [stage][layer pass]
  std::vector<RankPasses> rank_passes_;
  std::vector<std::vector<Item>> items_;  // per rank
  double transfer_seconds_ = 0;
  int64_t next_order_ = 0;
  mutable std::vector<FlatLayer> flat_;
};

}  // namespace

Schedule optimus_schedule(const OptimusInputs& in, const OptimusPlan& plan) { return Builder(in, plan).build(); }

}  // namespace fulcrum
