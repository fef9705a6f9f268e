#include "alloc/extent_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/format.h"

namespace kvfs::alloc {
namespace {

constexpr uint32_t kDev = 3;
constexpr uint64_t kB = kBlockSize;

Extent Ext(uint64_t off, uint64_t len, uint32_t dev = kDev) { return Extent{dev, off, len}; }

// Region of `blocks` blocks starting at kDataStart, with exactly the runs
// [start_block, +len_blocks) free; everything else reserved.
std::unique_ptr<ExtentAllocator> MakeLayout(
    uint64_t blocks, const std::vector<std::pair<uint64_t, uint64_t>>& free_runs) {
  auto a = std::make_unique<ExtentAllocator>(kDev, kDataStart, blocks * kB);
  std::vector<bool> is_free(blocks, false);
  for (auto [s, n] : free_runs) {
    for (uint64_t b = s; b < s + n; ++b) is_free[b] = true;
  }
  std::vector<Extent> used;
  for (uint64_t b = 0; b < blocks; ++b) {
    if (!is_free[b]) used.push_back(Ext(kDataStart + b * kB, kB));
  }
  EXPECT_TRUE(a->Rebuild(used).ok());
  return a;
}

// --- Reference model: one byte per block, 1 = used. ---------------------
class Model {
 public:
  explicit Model(uint64_t blocks) : used_(blocks, 0), free_blocks_(static_cast<int64_t>(blocks)) {}

  uint64_t Block(const Extent& e) const { return (e.byte_off - kDataStart) / kB; }
  bool AllFree(const Extent& e) const {
    for (uint64_t b = Block(e); b < Block(e) + e.len / kB; ++b) {
      if (used_[b]) return false;
    }
    return true;
  }
  bool AllUsed(const Extent& e) const {
    for (uint64_t b = Block(e); b < Block(e) + e.len / kB; ++b) {
      if (!used_[b]) return false;
    }
    return true;
  }
  void Mark(const Extent& e, uint8_t v) {
    for (uint64_t b = Block(e); b < Block(e) + e.len / kB; ++b) used_[b] = v;
    free_blocks_ += v ? -static_cast<int64_t>(e.len / kB) : static_cast<int64_t>(e.len / kB);
  }
  // Maximal free runs in offset order.
  std::vector<Extent> Runs() const {
    std::vector<Extent> runs;
    uint64_t b = 0;
    const uint64_t n = used_.size();
    while (b < n) {
      if (used_[b]) {
        ++b;
        continue;
      }
      uint64_t s = b;
      while (b < n && !used_[b]) ++b;
      runs.push_back(Ext(kDataStart + s * kB, (b - s) * kB));
    }
    return runs;
  }
  uint64_t free_bytes() const { return static_cast<uint64_t>(free_blocks_) * kB; }
  uint64_t blocks() const { return used_.size(); }
  bool used(uint64_t b) const { return used_[b]; }

 private:
  std::vector<uint8_t> used_;
  int64_t free_blocks_;
};

void ExpectMatchesModel(const ExtentAllocator& a, const Model& m, const std::string& where) {
  std::vector<Extent> runs = m.Runs();
  uint64_t largest = 0;
  for (const Extent& r : runs) largest = std::max(largest, r.len);
  ASSERT_EQ(a.free_bytes(), m.free_bytes()) << where;
  ASSERT_EQ(a.free_extent_count(), runs.size()) << where;
  ASSERT_EQ(a.largest_free(), largest) << where;
  ASSERT_EQ(a.FreeExtents(), runs) << where;
}

// --- Basic contracts ------------------------------------------------------

TEST(ExtentAllocator, StartsWithWholeRegionFree) {
  ExtentAllocator a(kDev, kDataStart, 1024 * kB);
  EXPECT_EQ(a.free_bytes(), 1024 * kB);
  EXPECT_EQ(a.largest_free(), 1024 * kB);
  EXPECT_EQ(a.free_extent_count(), 1u);
  EXPECT_EQ(a.FreeExtents(), std::vector<Extent>{Ext(kDataStart, 1024 * kB)});
}

TEST(ExtentAllocator, RoundsRequestsUpToBlockSize) {
  ExtentAllocator a(kDev, kDataStart, 1024 * kB);
  auto r1 = a.Allocate(1);
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(*r1, std::vector<Extent>{Ext(kDataStart, kB)});
  auto r2 = a.Allocate(kB + 1);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(*r2, std::vector<Extent>{Ext(kDataStart + kB, 2 * kB)});
  auto r3 = a.Allocate(3 * kB);
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(*r3, std::vector<Extent>{Ext(kDataStart + 3 * kB, 3 * kB)});
  EXPECT_EQ(a.free_bytes(), (1024 - 6) * kB);
}

TEST(ExtentAllocator, ZeroBytesIsEinval) {
  ExtentAllocator a(kDev, kDataStart, 16 * kB);
  auto r = a.Allocate(0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_EQ(a.free_bytes(), 16 * kB);
}

TEST(ExtentAllocator, BestFitPicksSmallestRunThatFitsLowestOffsetFirst) {
  // Free runs (block, len): 8 @0, 3 @10, 5 @15, 3 @22, 16 @30.
  auto layout = MakeLayout(64, {{0, 8}, {10, 3}, {15, 5}, {22, 3}, {30, 16}});
  ExtentAllocator& a = *layout;
  auto r = a.Allocate(3 * kB);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, std::vector<Extent>{Ext(kDataStart + 10 * kB, 3 * kB)});
  r = a.Allocate(4 * kB);  // 3 @22 is too small, 5 @15 is the best fit
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, std::vector<Extent>{Ext(kDataStart + 15 * kB, 4 * kB)});
  r = a.Allocate(6 * kB);  // 8 @0, not the larger 16 @30
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, std::vector<Extent>{Ext(kDataStart, 6 * kB)});
  r = a.Allocate(kB);  // the 1-block leftover of the 5-run is now the best fit
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, std::vector<Extent>{Ext(kDataStart + 19 * kB, kB)});
  EXPECT_EQ(a.FreeExtents(), (std::vector<Extent>{Ext(kDataStart + 6 * kB, 2 * kB),
                                                  Ext(kDataStart + 22 * kB, 3 * kB),
                                                  Ext(kDataStart + 30 * kB, 16 * kB)}));
}

TEST(ExtentAllocator, FallsBackToFewestExtentsLargestFirstWhenFragmented) {
  // Free runs: 2 @1, 4 @5, 3 @11, 1 @20. No run holds 6 blocks.
  auto layout = MakeLayout(32, {{1, 2}, {5, 4}, {11, 3}, {20, 1}});
  ExtentAllocator& a = *layout;
  auto r = a.Allocate(6 * kB);
  ASSERT_TRUE(r.ok());
  // Largest (4 @5) whole, then the best fit for the remaining 2: 2 @1.
  // Returned in ascending offset order.
  EXPECT_EQ(*r, (std::vector<Extent>{Ext(kDataStart + 1 * kB, 2 * kB),
                                     Ext(kDataStart + 5 * kB, 4 * kB)}));
  EXPECT_EQ(a.FreeExtents(), (std::vector<Extent>{Ext(kDataStart + 11 * kB, 3 * kB),
                                                  Ext(kDataStart + 20 * kB, kB)}));
  // Exactly all of the rest: 3 + 1, sum matches.
  r = a.Allocate(4 * kB - 100);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(
      *r, (std::vector<Extent>{Ext(kDataStart + 11 * kB, 3 * kB), Ext(kDataStart + 20 * kB, kB)}));
  EXPECT_EQ(a.free_bytes(), 0u);
  EXPECT_EQ(a.largest_free(), 0u);
  EXPECT_EQ(a.free_extent_count(), 0u);
}

TEST(ExtentAllocator, FallbackSplitsLastRunAtItsFront) {
  // Free runs: 4 @0, 4 @8, 4 @16. Request 10: two runs whole, 2 of the third.
  auto layout = MakeLayout(24, {{0, 4}, {8, 4}, {16, 4}});
  ExtentAllocator& a = *layout;
  auto r = a.Allocate(10 * kB);
  ASSERT_TRUE(r.ok());
  uint64_t sum = 0;
  for (const Extent& e : *r) sum += e.len;
  EXPECT_EQ(sum, 10 * kB);
  EXPECT_EQ(r->size(), 3u);
  EXPECT_TRUE(std::is_sorted(r->begin(), r->end(), [](const Extent& x, const Extent& y) {
    return x.byte_off < y.byte_off;
  }));
  EXPECT_EQ(a.free_bytes(), 2 * kB);
  EXPECT_EQ(a.free_extent_count(), 1u);
}

TEST(ExtentAllocator, EnospcLeavesStateUnchanged) {
  auto layout = MakeLayout(32, {{1, 2}, {5, 4}, {11, 3}});
  ExtentAllocator& a = *layout;
  const std::vector<Extent> before = a.FreeExtents();
  auto r = a.Allocate(10 * kB);  // 9 blocks free
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ENOSPC);
  EXPECT_EQ(a.FreeExtents(), before);
  EXPECT_EQ(a.free_bytes(), 9 * kB);
  r = a.Allocate(UINT64_MAX);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ENOSPC);
  r = a.Allocate(UINT64_MAX - kB);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ENOSPC);
  EXPECT_EQ(a.FreeExtents(), before);
  // Exactly what is free still succeeds.
  r = a.Allocate(9 * kB);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(a.free_bytes(), 0u);
}

TEST(ExtentAllocator, FreeMergesWithBothNeighbours) {
  ExtentAllocator a(kDev, kDataStart, 8 * kB);
  auto x = a.Allocate(2 * kB), y = a.Allocate(2 * kB), z = a.Allocate(2 * kB);
  ASSERT_TRUE(x.ok() && y.ok() && z.ok());
  // Free: [6,8). Runs: one.
  EXPECT_EQ(a.free_extent_count(), 1u);
  ASSERT_TRUE(a.Free((*x)[0]).ok());  // [0,2) + [6,8)
  EXPECT_EQ(a.free_extent_count(), 2u);
  ASSERT_TRUE(a.Free((*z)[0]).ok());  // [4,8) merges with next
  EXPECT_EQ(a.FreeExtents(),
            (std::vector<Extent>{Ext(kDataStart, 2 * kB), Ext(kDataStart + 4 * kB, 4 * kB)}));
  ASSERT_TRUE(a.Free((*y)[0]).ok());  // bridges both
  EXPECT_EQ(a.FreeExtents(), std::vector<Extent>{Ext(kDataStart, 8 * kB)});
  EXPECT_EQ(a.largest_free(), 8 * kB);
  EXPECT_EQ(a.free_bytes(), 8 * kB);
}

TEST(ExtentAllocator, PartOfAnAllocatedExtentCanBeFreed) {
  ExtentAllocator a(kDev, kDataStart, 8 * kB);
  auto x = a.Allocate(8 * kB);
  ASSERT_TRUE(x.ok());
  ASSERT_TRUE(a.Free(Ext(kDataStart + 2 * kB, 3 * kB)).ok());
  EXPECT_EQ(a.FreeExtents(), std::vector<Extent>{Ext(kDataStart + 2 * kB, 3 * kB)});
  ASSERT_TRUE(a.Free(Ext(kDataStart + 5 * kB, kB)).ok());  // merges with prev
  EXPECT_EQ(a.FreeExtents(), std::vector<Extent>{Ext(kDataStart + 2 * kB, 4 * kB)});
}

TEST(ExtentAllocator, DoubleFreeIsEinvalAndChangesNothing) {
  ExtentAllocator a(kDev, kDataStart, 16 * kB);
  auto x = a.Allocate(4 * kB);
  auto y = a.Allocate(4 * kB);
  ASSERT_TRUE(x.ok() && y.ok());
  ASSERT_TRUE(a.Free((*x)[0]).ok());
  const std::vector<Extent> before = a.FreeExtents();
  // Exactly the same extent again.
  Status st = a.Free((*x)[0]);
  EXPECT_EQ(st.code(), EINVAL);
  // Overlapping a free run from the left (x's last block + y's first).
  st = a.Free(Ext(kDataStart + 3 * kB, 2 * kB));
  EXPECT_EQ(st.code(), EINVAL);
  // Overlapping the free tail [8,16) from the right.
  st = a.Free(Ext(kDataStart + 7 * kB, 2 * kB));
  EXPECT_EQ(st.code(), EINVAL);
  // Covering a free run entirely.
  st = a.Free(Ext(kDataStart, 16 * kB));
  EXPECT_EQ(st.code(), EINVAL);
  EXPECT_EQ(a.FreeExtents(), before);
  EXPECT_EQ(a.free_bytes(), 12 * kB);
  EXPECT_NE(st.context().find("double free"), std::string::npos) << st.ToString();
}

TEST(ExtentAllocator, FreeOutsideRegionMisalignedOrOtherDeviceIsEinval) {
  ExtentAllocator a(kDev, kDataStart, 16 * kB);
  ASSERT_TRUE(a.Allocate(16 * kB).ok());
  const uint64_t end = kDataStart + 16 * kB;
  for (const Extent& e : {Ext(kDataStart - kB, kB),       // before the region
                          Ext(kDataStart - kB, 2 * kB),   // straddling the start
                          Ext(end, kB),                   // just past the end
                          Ext(end - kB, 2 * kB),          // straddling the end
                          Ext(kDataStart + 1, kB),        // misaligned offset
                          Ext(kDataStart, kB + 1),        // misaligned length
                          Ext(kDataStart, 0),             // empty
                          Ext(kDataStart, kB, kDev + 1),  // other device
                          Ext(UINT64_MAX - kB + 1, kB),   // end overflows
                          Ext(kDataStart, UINT64_MAX - kB + 1)}) {
    Status st = a.Free(e);
    EXPECT_EQ(st.code(), EINVAL) << e.byte_off << "+" << e.len;
  }
  EXPECT_EQ(a.free_bytes(), 0u);
  EXPECT_EQ(a.free_extent_count(), 0u);
}

TEST(ExtentAllocator, ReserveTakesExactRangeAndRejectsUsedOnes) {
  ExtentAllocator a(kDev, kDataStart, 16 * kB);
  ASSERT_TRUE(a.Reserve(Ext(kDataStart + 4 * kB, 4 * kB)).ok());
  EXPECT_EQ(a.FreeExtents(),
            (std::vector<Extent>{Ext(kDataStart, 4 * kB), Ext(kDataStart + 8 * kB, 8 * kB)}));
  const std::vector<Extent> before = a.FreeExtents();
  EXPECT_EQ(a.Reserve(Ext(kDataStart + 4 * kB, kB)).code(), EEXIST);
  EXPECT_EQ(a.Reserve(Ext(kDataStart + 2 * kB, 4 * kB)).code(), EEXIST);  // straddles
  EXPECT_EQ(a.Reserve(Ext(kDataStart + 7 * kB, 2 * kB)).code(), EEXIST);
  EXPECT_EQ(a.Reserve(Ext(kDataStart + 16 * kB, kB)).code(), EINVAL);
  EXPECT_EQ(a.Reserve(Ext(kDataStart + 1, kB)).code(), EINVAL);
  EXPECT_EQ(a.FreeExtents(), before);
  // Whole runs, start and end of runs.
  ASSERT_TRUE(a.Reserve(Ext(kDataStart, 4 * kB)).ok());
  ASSERT_TRUE(a.Reserve(Ext(kDataStart + 15 * kB, kB)).ok());
  ASSERT_TRUE(a.Reserve(Ext(kDataStart + 8 * kB, kB)).ok());
  EXPECT_EQ(a.FreeExtents(), std::vector<Extent>{Ext(kDataStart + 9 * kB, 6 * kB)});
  EXPECT_EQ(a.free_bytes(), 6 * kB);
}

TEST(ExtentAllocator, RebuildIsRegionMinusUsedIgnoringOtherDevices) {
  ExtentAllocator a(kDev, kDataStart, 32 * kB);
  ASSERT_TRUE(a.Allocate(5 * kB).ok());  // state before Rebuild is discarded
  std::vector<Extent> used = {Ext(kDataStart + 20 * kB, 4 * kB),
                              Ext(kDataStart, 2 * kB),
                              Ext(kDataStart + 2 * kB, kB),  // adjacent to the previous
                              Ext(kDataStart + 28 * kB, 4 * kB),
                              Ext(kDataStart + 10 * kB, 64 * kB, kDev + 1),  // ignored
                              Ext(0, kB, kDev + 1)};                         // ignored
  ASSERT_TRUE(a.Rebuild(used).ok());
  EXPECT_EQ(a.FreeExtents(), (std::vector<Extent>{Ext(kDataStart + 3 * kB, 17 * kB),
                                                  Ext(kDataStart + 24 * kB, 4 * kB)}));
  EXPECT_EQ(a.free_bytes(), 21 * kB);
  EXPECT_EQ(a.largest_free(), 17 * kB);
  EXPECT_EQ(a.free_extent_count(), 2u);
}

TEST(ExtentAllocator, RebuildOfFullRegionLeavesNothingFree) {
  ExtentAllocator a(kDev, kDataStart, 8 * kB);
  ASSERT_TRUE(a.Rebuild({Ext(kDataStart + 4 * kB, 4 * kB), Ext(kDataStart, 4 * kB)}).ok());
  EXPECT_EQ(a.free_bytes(), 0u);
  EXPECT_EQ(a.largest_free(), 0u);
  EXPECT_EQ(a.free_extent_count(), 0u);
  auto r = a.Allocate(1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ENOSPC);
  ASSERT_TRUE(a.Rebuild({}).ok());
  EXPECT_EQ(a.FreeExtents(), std::vector<Extent>{Ext(kDataStart, 8 * kB)});
}

TEST(ExtentAllocator, RebuildRejectsBadInputWithEucleanAndKeepsState) {
  ExtentAllocator a(kDev, kDataStart, 32 * kB);
  ASSERT_TRUE(a.Rebuild({Ext(kDataStart + 8 * kB, 8 * kB)}).ok());
  const std::vector<Extent> before = a.FreeExtents();
  struct Case {
    const char* what;
    std::vector<Extent> used;
  };
  const std::vector<Case> cases = {
      {"overlap",
       {Ext(kDataStart + 8 * kB, 4 * kB), Ext(kDataStart, 2 * kB),
        Ext(kDataStart + 10 * kB, 4 * kB)}},
      {"duplicate", {Ext(kDataStart, 4 * kB), Ext(kDataStart, 4 * kB)}},
      {"contained", {Ext(kDataStart, 16 * kB), Ext(kDataStart + 4 * kB, kB)}},
      {"misaligned offset", {Ext(kDataStart + 512, kB)}},
      {"misaligned length", {Ext(kDataStart, 100)}},
      {"empty", {Ext(kDataStart, 0)}},
      {"before region", {Ext(0, kB)}},
      {"past region", {Ext(kDataStart + 31 * kB, 2 * kB)}},
      {"overflowing", {Ext(UINT64_MAX - kB + 1, kB)}},
  };
  for (const Case& c : cases) {
    Status st = a.Rebuild(c.used);
    EXPECT_EQ(st.code(), EUCLEAN) << c.what;
    EXPECT_EQ(a.FreeExtents(), before) << c.what;
  }
  // The message names both overlapping extents.
  Status st = a.Rebuild(cases[0].used);
  EXPECT_NE(st.context().find(std::to_string(kDataStart + 8 * kB)), std::string::npos)
      << st.ToString();
  EXPECT_NE(st.context().find(std::to_string(kDataStart + 10 * kB)), std::string::npos)
      << st.ToString();
  EXPECT_EQ(a.free_bytes(), 24 * kB);
}

// --- Randomised comparison with the reference model ------------------------

// Sizes in bytes: mostly small, some medium, a few large, not always block
// multiples, so rounding, best fit, fallback and ENOSPC all occur.
uint64_t RandomRequest(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> kind(0, 99);
  int k = kind(rng);
  uint64_t blocks;
  if (k < 65) {
    blocks = std::uniform_int_distribution<uint64_t>(1, 8)(rng);
  } else if (k < 95) {
    blocks = std::uniform_int_distribution<uint64_t>(9, 128)(rng);
  } else {
    blocks = std::uniform_int_distribution<uint64_t>(129, 1024)(rng);
  }
  uint64_t slack = std::uniform_int_distribution<uint64_t>(0, 1)(rng)
                       ? std::uniform_int_distribution<uint64_t>(0, kB - 1)(rng)
                       : 0;
  return blocks * kB - slack;
}

TEST(ExtentAllocator, MatchesBitmapModelOver100kRandomSteps) {
  constexpr uint64_t kBlocks = 8192;  // 32 MiB
  constexpr int kSteps = 100000;
  std::mt19937_64 rng(20240611);
  ExtentAllocator a(kDev, kDataStart, kBlocks * kB);
  Model m(kBlocks);
  // Allocated extents, grouped as handed out (one group per Allocate or
  // Reserve), so that most frees return a whole "file" as a volume would.
  std::vector<std::vector<Extent>> live;
  uint64_t n_alloc = 0, n_multi = 0, n_enospc = 0, n_free = 0, n_partial = 0, n_reserve = 0,
           n_rejected = 0;

  auto check_and_mark = [&](const std::vector<Extent>& got, uint64_t want) {
    uint64_t sum = 0;
    live.emplace_back();
    for (size_t i = 0; i < got.size(); ++i) {
      const Extent& e = got[i];
      ASSERT_EQ(e.device, kDev);
      ASSERT_GT(e.len, 0u);
      ASSERT_EQ(e.byte_off % kB, 0u);
      ASSERT_EQ(e.len % kB, 0u);
      ASSERT_GE(e.byte_off, kDataStart);
      ASSERT_LE(e.end(), kDataStart + kBlocks * kB);
      if (i > 0) {
        ASSERT_GE(e.byte_off, got[i - 1].end());  // ascending, disjoint
      }
      ASSERT_TRUE(m.AllFree(e)) << "handed out a used range at " << e.byte_off;
      m.Mark(e, 1);
      live.back().push_back(e);
      sum += e.len;
    }
    ASSERT_EQ(sum, want);
  };

  for (int step = 0; step < kSteps; ++step) {
    const std::string where = "step " + std::to_string(step);
    // Allocation is likelier while more than 40% is free, so the region
    // hovers around 60% used and fragments. Every fourth stretch of 2500
    // steps allocates much more than it frees, driving it full, where the
    // fallback and ENOSPC occur.
    const bool roomy = m.free_bytes() > kBlocks * kB * 2 / 5;
    const bool filling = (step / 2500) % 4 == 3;
    const bool alloc = std::uniform_int_distribution<int>(0, 99)(rng) < (filling ? 90
                                                                         : roomy ? 70
                                                                                 : 35);
    const int op = std::uniform_int_distribution<int>(0, 99)(rng);
    // Check the exact best-fit / fewest-extents choice on a sample of steps.
    const bool inspect = step % 2 == 0;
    if (alloc || live.empty()) {
      const uint64_t bytes = RandomRequest(rng);
      const uint64_t want = AlignUp(bytes, kB);
      std::vector<Extent> runs;
      if (inspect) runs = m.Runs();
      auto r = a.Allocate(bytes);
      if (want > m.free_bytes()) {
        ASSERT_FALSE(r.ok()) << where;
        ASSERT_EQ(r.status().code(), ENOSPC) << where;
        ++n_enospc;
      } else {
        ASSERT_TRUE(r.ok()) << where << ": " << r.status().ToString();
        if (inspect) {
          // Smallest fitting run, lowest offset among equals; else the fewest
          // extents possible.
          const Extent* best = nullptr;
          for (const Extent& run : runs) {
            if (run.len >= want && (!best || run.len < best->len)) best = &run;
          }
          if (best) {
            ASSERT_EQ(r->size(), 1u) << where;
            ASSERT_EQ((*r)[0], Ext(best->byte_off, want)) << where;
          } else {
            std::vector<uint64_t> lens;
            for (const Extent& run : runs) lens.push_back(run.len);
            std::sort(lens.rbegin(), lens.rend());
            size_t k = 0;
            for (uint64_t acc = 0; acc < want; ++k) acc += lens[k];
            ASSERT_EQ(r->size(), k) << where;
          }
        }
        if (r->size() > 1) ++n_multi;
        check_and_mark(*r, want);
        if (HasFatalFailure()) return;
        ++n_alloc;
      }
    } else if (op < 84) {
      // Free a random allocation, now and then only a piece of one of its
      // extents (the rest stays allocated).
      size_t i = std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng);
      std::vector<Extent> group = std::move(live[i]);
      live[i] = std::move(live.back());
      live.pop_back();
      std::vector<Extent> to_free = group;
      size_t j = std::uniform_int_distribution<size_t>(0, group.size() - 1)(rng);
      const Extent e = group[j];
      if (e.len > kB && op < 20) {
        uint64_t blocks = e.len / kB;
        uint64_t s = std::uniform_int_distribution<uint64_t>(0, blocks - 1)(rng);
        uint64_t n = std::uniform_int_distribution<uint64_t>(1, blocks - s)(rng);
        const Extent piece = Ext(e.byte_off + s * kB, n * kB);
        to_free = {piece};
        group.erase(group.begin() + static_cast<ptrdiff_t>(j));
        if (piece.byte_off > e.byte_off)
          group.push_back(Ext(e.byte_off, piece.byte_off - e.byte_off));
        if (piece.end() < e.end()) group.push_back(Ext(piece.end(), e.end() - piece.end()));
        if (!group.empty()) live.push_back(std::move(group));
        ++n_partial;
      }
      for (const Extent& f : to_free) {
        ASSERT_TRUE(m.AllUsed(f)) << where;
        Status st = a.Free(f);
        ASSERT_TRUE(st.ok()) << where << ": " << st.ToString();
        m.Mark(f, 0);
      }
      ++n_free;
    } else if (op < 92) {
      // Reserve a range: must succeed iff the model says it is free. Half
      // the time start at a free block so that successes are common.
      uint64_t s = std::uniform_int_distribution<uint64_t>(0, kBlocks - 1)(rng);
      if (op < 88) {
        while (s < kBlocks - 1 && m.used(s)) ++s;
      }
      uint64_t n =
          std::uniform_int_distribution<uint64_t>(1, std::min<uint64_t>(32, kBlocks - s))(rng);
      Extent e = Ext(kDataStart + s * kB, n * kB);
      Status st = a.Reserve(e);
      if (m.AllFree(e)) {
        ASSERT_TRUE(st.ok()) << where << ": " << st.ToString();
        m.Mark(e, 1);
        live.push_back({e});
        ++n_reserve;
      } else {
        ASSERT_EQ(st.code(), EEXIST) << where;
        ++n_rejected;
      }
    } else {
      // Free a random range that is not entirely used: must be rejected.
      uint64_t s = std::uniform_int_distribution<uint64_t>(0, kBlocks - 1)(rng);
      uint64_t n =
          std::uniform_int_distribution<uint64_t>(1, std::min<uint64_t>(32, kBlocks - s))(rng);
      Extent e = Ext(kDataStart + s * kB, n * kB);
      if (!m.AllUsed(e)) {
        ASSERT_EQ(a.Free(e).code(), EINVAL) << where;
        ++n_rejected;
      }
    }

    ASSERT_EQ(a.free_bytes(), m.free_bytes()) << where;
    if (step % 4 == 0) {
      ExpectMatchesModel(a, m, where);
      if (HasFatalFailure()) return;
    }
    if (step % 1000 == 999) {
      // A fresh allocator rebuilt from the live set (shuffled, with another
      // device's extents mixed in) equals the model.
      std::vector<Extent> used;
      for (const auto& group : live) used.insert(used.end(), group.begin(), group.end());
      used.push_back(Ext(kDataStart, kBlocks * kB, kDev + 1));
      std::shuffle(used.begin(), used.end(), rng);
      ExtentAllocator b(kDev, kDataStart, kBlocks * kB);
      ASSERT_TRUE(b.Rebuild(used).ok()) << where;
      ExpectMatchesModel(b, m, where + " (rebuilt)");
      if (HasFatalFailure()) return;
      // Now and then carry on with a rebuilt state in the allocator under test.
      if (step % 10000 == 9999) {
        ASSERT_TRUE(a.Rebuild(used).ok()) << where;
        ExpectMatchesModel(a, m, where + " (rebuilt in place)");
        if (HasFatalFailure()) return;
      }
    }
  }
  ExpectMatchesModel(a, m, "end");
  // The mix really exercised every path.
  EXPECT_GT(n_alloc, 20000u);
  EXPECT_GT(n_multi, 1000u);
  EXPECT_GT(n_enospc, 5000u);
  EXPECT_GT(n_free, 20000u);
  EXPECT_GT(n_partial, 3000u);
  EXPECT_GT(n_reserve, 300u);
  EXPECT_GT(n_rejected, 1000u);
  // Shown in the test log so a change of the mix is visible.
  std::printf(
      "allocs %s (multi-extent %s, ENOSPC %s), frees %s (partial %s), reserves %s, "
      "rejected %s\n",
      std::to_string(n_alloc).c_str(), std::to_string(n_multi).c_str(),
      std::to_string(n_enospc).c_str(), std::to_string(n_free).c_str(),
      std::to_string(n_partial).c_str(), std::to_string(n_reserve).c_str(),
      std::to_string(n_rejected).c_str());
  RecordProperty("allocs", std::to_string(n_alloc));
  RecordProperty("multi_extent_allocs", std::to_string(n_multi));
  RecordProperty("enospc", std::to_string(n_enospc));
}

// --- Concurrency -------------------------------------------------------------

TEST(ExtentAllocator, EightThreadsNeverGetOverlappingExtents) {
  constexpr uint64_t kBlocks = 16384;
  constexpr int kThreads = 8;
  constexpr int kOpsPerThread = 20000;
  ExtentAllocator a(kDev, kDataStart, kBlocks * kB);
  // Owner of each block (0 = nobody). A thread claims the blocks of every
  // extent it gets; finding one already claimed means an overlap.
  std::vector<std::atomic<uint32_t>> owner(kBlocks);
  for (auto& o : owner) o.store(0);
  std::atomic<uint64_t> overlaps{0}, bad_frees{0}, bad_extents{0}, allocs{0}, enospc{0};

  auto worker = [&](uint32_t id) {
    std::mt19937_64 rng(1000 + id);
    std::vector<Extent> mine;
    for (int i = 0; i < kOpsPerThread; ++i) {
      if (mine.size() < 24 && std::uniform_int_distribution<int>(0, 2)(rng) != 0) {
        uint64_t bytes = std::uniform_int_distribution<uint64_t>(1, 200)(rng) * kB;
        auto r = a.Allocate(bytes);
        if (!r.ok()) {
          if (r.status().code() == ENOSPC) {
            enospc.fetch_add(1);
          } else {
            bad_extents.fetch_add(1);
          }
          continue;
        }
        allocs.fetch_add(1);
        for (const Extent& e : *r) {
          if (e.byte_off < kDataStart || e.end() > kDataStart + kBlocks * kB || e.byte_off % kB ||
              e.len % kB) {
            bad_extents.fetch_add(1);
            continue;
          }
          for (uint64_t b = (e.byte_off - kDataStart) / kB; b < (e.end() - kDataStart) / kB; ++b) {
            uint32_t expected = 0;
            if (!owner[b].compare_exchange_strong(expected, id)) overlaps.fetch_add(1);
          }
          mine.push_back(e);
        }
      } else if (!mine.empty()) {
        size_t j = std::uniform_int_distribution<size_t>(0, mine.size() - 1)(rng);
        Extent e = mine[j];
        mine[j] = mine.back();
        mine.pop_back();
        // Release ownership before the allocator may hand the range out again.
        for (uint64_t b = (e.byte_off - kDataStart) / kB; b < (e.end() - kDataStart) / kB; ++b) {
          uint32_t expected = id;
          if (!owner[b].compare_exchange_strong(expected, 0)) overlaps.fetch_add(1);
        }
        if (!a.Free(e).ok()) bad_frees.fetch_add(1);
      }
      if (i % 64 == 0) {
        // Readers run alongside writers.
        uint64_t fb = a.free_bytes();
        uint64_t lf = a.largest_free();
        if (lf > fb || fb > kBlocks * kB) bad_extents.fetch_add(1);
      }
    }
    for (const Extent& e : mine) {
      for (uint64_t b = (e.byte_off - kDataStart) / kB; b < (e.end() - kDataStart) / kB; ++b) {
        owner[b].store(0);
      }
      if (!a.Free(e).ok()) bad_frees.fetch_add(1);
    }
  };
  std::vector<std::thread> threads;
  for (uint32_t t = 1; t <= kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& t : threads) t.join();

  EXPECT_EQ(overlaps.load(), 0u);
  EXPECT_EQ(bad_frees.load(), 0u);
  EXPECT_EQ(bad_extents.load(), 0u);
  EXPECT_GT(allocs.load(), 50000u);
  // Everything came back and merged into one run.
  EXPECT_EQ(a.free_bytes(), kBlocks * kB);
  EXPECT_EQ(a.FreeExtents(), std::vector<Extent>{Ext(kDataStart, kBlocks * kB)});
}

}  // namespace
}  // namespace kvfs::alloc
