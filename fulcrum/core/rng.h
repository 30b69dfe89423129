#ifndef FULCRUM_CORE_RNG_H_
#define FULCRUM_CORE_RNG_H_

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace fulcrum {

// A seeded random stream whose output is fixed by this file alone (xoshiro256** seeded through SplitMix64,
// Lemire's bounded integers), so plans are identical across compilers and standard libraries; the standard
// distributions and std::shuffle do not promise that.
class Rng {
 public:
  // Derives an independent stream from several keys, e.g. {seed, epoch, purpose}.
  explicit Rng(std::initializer_list<uint64_t> keys);
  explicit Rng(uint64_t seed) : Rng({seed}) {}

  uint64_t next_u64() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, bound); bound > 0. Lemire, "Fast random integer generation in an interval" (2019): unbiased,
  // nearly division-free.
  uint64_t below(uint64_t bound) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"  // unsigned __int128: GCC and Clang on 64-bit targets
    using u128 = unsigned __int128;
#pragma GCC diagnostic pop
    u128 m = static_cast<u128>(next_u64()) * bound;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < bound) {
      const uint64_t threshold = -bound % bound;
      while (low < threshold) {
        m = static_cast<u128>(next_u64()) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  // A uniformly random permutation. Large inputs are scattered into 256 buckets chosen at random, each bucket
  // is shuffled in cache, and the buckets are concatenated: still uniform (given bucket sizes s_j, every
  // arrangement has probability 256^-n · Π 1/s_j!, which sums to 1/n! over the size vectors), and several times
  // faster than Fisher–Yates once the input outgrows the cache.
  template <typename T>
  void shuffle(std::span<T> items) {
    if (items.size() < kBucketedFrom) {
      fisher_yates(items);
      return;
    }
    std::vector<T> shuffled;
    std::vector<uint8_t> buckets;
    shuffle_into(items, shuffled, buckets, [](size_t, size_t) {});
    std::move(shuffled.begin(), shuffled.end(), items.begin());
  }

  // shuffle() writing its result to `out` (resized to fit) instead of in place, and handing it over piece by
  // piece: visit(begin, end) is called for consecutive ranges of `out`, in order, as soon as each range holds its
  // final values (one bucket at a time for large inputs, all at once for small ones), so a caller can consume a
  // range while it is still in cache. `out` ends equal to what shuffle() leaves in `items`, and the stream is
  // advanced identically. Every item is moved out of `items` before the first visit, so `visit` may reuse it.
  // `buckets` is scratch, kept by the caller to avoid allocating on every call.
  template <typename T, typename Visit>
  void shuffle_into(std::span<T> items, std::vector<T>& out, std::vector<uint8_t>& buckets, Visit&& visit) {
    const size_t n = items.size();
    out.resize(n);
    if (n < kBucketedFrom) {
      shuffle_small_into(items, out, visit);
      return;
    }
    // The loops below draw from a local copy of the generator, which the compiler can keep in registers; stores
    // through uint8_t or T pointers could otherwise alias the member state and force it through memory.
    Rng local = *this;
    const BucketLayout layout = local.draw_buckets(n, buckets);
    scatter(items, out.data(), buckets, layout.begin.data(), 0, n);
    for (size_t b = 0; b < kBuckets; ++b) {
      if (layout.begin[b + 1] == layout.begin[b]) continue;
      local.fisher_yates(std::span<T>(out.data() + layout.begin[b], layout.begin[b + 1] - layout.begin[b]));
      visit(layout.begin[b], layout.begin[b + 1]);
    }
    *this = local;
  }

  // shuffle_into() with its work split over two threads, for trivially copyable items. A helper thread scatters
  // the second half of the items while this thread scatters the first, then shuffles the buckets one after
  // another while this thread visits each as soon as it is done. The draws are the same and are made in the same
  // order by one thread at a time, so the permutation, the visits and the stream are exactly shuffle_into()'s.
  template <typename T, typename Visit>
  void shuffle_into_two_threads(std::span<T> items, std::vector<T>& out, std::vector<uint8_t>& buckets,
                                Visit&& visit) {
    static_assert(std::is_trivially_copyable_v<T>, "the helper thread's work must not throw");
    const size_t n = items.size();
    out.resize(n);
    if (n < kBucketedFrom) {
      shuffle_small_into(items, out, visit);
      return;
    }
    Rng local = *this;
    const BucketLayout layout = local.draw_buckets(n, buckets);
    std::atomic<bool> first_half_scattered{false};
    std::atomic<size_t> buckets_shuffled{0};
    {
      std::jthread helper([&] {
        scatter(items, out.data(), buckets, layout.second_half.data(), n / 2, n);
        first_half_scattered.wait(false, std::memory_order_acquire);
        for (size_t b = 0; b < kBuckets; ++b) {
          local.fisher_yates(std::span<T>(out.data() + layout.begin[b], layout.begin[b + 1] - layout.begin[b]));
          buckets_shuffled.store(b + 1, std::memory_order_release);
          buckets_shuffled.notify_one();
        }
      });
      scatter(items, out.data(), buckets, layout.begin.data(), 0, n / 2);
      first_half_scattered.store(true, std::memory_order_release);
      first_half_scattered.notify_one();
      for (size_t b = 0; b < kBuckets; ++b) {
        for (size_t done = buckets_shuffled.load(std::memory_order_acquire); done <= b;
             done = buckets_shuffled.load(std::memory_order_acquire)) {
          buckets_shuffled.wait(done, std::memory_order_acquire);
        }
        if (layout.begin[b + 1] > layout.begin[b]) visit(layout.begin[b], layout.begin[b + 1]);
      }
    }  // joins the helper, the last user of `local`
    *this = local;
  }

  template <typename T>
  void fisher_yates(std::span<T> items) {
    for (size_t i = items.size(); i > 1; --i) {
      size_t j = static_cast<size_t>(below(i));
      std::swap(items[i - 1], items[j]);
    }
  }

 private:
  static constexpr size_t kBucketedFrom = 64 * 1024;  // smaller inputs: plain Fisher–Yates
  static constexpr size_t kBuckets = 256;

  // Where each bucket starts in the shuffled output, and where the items of the second half of the input
  // (positions n/2 on) start within each bucket, so the two halves can be scattered independently.
  struct BucketLayout {
    std::array<size_t, kBuckets + 1> begin{};
    std::array<size_t, kBuckets> second_half{};
  };

  // Draws the bucket of each of n items into `buckets` (resized).
  BucketLayout draw_buckets(size_t n, std::vector<uint8_t>& buckets) {
    buckets.resize(n);
    BucketLayout layout;
    std::array<size_t, kBuckets> count{};
    Rng local = *this;  // in registers: the uint8_t stores below could alias the member state
    auto draw = [&](size_t from, size_t to) {
      for (size_t i = from; i < to; ++i) {
        // below(256) is the top 8 bits of one draw, never rejected (2^64 is a multiple of 256).
        buckets[i] = static_cast<uint8_t>(local.below(kBuckets));
        ++count[buckets[i]];
      }
    };
    draw(0, n / 2);
    layout.second_half = count;  // counts of the first half, for now
    draw(n / 2, n);
    *this = local;
    for (size_t b = 0; b < kBuckets; ++b) {
      layout.begin[b + 1] = layout.begin[b] + count[b];
      layout.second_half[b] += layout.begin[b];
    }
    return layout;
  }

  // Moves items [from, to) into their buckets; next[b] is where the first of them in bucket b goes.
  template <typename T>
  static void scatter(std::span<T> items, T* out, const std::vector<uint8_t>& buckets, const size_t* start,
                      size_t from, size_t to) {
    std::array<size_t, kBuckets> next;
    std::copy(start, start + kBuckets, next.begin());
    for (size_t i = from; i < to; ++i) out[next[buckets[i]]++] = std::move(items[i]);
  }

  template <typename T, typename Visit>
  void shuffle_small_into(std::span<T> items, std::vector<T>& out, Visit& visit) {
    std::move(items.begin(), items.end(), out.begin());
    fisher_yates(std::span<T>(out));
    if (!out.empty()) visit(size_t{0}, out.size());
  }

  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  uint64_t state_[4];
};

}  // namespace fulcrum

#endif  // FULCRUM_CORE_RNG_H_
