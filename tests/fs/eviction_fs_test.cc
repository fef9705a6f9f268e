// Eviction in-process (-o evict=lru on a FileSystem over a real image and
// index): what is never evicted (open files, staged and uncommitted data,
// files used within min_age, files out of scope), that the victim order
// follows renames over a name and WriteFile's replace, and that a writer
// that finds the volume full, Write's reservation growth included, waits
// for eviction and succeeds, or gets ENOSPC when nothing may go. Passes
// are run by Evict() (kvfsctl evict) and by waiting writers; the
// background pass starts only at a 100 % high watermark here.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "common/format.h"
#include "fs/fs_fixture.h"
#include "fs/inode_state.h"
#include "fs/stats.h"
#include "index/records.h"

namespace kvfs::fs {
namespace {

constexpr uint64_t kMiB = 1 << 20;
const Caller kRoot{0, 0, 1, {}, {}};

class EvictionFsTest : public FsTest {
 protected:
  void SetUp() override {
    image_bytes_ = 64 * kMiB;
    FsTest::SetUp();
  }
  FileSystemOptions FsOpts() override {
    FileSystemOptions o;
    o.eviction.enabled = true;
    o.eviction.high_pct = 100;  // passes only when asked, or by a full writer
    o.eviction.low_pct = 99;
    o.eviction.min_age_ns = min_age_ns_;
    o.eviction.scope = scope_;
    o.eviction.writer_wait = std::chrono::milliseconds(30000);
    return o;
  }
  // The names evicted, in order, as the front end is told of them.
  void Listen() {
    fs_->SetEvictionListener([this](uint64_t, std::string_view name, uint64_t) {
      std::lock_guard<std::mutex> l(mu_);
      told_.emplace_back(name);
    });
  }
  std::vector<std::string> Told(size_t n) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    for (;;) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (told_.size() >= n || std::chrono::steady_clock::now() > deadline) return told_;
      }
      std::this_thread::yield();
    }
  }
  bool Exists(uint64_t parent, const std::string& name) {
    return fs_->Lookup(parent, name).ok();
  }
  uint64_t EvictAll() {
    auto n = fs_->Evict(0);
    EXPECT_TRUE(n.ok()) << n.status().ToString();
    return n.ok() ? *n : 0;
  }
  uint64_t FreeBytes() {
    const FsStats s = fs_->StatFs();
    return s.free_blocks * s.block_size;
  }

  int64_t min_age_ns_ = 0;
  EvictScope scope_ = EvictScope::kMount;
  std::mutex mu_;
  std::vector<std::string> told_;
};

TEST_F(EvictionFsTest, OpenFilesStayUntilClosed) {
  const uint64_t a = Store(kRootIno, "a", Pattern(8192, 1));
  Store(kRootIno, "b", Pattern(8192, 2));
  ASSERT_TRUE(fs_->Sync().ok());
  auto fh = fs_->Open(a, O_RDONLY);
  ASSERT_TRUE(fh.ok());
  EXPECT_EQ(EvictAll(), 1u);
  EXPECT_TRUE(Exists(kRootIno, "a"));
  EXPECT_FALSE(Exists(kRootIno, "b"));
  EXPECT_EQ(*ReadFh(*fh, 0, 8192), Pattern(8192, 1));
  fs_->Release(*fh);
  EXPECT_EQ(EvictAll(), 1u);
  EXPECT_FALSE(Exists(kRootIno, "a"));
}

using GatedEvictionTest = WriteGated<EvictionFsTest>;

TEST_F(GatedEvictionTest, DataNotYetCommittedStays) {
  gate_->Hold();
  // Closed, its data write held back: in flight, its change not committed.
  Store(kRootIno, "w", Pattern(4096, 3));
  ASSERT_GT(gate_->held(), 0u);
  EXPECT_EQ(EvictAll(), 0u);
  EXPECT_TRUE(Exists(kRootIno, "w"));
  gate_->Release();
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_EQ(EvictAll(), 1u);
  EXPECT_FALSE(Exists(kRootIno, "w"));
}

TEST_F(EvictionFsTest, StagedDataStays) {
  auto c = fs_->Create(kRootIno, "w", 0644, O_WRONLY | O_CREAT, kRoot);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(fs_->Write(c->fh, 0, Pattern(4096, 3)).ok());  // staged in memory
  EXPECT_EQ(EvictAll(), 0u);
  ASSERT_TRUE(fs_->Write(c->fh, 4096, Pattern(4096, 4)).ok());
  ASSERT_TRUE(fs_->Flush(c->fh).ok());
  fs_->Release(c->fh);
  EXPECT_EQ(*Load(kRootIno, "w"), Pattern(4096, 3) + Pattern(4096, 4));
}

class EvictionMinAgeTest : public EvictionFsTest {
 protected:
  void SetUp() override {
    min_age_ns_ = int64_t{3600} * 1000000000;
    EvictionFsTest::SetUp();
  }
};

TEST_F(EvictionMinAgeTest, FilesUsedWithinMinAgeStay) {
  Store(kRootIno, "a", Pattern(8192, 1));
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_EQ(EvictAll(), 0u);
  EXPECT_TRUE(Exists(kRootIno, "a"));
}

TEST_F(EvictionMinAgeTest, WriterGetsEnospcWhenNothingMayGo) {
  std::string chunk = Pattern(kMiB, 5);
  int k = 0;
  Status last;
  for (; k < 200; ++k) {
    auto c = fs_->Create(kRootIno, "f" + std::to_string(k), 0644, O_WRONLY | O_CREAT, kRoot);
    ASSERT_TRUE(c.ok());
    auto w = fs_->Write(c->fh, 0, chunk);
    (void)fs_->Flush(c->fh);
    fs_->Release(c->fh);
    if (!w.ok()) {
      last = w.status();
      break;
    }
  }
  EXPECT_EQ(last.code(), ENOSPC) << last.ToString();
  EXPECT_LT(k, 200);
  const StatsSnapshot s = fs_->Stats();
  EXPECT_GE(s.evict_writer_waits, 1u);
  EXPECT_EQ(s.evicted_files, 0u);
  EXPECT_EQ(*Load(kRootIno, "f0"), chunk);  // nothing lost
}

class EvictionScopeTest : public EvictionFsTest {
 protected:
  void SetUp() override {
    scope_ = EvictScope::kXattr;
    EvictionFsTest::SetUp();
  }
};

TEST_F(EvictionScopeTest, OnlyFilesUnderTheNearestLruMarkGo) {
  auto kv = fs_->MkDir(kRootIno, "kv", 0755, kRoot);
  auto keep = fs_->MkDir(kRootIno, "keep", 0755, kRoot);
  ASSERT_TRUE(kv.ok() && keep.ok());
  auto sub = fs_->MkDir(kv->ino, "sub", 0755, kRoot);
  auto pinned = fs_->MkDir(kv->ino, "pinned", 0755, kRoot);
  ASSERT_TRUE(sub.ok() && pinned.ok());
  ASSERT_TRUE(fs_->SetXattr(kv->ino, index::kEvictXattr, "lru", 0, kRoot).ok());
  ASSERT_TRUE(fs_->SetXattr(pinned->ino, index::kEvictXattr, "off", 0, kRoot).ok());
  Store(kRootIno, "top", Pattern(4096, 1));
  Store(keep->ino, "k", Pattern(4096, 2));
  Store(kv->ino, "c", Pattern(4096, 3));
  Store(sub->ino, "s", Pattern(4096, 4));
  Store(pinned->ino, "p", Pattern(4096, 5));
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_EQ(EvictAll(), 2u);
  EXPECT_FALSE(Exists(kv->ino, "c"));
  EXPECT_FALSE(Exists(sub->ino, "s"));
  EXPECT_TRUE(Exists(kRootIno, "top"));
  EXPECT_TRUE(Exists(keep->ino, "k"));
  EXPECT_TRUE(Exists(pinned->ino, "p"));
}

TEST_F(EvictionFsTest, RenameOverANameKeepsTheRenamedFilesPlace) {
  Listen();
  Store(kRootIno, "a", Pattern(4096, 1));
  Store(kRootIno, "b", Pattern(4096, 2));
  Store(kRootIno, "c.tmp", Pattern(4096, 3));  // the newest
  ASSERT_TRUE(fs_->Rename(kRootIno, "c.tmp", kRootIno, "a", 0).ok());  // a's inode goes
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_EQ(EvictAll(), 2u);  // b, then c under its new name; a's inode is not offered
  EXPECT_EQ(Told(2), (std::vector<std::string>{"b", "a"}));
}

TEST_F(EvictionFsTest, WriteFileReplaceTracksTheNewFile) {
  Listen();
  Store(kRootIno, "k", Pattern(4096, 1));
  Store(kRootIno, "other", Pattern(4096, 2));
  std::promise<Status> p;
  const std::string data = Pattern(8192, 3);
  fs_->WriteFile(kRootIno, "k", data, kRoot, [&](Status st) { p.set_value(st); });
  ASSERT_TRUE(p.get_future().get().ok());
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_EQ(EvictAll(), 2u);  // other, then the new k; the old k is not offered
  EXPECT_EQ(Told(2), (std::vector<std::string>{"other", "k"}));
}

TEST_F(EvictionFsTest, FullWriterWaitsForEvictionThenSucceeds) {
  Listen();
  // Store three times the volume, 1 MiB a file: every store past the
  // first fill evicts the oldest files.
  std::vector<std::string> names;
  for (int k = 0; k < 3 * 64; ++k) {
    names.push_back("f" + std::to_string(k));
    ASSERT_EQ(Store(kRootIno, names.back(), Pattern(kMiB, k)) != 0, true) << k;
  }
  ASSERT_TRUE(fs_->Sync().ok());
  // Evicted by the writers that found the volume full or by the pass a
  // full volume starts, whichever came first.
  const StatsSnapshot s = fs_->Stats();
  EXPECT_GE(s.evicted_files, 64u);
  // The oldest went first; the newest is whole.
  const std::vector<std::string> told = Told(s.evicted_files);
  ASSERT_EQ(told.size(), s.evicted_files);
  for (size_t k = 0; k < told.size(); ++k) EXPECT_EQ(told[k], names[k]);
  EXPECT_EQ(*Load(kRootIno, names.back()), Pattern(kMiB, 3 * 64 - 1));
}

TEST_F(EvictionFsTest, WritesGrowingAReservationWaitForEvictionToo) {
  // Half a chunk, so that what the fills leave is not a whole chunk: no
  // reservation below takes the last byte (a full volume starts a pass).
  Store(kRootIno, "old", Pattern(kMiB / 2, 1));  // the oldest: the one to go
  ASSERT_TRUE(fs_->Sync().ok());  // its chunk's unused reservation is back
  for (int k = 0; FreeBytes() >= 2 * kMiB; ++k) {
    ASSERT_NE(Store(kRootIno, "fill" + std::to_string(k), Pattern(kMiB, k)), 0u);
  }
  // Two blocks left free.
  ASSERT_NE(Store(kRootIno, "pad", Pattern(FreeBytes() - 8192, 2)), 0u);
  ASSERT_TRUE(fs_->Sync().ok());
  ASSERT_EQ(FreeBytes(), 8192u);
  fs_->WaitEvictorIdle();
  ASSERT_EQ(fs_->Stats().evicted_files, 0u);
  // No whole chunk is free: the first write reserves only its block; the
  // second, in the same chunk, must grow the reservation past what is free.
  auto c = fs_->Create(kRootIno, "g", 0644, O_WRONLY | O_CREAT, kRoot);
  ASSERT_TRUE(c.ok());
  const std::string head = Pattern(4096, 3), tail = Pattern(64 << 10, 4);
  ASSERT_EQ(*fs_->Write(c->fh, 0, head), head.size());
  EXPECT_EQ(fs_->Stats().evicted_files, 0u);
  auto w = fs_->Write(c->fh, head.size(), tail);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(*w, tail.size());
  EXPECT_GE(fs_->Stats().evict_writer_waits, 1u);
  EXPECT_FALSE(Exists(kRootIno, "old"));
  EXPECT_TRUE(Exists(kRootIno, "pad"));  // only what the write needed went
  ASSERT_TRUE(fs_->Flush(c->fh).ok());
  fs_->Release(c->fh);
  EXPECT_EQ(*Load(kRootIno, "g"), head + tail);
}

}  // namespace
}  // namespace kvfs::fs
