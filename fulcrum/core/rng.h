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
    constexpr size_t kBuckets = 256;
    if (items.size() < 64 * 1024) {
      fisher_yates(items);
      return;
    }
    std::vector<uint8_t> bucket(items.size());
    std::array<size_t, kBuckets + 1> begin{};
    for (size_t i = 0; i < items.size(); ++i) {
      bucket[i] = static_cast<uint8_t>(below(kBuckets));
      ++begin[bucket[i] + 1];
    }
    for (size_t b = 0; b < kBuckets; ++b) begin[b + 1] += begin[b];
    std::vector<T> scattered(items.size());
    std::array<size_t, kBuckets> next;
    std::copy(begin.begin(), begin.end() - 1, next.begin());
    for (size_t i = 0; i < items.size(); ++i) scattered[next[bucket[i]]++] = std::move(items[i]);
    for (size_t b = 0; b < kBuckets; ++b) {
      fisher_yates(std::span<T>(scattered.data() + begin[b], begin[b + 1] - begin[b]));
    }
    std::move(scattered.begin(), scattered.end(), items.begin());
  }

  template <typename T>
  void fisher_yates(std::span<T> items) {
    for (size_t i = items.size(); i > 1; --i) {
      size_t j = static_cast<size_t>(below(i));
      std::swap(items[i - 1], items[j]);
    }
  }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  uint64_t state_[4];
};

}  // namespace fulcrum

#endif  // FULCRUM_CORE_RNG_H_
