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

// FILL over records already in pass order: `on_group(begin, end, vision, tokens)` gets each group as it closes,
// the open one included at the end (Q2).
template <typename OnGroup>
void sweep(std::span<const Rec> pool, const IsfParams& p, OnGroup&& on_group) {
  size_t open = 0;
  int64_t vision = 0, tokens = 0;
  for (size_t i = 0; i < pool.size(); ++i) {
    const Rec& r = pool[i];
    if (vision + r.vision > p.vision_cap || tokens + r.tokens > p.token_cap) {
      if (i > open) on_group(open, i, vision, tokens);
      open = i;
      vision = 0;
      tokens = 0;
    }
    vision += r.vision;
    tokens += r.tokens;
  }
  if (pool.size() > open) on_group(open, pool.size(), vision, tokens);
}

}  // namespace

void isf_fill(const Dataset& data, std::span<const uint32_t> order, const IsfParams& p, Groups& out) {
  std::vector<Rec> pool;
  for (uint32_t id : order) pool.push_back({id, data.vision(id), data.tokens(id)});
  sweep(pool, p, [&](size_t begin, size_t end, int64_t, int64_t) {
    for (size_t k = begin; k < end; ++k) out.ids.push_back(pool[k].id);
    out.begin.push_back(out.ids.size());
  });
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
  std::vector<Rec> next;  // the groups of this pass that go back to the pool
  next.reserve(pool.size());
  for (int pass = 0; pass < p.passes && !pool.empty(); ++pass) {
    Rng rng({p.seed, static_cast<uint64_t>(p.epoch), kIsfPurpose, static_cast<uint64_t>(pass)});
    rng.shuffle(std::span<Rec>(pool));
    const bool last = pass + 1 == p.passes;
    // FILL and filter in one sweep: a group is judged as soon as it closes.
    next.clear();
    sweep(pool, p, [&](size_t begin, size_t end, int64_t vision, int64_t tokens) {
      if (last || vision >= p.vision_full || tokens >= p.text_full) {  // full, or the last pass: accepted
        for (size_t k = begin; k < end; ++k) out.ids.push_back(pool[k].id);
        out.begin.push_back(out.ids.size());
      } else {
        next.insert(next.end(), pool.begin() + static_cast<std::ptrdiff_t>(begin),
                    pool.begin() + static_cast<std::ptrdiff_t>(end));  // recycled, never dropped
      }
    });
    pool.swap(next);     // empty pool: nothing left to regroup (Q3)
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
