#include "fulcrum/data/isf.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <thread>

#include "fulcrum/core/error.h"
#include "fulcrum/core/rng.h"
#include "fulcrum/data/isf_search.h"

namespace fulcrum {

namespace {

constexpr uint64_t kIsfPurpose = 0x697366ULL;         // "isf"
constexpr uint64_t kIsfDealPurpose = 0x6973666465ULL;  // "isfde"

// A sample with its loads beside its id, so passes read one contiguous array instead of looking ids up.
// The passes are bound by moving records (the shuffle scatters every record once per pass), so loads that fit in
// 16 bits are stored in 16 bits: 8-byte records instead of 12.
template <typename Load>
struct Rec {
  uint32_t id;
  Load vision;
  Load tokens;
};

// FILL over records already in pass order: `on_group(begin, end, vision, tokens)` gets each group as it closes,
// the open one included at the end (Q2).
template <typename R, typename OnGroup>
void sweep(std::span<const R> pool, const IsfParams& p, OnGroup&& on_group) {
  size_t open = 0;
  int64_t vision = 0, tokens = 0;
  for (size_t i = 0; i < pool.size(); ++i) {
    const R& r = pool[i];
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

// FILL and filter of one pass (the same rule as sweep()), fed the shuffled pool piece by piece as the shuffle
// finishes each piece. Every record is appended to the next pass's pool as it is read; when its group closes full
// (or in the last pass) the group is taken back off that pool and accepted. Most groups are recycled and have
// one or two samples, so writing each record once beats copying every recycled group when it closes.
template <typename R>
class PassSweep {
 public:
  // `next` has room for the whole pool; it may be the memory the pool was shuffled out of.
  PassSweep(const IsfParams& p, bool last, R* next, Groups& out) : p_(p), last_(last), next_(next), out_(out) {}

  // Out of line, so that the loop gets the registers to itself rather than sharing them with the shuffle.
  [[gnu::noinline]] void feed(const R* begin, const R* end) {
    // Local copies of the state stay in registers. Whether a record closes the open group is close to a coin
    // toss, so the common outcome (close, and recycle the group) is computed without branching; only accepting a
    // full group branches, which is rare after the first passes. A closing group is never empty: every pool
    // record fits the caps alone.
    size_t size = size_, open = open_;
    int64_t vision = vision_, tokens = tokens_;
    const int64_t vision_cap = p_.vision_cap, token_cap = p_.token_cap;
    // In the last pass every group is accepted: thresholds of 0 make every group full.
    const int64_t vision_full = last_ ? 0 : p_.vision_full, text_full = last_ ? 0 : p_.text_full;
    R* const next = next_;
    for (const R* r = begin; r != end; ++r) {
      const int64_t v = r->vision, t = r->tokens;
      const bool close = (vision + v > vision_cap) | (tokens + t > token_cap);
      if (close & ((vision >= vision_full) | (tokens >= text_full))) {  // OR, and ≥ (Q4)
        accept(open, size);
        size = open;
      }
      // Masks instead of ?: so that the compiler cannot turn them back into a branch: keep is all ones while
      // the group stays open and zero when it closes.
      const int64_t keep = static_cast<int64_t>(close) - 1;
      open += (size - open) & ~static_cast<size_t>(keep);
      vision = (vision & keep) + v;
      tokens = (tokens & keep) + t;
      next[size++] = *r;
    }
    size_ = size;
    open_ = open;
    vision_ = vision;
    tokens_ = tokens;
  }

  // Closes the open group (Q2); returns the size of the next pool.
  size_t finish() {
    if (size_ > open_ && (last_ || vision_ >= p_.vision_full || tokens_ >= p_.text_full)) {
      accept(open_, size_);
      size_ = open_;
    }
    return size_;
  }

 private:
  // Moves next_[begin, end) out of the next pool into the output as one group. Out of line: the rare path,
  // kept from crowding the sweep loop's registers.
  [[gnu::noinline]] void accept(size_t begin, size_t end) {
    for (size_t k = begin; k < end; ++k) out_.ids.push_back(next_[k].id);
    out_.begin.push_back(out_.ids.size());
  }

  const IsfParams& p_;
  const bool last_;
  R* const next_;
  Groups& out_;
  size_t size_ = 0;  // records in the next pool
  size_t open_ = 0;  // where the open group starts in it
  int64_t vision_ = 0, tokens_ = 0;
};

// The passes of ISF over `pool`, appending accepted groups to `out`. Two buffers serve all passes: the shuffle
// moves the pool into `shuffled`, and the sweep writes the recycled records back into the pool's memory.
template <typename R>
void run_passes(std::vector<R> pool, const IsfParams& p, Groups& out) {
  std::vector<R> shuffled;
  std::vector<uint8_t> buckets;
  // A second core shuffles while this one sweeps; the groups are the same either way.
  const bool two_threads = std::thread::hardware_concurrency() >= 2;
  size_t size = pool.size();
  for (int pass = 0; pass < p.passes && size > 0; ++pass) {  // empty pool: nothing left to regroup (Q3)
    Rng rng({p.seed, static_cast<uint64_t>(p.epoch), kIsfPurpose, static_cast<uint64_t>(pass)});
    PassSweep<R> sweep(p, /*last=*/pass + 1 == p.passes, pool.data(), out);
    auto feed = [&](size_t begin, size_t end) { sweep.feed(shuffled.data() + begin, shuffled.data() + end); };
    if (two_threads) {
      rng.shuffle_into_two_threads(std::span<R>(pool.data(), size), shuffled, buckets, feed);
    } else {
      rng.shuffle_into(std::span<R>(pool.data(), size), shuffled, buckets, feed);
    }
    size = sweep.finish();
  }
}

template <typename Load>
void run_passes(const Dataset& data, std::span<const uint32_t> ids, const IsfParams& p, Groups& out) {
  std::vector<Rec<Load>> pool(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    const uint32_t id = ids[k];
    pool[k] = {id, static_cast<Load>(data.vision(id)), static_cast<Load>(data.tokens(id))};
  }
  run_passes(std::move(pool), p, out);
}

}  // namespace

void isf_fill(const Dataset& data, std::span<const uint32_t> order, const IsfParams& p, Groups& out) {
  std::vector<Rec<uint32_t>> pool;
  for (uint32_t id : order) pool.push_back({id, data.vision(id), data.tokens(id)});
  sweep(std::span<const Rec<uint32_t>>(pool), p, [&](size_t begin, size_t end, int64_t, int64_t) {
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
  std::vector<uint32_t> fitting, over;
  fitting.reserve(data.size());
  uint32_t largest = 0;  // the largest load of a fitting sample, vision or tokens
  for (uint32_t id = 0; id < data.size(); ++id) {
    if (data.vision(id) > p.vision_cap || data.tokens(id) > p.token_cap) {
      if (oversize == OversizePolicy::kError) throw_oversize(data, id, p.vision_cap, p.token_cap);
      over.push_back(id);
    } else {
      fitting.push_back(id);
      largest = std::max({largest, data.vision(id), data.tokens(id)});
    }
  }
  Groups out;
  out.ids.reserve(data.size());
  out.begin.reserve(data.size() + 1);
  if (largest <= std::numeric_limits<uint16_t>::max()) {
    run_passes<uint16_t>(data, fitting, p, out);
  } else {
    run_passes<uint32_t>(data, fitting, p, out);
  }
  for (uint32_t id : over) out.add(std::span<const uint32_t>(&id, 1));
  return out;
}

void check_isf_caps(const BatchParams& params, const Dataset& data, const BatchParamNames& names) {
  if (data.vision_unit() != VisionUnit::kPatchTokens || params.vision_cap > 0 || params.search) return;
  throw InputError(fmt::format("isf on data that counts vision_tokens needs a vision cap: give {} (patch tokens a "
                               "micro-batch may hold){}",
                               names.vision_cap, names.search ? fmt::format(" or {}", names.search) : ""));
}

IsfParams isf_params(const BatchParams& params, const Dataset& data) {
  IsfParams p;
  if (params.vision_cap == 0) {  // by now a search has given its caps
    BatchParams unsearched = params;
    unsearched.search = false;
    check_isf_caps(unsearched, data);
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

void take_caps(const IsfParams& caps, BatchParams& params) {
  params.vision_cap = caps.vision_cap;
  params.token_cap = caps.token_cap;
  params.vision_full = caps.vision_full;
  params.text_full = caps.text_full;
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
      throw InputError(fmt::format("dropping the short last step leaves no step: {} isf groups, {} per step", groups.size(), slots));
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
    take_caps(isf_search(data, params, cost).best, resolved);
  }
  BatchPlan plan = deal_groups(isf_groups(data, isf_params(resolved, data), params.oversize), data, resolved);
  return first_step == 0 ? plan : plan.tail(first_step);
}

}  // namespace fulcrum
