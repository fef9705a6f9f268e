// The RAM cache and prefetch: reads served from RAM are the right bytes,
// never an older version, and the cache stays within its budget.
#include <fcntl.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/buddy_arena.h"
#include "common/format.h"
#include "fs/chunk_cache.h"
#include "fs/fs_fixture.h"

namespace kvfs::fs {
namespace {

// Version v of a key: the first 8 bytes say which version it is.
std::string Versioned(size_t size, uint64_t v) {
  std::string s = Pattern(size, static_cast<uint32_t>(v * 7919));
  std::memcpy(s.data(), &v, sizeof(v));
  return s;
}

class CacheTest : public FsTest {
 protected:
  FileSystemOptions FsOpts() override {
    FileSystemOptions o;
    o.cache_bytes = cache_bytes_;
    o.prefetch_budget_bytes = cache_bytes_;
    o.prefetch = PrefetchMode::kLookup;
    return o;
  }
  // The lookup-driven prefetches queued so far have started their loads
  // (a load counts as prefetched when it starts).
  void WaitForPrefetch(uint64_t) { fs_->WaitPrefetchIdle(); }
  uint64_t cache_bytes_ = 64 << 20;
};

TEST_F(CacheTest, LookupPrefetchServesTheLoadFromRam) {
  std::string data = Pattern(6 << 20, 1);
  Store(kRootIno, "key", data);
  Remount();  // cold: nothing cached
  ASSERT_EQ(fs_->cache_stats().bytes, 0u);
  ASSERT_TRUE(fs_->Lookup(kRootIno, "key").ok());  // the connector's exists() check
  WaitForPrefetch(data.size());
  EXPECT_EQ(fs_->cache_stats().prefetched_bytes, data.size());
  uint64_t hits = fs_->cache_stats().hits;
  EXPECT_EQ(*Load(kRootIno, "key"), data);
  EXPECT_GE(fs_->cache_stats().hits, hits + 6);
  EXPECT_EQ(fs_->cache_stats().prefetch_used_bytes, data.size());
  ASSERT_TRUE(fs_->DropCache().ok());
  EXPECT_EQ(fs_->cache_stats().bytes, 0u);
  EXPECT_EQ(*Load(kRootIno, "key"), data);  // from the device again
}

// The same check of a name the kernel has cached comes as a getattr.
TEST_F(CacheTest, GetattrPrefetchesLikeALookup) {
  std::string data = Pattern(3 << 20, 2);
  const uint64_t ino = Store(kRootIno, "key", data);
  Remount();
  ASSERT_TRUE(fs_->GetAttr(kRootIno).ok());  // a directory: nothing to read
  ASSERT_TRUE(fs_->GetAttr(ino).ok());
  WaitForPrefetch(data.size());
  EXPECT_EQ(fs_->cache_stats().prefetched_bytes, data.size());
  uint64_t hits = fs_->cache_stats().hits;
  EXPECT_EQ(*Load(kRootIno, "key"), data);
  EXPECT_GE(fs_->cache_stats().hits, hits + 3);
}

// The kernel also sends a getattr for an fstat, after a write and after an
// unlink: a writer must not read back what it wrote, nor an unlinked file
// be read into the cache.
TEST_F(CacheTest, GetattrDoesNotPrefetchAFileThatIsOpenOrUnlinked) {
  const std::string data = Pattern(3 << 20, 3);
  auto nothing_prefetched_since = [&](uint64_t before) {
    fs_->WaitPrefetchIdle();  // whatever the getattr queued has started
    return fs_->cache_stats().prefetched_bytes == before;
  };
  auto c = fs_->Create(kRootIno, "w", 0644, O_WRONLY, Caller{});
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(fs_->Write(c->fh, 0, data).ok());
  ASSERT_TRUE(fs_->Flush(c->fh).ok());
  ASSERT_TRUE(fs_->FlushAll().ok());  // on the device, committed
  uint64_t before = fs_->cache_stats().prefetched_bytes;
  ASSERT_TRUE(fs_->GetAttr(c->attr.ino).ok());  // the writer's fstat
  EXPECT_TRUE(nothing_prefetched_since(before)) << "a writer's getattr read its file back";
  fs_->Release(c->fh);

  const uint64_t ino = Store(kRootIno, "u", data);
  Remount();
  auto fh = fs_->Open(ino, O_RDONLY);  // prefetches by itself
  ASSERT_TRUE(fh.ok());
  WaitForPrefetch(data.size());
  ASSERT_TRUE(fs_->DropCache().ok());
  ASSERT_TRUE(fs_->Unlink(kRootIno, "u").ok());  // open: an orphan now
  before = fs_->cache_stats().prefetched_bytes;
  ASSERT_TRUE(fs_->GetAttr(ino).ok());
  EXPECT_TRUE(nothing_prefetched_since(before)) << "an unlinked file was read ahead";
  EXPECT_EQ(*ReadFh(*fh, 0, data.size()), data);  // still readable through its handle
  fs_->Release(*fh);
}

TEST_F(CacheTest, OverwriteInPlaceIsNeverServedStale) {
  std::string v1 = Versioned(3 << 20, 1), v2 = Versioned(3 << 20, 2);
  uint64_t ino = Store(kRootIno, "k", v1);
  ASSERT_TRUE(fs_->Prefetch(ino).ok());
  WaitForPrefetch(v1.size());
  EXPECT_EQ(*Load(kRootIno, "k"), v1);
  // Rewrite in place; reads must see the new bytes at every stage: staged,
  // in flight, and installed on the device.
  auto fh = fs_->Open(ino, O_WRONLY);
  ASSERT_TRUE(fh.ok());
  ASSERT_TRUE(fs_->Write(*fh, 4096, std::string_view(v2).substr(4096, 1 << 20)).ok());
  std::string mixed = v1;
  mixed.replace(4096, 1 << 20, v2.substr(4096, 1 << 20));
  EXPECT_EQ(*Load(kRootIno, "k"), mixed);
  ASSERT_TRUE(fs_->Flush(*fh).ok());
  fs_->Release(*fh);
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(*Load(kRootIno, "k"), mixed);
  ASSERT_TRUE(fs_->Prefetch(ino).ok());
  SetAttrRequest shrink;
  shrink.size = 100000;
  ASSERT_TRUE(fs_->SetAttr(ino, shrink).ok());
  EXPECT_EQ(*Load(kRootIno, "k"), mixed.substr(0, 100000));
}

TEST_F(CacheTest, RacingReadersSeeOneCompleteVersion) {
  const size_t size = (2 << 20) + 12345;
  Store(kRootIno, "k", Versioned(size, 0));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> reads{0}, bad{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      while (!stop) {
        auto got = Load(kRootIno, "k");
        if (!got.ok()) continue;  // between unlink-free rename steps it always exists
        uint64_t v;
        std::memcpy(&v, got->data(), sizeof(v));
        if (*got != Versioned(size, v)) bad++;
        reads++;
      }
    });
  }
  for (uint64_t v = 1; v <= 40; ++v) {
    Store(kRootIno, "k.tmp", Versioned(size, v));
    ASSERT_TRUE(fs_->Rename(kRootIno, "k.tmp", kRootIno, "k", 0).ok());
    if (v % 5 == 0) {
      // And in place, as one full overwrite.
      auto a = fs_->Lookup(kRootIno, "k");
      ASSERT_TRUE(a.ok());
      auto fh = fs_->Open(a->ino, O_WRONLY);
      ASSERT_TRUE(fh.ok());
      ASSERT_TRUE(fs_->Write(*fh, 0, Versioned(size, 1000 + v)).ok());
      fs_->Release(*fh);
    }
  }
  stop = true;
  for (auto& r : readers) r.join();
  EXPECT_GT(reads.load(), 10u);
  // One write() call is applied under the inode's lock, so even the
  // in-place versions are never seen half done.
  EXPECT_EQ(bad.load(), 0u);
}

TEST_F(CacheTest, CacheStaysWithinItsBudget) {
  cache_bytes_ = 8 << 20;
  Remount();
  for (int k = 0; k < 16; ++k) Store(kRootIno, "f" + std::to_string(k), Pattern(4 << 20, k));
  Remount();
  for (int k = 0; k < 16; ++k) {
    ASSERT_TRUE(fs_->Lookup(kRootIno, "f" + std::to_string(k)).ok());
    EXPECT_LE(fs_->cache_stats().bytes, 8u << 20);
  }
  for (int k = 0; k < 16; ++k) {
    EXPECT_EQ(*Load(kRootIno, "f" + std::to_string(k)), Pattern(4 << 20, k));
    EXPECT_LE(fs_->cache_stats().bytes, 8u << 20);
  }
}


// The ChunkCache itself over a 2 MiB arena: when the least recently used
// entries are not buddies, evicting just enough bytes leaves the room in
// pieces; the cache must evict on until one block is free.
TEST(ChunkCacheTest, EvictsUntilABlockOfTheNeededSizeIsFree) {
  auto arena = BuddyArena::Create(2 << 20);
  ASSERT_TRUE(arena.ok());
  ChunkCache cache(**arena);
  constexpr uint64_t kQuarter = 256 << 10;
  for (uint64_t i = 0; i < 8; ++i) {
    auto c = cache.StartLoad(/*owner=*/1, /*chunk=*/i, /*version=*/1, kQuarter, false);
    ASSERT_NE(c, nullptr) << i;
    c->Finish(true);
  }
  // Touch the even chunks: the odd ones (no two of them buddies) are the
  // least recently used, and together exactly 1 MiB.
  for (uint64_t i = 0; i < 8; i += 2) ASSERT_NE(cache.Get(1, i, 1), nullptr);
  auto big = cache.StartLoad(2, 0, 1, 1 << 20, false);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->data.size(), 1u << 20);
  big->Finish(true);
  // Within the budget throughout: 1 MiB plus what is left of the quarters.
  EXPECT_LE(cache.counters().bytes, 2u << 20);
  uint64_t left = 0;
  for (uint64_t i = 0; i < 8; ++i) left += cache.Get(1, i, 1, false) != nullptr;
  EXPECT_LE(left, 4u);
  // A load still in flight is never evicted: with the whole arena held by
  // loads, there is no room and no entry.
  ChunkCache busy(**arena);
  big.reset();
  cache.Clear();
  auto a = busy.StartLoad(3, 0, 1, 1 << 20, false);
  auto b = busy.StartLoad(3, 1, 1, 1 << 20, false);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(busy.StartLoad(3, 2, 1, 4096, false), nullptr);
  a->Finish(true);
  b->Finish(true);
}

}  // namespace
}  // namespace kvfs::fs
