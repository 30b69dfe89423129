#include "fulcrum/core/rng.h"

namespace fulcrum {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Rng::Rng(std::initializer_list<uint64_t> keys) {
  // Fold the keys one after another so {1, 2} and {2, 1} give different streams.
  uint64_t mix = 0x6a09e667f3bcc909ULL;
  for (uint64_t key : keys) {
    uint64_t x = mix ^ key;
    mix = splitmix64(x);
  }
  uint64_t x = mix;
  for (uint64_t& word : state_) word = splitmix64(x);
}

uint64_t Rng::next_u64() {
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

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"  // unsigned __int128: GCC and Clang on 64-bit targets
uint64_t Rng::below(uint64_t bound) {
  // Lemire, "Fast random integer generation in an interval" (2019): unbiased, nearly division-free.
  unsigned __int128 m = static_cast<unsigned __int128>(next_u64()) * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    const uint64_t threshold = -bound % bound;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next_u64()) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}
#pragma GCC diagnostic pop

}  // namespace fulcrum
