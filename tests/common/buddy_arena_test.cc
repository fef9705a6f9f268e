#include "common/buddy_arena.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace kvfs {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

std::unique_ptr<BuddyArena> Make(size_t bytes) {
  auto a = BuddyArena::Create(bytes);
  EXPECT_TRUE(a.ok()) << a.status().ToString();
  return std::move(a).value();
}

TEST(BuddyArenaTest, BlocksArePowersOfTwoAlignedToTheirSizeAndInsideTheRegion) {
  auto arena = Make(4 * kMiB);
  EXPECT_EQ(arena->region_bytes(), 4 * kMiB);
  for (size_t n : {size_t{1}, size_t{4096}, size_t{5000}, size_t{256} << 10, (size_t{256} << 10) + 1,
                   kMiB}) {
    ArenaBlock b = arena->Allocate(n);
    ASSERT_TRUE(b) << n;
    EXPECT_EQ(b.size(), BuddyArena::BlockBytes(n));
    EXPECT_GE(b.size(), n);
    EXPECT_LT(b.size() / 2, std::max(n, BuddyArena::kMinBlock));
    EXPECT_EQ(static_cast<size_t>(b.get() - arena->region()) % b.size(), 0u);
    EXPECT_GE(b.get(), arena->region());
    EXPECT_LE(b.get() + b.size(), arena->region() + arena->region_bytes());
    std::memset(b.get(), 0xab, b.size());
  }
  EXPECT_FALSE(arena->Allocate(0));
  EXPECT_FALSE(arena->Allocate(kMiB + 1));
  EXPECT_EQ(arena->free_bytes(), 4 * kMiB);
}

TEST(BuddyArenaTest, BlocksNeverOverlapAndTheArenaFillsExactly) {
  auto arena = Make(8 * kMiB);
  std::vector<ArenaBlock> blocks;
  // 8 MiB in 256 KiB blocks: exactly 32, then nothing.
  for (int i = 0; i < 32; ++i) {
    blocks.push_back(arena->Allocate(256 << 10));
    ASSERT_TRUE(blocks.back()) << i;
  }
  EXPECT_FALSE(arena->Allocate(4096));
  EXPECT_EQ(arena->free_bytes(), 0u);
  std::vector<std::pair<char*, char*>> spans;
  for (auto& b : blocks) spans.push_back({b.get(), b.get() + b.size()});
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].second, spans[i].first);
}

TEST(BuddyArenaTest, FreedBlocksMergeBackIntoWholeMegabytes) {
  auto arena = Make(2 * kMiB);
  {
    std::vector<ArenaBlock> small;
    for (int i = 0; i < 512; ++i) small.push_back(arena->Allocate(4096));
    EXPECT_FALSE(arena->Allocate(4096));
    // Free every other one: 1 MiB free in all, but no two buddies free.
    for (size_t i = 0; i < small.size(); i += 2) small[i] = ArenaBlock();
    EXPECT_EQ(arena->free_bytes(), kMiB);
    EXPECT_FALSE(arena->Allocate(8192));
  }
  // Everything freed: two whole 1 MiB blocks again.
  ArenaBlock a = arena->Allocate(kMiB), b = arena->Allocate(kMiB);
  EXPECT_TRUE(a);
  EXPECT_TRUE(b);
}

TEST(BuddyArenaTest, AnEmptyArenaHasNoBlocks) {
  auto arena = Make(kMiB - 1);  // rounded down to nothing
  EXPECT_EQ(arena->region_bytes(), 0u);
  EXPECT_FALSE(arena->Allocate(4096));
}

TEST(BuddyArenaTest, ThreadsAllocatingAndFreingMixedSizesNeverShareBytes) {
  auto arena = Make(16 * kMiB);
  std::vector<std::thread> threads;
  std::atomic<int> overlaps{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<ArenaBlock> held;
      for (int i = 0; i < 20000; ++i) {
        if (held.size() > 8 || (rng() % 3 == 0 && !held.empty())) {
          ArenaBlock& b = held[rng() % held.size()];
          // Each thread stamps its blocks; another thread's stamp means two
          // owners of the same bytes.
          if (b.get()[0] != static_cast<char>(t) || b.get()[b.size() - 1] != static_cast<char>(t)) {
            overlaps++;
          }
          std::swap(b, held.back());
          held.pop_back();
        } else {
          ArenaBlock b = arena->Allocate(size_t{4096} << (rng() % 9));
          if (!b) continue;
          b.get()[0] = b.get()[b.size() - 1] = static_cast<char>(t);
          held.push_back(std::move(b));
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(arena->free_bytes(), 16 * kMiB);
  EXPECT_TRUE(arena->Allocate(kMiB));
}

// Piece 1's hook waits until the test lets it go: the arena's thread is
// then making it, and blocks of it must not be handed out.
TEST(BuddyArenaTest, PiecesAreMadeInOrderAheadOfUseAndOnlyMadeOnesAreHandedOut) {
  const size_t piece = BuddyArena::kPieceBytes;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<const char*, size_t>> seen;  // GUARDED_BY(mu)
  bool let_go = false;                                // GUARDED_BY(mu)
  auto a = BuddyArena::Create(2 * piece + 3 * kMiB, [&](const char* base, size_t len) {
    std::unique_lock<std::mutex> l(mu);
    seen.push_back({base, len});
    cv.notify_all();
    if (seen.size() == 2) cv.wait(l, [&] { return let_go; });
  }, piece);
  ASSERT_TRUE(a.ok());
  BuddyArena& arena = **a;
  auto wait_seen = [&](size_t n) {
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return seen.size() >= n; });
  };
  auto made_becomes = [&](size_t bytes) {
    for (int i = 0; i < 10000 && arena.made_bytes() != bytes; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return arena.made_bytes() == bytes;
  };
  {
    // Only the first piece (made_at_create) is made and registered by Create.
    std::lock_guard<std::mutex> l(mu);
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].first, arena.region());
    EXPECT_EQ(seen[0].second, piece);
  }
  EXPECT_EQ(arena.made_bytes(), piece);
  // The first block of piece 0 starts the making of piece 1.
  std::vector<ArenaBlock> blocks;
  blocks.push_back(arena.Allocate(kMiB));
  EXPECT_EQ(blocks.back().get(), arena.region());
  wait_seen(2);
  for (size_t used = kMiB; used < piece; used += kMiB) blocks.push_back(arena.Allocate(kMiB));
  for (const ArenaBlock& b : blocks) ASSERT_TRUE(b);
  // Piece 1 is being made: nothing more until it is.
  EXPECT_FALSE(arena.Allocate(4096));
  EXPECT_EQ(arena.made_bytes(), piece);
  {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_EQ(seen[1].first, arena.region() + piece);
    EXPECT_EQ(seen[1].second, piece);
    let_go = true;
  }
  cv.notify_all();
  ASSERT_TRUE(made_becomes(2 * piece));
  blocks.push_back(arena.Allocate(kMiB));  // piece 1 now, which starts piece 2
  EXPECT_EQ(blocks.back().get(), arena.region() + piece);
  wait_seen(3);
  ASSERT_TRUE(made_becomes(2 * piece + 3 * kMiB));
  {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_EQ(seen[2].first, arena.region() + 2 * piece);
    EXPECT_EQ(seen[2].second, 3 * kMiB);  // the last, partial piece
  }
  blocks.clear();
  for (int i = 0; i < 200; ++i) blocks.push_back(arena.Allocate(kMiB));
  EXPECT_FALSE(arena.Allocate(kMiB));  // all 131 MiB handed out
  std::lock_guard<std::mutex> l(mu);
  EXPECT_EQ(seen.size(), 3u);  // each piece once
}

TEST(BuddyArenaTest, CreateMakesTheFirstPiecesAndAtLeastOne) {
  const size_t piece = BuddyArena::kPieceBytes;
  for (auto [made_at_create, want] : {std::pair<size_t, size_t>{0, piece}, {3 * piece, 3 * piece},
                                      {9 * piece, 4 * piece + kMiB}}) {
    std::mutex mu;
    size_t hooked = 0;
    auto a = BuddyArena::Create(4 * piece + kMiB, [&](const char*, size_t len) {
      std::lock_guard<std::mutex> l(mu);
      hooked += len;
    }, made_at_create);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ((*a)->made_bytes(), want);
    std::lock_guard<std::mutex> l(mu);
    EXPECT_EQ(hooked, want);
  }
}

TEST(BuddyArenaTest, WithoutAHookEveryBlockIsUsableAtOnce) {
  auto arena = Make(BuddyArena::kPieceBytes + 2 * kMiB);
  EXPECT_EQ(arena->made_bytes(), BuddyArena::kPieceBytes + 2 * kMiB);
  std::vector<ArenaBlock> blocks;
  for (size_t i = 0; i < 66; ++i) blocks.push_back(arena->Allocate(kMiB));
  for (const ArenaBlock& b : blocks) EXPECT_TRUE(b);
}

}  // namespace
}  // namespace kvfs
