// O_TMPFILE files (FileSystem::CreateUnnamed) and the one link that names
// them (FileSystem::Link): the atomic-publish idiom of connectors that write
// a key unnamed and link it to its final name (llm-d's filesystem backend).
#include <fcntl.h>

#include <thread>
#include <vector>

#include "common/format.h"
#include "fs/fs_fixture.h"
#include "util/write_gate_io.h"

namespace kvfs::fs {
namespace {

using TmpfileTest = FsTest;
using TmpfileOrderingTest = WriteGated<FsTest>;

std::vector<uint64_t> Orphans(volume::Volume& vol) {
  std::vector<uint64_t> out;
  EXPECT_TRUE(vol.index()
                  .ForEachOrphan([&](uint64_t ino) {
                    out.push_back(ino);
                    return true;
                  })
                  .ok());
  return out;
}

// The llm-d sequence: open(dir, O_TMPFILE|O_WRONLY), write, linkat, close.
TEST_F(TmpfileTest, UnnamedFileLinkedToItsNameIsByteExactAndSurvivesRemount) {
  auto d = fs_->MkDir(kRootIno, "kv", 0755, Caller{});
  ASSERT_TRUE(d.ok());
  const std::string data = Pattern((3 << 20) + 12345, 7);
  auto c = fs_->CreateUnnamed(d->ino, 0644, O_WRONLY | O_TMPFILE, Caller{1000, 1000, 0, {}, {}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->attr.nlink, 0u);
  EXPECT_EQ(c->attr.mode, S_IFREG | 0644u);
  EXPECT_EQ(c->attr.uid, 1000u);
  ASSERT_TRUE(fs_->Write(c->fh, 0, data).ok());
  // No name anywhere before the link.
  auto listed = 0;
  auto dh = fs_->OpenDir(d->ino);
  ASSERT_TRUE(dh.ok());
  ASSERT_TRUE(fs_->ReadDir(*dh, 0, [&](std::string_view, uint64_t, uint32_t, uint64_t) {
                    ++listed;
                    return true;
                  }).ok());
  fs_->ReleaseDir(*dh);
  EXPECT_EQ(listed, 2);  // . and ..
  EXPECT_EQ(fs_->GetAttr(c->attr.ino)->nlink, 0u);

  auto linked = fs_->Link(c->attr.ino, d->ino, "key");
  ASSERT_TRUE(linked.ok()) << linked.status().ToString();
  EXPECT_EQ(linked->ino, c->attr.ino);
  EXPECT_EQ(linked->nlink, 1u);
  EXPECT_EQ(linked->size, data.size());
  EXPECT_TRUE(fs_->Flush(c->fh).ok());
  fs_->Release(c->fh);
  EXPECT_EQ(*Load(d->ino, "key"), data);
  EXPECT_EQ(fs_->Lookup(d->ino, "key")->nlink, 1u);

  Remount();
  EXPECT_EQ(vol_->reclaimed_orphans(), 0u);
  EXPECT_EQ(*Load(d->ino, "key"), data);
  EXPECT_TRUE(Orphans(*vol_).empty());
  auto dir = vol_->index().GetInode(d->ino);
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->size, 1u);  // one entry
  auto rec = vol_->index().GetInode(c->attr.ino);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->nlink, 1u);
}

TEST_F(TmpfileTest, UnnamedFileClosedWithoutLinkIsDeletedAndItsSpaceFreed) {
  ASSERT_TRUE(fs_->FlushAll().ok());
  const uint64_t free_before = fs_->StatFs().free_blocks;
  auto c = fs_->CreateUnnamed(kRootIno, 0600, O_RDWR | O_TMPFILE, Caller{});
  ASSERT_TRUE(c.ok());
  const std::string data = Pattern(8 << 20, 2);
  ASSERT_TRUE(fs_->Write(c->fh, 0, data).ok());
  ASSERT_TRUE(fs_->FlushAll().ok());  // data and the orphan record in the index
  EXPECT_EQ(Orphans(*vol_), std::vector<uint64_t>{c->attr.ino});
  EXPECT_LT(fs_->StatFs().free_blocks, free_before);
  // Readable through its handle while open, as any file.
  EXPECT_EQ(*ReadFh(c->fh, 0, data.size()), data);
  fs_->Release(c->fh);
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(fs_->StatFs().free_blocks, free_before);
  EXPECT_EQ(vol_->index().GetInode(c->attr.ino).status().code(), ENOENT);
  EXPECT_TRUE(Orphans(*vol_).empty());
  // Its number can no longer be linked (the kernel never asks: no fd left).
  EXPECT_EQ(fs_->Link(c->attr.ino, kRootIno, "late").status().code(), ENOENT);
  EXPECT_EQ(fs_->Lookup(kRootIno, "late").status().code(), ENOENT);
  Remount();
  EXPECT_EQ(vol_->reclaimed_orphans(), 0u);
}

TEST_F(TmpfileTest, LinkOfAFileThatHasOrHadANameIsRefusedWithEperm) {
  const uint64_t named = Store(kRootIno, "named", "data");
  EXPECT_EQ(fs_->Link(named, kRootIno, "second").status().code(), EPERM);
  EXPECT_EQ(fs_->Lookup(kRootIno, "second").status().code(), ENOENT);

  // Once linked, an unnamed file is a named file like any other.
  auto c = fs_->CreateUnnamed(kRootIno, 0644, O_WRONLY | O_TMPFILE, Caller{});
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(fs_->Link(c->attr.ino, kRootIno, "first").ok());
  EXPECT_EQ(fs_->Link(c->attr.ino, kRootIno, "again").status().code(), EPERM);
  // ... and unlinked while open it is an orphan that cannot be linked back.
  ASSERT_TRUE(fs_->Unlink(kRootIno, "first").ok());
  EXPECT_EQ(fs_->Link(c->attr.ino, kRootIno, "back").status().code(), EPERM);
  fs_->Release(c->fh);

  // O_EXCL: "this file will never be linked".
  auto x = fs_->CreateUnnamed(kRootIno, 0644, O_WRONLY | O_TMPFILE | O_EXCL, Caller{});
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(fs_->Link(x->attr.ino, kRootIno, "excl").status().code(), EPERM);
  fs_->Release(x->fh);

  // A directory is never linked.
  auto d = fs_->MkDir(kRootIno, "d", 0755, Caller{});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(fs_->Link(d->ino, kRootIno, "d2").status().code(), EPERM);
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_TRUE(Orphans(*vol_).empty());
}

TEST_F(TmpfileTest, FailedLinkLeavesTheFileUnnamedAndLinkable) {
  Store(kRootIno, "taken", "x");
  auto d = fs_->MkDir(kRootIno, "gone", 0755, Caller{});
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(fs_->RmDir(kRootIno, "gone").ok());
  auto c = fs_->CreateUnnamed(kRootIno, 0644, O_WRONLY | O_TMPFILE, Caller{});
  ASSERT_TRUE(c.ok());
  const uint64_t f = Store(kRootIno, "file", "y");
  EXPECT_EQ(fs_->Link(c->attr.ino, kRootIno, "taken").status().code(), EEXIST);
  EXPECT_EQ(fs_->Link(c->attr.ino, f, "x").status().code(), ENOTDIR);
  EXPECT_EQ(fs_->Link(c->attr.ino, d->ino, "x").status().code(), ENOENT);
  EXPECT_EQ(fs_->Link(c->attr.ino, kRootIno, std::string(256, 'n')).status().code(),
            ENAMETOOLONG);
  EXPECT_EQ(fs_->Link(c->attr.ino, kRootIno, "..").status().code(), EEXIST);
  EXPECT_EQ(fs_->GetAttr(c->attr.ino)->nlink, 0u);
  ASSERT_TRUE(fs_->Write(c->fh, 0, std::string("ok")).ok());
  ASSERT_TRUE(fs_->Link(c->attr.ino, kRootIno, "free").ok());
  fs_->Release(c->fh);
  EXPECT_EQ(*Load(kRootIno, "free"), "ok");
  EXPECT_EQ(*Load(kRootIno, "taken"), "x");
}

TEST_F(TmpfileTest, UnnamedFileInANonDirectoryOrRemovedDirectoryIsRefused) {
  const uint64_t f = Store(kRootIno, "f", "z");
  EXPECT_EQ(fs_->CreateUnnamed(f, 0644, O_WRONLY | O_TMPFILE, Caller{}).status().code(), ENOTDIR);
  auto d = fs_->MkDir(kRootIno, "d", 0755, Caller{});
  ASSERT_TRUE(fs_->RmDir(kRootIno, "d").ok());
  EXPECT_EQ(fs_->CreateUnnamed(d->ino, 0644, O_WRONLY | O_TMPFILE, Caller{}).status().code(),
            ENOENT);
}

// The last close racing the link (another thread closes the descriptor
// while linkat runs): either the link comes first and the file keeps its
// name and data, or the close does and the link fails with ENOENT, leaving
// nothing. Never a name on a deleted file, never an orphan left behind.
TEST_F(TmpfileTest, LastCloseRacingTheLinkLeavesANamedFileOrNothing) {
  const std::string data = Pattern(64 << 10, 5);
  int linked = 0, refused = 0;
  for (int i = 0; i < 200; ++i) {
    auto c = fs_->CreateUnnamed(kRootIno, 0644, O_WRONLY | O_TMPFILE, Caller{});
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE(fs_->Write(c->fh, 0, data).ok());
    const std::string name = "k" + std::to_string(i);
    Status st;
    std::thread linker([&] { st = fs_->Link(c->attr.ino, kRootIno, name).status(); });
    fs_->Release(c->fh);
    linker.join();
    if (st.ok()) {
      ++linked;
      EXPECT_EQ(*Load(kRootIno, name), data) << name;
    } else {
      ++refused;
      EXPECT_EQ(st.code(), ENOENT) << st.ToString();
      EXPECT_EQ(fs_->Lookup(kRootIno, name).status().code(), ENOENT);
    }
  }
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_TRUE(Orphans(*vol_).empty());
  EXPECT_EQ(vol_->index().GetInode(kRootIno)->size, static_cast<uint64_t>(linked));
  Remount();
  EXPECT_EQ(vol_->reclaimed_orphans(), 0u);
  for (int i = 0; i < 200; ++i) {
    auto r = Load(kRootIno, "k" + std::to_string(i));
    if (r.ok()) {
      EXPECT_EQ(*r, data);
    }
  }
  RecordProperty("linked", linked);
  RecordProperty("refused", refused);
}

// A crash before the link: the unnamed file is an orphan in the index, and
// the next mount reclaims it (its data space too), as a file unlinked while
// open.
TEST_F(TmpfileTest, CrashBeforeTheLinkLeavesAnOrphanTheNextMountReclaims) {
  ASSERT_TRUE(fs_->FlushAll().ok());
  const uint64_t free_before = fs_->StatFs().free_blocks;
  auto c = fs_->CreateUnnamed(kRootIno, 0644, O_WRONLY | O_TMPFILE, Caller{});
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(fs_->Write(c->fh, 0, Pattern(5 << 20, 4)).ok());
  ASSERT_TRUE(FsyncFh(c->fh).ok());
  // "Crash" with the file open: everything committed, never released.
  ASSERT_TRUE(fs_->Shutdown().ok());
  fs_.reset();
  vol_.reset();
  Mount();
  EXPECT_EQ(vol_->reclaimed_orphans(), 1u);
  EXPECT_EQ(vol_->index().GetInode(c->attr.ino).status().code(), ENOENT);
  EXPECT_TRUE(Orphans(*vol_).empty());
  EXPECT_EQ(fs_->StatFs().free_blocks, free_before);
}

// Like a rename: the link is not committed before the data it names.
TEST_F(TmpfileOrderingTest, LinkIsNotCommittedBeforeTheDataItDependsOn) {
  Store(kRootIno, "before", "early");
  ASSERT_TRUE(fs_->FlushAll().ok());

  gate_->Hold();
  const std::string data = Pattern(3 << 20, 11);
  auto c = fs_->CreateUnnamed(kRootIno, 0644, O_WRONLY | O_TMPFILE, Caller{});
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(fs_->Write(c->fh, 0, data).ok());
  ASSERT_TRUE(fs_->Link(c->attr.ino, kRootIno, "key").ok());
  fs_->Release(c->fh);
  auto later = fs_->MkDir(kRootIno, "later", 0755, Caller{});
  ASSERT_TRUE(later.ok());
  ASSERT_GT(gate_->held(), 0u);

  // The live namespace shows the name and the data...
  EXPECT_EQ(*Load(kRootIno, "key"), data);
  // ...the index neither, nor anything queued after the link, however long
  // the committer has had. The unnamed file may be recorded, as an orphan.
  fs_->WaitCommitsStalled();
  index::Index& idx = vol_->index();
  EXPECT_EQ(idx.LookupEntry(kRootIno, "key").status().code(), ENOENT);
  EXPECT_EQ(idx.LookupEntry(kRootIno, "later").status().code(), ENOENT);
  auto rec = idx.GetInode(c->attr.ino);
  if (rec.ok()) {
    EXPECT_EQ(rec->nlink, 0u);
    EXPECT_EQ(Orphans(*vol_), std::vector<uint64_t>{c->attr.ino});
  }

  gate_->Release();
  ASSERT_TRUE(fs_->FlushAll().ok());
  auto ino = idx.LookupEntry(kRootIno, "key");
  ASSERT_TRUE(ino.ok());
  EXPECT_EQ(*ino, c->attr.ino);
  rec = idx.GetInode(*ino);
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ(rec->size, data.size());
  EXPECT_EQ(rec->nlink, 1u);
  EXPECT_EQ(rec->extents.size(), 3u);
  EXPECT_TRUE(Orphans(*vol_).empty());
  EXPECT_TRUE(idx.LookupEntry(kRootIno, "later").ok());
}

}  // namespace
}  // namespace kvfs::fs
