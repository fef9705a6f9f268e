#include "fs/entry_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace kvfs::fs {
namespace {

TEST(EntryCacheTest, RemembersPositiveAndNegativeEntriesUntilChanged) {
  EntryCache c(1 << 20);
  EXPECT_FALSE(c.Get(1, "a").has_value());
  c.Put(1, "a", 42);
  c.Put(1, "missing", 0);
  ASSERT_TRUE(c.Get(1, "a").has_value());
  EXPECT_EQ(*c.Get(1, "a"), 42u);
  EXPECT_EQ(*c.Get(1, "missing"), 0u);
  EXPECT_FALSE(c.Get(2, "a").has_value()) << "the parent is part of the key";
  c.Put(1, "a", 0);  // unlinked
  EXPECT_EQ(*c.Get(1, "a"), 0u);
  c.Put(1, "missing", 7);  // created
  EXPECT_EQ(*c.Get(1, "missing"), 7u);
  c.Erase(1, "missing");
  EXPECT_FALSE(c.Get(1, "missing").has_value());
  EXPECT_EQ(c.entries(), 1u);
}

TEST(EntryCacheTest, StaysWithinItsBytesDroppingTheLeastRecentlyUsed) {
  const size_t max = 64 << 10;
  EntryCache c(max);
  const std::string pad(100, 'x');
  for (uint64_t i = 0; i < 5000; ++i) {
    c.Put(1, pad + std::to_string(i), i + 1);
    c.Get(1, pad + "0");  // kept in use: never the least recently used
  }
  EXPECT_LE(c.bytes(), max);
  EXPECT_GT(c.entries(), 100u);
  EXPECT_LT(c.entries(), 5000u);
  ASSERT_TRUE(c.Get(1, pad + "0").has_value());
  EXPECT_EQ(*c.Get(1, pad + "0"), 1u);
  EXPECT_FALSE(c.Get(1, pad + "1").has_value());
  EXPECT_EQ(*c.Get(1, pad + "4999"), 5000u);
}

TEST(EntryCacheTest, ConcurrentUseKeepsEveryAnswerOneThatWasPut) {
  EntryCache c(256 << 10);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&c, t] {
      for (uint64_t i = 0; i < 20000; ++i) {
        std::string name = "n" + std::to_string(i % 3000);
        c.Put(t, name, i % 3000 + 1);
        auto got = c.Get(t, name);
        if (got.has_value()) {
          EXPECT_EQ(*got, i % 3000 + 1);
        }
        if (i % 7 == 0) c.Erase(t, name);
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_LE(c.bytes(), 256u << 10);
}

TEST(EntryCacheTest, ADirectoryIsCompleteUntilItLosesANameItHolds) {
  EntryCache c(64 << 10);  // 4 KiB a shard
  EXPECT_FALSE(c.Complete(5));
  c.MarkComplete(5);
  c.MarkComplete(6);
  EXPECT_TRUE(c.Complete(5));
  c.Put(5, "a", 50);
  c.Put(5, "gone", 0);
  c.Erase(5, "gone");  // a missing name lost: still complete
  EXPECT_TRUE(c.Complete(5));
  c.Erase(5, "a");  // a name lost
  EXPECT_FALSE(c.Complete(5));
  EXPECT_TRUE(c.Complete(6));
  // Names of other directories push 6's name out of its shard.
  c.Put(6, "b", 60);
  const std::string pad(200, 'x');
  for (uint64_t i = 0; i < 2000; ++i) c.Put(7, pad + std::to_string(i), i + 1);
  EXPECT_FALSE(c.Get(6, "b").has_value());
  EXPECT_FALSE(c.Complete(6));
  // A name too large to keep at all.
  c.MarkComplete(8);
  c.Put(8, std::string(8 << 10, 'n'), 80);
  EXPECT_FALSE(c.Complete(8));
  c.MarkComplete(9);
  c.ForgetComplete();
  EXPECT_FALSE(c.Complete(9));
}

}  // namespace
}  // namespace kvfs::fs
