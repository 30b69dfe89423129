#include "fulcrum/core/rng.h"

namespace fulcrum {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

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

}  // namespace fulcrum
