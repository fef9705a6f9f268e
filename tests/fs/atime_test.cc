// Access times (fs/atime.h): each relatime rule, strictatime and noatime,
// and that moved atimes reach the index without a commit per read: with
// the next capture of the inode, in the periodic flush, and at shutdown.
#include "fs/atime.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "common/format.h"
#include "fs/fs_fixture.h"
#include "fs/stats.h"

namespace kvfs::fs {
namespace {

constexpr int64_t kSec = 1000000000;
constexpr int64_t kDay = 24 * 3600 * kSec;

index::Inode Rec(int64_t atime, int64_t mtime, int64_t ctime) {
  index::Inode r;
  r.atime_ns = atime;
  r.mtime_ns = mtime;
  r.ctime_ns = ctime;
  return r;
}

TEST(AtimeRuleTest, RelatimeMovesOnlyWhenNotNewerThanMtimeOrCtimeOrADayOld) {
  const int64_t t = 1000 * kDay;
  const auto rel = AtimeMode::kRelatime;
  EXPECT_TRUE(AtimeDue(rel, Rec(t, t + kSec, t), t + 2 * kSec));   // older than mtime
  EXPECT_TRUE(AtimeDue(rel, Rec(t, t, t), t + kSec));              // equal to mtime
  EXPECT_TRUE(AtimeDue(rel, Rec(t, t - kSec, t + kSec), t + 2 * kSec));  // older than ctime
  EXPECT_FALSE(AtimeDue(rel, Rec(t, t - kSec, t - kSec), t + kSec));     // newer, fresh
  EXPECT_FALSE(AtimeDue(rel, Rec(t, t - kSec, t - kSec), t + kDay - 1));
  EXPECT_TRUE(AtimeDue(rel, Rec(t, t - kSec, t - kSec), t + kDay));     // a day old
  EXPECT_TRUE(AtimeDue(AtimeMode::kStrictatime, Rec(t, t - kSec, t - kSec), t + 1));
  EXPECT_FALSE(AtimeDue(AtimeMode::kNoatime, Rec(t, t + kSec, t), t + kDay * 2));
}

class AtimeFsTest : public FsTest {
 protected:
  FileSystemOptions FsOpts() override {
    FileSystemOptions o;
    o.atime = mode_;
    o.atime_flush_ms = flush_ms_;
    return o;
  }
  // Opens and reads `ino` once; returns its atime afterwards.
  int64_t ReadOnce(uint64_t ino) {
    auto fh = fs_->Open(ino, O_RDONLY);
    EXPECT_TRUE(fh.ok());
    EXPECT_TRUE(ReadFh(*fh, 0, 100).ok());
    fs_->Release(*fh);
    return fs_->GetAttr(ino)->atime_ns;
  }
  AtimeMode mode_ = AtimeMode::kRelatime;
  unsigned flush_ms_ = 3600 * 1000;
};

TEST_F(AtimeFsTest, FirstReadAfterAWriteMovesAtimeThenItHolds) {
  const uint64_t ino = Store(kRootIno, "k", "0123456789");
  const int64_t before = fs_->GetAttr(ino)->atime_ns;
  const int64_t first = ReadOnce(ino);
  EXPECT_GT(first, before);
  EXPECT_EQ(ReadOnce(ino), first);  // newer than mtime and ctime: relatime holds it
}

TEST_F(AtimeFsTest, ListingADirectoryMovesItsAtimeAfterItChanged) {
  const Caller me{0, 0, 1, {}, {}};
  auto d = fs_->MkDir(kRootIno, "d", 0755, me);
  ASSERT_TRUE(d.ok());
  Store(d->ino, "k", "abc");  // the directory's mtime moves past its atime
  const int64_t before = fs_->GetAttr(d->ino)->atime_ns;
  // The listing (a read from offset 0), not the open, reads the directory.
  auto list = [&] {
    auto dh = fs_->OpenDir(d->ino);
    ASSERT_TRUE(dh.ok());
    ASSERT_TRUE(fs_->ReadDir(*dh, 0, [](std::string_view, uint64_t, uint32_t, uint64_t) {
                      return true;
                    }).ok());
    fs_->ReleaseDir(*dh);
  };
  list();
  const int64_t listed = fs_->GetAttr(d->ino)->atime_ns;
  EXPECT_GT(listed, before);
  list();
  EXPECT_EQ(fs_->GetAttr(d->ino)->atime_ns, listed);  // unchanged since: relatime holds
}

TEST_F(AtimeFsTest, TenThousandReadsMakeAtMostOneCommit) {
  const uint64_t ino = Store(kRootIno, "k", "0123456789");
  ASSERT_TRUE(fs_->Sync().ok());
  const uint64_t commits = fs_->Stats().index_commits;
  auto fh = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(fh.ok());
  for (int k = 0; k < 10000; ++k) ASSERT_TRUE(ReadFh(*fh, 0, 10).ok());
  fs_->Release(*fh);
  fs_->WaitCommitsStalled();
  EXPECT_EQ(fs_->Stats().index_commits, commits);  // held in memory until a flush
  EXPECT_EQ(fs_->Stats().atime_updates, 1u);
}

TEST_F(AtimeFsTest, MovedAtimeIsPersistedAtShutdown) {
  const uint64_t ino = Store(kRootIno, "k", "0123456789");
  const int64_t moved = ReadOnce(ino);
  Remount();
  EXPECT_EQ(fs_->GetAttr(ino)->atime_ns, moved);
}

TEST_F(AtimeFsTest, MovedAtimeRidesTheNextCommitOfTheInode) {
  const uint64_t ino = Store(kRootIno, "k", "0123456789");
  const int64_t moved = ReadOnce(ino);
  SetAttrRequest chmod;
  chmod.mode = 0600;
  ASSERT_TRUE(fs_->SetAttr(ino, chmod).ok());
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_EQ(vol_->index().GetInode(ino)->atime_ns, moved);
}

// AtimeFsTest with another mode or flush interval.
template <AtimeMode kMode, unsigned kFlushMs = 3600 * 1000>
class AtimeModeTest : public AtimeFsTest {
 protected:
  void SetUp() override {
    mode_ = kMode;
    flush_ms_ = kFlushMs;
    AtimeFsTest::SetUp();
  }
};
using AtimeFlushTest = AtimeModeTest<AtimeMode::kRelatime, 50>;
using NoatimeTest = AtimeModeTest<AtimeMode::kNoatime>;
// Strictatime on a clock the test steps.
class StrictatimeTest : public AtimeModeTest<AtimeMode::kStrictatime> {
 protected:
  FileSystemOptions FsOpts() override {
    FileSystemOptions o = AtimeModeTest::FsOpts();
    o.now_ns = [this] { return now_ns_.load(); };
    return o;
  }
  std::atomic<int64_t> now_ns_{1'800'000'000'000'000'000};
};

TEST_F(AtimeFlushTest, PeriodicFlushWritesMovedAtimesInOneCommit) {
  std::vector<uint64_t> inos;
  for (int k = 0; k < 20; ++k) inos.push_back(Store(kRootIno, "k" + std::to_string(k), "abc"));
  ASSERT_TRUE(fs_->Sync().ok());
  const uint64_t commits = fs_->Stats().index_commits;
  for (uint64_t ino : inos) ReadOnce(ino);
  fs_->WaitAtimesFlushed();  // the log's own periodic flush, not one asked for
  ASSERT_TRUE(fs_->Sync().ok());
  const StatsSnapshot s = fs_->Stats();
  EXPECT_GE(s.atime_flushes, 1u);
  EXPECT_LE(s.index_commits - commits, 2u);  // one group, or two if a flush split it
  for (uint64_t ino : inos) {
    EXPECT_EQ(vol_->index().GetInode(ino)->atime_ns, fs_->GetAttr(ino)->atime_ns);
  }
}

TEST_F(NoatimeTest, ReadsNeverMoveAtime) {
  const uint64_t ino = Store(kRootIno, "k", "0123456789");
  const int64_t before = fs_->GetAttr(ino)->atime_ns;
  EXPECT_EQ(ReadOnce(ino), before);
  EXPECT_EQ(fs_->Stats().atime_updates, 0u);
}

TEST_F(StrictatimeTest, EveryReadMovesAtimeButCommitsStayBatched) {
  const uint64_t ino = Store(kRootIno, "k", "0123456789");
  ASSERT_TRUE(fs_->Sync().ok());
  const uint64_t commits = fs_->Stats().index_commits;
  const int64_t first = ReadOnce(ino);
  EXPECT_EQ(first, now_ns_.load());
  now_ns_ += 1000;
  EXPECT_EQ(ReadOnce(ino), first + 1000);
  fs_->WaitCommitsStalled();
  EXPECT_EQ(fs_->Stats().index_commits, commits);
}

}  // namespace
}  // namespace kvfs::fs
