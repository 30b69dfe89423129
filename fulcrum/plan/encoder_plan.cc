#include "fulcrum/plan/encoder_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "fulcrum/core/error.h"
#include "fulcrum/cost/training_state_memory.h"
#include "fulcrum/sched/pipeline_schedules.h"

namespace fulcrum {

EncoderPlacementSlot encoder_slot(const ParallelLayout& llm, const EncoderPlan& plan, int pipeline, int stage) {
  const int g = llm.pp / plan.pp, h = llm.tp / plan.tp;
  const int a = pipeline / h, b = pipeline % h;
  return {stage * g + a, b * plan.tp, a};
}

std::vector<int> pipeline_classes(const ParallelLayout& llm, const EncoderPlan& plan) {
  std::vector<int> out;
  for (int j = 0; j < plan.pipelines; ++j) out.push_back(encoder_slot(llm, plan, j, 0).equivalence_class);
  return out;
}

namespace {

struct EncoderSide {
  std::vector<int> encoders;    // component indices with role kEncoder
  std::vector<int> projectors;  // role kProjector
  std::vector<int64_t> first_layer;  // flattened index of each component's first layer
};

EncoderSide encoder_side(const ModelSpec& model) {
  EncoderSide side;
  int64_t layer = 0;
  for (int c = 0; c < static_cast<int>(model.components.size()); ++c) {
    side.first_layer.push_back(layer);
    layer += static_cast<int64_t>(model.components[c].layers.size());
    if (model.components[c].role == ComponentRole::kEncoder) side.encoders.push_back(c);
    if (model.components[c].role == ComponentRole::kProjector) side.projectors.push_back(c);
  }
  return side;
}

// The stages of an encoder plan with `pp` stages, or a reason it has none.
std::vector<EncoderStage> encoder_stages(const ModelSpec& model, const EncoderSide& side, int pp, std::string* why) {
  std::vector<EncoderStage> stages(pp);
  for (int c : side.encoders) {
    ModelSpec alone;
    alone.name = model.components[c].name;
    alone.components = {model.components[c]};
    if (alone.components[0].transformer_blocks() < pp) {
      *why = fmt::format("encoder '{}' has {} transformer blocks for {} stages", alone.name,
                         alone.components[0].transformer_blocks(), pp);
      return {};
    }
    const std::vector<StageLayers> cut = partition_layers(alone, pp, EncoderPlacement::kSpread);
    const int32_t offset = static_cast<int32_t>(side.first_layer[c]);
    for (int e = 0; e < pp; ++e) {
      stages[e].ranges.push_back({cut[e].first_layer + offset, cut[e].end_layer + offset});
    }
  }
  for (int c : side.projectors) {
    const int32_t first = static_cast<int32_t>(side.first_layer[c]);
    stages.back().ranges.push_back({first, first + static_cast<int32_t>(model.components[c].layers.size())});
  }
  // In the model's layer order: each projector right after its encoder's last layers, as the forward runs them.
  for (EncoderStage& stage : stages) {
    std::sort(stage.ranges.begin(), stage.ranges.end(),
              [](const StageLayers& a, const StageLayers& b) { return a.first_layer < b.first_layer; });
  }
  return stages;
}

}  // namespace

std::vector<EncoderPlan> encoder_plans(const ModelSpec& model, const ParallelLayout& llm, const EncoderMemory& memory,
                                       std::vector<std::string>* rejected) {
  const EncoderSide side = encoder_side(model);
  if (side.encoders.empty()) {
    throw InputError(fmt::format("model '{}' has no encoder to give its own plan", model.name));
  }
  if (static_cast<int>(memory.llm_bytes_per_rank.size()) != llm.pp) {
    throw InputError(fmt::format("encoder plans need the LLM's bytes on each of its {} pipeline ranks, got {}",
                                 llm.pp, memory.llm_bytes_per_rank.size()));
  }
  const std::vector<FlatLayer> layers = flat_layers(model);
  std::vector<EncoderPlan> out;
  auto reject = [&](int pp, int tp, const std::string& why) {
    if (rejected) rejected->push_back(fmt::format("encoder PP {} TP {}: {}", pp, tp, why));
  };
  for (int pp = 1; pp <= llm.pp; ++pp) {
    if (llm.pp % pp != 0) continue;
    for (int tp = 1; tp <= llm.tp; ++tp) {
      if (llm.tp % tp != 0) continue;
      std::string why;
      for (int c : side.encoders) {
        const ComponentSpec& comp = model.components[c];
        // Key/value heads split over TP, or each copied to TP / kv_heads shards (as the cost model prices it).
        const int64_t kv = comp.kv_heads();
        if (comp.attention_heads() % tp != 0 || (kv % tp != 0 && tp % kv != 0)) {
          why = fmt::format("TP {} does not divide encoder '{}''s {} heads ({} key/value)", tp, comp.name,
                            comp.attention_heads(), kv);
          break;
        }
      }
      if (!why.empty()) {
        reject(pp, tp, why);
        continue;
      }
      EncoderPlan plan;
      plan.pp = pp;
      plan.tp = tp;
      plan.pipelines = (llm.pp / pp) * (llm.tp / tp);
      plan.dp = llm.dp * plan.pipelines;
      plan.stages = encoder_stages(model, side, pp, &why);
      if (plan.stages.empty()) {
        reject(pp, tp, why);
        continue;
      }
      for (const EncoderStage& stage : plan.stages) {
        // Per component: its parameters on one device of the stage, kept as the LLM keeps its own.
        std::map<int, int64_t> params;
        for (const StageLayers& range : stage.ranges) {
          for (int32_t i = range.first_layer; i < range.end_layer; ++i) {
            params[layers[i].component] += layers[i].spec->parameters() / tp;
          }
        }
        double bytes = 0;
        for (const auto& [c, n] : params) {
          bytes += training_state_bytes(n, plan.dp, llm.state_sharding, model.components[c].trainable).total();
        }
        plan.stage_state_bytes.push_back(bytes);
      }
      int worst_rank = 0;
      for (int r = 0; r < llm.pp; ++r) {
        const double bytes = memory.llm_bytes_per_rank[r] + plan.stage_state_bytes[r / (llm.pp / pp)];
        if (bytes > plan.peak_bytes) {
          plan.peak_bytes = bytes;
          worst_rank = r;
        }
      }
      if (plan.peak_bytes > memory.usable_bytes) {
        reject(pp, tp, fmt::format("needs {:.1f} GiB on LLM rank {}, {:.1f} GiB usable", plan.peak_bytes / (1 << 30),
                                   worst_rank, memory.usable_bytes / (1 << 30)));
        continue;
      }
      out.push_back(std::move(plan));
    }
  }
  return out;
}

namespace {

constexpr int64_t kSaturated = std::numeric_limits<int64_t>::max();

int64_t saturating_add(int64_t a, int64_t b) { return a > kSaturated - b ? kSaturated : a + b; }

// partitions[n][k]: partitions of n into exactly k positive parts (non-increasing sequences), saturating.
std::vector<std::vector<int64_t>> partition_counts(int n, int k) {
  std::vector<std::vector<int64_t>> p(n + 1, std::vector<int64_t>(k + 1, 0));
  p[0][0] = 1;
  for (int i = 1; i <= n; ++i) {
    for (int j = 1; j <= std::min(i, k); ++j) {
      // The smallest part is 1 (drop it), or every part is at least 2 (take 1 from each).
      p[i][j] = saturating_add(p[i - 1][j - 1], p[i - j][j]);
    }
  }
  return p;
}

// Sizes of the consecutive runs of equal classes (pipelines of a class are adjacent: j = a·h + b).
std::vector<int> class_sizes(const std::vector<int>& classes) {
  std::vector<int> sizes;
  for (size_t j = 0; j < classes.size(); ++j) {
    if (j == 0 || classes[j] != classes[j - 1]) {
      sizes.push_back(1);
    } else {
      ++sizes.back();
    }
  }
  return sizes;
}

void check_split_arguments(int micro_batches, const std::vector<int>& classes) {
  if (classes.empty()) throw InputError("a micro-batch split needs at least one encoder pipeline");
  if (micro_batches < static_cast<int>(classes.size())) {
    throw InputError(fmt::format("{} micro-batches cannot feed {} encoder pipelines: each needs at least one",
                                 micro_batches, classes.size()));
  }
  for (size_t j = 1; j < classes.size(); ++j) {
    if (classes[j] < classes[j - 1]) throw InputError("encoder pipeline classes must be grouped in order");
  }
}

void sort_within_classes(MicroBatchSplit& split, const std::vector<int>& classes) {
  size_t begin = 0;
  for (size_t j = 1; j <= split.size(); ++j) {
    if (j == split.size() || classes[j] != classes[begin]) {
      std::sort(split.begin() + static_cast<std::ptrdiff_t>(begin), split.begin() + static_cast<std::ptrdiff_t>(j),
                std::greater<int>());
      begin = j;
    }
  }
}

}  // namespace

int64_t count_micro_batch_splits(int micro_batches, const std::vector<int>& classes) {
  check_split_arguments(micro_batches, classes);
  const std::vector<int> sizes = class_sizes(classes);
  const int largest = *std::max_element(sizes.begin(), sizes.end());
  const auto p = partition_counts(micro_batches, largest);
  // ways[n]: splits of n micro-batches over the classes so far.
  std::vector<int64_t> ways(micro_batches + 1, 0);
  ways[0] = 1;
  for (int size : sizes) {
    std::vector<int64_t> next(micro_batches + 1, 0);
    for (int n = 0; n <= micro_batches; ++n) {
      if (ways[n] == 0) continue;
      for (int t = size; n + t <= micro_batches; ++t) {
        const int64_t ways_here = p[t][size];
        if (ways_here == 0) continue;
        const int64_t product =
            ways[n] > kSaturated / ways_here ? kSaturated : ways[n] * ways_here;
        next[n + t] = saturating_add(next[n + t], product);
      }
    }
    ways = std::move(next);
  }
  return ways[micro_batches];
}

std::vector<MicroBatchSplit> micro_batch_splits(int micro_batches, const std::vector<int>& classes, int64_t limit) {
  const int64_t count = count_micro_batch_splits(micro_batches, classes);
  if (count > limit) {
    throw InputError(fmt::format("{} micro-batches over {} encoder pipelines give {} splits, more than {}",
                                 micro_batches, classes.size(), count, limit));
  }
  std::vector<MicroBatchSplit> out;
  const int m = static_cast<int>(classes.size());
  MicroBatchSplit split(m, 0);
  // Depth-first in lexicographic order: pipeline j takes 1 … what leaves one for each later pipeline, and no
  // more than the previous pipeline of its class.
  std::function<void(int, int)> fill = [&](int j, int left) {
    if (j == m - 1) {
      split[j] = left;
      if (j == 0 || classes[j] != classes[j - 1] || left <= split[j - 1]) out.push_back(split);
      return;
    }
    const int most = left - (m - 1 - j);
    const int cap = (j > 0 && classes[j] == classes[j - 1]) ? std::min(most, split[j - 1]) : most;
    for (int take = 1; take <= cap; ++take) {
      split[j] = take;
      fill(j + 1, left - take);
    }
  };
  fill(0, micro_batches);
  return out;
}

SplitSearchResult search_micro_batch_split(int micro_batches, const std::vector<int>& classes,
                                           const std::function<PipelineSeconds(const MicroBatchSplit&)>& evaluate,
                                           int64_t exhaustive_limit, int64_t evaluation_budget) {
  const int m = static_cast<int>(classes.size());
  const int64_t count = count_micro_batch_splits(micro_batches, classes);
  // A split's rank: its pipelines' times longest first, then the split itself.
  struct Ranked {
    PipelineSeconds longest_first;
    MicroBatchSplit split;
    PipelineSeconds pipelines;
    bool operator<(const Ranked& o) const {
      return longest_first != o.longest_first ? longest_first < o.longest_first : split < o.split;
    }
  };
  SplitSearchResult result;
  std::optional<Ranked> best;
  auto rank = [&](const MicroBatchSplit& split) {
    Ranked r{{}, split, evaluate(split)};
    ++result.evaluated;
    if (static_cast<int>(r.pipelines.size()) != m) {
      throw InputError(fmt::format("a split over {} encoder pipelines was given {} pipeline times", m,
                                   r.pipelines.size()));
    }
    r.longest_first = r.pipelines;
    std::sort(r.longest_first.begin(), r.longest_first.end(), std::greater<>());
    if (!best || r < *best) best = r;
    return r;
  };
  if (count <= exhaustive_limit) {
    for (const MicroBatchSplit& split : micro_batch_splits(micro_batches, classes, exhaustive_limit)) rank(split);
    result.exhaustive = true;
  } else {
    // Steepest descent from the even split over single moves, stopping when no move improves. Only a move
    // out of a longest pipeline can shorten the step, so those are tried first (m − 1 of them per longest
    // pipeline); the other moves, which can only settle ties below the longest, when none of those helps.
    MicroBatchSplit even(m, micro_batches / m);
    for (int j = 0; j < micro_batches % m; ++j) ++even[j];
    sort_within_classes(even, classes);
    Ranked current = rank(even);
    std::set<MicroBatchSplit> seen = {even};
    auto best_move = [&](bool from_longest_only) {
      std::optional<Ranked> next;
      const double longest = current.longest_first.front();
      for (int x = 0; x < m; ++x) {
        if (current.split[x] <= 1) continue;
        if (from_longest_only && current.pipelines[x] < longest) continue;
        for (int y = 0; y < m; ++y) {
          if (y == x) continue;
          MicroBatchSplit moved = current.split;
          --moved[x];
          ++moved[y];
          sort_within_classes(moved, classes);
          if (result.evaluated >= evaluation_budget) return next;
          if (!seen.insert(moved).second) continue;
          Ranked r = rank(moved);
          if (!next || r < *next) next = std::move(r);
        }
      }
      return next;
    };
    for (;;) {
      std::optional<Ranked> next = best_move(true);
      if (!next || !(next->longest_first < current.longest_first)) {
        std::optional<Ranked> other = best_move(false);
        if (other && (!next || *other < *next)) next = std::move(other);
      }
      if (!next || !(next->longest_first < current.longest_first)) break;
      current = std::move(*next);
    }
  }
  result.split = best->split;
  result.pipelines = best->pipelines;
  result.seconds = best->longest_first.front();
  return result;
}

}  // namespace fulcrum
