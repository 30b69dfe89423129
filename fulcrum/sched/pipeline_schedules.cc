#include "fulcrum/sched/pipeline_schedules.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "fulcrum/core/error.h"

namespace fulcrum {

int64_t flattened_layers(const ModelSpec& model) {
  int64_t n = 0;
  for (const ComponentSpec& c : model.components) n += static_cast<int64_t>(c.layers.size());
  return n;
}

std::vector<Recompute> block_recompute(const ModelSpec& model, Recompute mode) {
  std::vector<Recompute> out;
  for (const ComponentSpec& c : model.components) {
    for (const LayerSpec& l : c.layers) out.push_back(l.kind == LayerKind::kTransformerBlock ? mode : Recompute::kNone);
  }
  return out;
}

std::vector<Recompute> first_blocks_full(const ModelSpec& model, double full_share) {
  if (!(full_share >= 0 && full_share <= 1)) throw InputError(fmt::format("a share of {} is not in [0, 1]", full_share));
  std::vector<Recompute> out;
  for (const ComponentSpec& c : model.components) {
    const int64_t blocks = c.transformer_blocks();
    const auto full = static_cast<int64_t>(std::ceil(full_share * static_cast<double>(blocks) - 1e-9));
    int64_t seen = 0;
    for (const LayerSpec& l : c.layers) {
      if (l.kind != LayerKind::kTransformerBlock) {
        out.push_back(Recompute::kNone);
      } else {
        out.push_back(seen++ < full ? Recompute::kFull : Recompute::kSelective);
      }
    }
  }
  return out;
}

std::vector<StageLayers> partition_layers(const ModelSpec& model, int stages, EncoderPlacement placement) {
  if (stages < 1) throw InputError(fmt::format("{} pipeline stages: at least one is needed", stages));
  // Flattened layers, and which of them are blocks that get spread.
  std::vector<bool> spread;
  for (const ComponentSpec& c : model.components) {
    const bool encoder_side = c.role != ComponentRole::kLlm;
    for (const LayerSpec& l : c.layers) {
      spread.push_back(l.kind == LayerKind::kTransformerBlock &&
                       !(encoder_side && placement == EncoderPlacement::kFirstStage));
    }
  }
  const int64_t layers = static_cast<int64_t>(spread.size());
  const int64_t blocks = std::count(spread.begin(), spread.end(), true);
  if (blocks < stages) {
    throw InputError(fmt::format("model '{}' has {} transformer blocks to spread over {} pipeline stages{}: use "
                                 "fewer stages (pp × vpp)", model.name, blocks, stages,
                                 placement == EncoderPlacement::kFirstStage && model.has_encoder()
                                     ? " (the encoders' blocks stay in the first stage; encoder placement "
                                       "'spread' spreads them too)"
                                     : ""));
  }
  // Blocks per stage: the first (stages − extra) take `base`, the rest one more.
  const int64_t base = blocks / stages;
  const int64_t extra = blocks % stages;
  std::vector<StageLayers> out(stages);
  int64_t layer = 0;
  for (int s = 0; s < stages; ++s) {
    int64_t want = base + (s >= stages - extra ? 1 : 0);
    out[s].first_layer = static_cast<int32_t>(layer);
    // Take layers up to and including the `want`-th spread block.
    while (want > 0) {
      if (spread[layer]) --want;
      ++layer;
    }
    out[s].end_layer = static_cast<int32_t>(layer);
  }
  out.back().end_layer = static_cast<int32_t>(layers);  // final norm and LM head
  return out;
}

namespace {

struct ComputeOp {
  OpKind op;
  int stage;
  int micro_batch;
};

using RankOrder = std::vector<ComputeOp>;

std::vector<RankOrder> gpipe_order(int pp, int m) {
  std::vector<RankOrder> orders(pp);
  for (int r = 0; r < pp; ++r) {
    for (int j = 0; j < m; ++j) orders[r].push_back({OpKind::kForward, r, j});
    for (int j = 0; j < m; ++j) orders[r].push_back({OpKind::kBackward, r, j});
  }
  return orders;
}

std::vector<RankOrder> one_f_one_b_order(int pp, int m) {
  std::vector<RankOrder> orders(pp);
  for (int r = 0; r < pp; ++r) {
    const int warmup = std::min(pp - r - 1, m);
    int f = 0, b = 0;
    for (; f < warmup; ++f) orders[r].push_back({OpKind::kForward, r, f});
    while (f < m) {
      orders[r].push_back({OpKind::kForward, r, f++});
      orders[r].push_back({OpKind::kBackward, r, b++});
    }
    while (b < m) orders[r].push_back({OpKind::kBackward, r, b++});
  }
  return orders;
}

// Megatron-LM's interleaved 1F1B (schedules.py, forward_backward_pipelining_with_interleaving).
// `fewer_warmup[r]` (when given) takes that many forwards off rank r's warm-up.
std::vector<RankOrder> interleaved_order(int pp, int vpp, int m, const std::vector<int>& fewer_warmup) {
  std::vector<RankOrder> orders(pp);
  const int total = m * vpp;
  const int group = pp * vpp;
  auto micro_batch = [&](int k) { return (k / group) * pp + k % pp; };
  auto forward_chunk = [&](int k) { return (k % group) / pp; };
  auto backward_chunk = [&](int k) { return vpp - 1 - (k % group) / pp; };
  for (int r = 0; r < pp; ++r) {
    const int fewer = fewer_warmup.empty() ? 0 : fewer_warmup[r];
    const int warmup = (m == pp ? total : std::min(total, (pp - r - 1) * 2 + (vpp - 1) * pp)) - fewer;
    auto forward = [&](int k) { orders[r].push_back({OpKind::kForward, forward_chunk(k) * pp + r, micro_batch(k)}); };
    auto backward = [&](int k) {
      orders[r].push_back({OpKind::kBackward, backward_chunk(k) * pp + r, micro_batch(k)});
    };
    int f = 0, b = 0;
    for (; f < warmup; ++f) forward(f);
    while (f < total) {
      forward(f++);
      backward(b++);
    }
    while (b < total) backward(b++);
  }
  return orders;
}

// ZB-H1: the 1F1B order with each backward split, and rank r's weight gradients deferred by r + 1
// micro-batches: the weight gradient of micro-batch j runs after the input gradient of micro-batch j + r + 1
// (or at the end). Rank r then holds activations for at most (pp − 1 − r) + (r + 1) = pp micro-batches, as
// 1F1B's first rank does, and the deferred weight gradients fill the cool-down: the last rank finishes its
// input gradients earliest and ends with the most weight gradients.
std::vector<RankOrder> zero_bubble_h1_order(int pp, int m) {
  std::vector<RankOrder> orders = one_f_one_b_order(pp, m);
  for (int r = 0; r < pp; ++r) {
    RankOrder split;
    const int defer = r + 1;
    int weights = 0;
    for (const ComputeOp& op : orders[r]) {
      if (op.op != OpKind::kBackward) {
        split.push_back(op);
        continue;
      }
      split.push_back({OpKind::kBackwardInput, op.stage, op.micro_batch});
      if (op.micro_batch - defer >= weights) split.push_back({OpKind::kBackwardWeight, op.stage, weights++});
    }
    while (weights < m) split.push_back({OpKind::kBackwardWeight, r, weights++});
    orders[r] = std::move(split);
  }
  return orders;
}

// Turns each rank's compute order into its program: receives, sends and data-parallel collectives around it.
Schedule lower(PipelineKind kind, const ParallelLayout& layout, int m, std::vector<StageLayers> stages,
               std::vector<Recompute> recompute, const std::vector<RankOrder>& orders) {
  Schedule s;
  s.kind = kind;
  s.layout = layout;
  s.micro_batches = m;
  s.model_layers = stages.empty() ? 0 : stages.back().end_layer;
  s.stages = std::move(stages);
  s.recompute = std::move(recompute);
  s.programs.resize(layout.pp);
  const int S = layout.stages();
  const bool data_parallel = layout.dp > 1;
  const bool zero3 = layout.state_sharding == StateSharding::kZero3;
  const bool gather_once = data_parallel && !zero3 && layout.state_sharding != StateSharding::kZero0;
  auto other_rank = [&](int a, int b) { return layout.rank_of_stage(a) != layout.rank_of_stage(b); };

  for (int r = 0; r < layout.pp; ++r) {
    auto& out = s.programs[r].instructions;
    const RankOrder& order = orders[r];
    std::vector<int> backwards_left(S, 0);
    std::vector<bool> gathered(S, false);
    for (const ComputeOp& op : order) {
      if (op.op != OpKind::kForward && op.op != OpKind::kBackwardInput) ++backwards_left[op.stage];
    }
    auto gather = [&](int stage) {
      Instruction in;
      in.op = OpKind::kCollective;
      in.stage = stage;
      in.collective = CollectiveKind::kAllGather;
      in.tensor = CollectiveTensor::kParameters;
      out.push_back(in);
    };
    if (zero3 && data_parallel && !order.empty()) gather(order[0].stage);
    for (size_t k = 0; k < order.size(); ++k) {
      const ComputeOp& op = order[k];
      const int st = op.stage, j = op.micro_batch;
      if (gather_once && !gathered[st]) {
        gather(st);
        gathered[st] = true;
      }
      if (op.op == OpKind::kForward && st > 0 && other_rank(st, st - 1)) {
        out.push_back({.op = OpKind::kRecv, .stage = st, .micro_batch = j, .peer_stage = st - 1,
                       .payload = Payload::kActivation});
      }
      const bool input_gradient = op.op == OpKind::kBackward || op.op == OpKind::kBackwardInput;
      if (input_gradient && st + 1 < S && other_rank(st, st + 1)) {
        out.push_back({.op = OpKind::kRecv, .stage = st, .micro_batch = j, .peer_stage = st + 1,
                       .payload = Payload::kGradient});
      }
      // ZeRO-3 prefetch: the next compute's parameters are gathered while this one runs.
      if (zero3 && data_parallel && k + 1 < order.size()) gather(order[k + 1].stage);
      out.push_back({.op = op.op, .stage = st, .micro_batch = j});
      if (op.op == OpKind::kForward && st + 1 < S && other_rank(st, st + 1)) {
        out.push_back({.op = OpKind::kSend, .stage = st, .micro_batch = j, .peer_stage = st + 1,
                       .payload = Payload::kActivation});
      }
      if (input_gradient && st > 0 && other_rank(st, st - 1)) {
        out.push_back({.op = OpKind::kSend, .stage = st, .micro_batch = j, .peer_stage = st - 1,
                       .payload = Payload::kGradient});
      }
      if (op.op != OpKind::kForward && op.op != OpKind::kBackwardInput && --backwards_left[st] == 0 &&
          data_parallel) {
        Instruction in;
        in.op = OpKind::kCollective;
        in.stage = st;
        in.collective = layout.state_sharding == StateSharding::kZero0 ? CollectiveKind::kAllReduce
                                                                         : CollectiveKind::kReduceScatter;
        in.tensor = CollectiveTensor::kGradients;
        out.push_back(in);
      }
    }
  }
  return s;
}

}  // namespace

Schedule make_pipeline_schedule(PipelineKind kind, const ParallelLayout& layout, int micro_batches,
                                std::vector<StageLayers> stages, std::vector<Recompute> recompute,
                                const std::vector<int>& fewer_warmup_forwards) {
  if (layout.pp < 1 || layout.vpp < 1 || layout.dp < 1 || layout.tp < 1) {
    throw InputError(fmt::format("parallel degrees must be at least 1 (dp {}, tp {}, pp {}, vpp {})", layout.dp,
                                 layout.tp, layout.pp, layout.vpp));
  }
  if (micro_batches < 1) throw InputError(fmt::format("{} micro-batches: at least one is needed", micro_batches));
  if (static_cast<int>(stages.size()) != layout.stages()) {
    throw InputError(fmt::format("{} stages for pp {} × vpp {}", stages.size(), layout.pp, layout.vpp));
  }
  const int pp = layout.pp, m = micro_batches;
  std::vector<RankOrder> orders;
  switch (kind) {
    case PipelineKind::kGpipe:
    case PipelineKind::kOneFOneB:
    case PipelineKind::kZeroBubbleH1:
      if (!fewer_warmup_forwards.empty()) {
        throw InputError(fmt::format("fewer warm-up forwards are for interleaved 1F1B, not {}", pipeline_kind_name(kind)));
      }
      if (layout.vpp != 1) {
        throw InputError(fmt::format("the {} schedule has one model chunk per rank, not vpp {}: use interleaved",
                                     pipeline_kind_name(kind), layout.vpp));
      }
      orders = kind == PipelineKind::kGpipe      ? gpipe_order(pp, m)
               : kind == PipelineKind::kOneFOneB ? one_f_one_b_order(pp, m)
                                                 : zero_bubble_h1_order(pp, m);
      break;
    case PipelineKind::kInterleaved:
      if (m % pp != 0) {
        throw InputError(fmt::format("interleaved 1F1B needs micro-batches divisible by pp: {} micro-batches, pp {}",
                                     m, pp));
      }
      if (!fewer_warmup_forwards.empty()) {
        if (static_cast<int>(fewer_warmup_forwards.size()) != pp) {
          throw InputError(fmt::format("fewer warm-up forwards for {} ranks, pp {}", fewer_warmup_forwards.size(), pp));
        }
        // The last rank's first backward needs micro-batch 0 through every chunk: (vpp − 1)·pp + 1 forwards. An
        // earlier rank waits for the next rank's first backward, which needs the forwards the next rank ran in
        // its own warm-up and first steady step: it keeps at least as many warm-up forwards as the next rank.
        const int total = m * layout.vpp;
        std::vector<int> kept(pp);
        for (int r = pp - 1; r >= 0; --r) {
          const int warmup = m == pp ? total : std::min(total, (pp - r - 1) * 2 + (layout.vpp - 1) * pp);
          const int least = r == pp - 1 ? std::min(warmup, (layout.vpp - 1) * pp + 1)
                                        : std::min(kept[r + 1], total - 1);
          kept[r] = warmup - fewer_warmup_forwards[r];
          if (fewer_warmup_forwards[r] < 0 || kept[r] < std::min(least, warmup)) {
            throw InputError(fmt::format("rank {} of interleaved 1F1B cannot run {} fewer of its {} warm-up forwards: "
                                         "at least {} must stay", r, fewer_warmup_forwards[r], warmup,
                                         std::min(least, warmup)));
          }
        }
      }
      orders = interleaved_order(pp, layout.vpp, m, fewer_warmup_forwards);
      break;
    case PipelineKind::kCustom:
      throw InputError("a custom schedule is written by a planner, not generated");
  }
  return lower(kind, layout, m, std::move(stages), std::move(recompute), orders);
}

}  // namespace fulcrum
