#include "volume/placement.h"

#include <gtest/gtest.h>

#include <set>

namespace kvfs::volume {
namespace {

TEST(PlacementTest, ChunksOfAFileStripeOverEveryDevice) {
  for (uint64_t seed : {1ull, 2ull, 12345ull}) {
    std::set<uint32_t> seen;
    for (uint64_t c = 0; c < 8; ++c) seen.insert(PreferredDevice({seed, c}, 8));
    EXPECT_EQ(seen.size(), 8u) << seed;
  }
  // Consecutive inode numbers start on different devices, not all on one.
  std::set<uint32_t> first;
  for (uint64_t ino = 100; ino < 116; ++ino) first.insert(PreferredDevice({ino, 0}, 4));
  EXPECT_EQ(first.size(), 4u);
}

TEST(PlacementTest, FallsBackToTheMostFreeDeviceBeyondTheSlack) {
  const std::vector<uint64_t> region(4, 3200);  // slack 100
  const PlacementHint h{7, 0};
  const uint32_t pref = PreferredDevice(h, 4);
  std::vector<uint64_t> free(4, 1000);
  free[pref] = 950;  // within the slack: stays preferred
  EXPECT_EQ(PlacementOrder(h, free, region)[0], pref);
  free[pref] = 850;  // beyond it: the most free device (the lowest index of equals)
  auto order = PlacementOrder(h, free, region);
  EXPECT_NE(order[0], pref);
  EXPECT_EQ(free[order[0]], 1000u);
  EXPECT_EQ(order.back(), pref);
  EXPECT_EQ(order.size(), 4u);
}

TEST(PlacementTest, NameSeedDependsOnParentAndName) {
  EXPECT_EQ(NameSeed(1, "a", 1), NameSeed(1, "a", 1));
  EXPECT_NE(NameSeed(1, "a", 1), NameSeed(2, "a", 1));
  EXPECT_NE(NameSeed(1, "a", 1), NameSeed(1, "b", 1));
}

}  // namespace
}  // namespace kvfs::volume
