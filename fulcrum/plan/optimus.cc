#include "fulcrum/plan/optimus.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <tuple>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/collective_cost.h"
#include "fulcrum/cost/dtype.h"
#include "fulcrum/cost/training_state_memory.h"
#include "fulcrum/sched/pipeline_schedules.h"

namespace fulcrum {
namespace {

using LoadKey = std::tuple<int64_t, int64_t, int64_t, int64_t>;
LoadKey key_of(const MicroBatchLoad& l) { return {l.vision, l.llm_tokens, l.llm_tokens_squared, l.sequences}; }

void append(std::vector<Kernel>& out, const LayerCost& cost) {
  if (cost.kernels.empty()) {
    Kernel k;
    k.name = "layer";
    k.seconds = cost.seconds;
    k.flops = cost.flops;
    out.push_back(std::move(k));
    return;
  }
  out.insert(out.end(), cost.kernels.begin(), cost.kernels.end());
}

// Adds [start, end) to sorted intervals, joining it to the last when they touch.
void push_interval(std::vector<TimeInterval>& out, double start, double end) {
  if (end <= start) return;
  if (!out.empty() && start <= out.back().end_seconds + 1e-15) {
    out.back().end_seconds = std::max(out.back().end_seconds, end);
    return;
  }
  out.push_back({start, end});
}

const std::vector<MicroBatchLoad>& step_loads(const OptimusInputs& in, int replica) {
  if (in.loads.per_replica.empty()) throw InputError("Optimus needs the step's micro-batch loads");
  const size_t r = in.loads.per_replica.size() == 1 ? 0 : static_cast<size_t>(replica);
  return in.loads.per_replica.at(r);
}

void check_inputs(const OptimusInputs& in) {
  if (!in.model || !in.cluster || !in.cost) throw InputError("Optimus needs a model, a cluster and a cost model");
  if (in.micro_batches <= 0) throw InputError("Optimus needs at least one micro-batch per LLM pipeline");
}

}  // namespace

double encoder_collective_slowdown(const ClusterSpec& cluster) {
  return cluster.device.communication_shares_compute ? cluster.device.communication_compute_slowdown
                                                     : kGpuEncoderCollectiveSlowdown;
}

ModelSpec llm_only(const ModelSpec& model) {
  ModelSpec out;
  out.name = model.name;
  for (const ComponentSpec& c : model.components) {
    if (c.role == ComponentRole::kLlm) out.components.push_back(c);
  }
  if (out.components.empty()) throw InputError(fmt::format("model '{}' has no LLM", model.name));
  return out;
}

LlmAlone simulate_llm_alone(const OptimusInputs& in, const std::vector<int>& fewer_warmup_forwards) {
  check_inputs(in);
  LlmAlone out;
  out.model = llm_only(*in.model);
  ParallelLayout layout = in.llm_layout;
  layout.encoder_tp = 0;
  PipelineKind kind = in.llm_schedule;
  if (layout.vpp == 1 && kind == PipelineKind::kInterleaved) kind = PipelineKind::kOneFOneB;
  if (in.llm_schedule_given) {
    if (!fewer_warmup_forwards.empty()) throw InputError("a given LLM schedule keeps its own warm-up");
    const ParallelLayout& given = in.llm_schedule_given->layout;
    if (given.dp != layout.dp || given.tp != layout.tp || given.pp != layout.pp || given.vpp != layout.vpp ||
        in.llm_schedule_given->micro_batches != in.micro_batches ||
        in.llm_schedule_given->model_layers != flattened_layers(out.model)) {
      throw InputError("the LLM schedule given to Optimus does not fit its layout, micro-batches or layers");
    }
    out.schedule = *in.llm_schedule_given;
  } else {
    out.schedule = make_pipeline_schedule(kind, layout, in.micro_batches,
                                          partition_layers(out.model, layout.stages(), EncoderPlacement::kFirstStage),
                                          block_recompute(out.model, in.llm_recompute), fewer_warmup_forwards);
  }
  SimOptions options;
  options.timeline = true;
  options.dtype = in.dtype;
  out.result = simulate(out.schedule, out.model, *in.cluster, *in.cost, in.efficiency, in.loads, options);
  return out;
}

std::vector<LlmDeviceTimeline> llm_device_timelines(const OptimusInputs& in, const LlmAlone& llm) {
  const Schedule& s = llm.schedule;
  const std::vector<FlatLayer> layers = flat_layers(llm.model);
  const std::vector<MicroBatchLoad>& loads = step_loads(in, llm.result.timeline_replica);
  // Per stage: a representative transformer block and how many the stage runs.
  struct StageBlocks {
    int32_t layer = -1;
    int64_t count = 0;
  };
  std::vector<StageBlocks> blocks(s.stages.size());
  for (size_t st = 0; st < s.stages.size(); ++st) {
    for (int32_t i = s.stages[st].first_layer; i < s.stages[st].end_layer; ++i) {
      if (layers[i].spec->kind != LayerKind::kTransformerBlock || !layers[i].runs) continue;
      if (blocks[st].layer < 0) blocks[st].layer = i;
      ++blocks[st].count;
    }
  }
  auto pattern = [&](const TimelineEvent& e) {
    std::vector<Kernel> out;
    const StageBlocks& b = blocks[e.stage];
    if (b.layer < 0) return out;
    const FlatLayer& fl = layers[b.layer];
    LayerWork w;
    w.layer = fl.spec;
    w.batch = component_batch(llm.model, fl.component, loads.at(e.micro_batch));
    w.sharding.tp = s.layout.tp;
    w.sharding.sequence_parallel = s.layout.sequence_parallel && s.layout.tp > 1;
    w.trainable = llm.model.components[fl.component].trainable;
    w.dtype = in.dtype;
    const Recompute recompute = s.recompute[b.layer];
    if ((e.op == OpKind::kBackward || e.op == OpKind::kBackwardInput) && recompute != Recompute::kNone) {
      w.pass = Pass::kRecompute;
      w.recompute = recompute;
      append(out, in.cost->layer_cost(w));
      w.recompute = Recompute::kNone;
    }
    switch (e.op) {
      case OpKind::kForward:
        w.pass = Pass::kForward;
        append(out, in.cost->layer_cost(w));
        break;
      case OpKind::kBackward:
        append(out, backward_cost(*in.cost, w));
        break;
      case OpKind::kBackwardInput:
        w.pass = Pass::kBackwardInput;
        append(out, in.cost->layer_cost(w));
        break;
      default:
        w.pass = Pass::kBackwardWeight;
        append(out, in.cost->layer_cost(w));
        break;
    }
    return out;
  };

  std::vector<LlmDeviceTimeline> out(s.layout.pp);
  std::vector<std::vector<TimelineEvent>> by_rank(s.layout.pp);
  for (const TimelineEvent& e : llm.result.timeline) {
    if (e.stream == TimelineEvent::Stream::kCompute && e.end_seconds > e.start_seconds) by_rank.at(e.rank).push_back(e);
  }
  for (int r = 0; r < s.layout.pp; ++r) {
    LlmDeviceTimeline& t = out[r];
    std::sort(by_rank[r].begin(), by_rank[r].end(),
              [](const TimelineEvent& a, const TimelineEvent& b) { return a.start_seconds < b.start_seconds; });
    for (const TimelineEvent& e : by_rank[r]) {
      const bool pass = e.op == OpKind::kForward || e.op == OpKind::kBackward || e.op == OpKind::kBackwardInput ||
                        e.op == OpKind::kBackwardWeight;
      if (e.op == OpKind::kCollective && e.stage < 0) {
        t.optimizer_seconds += e.end_seconds - e.start_seconds;  // it waits for the encoders' gradients too
        continue;
      }
      const double comm = pass ? std::clamp(e.tp_comm_seconds, 0.0, e.end_seconds - e.start_seconds) : 0.0;
      if (pass) t.last_pass_end_seconds = std::max(t.last_pass_end_seconds, e.end_seconds);
      if (pass && t.first_pass_start_seconds < 0) t.first_pass_start_seconds = e.start_seconds;  // sorted by start
      if (comm <= 0) {
        push_interval(t.compute, e.start_seconds, e.end_seconds);
        continue;
      }
      const double compute = e.end_seconds - e.start_seconds - comm;
      const std::vector<Kernel> kernels = pattern(e);
      double pattern_compute = 0, pattern_comm = 0;
      for (const Kernel& k : kernels) (k.kind == Kernel::Kind::kCompute ? pattern_compute : pattern_comm) += k.seconds;
      const int64_t reps = std::max<int64_t>(1, blocks[e.stage].count);
      if (pattern_compute <= 0 || pattern_comm <= 0) {
        // No kernel list to cut by: the collectives at the end of the pass.
        push_interval(t.compute, e.start_seconds, e.start_seconds + compute);
        t.tensor_comm.push_back({e.start_seconds + compute, e.end_seconds});
        continue;
      }
      const double compute_scale = compute / (static_cast<double>(reps) * pattern_compute);
      const double comm_scale = comm / (static_cast<double>(reps) * pattern_comm);
      double at = e.start_seconds;
      for (int64_t rep = 0; rep < reps; ++rep) {
        for (const Kernel& k : kernels) {
          const bool is_compute = k.kind == Kernel::Kind::kCompute;
          const double end = std::min(e.end_seconds, at + k.seconds * (is_compute ? compute_scale : comm_scale));
          if (is_compute) {
            push_interval(t.compute, at, end);
          } else if (end > at) {
            t.tensor_comm.push_back({at, end});
          }
          at = end;
        }
      }
      if (at < e.end_seconds) push_interval(t.compute, at, e.end_seconds);  // rounding
    }
    t.end_seconds = llm.result.iteration_seconds;
    if (static_cast<size_t>(r) < llm.result.collectives_end_seconds.size()) {
      t.collectives_end_seconds = llm.result.collectives_end_seconds[static_cast<size_t>(r)];
    }
  }
  return out;
}

std::vector<EncoderStagePasses> encoder_stage_passes(const ModelSpec& model, const EncoderPlan& plan) {
  const std::vector<FlatLayer> layers = flat_layers(model);
  // Whether something before a layer in its encoder's chain trains: then a frozen layer still passes the
  // gradient of its input back (a frozen encoder under a trained projector needs none).
  std::vector<bool> upstream_trains(layers.size(), false);
  bool trains = false;
  for (size_t i = 0; i < layers.size(); ++i) {
    const ComponentRole role = model.components[layers[i].component].role;
    if (role == ComponentRole::kEncoder && (i == 0 || layers[i - 1].component != layers[i].component)) {
      trains = false;  // a new encoder chain starts
    }
    upstream_trains[i] = trains;
    trains = trains || model.components[layers[i].component].trainable;
  }
  std::vector<EncoderStagePasses> out(plan.stages.size());
  for (size_t e = 0; e < plan.stages.size(); ++e) {
    for (const StageLayers& range : plan.stages[e].ranges) {
      for (int32_t l = range.first_layer; l < range.end_layer; ++l) {
        if (!layers[l].runs) continue;
        out[e].forward.push_back({l, Pass::kForward});
        if (model.components[layers[l].component].trainable) {
          out[e].backward.push_back({l, Pass::kBackward});
        } else if (upstream_trains[l]) {
          out[e].backward.push_back({l, Pass::kBackwardInput});
        } else {
          continue;
        }
        // Reversed below: the recomputation just before the backward it serves. Only transformer blocks keep
        // activations worth recomputing (as block_recompute sets the LLM's).
        if (plan.recompute != Recompute::kNone && layers[l].spec->kind == LayerKind::kTransformerBlock) {
          out[e].backward.push_back({l, Pass::kRecompute});
        }
      }
    }
    std::reverse(out[e].backward.begin(), out[e].backward.end());
  }
  return out;
}

EncoderWork encoder_work(const OptimusInputs& in, const EncoderPlan& plan, int replica) {
  check_inputs(in);
  const ModelSpec& model = *in.model;
  const std::vector<FlatLayer> layers = flat_layers(model);
  const std::vector<MicroBatchLoad>& loads = step_loads(in, replica);
  if (static_cast<int>(loads.size()) != in.micro_batches) {
    throw InputError(fmt::format("the step carries {} micro-batches, the LLM pipeline {}", loads.size(),
                                 in.micro_batches));
  }
  const ParallelLayout& llm = in.llm_layout;
  TensorSharding sharding;
  sharding.tp = plan.tp;
  sharding.sequence_parallel = llm.sequence_parallel && plan.tp > 1;
  const std::vector<EncoderStagePasses> passes = encoder_stage_passes(model, plan);
  EncoderWork out;
  const int stages = static_cast<int>(plan.stages.size());
  out.forward.assign(stages, std::vector<std::vector<Kernel>>(in.micro_batches));
  out.backward.assign(stages, std::vector<std::vector<Kernel>>(in.micro_batches));
  std::map<LoadKey, int> first_of_load;  // identical loads share their kernels
  double largest_boundary_bytes = 0;
  const double element = activation_element_bytes(in.dtype);
  for (int i = 0; i < in.micro_batches; ++i) {
    const auto [it, added] = first_of_load.emplace(key_of(loads[i]), i);
    for (int e = 0; e < stages; ++e) {
      if (!added) {
        out.forward[e][i] = out.forward[e][it->second];
        out.backward[e][i] = out.backward[e][it->second];
        continue;
      }
      auto work = [&](const EncoderLayerPass& lp) {
        const FlatLayer& fl = layers[lp.layer];
        LayerWork w;
        w.layer = fl.spec;
        w.pass = lp.pass;
        w.batch = component_batch(model, fl.component, loads[i]);
        w.sharding = sharding;
        w.trainable = model.components[fl.component].trainable;
        w.recompute = lp.pass == Pass::kRecompute ? plan.recompute : Recompute::kNone;
        w.dtype = in.dtype;
        return w;
      };
      for (const EncoderLayerPass& lp : passes[e].forward) {
        const LayerWork w = work(lp);
        if (w.batch.tokens <= 0) continue;
        append(out.forward[e][i], in.cost->layer_cost(w));
        for (const StageLayers& range : plan.stages[e].ranges) {
          if (lp.layer + 1 == range.end_layer) {
            largest_boundary_bytes = std::max(largest_boundary_bytes,
                                              element * static_cast<double>(w.batch.tokens * w.layer->hidden));
          }
        }
      }
      for (const EncoderLayerPass& lp : passes[e].backward) {
        const LayerWork w = work(lp);
        if (w.batch.tokens <= 0) continue;
        append(out.backward[e][i], lp.pass == Pass::kBackward ? backward_cost(*in.cost, w) : in.cost->layer_cost(w));
      }
    }
  }
  // Pipeline ranks are dp × tp devices apart (tensor parallelism innermost, then data, then pipeline).
  out.transfer_seconds = p2p_seconds(largest_boundary_bytes, *in.cluster, in.efficiency,
                                     static_cast<int64_t>(llm.dp) * llm.tp);
  for (int e = 0; e < stages; ++e) {
    std::map<int, int64_t> params;
    for (const StageLayers& range : plan.stages[e].ranges) {
      for (int32_t l = range.first_layer; l < range.end_layer; ++l) {
        params[layers[l].component] += layers[l].spec->parameters() / plan.tp;
      }
    }
    double tail = 0, step = 0;
    // The encoder's replicas of a stage: one per encoder pipeline of every LLM pipeline, tp devices apart at least.
    const DeviceGroupShape group{plan.dp, plan.tp};
    for (const auto& [c, n] : params) {
      if (!model.components[c].trainable) continue;
      const bool distributed = llm.state_sharding != StateSharding::kZero0;
      const double gradient_bytes =
          (llm.state_sharding == StateSharding::kMegatronDistributedOptimizer ? 4.0 : element) * static_cast<double>(n);
      if (plan.dp > 1) {
        tail += collective_seconds(distributed ? CollectiveOp::kReduceScatter : CollectiveOp::kAllReduce,
                                   gradient_bytes, *in.cluster, in.efficiency, group);
        if (distributed) {
          tail += collective_seconds(CollectiveOp::kAllGather, element * static_cast<double>(n), *in.cluster,
                                     in.efficiency, group);
        }
      }
      const double shard = distributed ? static_cast<double>(n) / plan.dp : static_cast<double>(n);
      const double bandwidth = in.cluster->device.memory_bytes_per_second * in.efficiency.memory;
      step += kOptimizerStepBytesPerParameter * shard / bandwidth;
    }
    out.stage_tail_seconds.push_back(tail);
    out.stage_optimizer_seconds.push_back(step);
  }
  return out;
}

BubbleProblem encoder_bubble_problem(const OptimusInputs& in, const std::vector<LlmDeviceTimeline>& llm_ranks,
                                     const DependencyPoints& dependency, const EncoderPlan& plan,
                                     const EncoderWork& work, const MicroBatchSplit& split,
                                     const std::vector<std::vector<int>>* feeds) {
  if (static_cast<int>(split.size()) != plan.pipelines) {
    throw InputError(fmt::format("a split of {} parts for {} encoder pipelines", split.size(), plan.pipelines));
  }
  BubbleProblem p;
  p.llm_ranks = llm_ranks;
  p.dependency = dependency;
  p.transfer_seconds = work.transfer_seconds;
  p.communication_slowdown = encoder_collective_slowdown(*in.cluster);
  int first = 0;
  for (int j = 0; j < plan.pipelines; ++j) {
    EncoderPipelineWork w;
    const int stages = static_cast<int>(plan.stages.size());
    w.forward.resize(stages);
    w.backward.resize(stages);
    for (int e = 0; e < stages; ++e) {
      w.stage_rank.push_back(encoder_slot(in.llm_layout, plan, j, e).llm_rank);
      for (int k = 0; k < split[j]; ++k) {
        const int i = feeds ? feeds->at(j).at(k) : first + k;
        w.forward[e].push_back(work.forward[e].at(i));
        w.backward[e].push_back(work.backward[e].at(i));
      }
    }
    w.stage_tail_seconds = work.stage_tail_seconds;
    w.stage_optimizer_seconds = work.stage_optimizer_seconds;
    first += split[j];
    p.pipelines.push_back(std::move(w));
  }
  if (feeds) p.llm_micro_batch = *feeds;
  return p;
}

PlacedEncoder schedule_with_their_images(const OptimusInputs& in, const std::vector<LlmDeviceTimeline>& llm_ranks,
                                         const DependencyPoints& dependency, const EncoderPlan& plan,
                                         const EncoderWork& work, const MicroBatchSplit& split, BubbleMode mode) {
  PlacedEncoder out;
  out.problem = encoder_bubble_problem(in, llm_ranks, dependency, plan, work, split);
  out.schedule = schedule_encoder_bubbles(out.problem, mode);
  bool contiguous = true;
  for (size_t j = 0, first = 0; j < split.size(); first += split[j], ++j) {
    for (int k = 0; k < split[j]; ++k) {
      contiguous = contiguous && out.schedule.llm_micro_batch[j][k] == static_cast<int>(first) + k;
    }
  }
  if (contiguous) return out;
  const std::vector<std::vector<int>> feeds = out.schedule.llm_micro_batch;
  out.problem = encoder_bubble_problem(in, llm_ranks, dependency, plan, work, split, &feeds);
  out.schedule = schedule_encoder_bubbles(out.problem, mode);
  return out;
}

namespace {

double most_encoder_seconds_on_a_device(const BubbleProblem& problem) {
  double most = 0;
  for (const EncoderPipelineWork& w : problem.pipelines) {
    for (size_t e = 0; e < w.stage_rank.size(); ++e) {
      double seconds = w.stage_tail_seconds[e] + (w.stage_optimizer_seconds.empty() ? 0.0 : w.stage_optimizer_seconds[e]);
      for (const auto& pass : w.forward[e]) {
        for (const Kernel& k : pass) seconds += k.seconds;
      }
      for (const auto& pass : w.backward[e]) {
        for (const Kernel& k : pass) seconds += k.seconds;
      }
      most = std::max(most, seconds);
    }
  }
  return most;
}

std::vector<int> first_rank_fewer(const OptimusInputs& in, int fewer) {
  if (fewer == 0) return {};
  std::vector<int> per_rank(in.llm_layout.pp, 0);
  per_rank[0] = fewer;
  return per_rank;
}

// Fewer warm-up forwards on the first LLM rank, one more at a time while the LLM has to start late for the
// encoder and each step shortens the fine schedule of the chosen encoder plan and split.
void adjust_warmup(const OptimusInputs& in, OptimusPlan& out) {
  for (int fewer = 1; out.fine.head_shift_seconds > 0; ++fewer) {
    try {
      LlmAlone llm = simulate_llm_alone(in, first_rank_fewer(in, fewer));
      const std::vector<LlmDeviceTimeline> ranks = llm_device_timelines(in, llm);
      const DependencyPoints dependency = dependency_points(llm.result, in.micro_batches);
      const EncoderWork work = encoder_work(in, out.encoder_plan, llm.result.timeline_replica);
      PlacedEncoder fine =
          schedule_with_their_images(in, ranks, dependency, out.encoder_plan, work, out.split, BubbleMode::kFine);
      if (!(fine.schedule.iteration_seconds < out.iteration_seconds)) return;
      out.no_bubble_seconds += fine.schedule.llm_seconds - out.fine.llm_seconds;
      out.llm = std::move(llm);
      out.fine = std::move(fine.schedule);
      out.coarse = schedule_with_their_images(in, ranks, dependency, out.encoder_plan, work, out.split,
                                              BubbleMode::kCoarse).schedule;
      out.iteration_seconds = out.fine.iteration_seconds;
      out.fewer_warmup_forwards = fewer;
    } catch (const InputError&) {
      return;  // the rank keeps no fewer (or the pipeline would deadlock): the plan stays as it is
    }
  }
}

}  // namespace

OptimusPlan plan_optimus(const OptimusInputs& in) {
  check_inputs(in);
  const auto started = std::chrono::steady_clock::now();
  OptimusPlan out;
  out.llm = simulate_llm_alone(in);
  const std::vector<LlmDeviceTimeline> ranks = llm_device_timelines(in, out.llm);
  const DependencyPoints dependency = dependency_points(out.llm.result, in.micro_batches);
  EncoderMemory memory;
  memory.usable_bytes = in.cluster->usable_memory_bytes();
  memory.llm_bytes_per_rank = out.llm.result.peak_memory_bytes;
  const std::vector<EncoderPlan> plans = encoder_plans(*in.model, in.llm_layout, memory, &out.rejected);
  bool found = false;
  for (EncoderPlan plan : plans) {
    plan.recompute = in.encoder_recompute;
    if (in.encoder_pp > 0 && plan.pp != in.encoder_pp) {
      out.rejected.push_back(fmt::format("encoder PP {} TP {}: the request pins encoder PP {}", plan.pp, plan.tp,
                                         in.encoder_pp));
      continue;
    }
    if (plan.pipelines > in.micro_batches) {
      out.rejected.push_back(fmt::format("encoder PP {} TP {}: {} encoder pipelines for {} micro-batches", plan.pp,
                                         plan.tp, plan.pipelines, in.micro_batches));
      continue;
    }
    ++out.encoder_plans;
    const EncoderWork work = encoder_work(in, plan, out.llm.result.timeline_replica);
    // Splits are ranked with each pipeline carrying consecutive micro-batches' images; the chosen one is then
    // scheduled with each encoder micro-batch carrying the images of the LLM micro-batch it feeds.
    const SplitSearchResult best = search_micro_batch_split(
        in.micro_batches, pipeline_classes(in.llm_layout, plan),
        [&](const MicroBatchSplit& split) {
          const BubbleProblem problem = encoder_bubble_problem(in, ranks, dependency, plan, work, split);
          return schedule_encoder_bubbles(problem, BubbleMode::kFine).pipeline_end_seconds;
        },
        in.exhaustive_split_limit, in.split_evaluation_budget);
    out.splits_evaluated += best.evaluated;
    PlacedEncoder fine = schedule_with_their_images(in, ranks, dependency, plan, work, best.split, BubbleMode::kFine);
    if (found && !(fine.schedule.iteration_seconds < out.iteration_seconds)) continue;
    found = true;
    out.encoder_plan = plan;
    out.split = best.split;
    out.fine = std::move(fine.schedule);
    out.iteration_seconds = out.fine.iteration_seconds;
    out.no_bubble_seconds = out.fine.llm_seconds + most_encoder_seconds_on_a_device(fine.problem);
  }
  if (!found) {
    std::string why;
    for (const std::string& r : out.rejected) why += "; " + r;
    throw InputError(fmt::format("no encoder plan of model '{}' suits the LLM plan{}", in.model->name, why));
  }
  out.coarse = schedule_with_their_images(in, ranks, dependency, out.encoder_plan,
                                          encoder_work(in, out.encoder_plan, out.llm.result.timeline_replica),
                                          out.split, BubbleMode::kCoarse)
                   .schedule;
  if (!in.llm_schedule_given && out.llm.schedule.kind == PipelineKind::kInterleaved) adjust_warmup(in, out);
  out.scheduler_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

OptimusPlan plan_step(const OptimusInputs& in, const OptimusPlan& plan) {
  OptimusPlan out = plan;
  out.llm = simulate_llm_alone(in, first_rank_fewer(in, plan.fewer_warmup_forwards));
  out.fine = schedule_with_their_images(in, llm_device_timelines(in, out.llm),
                                        dependency_points(out.llm.result, in.micro_batches), plan.encoder_plan,
                                        encoder_work(in, plan.encoder_plan, out.llm.result.timeline_replica),
                                        plan.split, BubbleMode::kFine)
                 .schedule;
  out.iteration_seconds = out.fine.iteration_seconds;
  return out;
}

}  // namespace fulcrum
