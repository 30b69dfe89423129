#include "fulcrum/data/isf_search.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

#include "fulcrum/core/error.h"
#include "fulcrum/data/balance_metrics.h"

namespace fulcrum {

IsfSearchResult isf_search(const Dataset& data, const BatchParams& params, const SampleCost& cost) {
  return std::move(isf_search(data, std::span<const BatchParams>(&params, 1), cost).front());
}

std::vector<IsfSearchResult> isf_search(const Dataset& data, std::span<const BatchParams> runs,
                                        const SampleCost& cost) {
  if (runs.empty()) return {};
  const BatchParams& params = runs.front();
  // b compared as a fraction: samples a step over slots a step.
  const auto same_b = [&](const BatchParams& r) {
    return r.resolved_samples_per_step() * params.slots_per_step() ==
           params.resolved_samples_per_step() * r.slots_per_step();
  };
  for (const BatchParams& r : runs) {
    if (!same_b(r) || r.seed != params.seed || r.epoch != params.epoch || r.oversize != params.oversize) {
      throw std::invalid_argument("isf_search: runs searched together must share b, seed, epoch and oversize");
    }
  }
  IsfSearchResult result;
  const double n = static_cast<double>(data.size());
  double tokens_rounded = 0, vision = 0;
  int64_t largest_vision = 1, largest_tokens = 1;
  for (uint32_t id = 0; id < data.size(); ++id) {
    tokens_rounded += static_cast<double>((data.tokens(id) + 255) / 256 * 256);
    vision += data.vision(id);
    largest_vision = std::max<int64_t>(largest_vision, data.vision(id));
    largest_tokens = std::max<int64_t>(largest_tokens, data.tokens(id));
  }
  // Caps below the largest sample would reject it; with own-group it is placed alone, so any cap ≥ 1 works.
  if (params.oversize == OversizePolicy::kOwnGroup) largest_vision = largest_tokens = 1;
  const double b = static_cast<double>(params.resolved_samples_per_step()) / static_cast<double>(params.slots_per_step());
  // tpt ← ⌊(⌊mean(ceil_256(t)) / mean(v)⌋ + 1) / 16⌋ · 16; kept ≥ 1 for data with few tokens per vision unit.
  const double ratio = vision > 0 ? std::floor((tokens_rounded / n) / (vision / n)) + 1 : 4096;
  int64_t tpt = static_cast<int64_t>(std::floor(ratio / 16)) * 16;
  if (tpt < 1) tpt = std::max<int64_t>(1, static_cast<int64_t>(ratio));
  // A tile is a step of one vision unit and its tpt tokens. A patch token is far too fine a step: patch-token
  // data steps by 256 LLM tokens (the rounding above) and the patch tokens that come with them in the data's mix.
  int64_t vision_step = 1, token_step = tpt;
  int64_t vision_cap = 4096 / tpt;
  if (data.vision_unit() == VisionUnit::kPatchTokens) {
    const double tokens_per_patch = vision > 0 ? (tokens_rounded / n) / (vision / n) : 4096;
    token_step = 256;
    vision_step = std::max<int64_t>(1, std::llround(256 / tokens_per_patch));
    vision_cap = std::max<int64_t>(1, std::llround(4096 / tokens_per_patch));
  }
  result.tokens_per_tile = tpt;
  result.vision_step = vision_step;
  result.token_step = token_step;

  // The search starts no lower than the largest sample, which a lower cap would refuse (OmniBal's start would
  // end the search before its first trial).
  BatchParams start = params;  // patch-token data has no default vision cap: the search gives it one
  start.vision_cap = std::max(vision_cap, largest_vision);
  start.token_cap = std::max<int64_t>(4096, largest_tokens);
  IsfParams p = isf_params(start, data);
  p.passes = 50;
  double max_avg = 0;
  bool have_candidate = false;
  std::vector<IsfSearchResult> results(runs.size(), result);
  for (int trial = 0; trial < 64 && p.vision_cap >= largest_vision && p.token_cap >= largest_tokens; ++trial) {
    p.text_full = p.token_cap - 128;
    p.vision_full = p.vision_cap;
    const Groups groups = isf_groups(data, p, params.oversize);
    IsfTrial t{p, n / static_cast<double>(groups.size()), 0, false};
    max_avg = std::max(max_avg, t.mean_group_samples);
    t.candidate = b <= t.mean_group_samples && t.mean_group_samples <= b + 1;
    have_candidate = have_candidate || t.candidate;
    for (size_t r = 0; r < runs.size(); ++r) {
      BatchParams dealt = runs[r];
      dealt.drop_last = false;
      const PlanMetrics m = measure_plan(deal_groups(groups, data, dealt), data, cost);
      t.score = m.pad_ratio + m.per_step.dist_ratio_vit + m.per_step.dist_ratio_llm;
      results[r].trials.push_back(t);
    }
    if (max_avg <= b + 1) {
      p.vision_cap += vision_step;
      p.token_cap += token_step;
    } else if (have_candidate) {
      break;
    } else {
      p.vision_cap -= vision_step;
      p.token_cap -= token_step;
    }
  }
  if (!have_candidate) {
    throw IsfSearchFailed(fmt::format(
        "the isf cap search found no caps giving {:.1f} to {:.1f} samples per group in {} trials", b, b + 1,
        results.front().trials.size()));
  }
  for (size_t r = 0; r < runs.size(); ++r) {
    const IsfTrial* best = nullptr;
    for (const IsfTrial& t : results[r].trials) {
      if (t.candidate && (!best || t.score < best->score)) best = &t;
    }
    results[r].best = best->params;
    results[r].best.passes = runs[r].passes;
  }
  return results;
}

}  // namespace fulcrum
