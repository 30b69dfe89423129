#include "fulcrum/core/rng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace fulcrum {
namespace {

TEST(Rng, SameKeysSameStream) {
  Rng a({7, 3}), b({7, 3});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
}

TEST(Rng, KeyOrderMatters) {
  Rng a({7, 3}), b({3, 7});
  EXPECT_NE(a.next_u64(), b.next_u64());
}

TEST(Rng, FirstOutputIsPinned) {
  // Pinned so that a change of the generator, which would change every plan, cannot pass unnoticed.
  // Values from a separate Python transcription of the published xoshiro256** and SplitMix64 code.
  Rng rng(0);
  EXPECT_EQ(rng.next_u64(), 0xff73d0ed7d9fce26ULL);
  EXPECT_EQ(rng.next_u64(), 0x2aebd5d6fe969244ULL);
  EXPECT_EQ(rng.next_u64(), 0x87a5ef76138322f2ULL);
  EXPECT_EQ(Rng({7, 3}).next_u64(), 0x5a5d3c46ed7cd6f7ULL);
}

TEST(Rng, BelowStaysInRangeAndCoversIt) {
  Rng rng(42);
  std::vector<int> counts(10, 0);
  for (int i = 0; i < 100000; ++i) {
    uint64_t x = rng.below(10);
    ASSERT_LT(x, 10u);
    ++counts[x];
  }
  for (int c : counts) {
    EXPECT_GT(c, 9000);
    EXPECT_LT(c, 11000);
  }
}

TEST(Rng, ShuffleIsAPermutation) {
  Rng rng(1);
  std::vector<int> v(1000);
  std::iota(v.begin(), v.end(), 0);
  rng.shuffle(std::span<int>(v));
  std::vector<int> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  int fixed_points = 0;
  for (int i = 0; i < 1000; ++i) fixed_points += v[i] == i;
  EXPECT_LT(fixed_points, 20);
}

TEST(Rng, ShuffleIntoEqualsShuffleAndVisitsInOrder) {
  // Below and above the size where shuffle() switches to buckets.
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{200000}}) {
    std::vector<uint32_t> a(n), b(n);
    std::iota(a.begin(), a.end(), 0u);
    std::iota(b.begin(), b.end(), 0u);
    Rng ra({9, n}), rb({9, n});
    ra.shuffle(std::span<uint32_t>(a));
    std::vector<uint32_t> out;
    std::vector<uint8_t> scratch;
    size_t visited = 0;
    rb.shuffle_into(std::span<uint32_t>(b), out, scratch, [&](size_t begin, size_t end) {
      ASSERT_EQ(begin, visited);
      ASSERT_LT(begin, end);
      visited = end;
    });
    EXPECT_EQ(visited, n);
    EXPECT_EQ(out, a) << n;

    // The same on two threads.
    std::vector<uint32_t> c(n), out2;
    std::iota(c.begin(), c.end(), 0u);
    Rng rc({9, n});
    visited = 0;
    rc.shuffle_into_two_threads(std::span<uint32_t>(c), out2, scratch, [&](size_t begin, size_t end) {
      ASSERT_EQ(begin, visited);
      ASSERT_LT(begin, end);
      ASSERT_TRUE(std::equal(out2.begin() + begin, out2.begin() + end, a.begin() + begin));  // final when visited
      visited = end;
    });
    EXPECT_EQ(visited, n);
    EXPECT_EQ(out2, a) << n;
    const uint64_t next = ra.next_u64();  // the streams advanced alike
    EXPECT_EQ(rb.next_u64(), next) << n;
    EXPECT_EQ(rc.next_u64(), next) << n;
  }
}

}  // namespace
}  // namespace fulcrum
