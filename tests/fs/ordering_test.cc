// Ordered commits: a metadata change that depends on data is not committed
// before the data write completes. A wrapper around the real engine holds
// writes back until the test lets them go.
#include <fcntl.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "common/format.h"
#include "fs/fs_fixture.h"
#include "util/write_gate_io.h"

namespace kvfs::fs {
namespace {

using OrderingTest = WriteGated<FsTest>;

TEST_F(OrderingTest, RenameIsNotCommittedBeforeTheDataItDependsOn) {
  // Something unrelated, committed before the hold.
  Store(kRootIno, "before", "early");
  ASSERT_TRUE(fs_->FlushAll().ok());

  gate_->Hold();
  std::string data = Pattern(3 << 20, 11);
  Store(kRootIno, "key.tmp", data);
  ASSERT_TRUE(fs_->Rename(kRootIno, "key.tmp", kRootIno, "key", 0).ok());
  // A later, independent change queued behind the rename.
  auto d = fs_->MkDir(kRootIno, "later", 0755, Caller{});
  ASSERT_TRUE(d.ok());
  ASSERT_GT(gate_->held(), 0u);

  // The live namespace already shows the rename...
  EXPECT_TRUE(fs_->Lookup(kRootIno, "key").ok());
  EXPECT_EQ(*Load(kRootIno, "key"), data);
  // ...but the index does not, nor anything queued after it, however long
  // the committer has had.
  fs_->WaitCommitsStalled();
  index::Index& idx = vol_->index();
  EXPECT_EQ(idx.LookupEntry(kRootIno, "key").status().code(), ENOENT);
  EXPECT_EQ(idx.LookupEntry(kRootIno, "later").status().code(), ENOENT);
  EXPECT_TRUE(idx.LookupEntry(kRootIno, "before").ok());

  gate_->Release();
  ASSERT_TRUE(fs_->FlushAll().ok());
  auto ino = idx.LookupEntry(kRootIno, "key");
  ASSERT_TRUE(ino.ok());
  auto rec = idx.GetInode(*ino);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->size, data.size());
  EXPECT_EQ(rec->extents.size(), 3u);
  EXPECT_TRUE(idx.LookupEntry(kRootIno, "later").ok());
  EXPECT_EQ(idx.LookupEntry(kRootIno, "key.tmp").status().code(), ENOENT);
}

TEST_F(OrderingTest, CommittedSizeNeverRunsAheadOfWrittenData) {
  auto c = fs_->Create(kRootIno, "grow", 0644, O_WRONLY, Caller{});
  ASSERT_TRUE(c.ok());
  std::string first = Pattern(2 << 20, 1);
  ASSERT_TRUE(fs_->Write(c->fh, 0, first).ok());
  ASSERT_TRUE(fs_->Flush(c->fh).ok());
  ASSERT_TRUE(fs_->FlushAll().ok());
  gate_->Hold();
  ASSERT_TRUE(fs_->Write(c->fh, first.size(), Pattern(3 << 20, 2)).ok());
  // Metadata-only change that captures the record while data is held.
  SetAttrRequest chmod;
  chmod.mode = 0600;
  ASSERT_TRUE(fs_->SetAttr(c->attr.ino, chmod).ok());
  fs_->WaitCommitsStalled();  // the chmod's change is committed, the data change held
  auto rec = vol_->index().GetInode(c->attr.ino);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->size, first.size());  // not the 5 MiB the live file has
  EXPECT_EQ(rec->mode & 0777, 0600u);
  gate_->Release();
  fs_->Release(c->fh);
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(vol_->index().GetInode(c->attr.ino)->size, 5u << 20);
}

TEST_F(OrderingTest, FsyncReturnsOnlyAfterDataAndIndexAreDurable) {
  auto c = fs_->Create(kRootIno, "synced", 0644, O_WRONLY, Caller{});
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(fs_->Write(c->fh, 0, Pattern(1 << 20, 3)).ok());
  gate_->Hold();
  ASSERT_TRUE(fs_->Write(c->fh, 1 << 20, Pattern(4096, 4)).ok());
  std::promise<Status> p;
  auto f = p.get_future();
  fs_->Fsync(c->fh, false, [&](Status st) { p.set_value(st); });
  EXPECT_EQ(f.wait_for(std::chrono::milliseconds(150)), std::future_status::timeout);
  gate_->Release();
  EXPECT_TRUE(f.get().ok());
  EXPECT_EQ(vol_->index().GetInode(c->attr.ino)->size, (1u << 20) + 4096);
  fs_->Release(c->fh);
}

}  // namespace
}  // namespace kvfs::fs
