#ifndef FULCRUM_CORE_RNG_H_
#define FULCRUM_CORE_RNG_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
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
    constexpr size_t kBuckets = 256;
    const size_t n = items.size();
    out.resize(n);
    if (n < kBucketedFrom) {
      std::move(items.begin(), items.end(), out.begin());
      fisher_yates(std::span<T>(out));
      if (n > 0) visit(size_t{0}, n);
      return;
    }
    buckets.resize(n);
    std::array<size_t, kBuckets + 1> begin{};
    // The loops below draw from a local copy of the generator, which the compiler can keep in registers; stores
    // through uint8_t or T pointers could otherwise alias the member state and force it through memory.
    Rng local = *this;
    for (size_t i = 0; i < n; ++i) {
      // below(256) is the top 8 bits of one draw, never rejected (2^64 is a multiple of 256).
      buckets[i] = static_cast<uint8_t>(local.below(kBuckets));
      ++begin[buckets[i] + 1];
    }
    for (size_t b = 0; b < kBuckets; ++b) begin[b + 1] += begin[b];
    std::array<size_t, kBuckets> next;
    std::copy(begin.begin(), begin.end() - 1, next.begin());
    for (size_t i = 0; i < n; ++i) out[next[buckets[i]]++] = std::move(items[i]);
    for (size_t b = 0; b < kBuckets; ++b) {
      if (begin[b + 1] == begin[b]) continue;
      local.fisher_yates(std::span<T>(out.data() + begin[b], begin[b + 1] - begin[b]));
      visit(begin[b], begin[b + 1]);
    }
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

  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  uint64_t state_[4];
};

}  // namespace fulcrum

#endif  // FULCRUM_CORE_RNG_H_
