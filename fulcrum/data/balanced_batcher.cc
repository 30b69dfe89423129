#include "fulcrum/data/balanced_batcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <exception>
#include <numeric>
#include <queue>
#include <thread>

#include "fulcrum/core/error.h"
#include "fulcrum/core/rng.h"
#include "fulcrum/data/epoch_stream.h"

namespace fulcrum {

namespace {

constexpr uint64_t kWindowOrderPurpose = 0x77696e646f77ULL;  // "window"
constexpr int kSwapRounds = 3;  // more rounds measured no better on the bundled data

struct Item {
  uint32_t id;
  uint32_t vision;
  uint32_t tokens;
  double seconds;  // predicted time of the sample alone: the dealing order
};

struct Bin {
  MicroBatchLoad load;
  double seconds = 0;
  bool closed = false;  // holds an oversize sample alone
  std::vector<uint32_t> items;  // indices into the window's items
};

// Balances one window; reuses its buffers from window to window.
class WindowBalancer {
 public:
  WindowBalancer(const Dataset& data, const BatchParams& params, const SampleCost& cost)
      : data_(data), params_(params), cost_(cost) {}

  // Appends the window's steps to `plan`.
  void balance(std::span<const uint32_t> samples, int64_t steps, int64_t window_index, BatchPlan& plan) {
    const int64_t per_step = params_.slots_per_step();
    const size_t bin_count = static_cast<size_t>(steps * per_step);
    load_items(samples);
    open_bins(bin_count);
    deal(window_index);
    for (int round = 0; round < kSwapRounds; ++round) swap_round();
    emit(steps, window_index, plan);
  }

 private:
  bool fits(const Bin& bin, const Item& item) const {
    if (bin.closed) return false;
    if (params_.vision_cap > 0 && bin.load.vision + item.vision > params_.vision_cap) return false;
    if (params_.token_cap > 0 && bin.load.llm_tokens + item.tokens > params_.token_cap) return false;
    return true;
  }
  bool oversize(const Item& item) const {
    return (params_.vision_cap > 0 && item.vision > params_.vision_cap) ||
           (params_.token_cap > 0 && item.tokens > params_.token_cap);
  }
  double seconds_of(const MicroBatchLoad& load) const { return cost_.micro_batch_seconds(load); }

  void load_items(std::span<const uint32_t> samples) {
    // Gather the loads first, then ask the cost: the stream visits the dataset in random order, and a loop
    // without calls lets the processor overlap those cache misses.
    items_.resize(samples.size());
    for (size_t k = 0; k < samples.size(); ++k) {
      const uint32_t id = samples[k];
      items_[k] = {id, data_.vision(id), data_.tokens(id), 0};
    }
    for (Item& item : items_) {
      MicroBatchLoad alone;
      alone.add_packed(item.vision, item.tokens);
      item.seconds = seconds_of(alone);
    }
    // Decreasing time; ties by vision, then by stream position, so the order is fixed. The keys are sorted
    // beside the positions, so comparisons read one contiguous array; with the position as the last key the
    // order is total, and an unstable sort gives the one order there is.
    keys_.resize(items_.size());
    for (uint32_t k = 0; k < items_.size(); ++k) keys_[k] = {items_[k].seconds, items_[k].vision, k};
    std::sort(keys_.begin(), keys_.end(), [](const SortKey& a, const SortKey& b) {
      if (a.seconds != b.seconds) return a.seconds > b.seconds;
      if (a.vision != b.vision) return a.vision > b.vision;
      return a.position < b.position;
    });
    order_.resize(items_.size());
    for (size_t k = 0; k < keys_.size(); ++k) order_[k] = keys_[k].position;
  }

  void open_bins(size_t count) {
    if (bins_.size() < count) bins_.resize(count);
    bin_count_ = count;
    for (size_t b = 0; b < count; ++b) {
      bins_[b].load = {};
      bins_[b].seconds = 0;
      bins_[b].closed = false;
      bins_[b].items.clear();
    }
  }

  void add(Bin& bin, uint32_t item) {
    bin.items.push_back(item);
    bin.load.add_packed(items_[item].vision, items_[item].tokens);
    bin.seconds = seconds_of(bin.load);
  }

  void deal(int64_t window_index) {
    using Entry = std::pair<double, uint32_t>;  // (seconds, bin): the lowest first, ties by bin index
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
    for (uint32_t b = 0; b < bin_count_; ++b) heap.push({0.0, b});
    std::vector<Entry> skipped;
    for (uint32_t item : order_) {
      const Item& it = items_[item];
      if (oversize(it)) {
        if (params_.oversize == OversizePolicy::kError) {
          throw_oversize(data_, it.id, params_.vision_cap, params_.token_cap);
        }
        // Alone in an empty bin, which then takes nothing else.
        while (!heap.empty() && !bins_[heap.top().second].items.empty()) {
          skipped.push_back(heap.top());
          heap.pop();
        }
        if (heap.empty()) throw no_room(window_index, it);
        Bin& bin = bins_[heap.top().second];
        heap.pop();
        add(bin, item);
        bin.closed = true;
      } else {
        while (!heap.empty() && !fits(bins_[heap.top().second], it)) {
          if (!bins_[heap.top().second].closed) skipped.push_back(heap.top());
          heap.pop();
        }
        if (heap.empty()) throw no_room(window_index, it);
        const uint32_t b = heap.top().second;
        heap.pop();
        add(bins_[b], item);
        heap.push({bins_[b].seconds, b});
      }
      for (const Entry& e : skipped) heap.push(e);
      skipped.clear();
    }
    for (uint32_t b = 0; b < bin_count_; ++b) {
      if (bins_[b].items.empty()) throw no_room(window_index, items_[order_.back()]);
    }
  }

  InputError no_room(int64_t window_index, const Item& item) const {
    auto cap = [](int64_t c) { return c > 0 ? fmt::to_string(c) : std::string("no cap"); };
    return InputError(fmt::format(
        "window {}: {} (vision {}, tokens {}) fits in none of its {} micro-batches under the caps (vision {}, "
        "tokens {}); raise the caps or the micro-batches per rank, or lower the samples per step",
        window_index, data_.describe_sample(item.id), item.vision, item.tokens, bin_count_, cap(params_.vision_cap),
        cap(params_.token_cap)));
  }

  bool load_fits(const MicroBatchLoad& load) const {
    return (params_.vision_cap <= 0 || load.vision <= params_.vision_cap) &&
           (params_.token_cap <= 0 || load.llm_tokens <= params_.token_cap);
  }

  // One round of pairing the lightest bins with the heaviest and applying each pair's best move or swap.
  void swap_round() {
    by_time_.resize(bin_count_);
    std::iota(by_time_.begin(), by_time_.end(), 0u);
    std::sort(by_time_.begin(), by_time_.end(), [&](uint32_t a, uint32_t b) {
      return bins_[a].seconds != bins_[b].seconds ? bins_[a].seconds < bins_[b].seconds : a < b;
    });
    for (size_t i = 0; i < bin_count_ / 2; ++i) {
      Bin& light = bins_[by_time_[i]];
      Bin& heavy = bins_[by_time_[bin_count_ - 1 - i]];
      if (light.closed || heavy.closed) continue;
      improve_pair(heavy, light);
    }
  }

  // A pair is as slow as its slower bin.
  double pair_score(const MicroBatchLoad& a, const MicroBatchLoad& b) const {
    return std::max(seconds_of(a), seconds_of(b));
  }

  void improve_pair(Bin& heavy, Bin& light) {
    double best = pair_score(heavy.load, light.load);
    int best_x = -1, best_y = -1;  // x: index in heavy.items; y: index in light.items, -1 for a move
    for (size_t x = 0; x < heavy.items.size(); ++x) {
      const Item& hx = items_[heavy.items[x]];
      MicroBatchLoad heavy_without = heavy.load;
      heavy_without.remove_packed(hx.vision, hx.tokens);
      if (heavy.items.size() > 1) {
        MicroBatchLoad light_with = light.load;
        light_with.add_packed(hx.vision, hx.tokens);
        const double worst = pair_score(heavy_without, light_with);
        if (worst < best && load_fits(light_with)) {
          best = worst;
          best_x = static_cast<int>(x);
          best_y = -1;
        }
      }
      for (size_t y = 0; y < light.items.size(); ++y) {
        const Item& ly = items_[light.items[y]];
        MicroBatchLoad heavy_swapped = heavy_without;
        heavy_swapped.add_packed(ly.vision, ly.tokens);
        MicroBatchLoad light_swapped = light.load;
        light_swapped.remove_packed(ly.vision, ly.tokens);
        light_swapped.add_packed(hx.vision, hx.tokens);
        const double worst = pair_score(heavy_swapped, light_swapped);
        if (worst < best && load_fits(heavy_swapped) && load_fits(light_swapped)) {
          best = worst;
          best_x = static_cast<int>(x);
          best_y = static_cast<int>(y);
        }
      }
    }
    if (best_x < 0) return;
    const uint32_t moved = heavy.items[best_x];
    heavy.items.erase(heavy.items.begin() + best_x);
    heavy.load.remove_packed(items_[moved].vision, items_[moved].tokens);
    if (best_y >= 0) {
      const uint32_t back = light.items[best_y];
      light.items.erase(light.items.begin() + best_y);
      light.load.remove_packed(items_[back].vision, items_[back].tokens);
      add(heavy, back);
    }
    heavy.seconds = seconds_of(heavy.load);
    add(light, moved);
  }

  void emit(int64_t steps, int64_t window_index, BatchPlan& plan) {
    const int dp = params_.dp, m = params_.micro_batches;
    // Group: bins sorted by (vision, tokens, time); dp consecutive bins share a micro-batch slot.
    by_time_.resize(bin_count_);
    std::iota(by_time_.begin(), by_time_.end(), 0u);
    std::sort(by_time_.begin(), by_time_.end(), [&](uint32_t a, uint32_t b) {
      if (bins_[a].load.vision != bins_[b].load.vision) return bins_[a].load.vision < bins_[b].load.vision;
      if (bins_[a].load.llm_tokens != bins_[b].load.llm_tokens) return bins_[a].load.llm_tokens < bins_[b].load.llm_tokens;
      return bins_[a].seconds != bins_[b].seconds ? bins_[a].seconds < bins_[b].seconds : a < b;
    });
    std::vector<uint32_t> step_order(static_cast<size_t>(steps));
    std::iota(step_order.begin(), step_order.end(), 0u);
    Rng rng({params_.seed, static_cast<uint64_t>(params_.epoch), kWindowOrderPurpose,
             static_cast<uint64_t>(window_index)});
    rng.shuffle(std::span<uint32_t>(step_order));
    std::vector<uint32_t> ids;
    for (uint32_t g : step_order) {
      const size_t step_base = static_cast<size_t>(g) * dp * m;
      for (int r = 0; r < dp; ++r) {
        for (int j = 0; j < m; ++j) {
          const size_t position = step_base + static_cast<size_t>(j) * dp + (j % 2 == 0 ? r : dp - 1 - r);
          ids.clear();
          for (uint32_t item : bins_[by_time_[position]].items) ids.push_back(items_[item].id);
          std::sort(ids.begin(), ids.end());
          plan.add_micro_batch(ids);
        }
      }
    }
  }

  const Dataset& data_;
  const BatchParams& params_;
  const SampleCost& cost_;
  struct SortKey {
    double seconds;
    uint32_t vision;
    uint32_t position;  // in items_
  };

  std::vector<Item> items_;
  std::vector<SortKey> keys_;
  std::vector<uint32_t> order_;
  std::vector<Bin> bins_;
  size_t bin_count_ = 0;
  std::vector<uint32_t> by_time_;
};

// Balances windows 0..windows-1 with `balance(k, balancer, out)` on this thread and a helper thread, each taking
// the next unclaimed window when it is free (so a thread slowed by other load takes fewer), then appends the
// windows' micro-batches to `plan` in window order. The plan is the one a single thread makes. A window that
// fails stops its thread; the error raised is the first failing window's, as from a single thread: every window
// before it was claimed earlier, and either completed or failed first.
template <typename Balance>
void balance_on_two_threads(int64_t windows, Balance&& balance, const Dataset& data, const BatchParams& params,
                            const SampleCost& cost, BatchPlan& plan) {
  struct Done {
    int worker = 0;
    int64_t first = 0, last = 0;  // its micro-batches in that worker's plan
  };
  std::vector<Done> done(static_cast<size_t>(windows));
  std::atomic<int64_t> next{0};
  struct Failure {
    int64_t window = -1;
    std::exception_ptr error;
  };
  std::array<Failure, 2> failures;
  std::array<BatchPlan, 2> parts{new_plan("fulcrum", params, data, false), new_plan("fulcrum", params, data, false)};
  auto work = [&](int worker) {
    WindowBalancer balancer(data, params, cost);
    BatchPlan& out = parts[static_cast<size_t>(worker)];
    for (int64_t k = next.fetch_add(1); k < windows; k = next.fetch_add(1)) {
      const int64_t first = out.micro_batch_count();
      try {
        balance(k, balancer, out);
      } catch (...) {
        failures[static_cast<size_t>(worker)] = {k, std::current_exception()};
        return;
      }
      done[static_cast<size_t>(k)] = {worker, first, out.micro_batch_count()};
    }
  };
  {
    std::jthread helper(work, 1);
    work(0);
  }  // joins the helper
  const Failure* first_failure = nullptr;
  for (const Failure& f : failures) {
    if (f.error && (!first_failure || f.window < first_failure->window)) first_failure = &f;
  }
  if (first_failure) std::rethrow_exception(first_failure->error);
  for (const Done& d : done) {
    for (int64_t m = d.first; m < d.last; ++m) plan.add_micro_batch(parts[static_cast<size_t>(d.worker)].micro_batch(m));
  }
}

}  // namespace

BatchPlan BalancedBatcher::plan(const Dataset& data, const BatchParams& params, const SampleCost& cost,
                                int64_t first_step) const {
  StepStream stream = cut_into_steps(shuffled_ids(data.size(), params.seed, params.epoch),
                                     params.resolved_samples_per_step(), params.slots_per_step(), params.drop_last);
  BatchPlan plan = new_plan(name(), params, data, /*padded=*/false);
  plan.repeated = stream.repeated;
  plan.dropped = stream.dropped;
  const int64_t window = params.window_steps;
  const int64_t first_window = std::clamp<int64_t>(first_step, 0, stream.steps()) / window;
  const int64_t end_window = (stream.steps() + window - 1) / window;
  plan.set_first_step(first_window * window);
  plan.reserve(stream.order.size(), static_cast<size_t>(stream.steps() * params.slots_per_step()));
  const int64_t windows = end_window - first_window;
  auto window_samples = [&](int64_t w) {
    const int64_t begin_step = w * window;
    const int64_t end_step = std::min(stream.steps(), begin_step + window);
    return std::span<const uint32_t>(stream.order.data() + stream.step_begin[begin_step],
                                     stream.order.data() + stream.step_begin[end_step]);
  };
  auto window_steps = [&](int64_t w) { return std::min(stream.steps(), (w + 1) * window) - w * window; };
  if (windows < 2 || std::thread::hardware_concurrency() < 2) {
    WindowBalancer balancer(data, params, cost);
    for (int64_t w = first_window; w < end_window; ++w) balancer.balance(window_samples(w), window_steps(w), w, plan);
  } else {
    balance_on_two_threads(windows, [&](int64_t k, WindowBalancer& balancer, BatchPlan& out) {
      const int64_t w = first_window + k;
      balancer.balance(window_samples(w), window_steps(w), w, out);
    }, data, params, cost, plan);
  }
  return first_step == plan.first_step() ? plan : plan.tail(first_step - plan.first_step());
}

}  // namespace fulcrum
