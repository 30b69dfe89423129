#include "fulcrum/data/isf.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "fulcrum/core/error.h"
#include "fulcrum/core/rng.h"
#include "fulcrum/data/isf_search.h"

namespace fulcrum {

namespace {

constexpr uint64_t kIsfPurpose = 0x697366ULL;         // "isf"
constexpr uint64_t kIsfDealPurpose = 0x6973666465ULL;  // "isfde"

// A sample with its loads beside its id, so passes read one contiguous array instead of looking ids up.
struct Rec {
  uint32_t id;
  uint32_t vision;
  uint32_t tokens;
};

// FILL over records already in pass order; group g is recs[begin[g], begin[g + 1]).
void fill_records(std::span<const Rec> pool, const IsfParams& p, std::vector<Rec>& recs, std::vector<size_t>& begin) {
  recs.clear();
  begin.assign(1, 0);
  int64_t vision = 0, tokens = 0;
  for (const Rec& r : pool) {
    if (vision + r.vision > p.vision_cap || tokens + r.tokens > p.token_cap) {
      if (recs.size() > begin.back()) begin.push_back(recs.size());
      vision = 0;
      tokens = 0;
    }
    recs.push_back(r);
    vision += r.vision;
    tokens += r.tokens;
  }
  if (recs.size() > begin.back()) begin.push_back(recs.size());  // always flush (Q2)
}

}  // namespace

void isf_fill(const Dataset& data, std::span<const uint32_t> order, const IsfParams& p, Groups& out) {
  std::vector<Rec> pool, recs;
  std::vector<size_t> begin;
  for (uint32_t id : order) pool.push_back({id, data.vision(id), data.tokens(id)});
  fill_records(pool, p, recs, begin);
  std::vector<uint32_t> ids;
  for (size_t g = 0; g + 1 < begin.size(); ++g) {
    ids.clear();
    for (size_t k = begin[g]; k < begin[g + 1]; ++k) ids.push_back(recs[k].id);
    out.add(ids);
  }
}

bool isf_full(const Dataset& data, std::span<const uint32_t> group, const IsfParams& p) {
  int64_t vision = 0, tokens = 0;
  for (uint32_t id : group) {
    vision += data.vision(id);
    tokens += data.tokens(id);
  }
  return vision >= p.vision_full || tokens >= p.text_full;  // OR, and ≥ (Q4)
}

Groups isf_groups(const Dataset& data, const IsfParams& p, OversizePolicy oversize) {
  std::vector<Rec> pool;
  std::vector<uint32_t> over;
  pool.reserve(data.size());
  for (uint32_t id = 0; id < data.size(); ++id) {
    if (data.vision(id) > p.vision_cap || data.tokens(id) > p.token_cap) {
      if (oversize == OversizePolicy::kError) throw_oversize(data, id, p.vision_cap, p.token_cap);
      over.push_back(id);
    } else {
      pool.push_back({id, data.vision(id), data.tokens(id)});
    }
  }
  Groups out;
  out.ids.reserve(data.size());
  std::vector<Rec> recs;
  std::vector<size_t> begin;
  recs.reserve(pool.size());
  auto emit = [&out](std::span<const Rec> group) {
    for (const Rec& r : group) out.ids.push_back(r.id);
    out.begin.push_back(out.ids.size());
  };
  for (int pass = 0; pass < p.passes; ++pass) {
    Rng rng({p.seed, static_cast<uint64_t>(p.epoch), kIsfPurpose, static_cast<uint64_t>(pass)});
    rng.shuffle(std::span<Rec>(pool));
    fill_records(pool, p, recs, begin);
    const bool last = pass + 1 == p.passes;
    pool.clear();
    for (size_t g = 0; g + 1 < begin.size(); ++g) {
      std::span<const Rec> group(recs.data() + begin[g], recs.data() + begin[g + 1]);
      int64_t vision = 0, tokens = 0;
      for (const Rec& r : group) {
        vision += r.vision;
        tokens += r.tokens;
      }
      if (last || vision >= p.vision_full || tokens >= p.text_full) {
        emit(group);  // full, or the last pass's groups, accepted without filtering
      } else {
        pool.insert(pool.end(), group.begin(), group.end());  // recycle, never drop
      }
    }
    if (pool.empty()) break;  // Q3: nothing left to regroup
  }
  for (uint32_t id : over) out.add(std::span<const uint32_t>(&id, 1));
  return out;
}

IsfParams isf_params(const BatchParams& params, const Dataset& data) {
  IsfParams p;
  if (data.vision_unit() == VisionUnit::kPatchTokens && params.vision_cap == 0) {
    throw InputError("isf on a dataset that counts vision_tokens needs --vit-cap (in patch tokens)");
  }
  if (params.vision_cap > 0) p.vision_cap = params.vision_cap;
  if (params.token_cap > 0) p.token_cap = params.token_cap;
  p.vision_full = params.vision_full > 0 ? params.vision_full : p.vision_cap;
  p.text_full = params.text_full > 0 ? params.text_full : std::max<int64_t>(1, p.token_cap - 128);
  p.passes = params.passes;
  p.seed = params.seed;
  p.epoch = params.epoch;
  return p;
}

BatchPlan deal_groups(const Groups& groups, const Dataset& data, const BatchParams& params) {
  const int64_t slots = params.slots_per_step();
  std::vector<uint32_t> order(groups.size());
  std::iota(order.begin(), order.end(), 0u);
  Rng rng({params.seed, static_cast<uint64_t>(params.epoch), kIsfDealPurpose});
  rng.shuffle(std::span<uint32_t>(order));

  BatchPlan plan = new_plan("isf", params, data, /*padded=*/false);
  plan.reserve(data.size() + static_cast<size_t>(slots), groups.size() + static_cast<size_t>(slots));
  const int64_t full_steps = static_cast<int64_t>(groups.size()) / slots;
  for (int64_t k = 0; k < full_steps * slots; ++k) plan.add_micro_batch(groups.group(order[k]));

  // The short last step: its groups, split or padded to exactly `slots` non-empty micro-batches.
  std::vector<std::vector<uint32_t>> tail;
  for (size_t k = static_cast<size_t>(full_steps * slots); k < order.size(); ++k) {
    auto g = groups.group(order[k]);
    tail.emplace_back(g.begin(), g.end());
  }
  if (tail.empty()) return plan;
  int64_t tail_samples = 0;
  for (auto& g : tail) tail_samples += static_cast<int64_t>(g.size());
  if (params.drop_last) {
    if (full_steps == 0) {
      throw InputError(fmt::format("--drop-last leaves no step: {} isf groups, {} per step", groups.size(), slots));
    }
    plan.dropped = tail_samples;
    return plan;
  }
  while (static_cast<int64_t>(tail.size()) < slots && tail_samples > static_cast<int64_t>(tail.size())) {
    auto largest = std::max_element(tail.begin(), tail.end(),
                                    [](const auto& a, const auto& b) { return a.size() < b.size(); });
    const uint32_t moved = largest->back();
    largest->pop_back();
    tail.push_back({moved});
  }
  for (int64_t k = 0; static_cast<int64_t>(tail.size()) < slots; ++k) {
    // Fewer samples than micro-batches: repeat from the start of the dealt order.
    tail.push_back({plan.sample_ids().empty() ? tail[static_cast<size_t>(k) % tail.size()][0]
                                              : plan.sample_ids()[static_cast<size_t>(k) % plan.sample_ids().size()]});
    ++plan.repeated;
  }
  for (auto& g : tail) plan.add_micro_batch(g);
  return plan;
}

BatchPlan IsfBatcher::plan(const Dataset& data, const BatchParams& params, const SampleCost& cost,
                           int64_t first_step) const {
  BatchParams resolved = params;
  if (params.search) {
    IsfSearchResult found = isf_search(data, params, cost);
    resolved.vision_cap = found.best.vision_cap;
    resolved.token_cap = found.best.token_cap;
    resolved.text_full = found.best.text_full;
    resolved.vision_full = found.best.vision_full;
  }
  BatchPlan plan = deal_groups(isf_groups(data, isf_params(resolved, data), params.oversize), data, resolved);
  return first_step == 0 ? plan : plan.tail(first_step);
}

}  // namespace fulcrum
