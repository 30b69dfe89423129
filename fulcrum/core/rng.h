#ifndef FULCRUM_CORE_RNG_H_
#define FULCRUM_CORE_RNG_H_

#include <cstdint>
#include <initializer_list>
#include <span>
#include <utility>

namespace fulcrum {

// A seeded random stream whose output is fixed by this file alone (xoshiro256** seeded through SplitMix64,
// Lemire's bounded integers), so plans are identical across compilers and standard libraries; the standard
// distributions and std::shuffle do not promise that.
class Rng {
 public:
  // Derives an independent stream from several keys, e.g. {seed, epoch, purpose}.
  explicit Rng(std::initializer_list<uint64_t> keys);
  explicit Rng(uint64_t seed) : Rng({seed}) {}

  uint64_t next_u64();
  // Uniform in [0, bound); bound > 0.
  uint64_t below(uint64_t bound);

  // Fisher–Yates shuffle.
  template <typename T>
  void shuffle(std::span<T> items) {
    for (size_t i = items.size(); i > 1; --i) {
      size_t j = static_cast<size_t>(below(i));
      std::swap(items[i - 1], items[j]);
    }
  }

 private:
  uint64_t state_[4];
};

}  // namespace fulcrum

#endif  // FULCRUM_CORE_RNG_H_
