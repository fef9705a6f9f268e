// RamCache: the budget is split 1/4 chunk cache, 3/4 file memory with file
// memory on (all chunk cache without), the operators' view adds both up,
// and it is torn down before the volume without anything left registered.
#include "fs/ram_cache.h"

#include <gtest/gtest.h>

#include "fs_fixture.h"

namespace kvfs::fs {
namespace {

using RamCacheTest = FsTest;

TEST_F(RamCacheTest, FileMemoryTakesThreeQuartersOfTheBudget) {
  constexpr uint64_t kBudget = 64 << 20;
  auto r = RamCache::Create(*vol_, kBudget, /*file_memory=*/true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  RamCache& ram = **r;
  ASSERT_NE(ram.memory(), nullptr);
  EXPECT_EQ(ram.memory()->counters().budget_bytes, kBudget / 4 * 3);
  EXPECT_EQ(ram.chunks().counters().budget, kBudget / 4);
  EXPECT_EQ(ram.View().budget, kBudget);
  EXPECT_EQ(ram.speculative_bytes(), 0u);
  ram.Clear();
  ram.StopRegistering();
}

TEST_F(RamCacheTest, WithoutFileMemoryTheChunkCacheHasItAll) {
  constexpr uint64_t kBudget = 32 << 20;
  auto r = RamCache::Create(*vol_, kBudget, /*file_memory=*/false);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->memory(), nullptr);
  EXPECT_EQ((*r)->View().budget, kBudget);
  (*r)->EraseOwner(12345);  // nothing owned: nothing happens
}

}  // namespace
}  // namespace kvfs::fs
