#include "fsck/checker.h"

#include <rocksdb/db.h>
#include <sys/stat.h>

#include <atomic>
#include <cstring>
#include <filesystem>

#include "fs/inode_state.h"  // needs sys/stat.h first
#include "common/crc32c.h"
#include "device/fault_injecting_io.h"
#include "fsck/model.h"
#include "fsck/fsck_fixture.h"

namespace kvfs::fsck {
namespace {

static_assert(kFsChunkBytes == fs::kChunkBytes, "fsck must know fs/'s chunk size");

// A FaultInjectingIo that also counts the requests it failed, into a
// counter that outlives it (the verifier destroys its wrapper).
class CountingFaults : public device::FaultInjectingIo {
 public:
  CountingFaults(device::BlockIo& inner, std::atomic<uint64_t>* failed)
      : FaultInjectingIo(inner), failed_(failed) {}
  ~CountingFaults() override { *failed_ += requests_failed(); }

 private:
  std::atomic<uint64_t>* failed_;
};

TEST_F(FsckTest, FreshVolumeIsClean) {
  Report r = Run(false, true);
  EXPECT_EQ(r.ExitCode(), kExitClean) << Lines(r);
  EXPECT_TRUE(r.findings.empty());
  EXPECT_EQ(r.stats.directories, 1u);
}

TEST_F(FsckTest, VolumeWrittenByTheFilesystemIsClean) {
  Populate();
  Report r = Run(false, true);
  EXPECT_EQ(r.ExitCode(), kExitClean) << Lines(r);
  EXPECT_TRUE(r.findings.empty()) << Lines(r);
  EXPECT_EQ(r.stats.directories, 4u);  // /, a, b, c
  EXPECT_EQ(r.stats.files, 4u);
  EXPECT_EQ(r.stats.extents, 4u + 1 + 1);  // k1: 4 chunks; k2; k3
  EXPECT_GT(r.stats.verified_bytes, 4u << 20);
  // -y on a clean volume changes nothing and says so with exit 0.
  Report y = Run(true);
  EXPECT_EQ(y.ExitCode(), kExitClean) << Lines(y);
}

TEST_F(FsckTest, DanglingEntryIsReportedByPathAndRemoved) {
  Populate();
  {
    auto idx = OpenIndex();
    auto b = idx->NewBatch();
    b.DeleteInode(k2_);  // /a/k2's inode is gone, its entry stays
    ASSERT_TRUE(idx->Commit(b, true).ok());
  }
  Report n = Run(false);
  auto d = Of(n, FindingKind::kDanglingEntry);
  ASSERT_EQ(d.size(), 1u) << Lines(n);
  EXPECT_EQ(d[0]->path, "/a/k2");
  EXPECT_EQ(n.findings.size(), 1u) << Lines(n);
  ExpectRepaired(FindingKind::kDanglingEntry);
  EXPECT_EQ(ReadPath({"a", "k2"}).status().code(), ENOENT);
  EXPECT_EQ(GetInode(a_).size, 1u);  // b is left
}

TEST_F(FsckTest, UnreachableFileIsLinkedIntoLostFoundWithItsData) {
  Populate();
  {
    auto idx = OpenIndex();
    auto b = idx->NewBatch();
    b.DeleteEntry(b_, "k1");
    index::Inode dir = *idx->GetInode(b_);
    dir.size--;
    b.PutInode(dir);
    ASSERT_TRUE(idx->Commit(b, true).ok());
  }
  Report n = Run(false);
  auto u = Of(n, FindingKind::kUnreachable);
  ASSERT_EQ(u.size(), 1u) << Lines(n);
  EXPECT_EQ(u[0]->ino, k1_);
  EXPECT_EQ(n.findings.size(), 1u) << Lines(n);  // no separate link-count noise
  ExpectRepaired(FindingKind::kUnreachable);
  auto data = ReadPath({"lost+found", "#" + std::to_string(k1_)});
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_EQ(*data, k1_data_);
}

TEST_F(FsckTest, OrphanLeftByACrashIsReclaimed) {
  Populate();
  Mount();
  auto k3 = fs_->Lookup(kRootIno, "k3");
  ASSERT_TRUE(k3.ok());
  auto fh = fs_->Open(k3->ino, O_RDONLY);
  ASSERT_TRUE(fh.ok());
  ASSERT_TRUE(fs_->Unlink(kRootIno, "k3").ok());
  // "Crash" with the file still open: commit everything, never release.
  ASSERT_TRUE(fs_->Shutdown().ok());
  fs_.reset();
  vol_.reset();

  Report n = Run(false);
  auto o = Of(n, FindingKind::kOrphan);
  ASSERT_EQ(o.size(), 1u) << Lines(n);
  EXPECT_EQ(o[0]->ino, k3->ino);
  EXPECT_EQ(n.stats.orphans, 1u);
  ExpectRepaired(FindingKind::kOrphan);
  auto idx = OpenIndex();
  EXPECT_EQ(idx->GetInode(k3->ino).status().code(), ENOENT);
}

// An O_TMPFILE file never linked (open(O_TMPFILE), write, crash before the
// linkat) is recorded as an orphan, and fsck reclaims it like a file
// unlinked while open.
TEST_F(FsckTest, UnnamedFileLeftByACrashIsAnOrphanFsckReclaims) {
  Populate();
  Mount();
  auto c = fs_->CreateUnnamed(kRootIno, 0644, O_WRONLY | O_TMPFILE, fs::Caller{});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(fs_->Write(c->fh, 0, std::string(1 << 20, 'u')).ok());
  // "Crash" before the link: everything committed, never released.
  ASSERT_TRUE(fs_->Shutdown().ok());
  fs_.reset();
  vol_.reset();

  Report n = Run(false);
  auto o = Of(n, FindingKind::kOrphan);
  ASSERT_EQ(o.size(), 1u) << Lines(n);
  EXPECT_EQ(o[0]->ino, c->attr.ino);
  EXPECT_EQ(n.findings.size(), 1u) << Lines(n);  // no link-count or unreachable noise
  ExpectRepaired(FindingKind::kOrphan);
  auto idx = OpenIndex();
  EXPECT_EQ(idx->GetInode(c->attr.ino).status().code(), ENOENT);
}

TEST_F(FsckTest, WrongLinkAndEntryCountsAreFixed) {
  Populate();
  index::Inode a = GetInode(a_);
  a.size += 3;
  a.nlink = 7;
  PutInode(a);
  index::Inode k2 = GetInode(k2_);
  k2.nlink = 2;
  PutInode(k2);
  Report n = Run(false);
  EXPECT_EQ(n.ExitCode(), kExitUncorrected);
  EXPECT_EQ(Of(n, FindingKind::kNlink).size(), 2u) << Lines(n);
  ASSERT_EQ(Of(n, FindingKind::kEntryCount).size(), 1u) << Lines(n);
  EXPECT_EQ(Of(n, FindingKind::kEntryCount)[0]->path, "/a");
  ExpectRepaired(FindingKind::kNlink);
  EXPECT_EQ(GetInode(a_).size, 2u);
  EXPECT_EQ(GetInode(a_).nlink, 3u);
  EXPECT_EQ(GetInode(k2_).nlink, 1u);
}

TEST_F(FsckTest, WrongDirectoryParentIsFixed) {
  Populate();
  index::Inode c = GetInode(c_);
  EXPECT_EQ(c.parent, kRootIno);  // renamed out of /a/b
  c.parent = a_;
  PutInode(c);
  ExpectRepaired(FindingKind::kDirParent);
  EXPECT_EQ(GetInode(c_).parent, kRootIno);
}

TEST_F(FsckTest, SecondNameOfAFileIsRemoved) {
  Populate();
  {
    auto idx = OpenIndex();
    auto b = idx->NewBatch();
    b.PutEntry(c_, "alias", k2_);
    index::Inode c = *idx->GetInode(c_);
    c.size++;
    b.PutInode(c);
    index::Inode k2 = *idx->GetInode(k2_);
    k2.nlink = 2;
    b.PutInode(k2);
    ASSERT_TRUE(idx->Commit(b, true).ok());
  }
  Report n = Run(false);
  auto m = Of(n, FindingKind::kMultipleNames);
  ASSERT_EQ(m.size(), 1u) << Lines(n);
  EXPECT_EQ(m[0]->path, "/c/alias");  // the first name in index order stays
  ExpectRepaired(FindingKind::kMultipleNames);
  EXPECT_TRUE(ReadPath({"a", "k2"}).ok());
}

TEST_F(FsckTest, DetachedDirectoryLoopIsBrokenIntoLostFound) {
  Populate();
  {
    // /a leaves the root and becomes a child of its own child /a/b.
    auto idx = OpenIndex();
    auto b = idx->NewBatch();
    b.DeleteEntry(kRootIno, "a");
    b.PutEntry(b_, "a", a_);
    index::Inode root = *idx->GetInode(kRootIno);
    root.size--;
    root.nlink--;
    b.PutInode(root);
    index::Inode bd = *idx->GetInode(b_);
    bd.size++;
    bd.nlink++;
    b.PutInode(bd);
    index::Inode ad = *idx->GetInode(a_);
    ad.parent = b_;
    b.PutInode(ad);
    ASSERT_TRUE(idx->Commit(b, true).ok());
  }
  Report n = Run(false);
  auto l = Of(n, FindingKind::kDirLoop);
  ASSERT_EQ(l.size(), 1u) << Lines(n);
  EXPECT_EQ(l[0]->ino, a_);  // the lowest inode of the loop
  ExpectRepaired(FindingKind::kDirLoop);
  auto k1 = ReadPath({"lost+found", "#" + std::to_string(a_) + "-a", "b", "k1"});
  ASSERT_TRUE(k1.ok()) << k1.status().ToString();
  EXPECT_EQ(*k1, k1_data_);
}

TEST_F(FsckTest, BlocksSharedByTwoFilesGoToTheRightfulOwner) {
  Populate();
  // k2's only extent now points into k3's blocks (a stale pointer: the
  // checksum still describes k2's old bytes).
  index::Inode k3 = GetInode(k3_);
  index::Inode k2 = GetInode(k2_);
  ASSERT_EQ(k2.extents.size(), 1u);
  k2.extents[0].ext.byte_off = k3.extents[0].ext.byte_off;
  PutInode(k2);
  Report n = Run(false);
  auto s = Of(n, FindingKind::kSharedBlocks);
  ASSERT_EQ(s.size(), 1u) << Lines(n);
  EXPECT_EQ(s[0]->path, "/a/k2");
  EXPECT_NE(s[0]->problem.find("/k3"), std::string::npos) << s[0]->problem;
  ExpectRepaired(FindingKind::kSharedBlocks);
  auto k3_data = ReadPath({"k3"});
  ASSERT_TRUE(k3_data.ok());
  EXPECT_EQ(*k3_data, Pattern(1 << 20, 3));
  auto moved = ReadPath({"lost+found", "#" + std::to_string(k2_) + "-k2"});
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(*moved, std::string(5000, '\0'));  // its bytes were lost: a hole
}

TEST_F(FsckTest, BlocksSharedWithMatchingChecksumsAreCopied) {
  Populate();
  // k2 claims k3's extent, checksum and all: both owners' checksums match,
  // so the lower inode (k2) keeps the blocks and k3 gets its own copy.
  index::Inode k3 = GetInode(k3_);
  index::Inode k2 = GetInode(k2_);
  ASSERT_LT(k2_, k3_);
  k2.extents = {k3.extents[0]};
  k2.size = k3.size;
  PutInode(k2);
  ExpectRepaired(FindingKind::kSharedBlocks);
  auto moved = ReadPath({"lost+found", "#" + std::to_string(k3_) + "-k3"});
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(*moved, Pattern(1 << 20, 3));
  auto kept = ReadPath({"a", "k2"});
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(*kept, Pattern(1 << 20, 3));
  index::Inode after = GetInode(k3_);
  ASSERT_EQ(after.extents.size(), 1u);
  EXPECT_NE(after.extents[0].ext.byte_off, k3.extents[0].ext.byte_off);
  EXPECT_EQ(GetInode(k2_).extents[0].ext.byte_off, k3.extents[0].ext.byte_off);
}

TEST_F(FsckTest, ExtentOutsideTheDataRegionIsDroppedAndTheFileMoved) {
  Populate();
  index::Inode k1 = GetInode(k1_);
  ASSERT_EQ(k1.extents.size(), 4u);
  k1.extents[1].ext.byte_off = kImageBytes + (1 << 20);  // past the device
  PutInode(k1);
  Report n = Run(false);
  auto b = Of(n, FindingKind::kBadExtent);
  ASSERT_EQ(b.size(), 1u) << Lines(n);
  EXPECT_EQ(b[0]->path, "/a/b/k1");
  EXPECT_NE(b[0]->problem.find("outside the data region"), std::string::npos) << b[0]->problem;
  EXPECT_NE(b[0]->fix.find("/lost+found/#" + std::to_string(k1_) + "-k1"), std::string::npos);
  ExpectRepaired(FindingKind::kBadExtent);
  auto moved = ReadPath({"lost+found", "#" + std::to_string(k1_) + "-k1"});
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  std::string want = k1_data_;
  std::memset(want.data() + (1 << 20), 0, 1 << 20);  // the dropped chunk reads as zeros
  EXPECT_EQ(*moved, want);
}

TEST_F(FsckTest, ExtentAcrossAChunkBoundaryIsSplitKeepingTheData) {
  Populate();
  index::Inode k1 = GetInode(k1_);
  ASSERT_EQ(k1.extents.size(), 4u);
  // Merge chunks 0 and 1 into one 2 MiB extent: fs/ refuses to load that.
  ASSERT_EQ(k1.extents[1].ext.byte_off, k1.extents[0].ext.end()) << "chunks not adjacent";
  k1.extents[0].ext.len = 2 << 20;
  k1.extents[0].crc32c = Crc32c(k1_data_.data(), 2 << 20);
  k1.extents.erase(k1.extents.begin() + 1);
  PutInode(k1);
  EXPECT_EQ(ReadPath({"a", "b", "k1"}).status().code(), EUCLEAN);
  Report n = Run(false);
  auto b = Of(n, FindingKind::kBadExtent);
  ASSERT_EQ(b.size(), 1u) << Lines(n);
  EXPECT_NE(b[0]->problem.find("chunk boundary"), std::string::npos) << b[0]->problem;
  EXPECT_EQ(b[0]->problem.find("checksum"), std::string::npos) << b[0]->problem;
  ExpectRepaired(FindingKind::kBadExtent, /*verify=*/true);
  auto moved = ReadPath({"lost+found", "#" + std::to_string(k1_) + "-k1"});
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  EXPECT_EQ(*moved, k1_data_);
  EXPECT_EQ(GetInode(k1_).extents.size(), 4u);
}

TEST_F(FsckTest, MissingRootIsRecreatedKeepingTheTree) {
  Populate();
  {
    auto idx = OpenIndex();
    auto b = idx->NewBatch();
    b.DeleteInode(kRootIno);
    ASSERT_TRUE(idx->Commit(b, true).ok());
  }
  Report n = Run(false);
  ASSERT_EQ(Of(n, FindingKind::kMissingRoot).size(), 1u) << Lines(n);
  EXPECT_EQ(n.findings.size(), 1u) << Lines(n);
  ExpectRepaired(FindingKind::kMissingRoot);
  auto k1 = ReadPath({"a", "b", "k1"});
  ASSERT_TRUE(k1.ok()) << k1.status().ToString();
  EXPECT_EQ(*k1, k1_data_);
  EXPECT_EQ(GetInode(kRootIno).nlink, 4u);  // 2 + a, c, (no lost+found needed)
}

TEST_F(FsckTest, FlippedByteIsFoundByVerifyDataAndTheFileMoved) {
  Populate();
  index::Inode k1 = GetInode(k1_);
  FlipByte(k1.extents[2].ext.byte_off + 1234);
  Report plain = Run(false, false);
  EXPECT_EQ(plain.ExitCode(), kExitClean) << "metadata alone cannot see it: " << Lines(plain);
  Report n = Run(false, true);
  auto c = Of(n, FindingKind::kBadChecksum);
  ASSERT_EQ(c.size(), 1u) << Lines(n);
  EXPECT_EQ(c[0]->path, "/a/b/k1");
  EXPECT_NE(c[0]->problem.find(std::to_string(2 << 20)), std::string::npos) << c[0]->problem;
  ExpectRepaired(FindingKind::kBadChecksum, /*verify=*/true);
  EXPECT_EQ(ReadPath({"a", "b", "k1"}).status().code(), ENOENT);
  auto moved = ReadPath({"lost+found", "#" + std::to_string(k1_) + "-k1"});
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  std::string want = k1_data_;
  want[(2 << 20) + 1234] ^= 0x5a;  // the damaged bytes are kept for inspection
  EXPECT_EQ(*moved, want);
}

// A device read error during --verify-data (injected by a FaultInjectingIo
// around the verifier's real engine) names the file, and the check goes on:
// every other extent is still read and verified.
TEST_F(FsckTest, ReadErrorDuringVerifyDataNamesTheFileAndTheCheckGoesOn) {
  Populate();
  const index::Inode k1 = GetInode(k1_);
  ASSERT_EQ(k1.extents.size(), 4u);
  const Extent bad = k1.extents[1].ext;  // file bytes [1 MiB, 2 MiB)
  std::atomic<uint64_t> failed{0};
  auto run = [&](bool repair) {
    CheckOptions o;
    o.devices = {img_};
    o.repair = repair;
    o.verify_data = true;
    o.verify.inflight_reads = 4;
    o.verify.read_bytes = 8 << 20;  // k1's extents and its neighbours in one request
    o.index_cache_bytes = 8 << 20;
    o.verify.wrap_io = [&](device::BlockIo& inner) -> std::unique_ptr<device::BlockIo> {
      auto io = std::make_unique<CountingFaults>(inner, &failed);
      io->FailRange(device::IoOp::kRead, bad.device, bad.byte_off + 8192, 4096, EIO);
      return io;
    };
    return Check(o);
  };
  Report n = run(false);
  EXPECT_TRUE(n.error.ok()) << n.error.ToString();
  EXPECT_EQ(n.ExitCode(), kExitUncorrected) << Lines(n);
  EXPECT_GT(failed.load(), 0u) << "the fault was never hit";
  auto e = Of(n, FindingKind::kReadError);
  ASSERT_EQ(e.size(), 1u) << Lines(n);
  EXPECT_EQ(e[0]->path, "/a/b/k1");
  EXPECT_EQ(e[0]->ino, k1_);
  EXPECT_NE(e[0]->problem.find(std::strerror(EIO)), std::string::npos) << e[0]->problem;
  EXPECT_NE(e[0]->problem.find("1 extent(s)"), std::string::npos) << e[0]->problem;
  EXPECT_NE(e[0]->problem.find(std::to_string(1 << 20)), std::string::npos) << e[0]->problem;
  EXPECT_EQ(n.findings.size(), 1u) << "only k1 is damaged: " << Lines(n);
  // Every extent was read, the failed request included.
  EXPECT_EQ(n.stats.verified_bytes, n.stats.data_bytes);

  // Repair drops the unreadable extent and moves the file; the rest of its
  // bytes are kept.
  Report y = run(true);
  EXPECT_EQ(y.ExitCode(), kExitCorrected) << Lines(y);
  Report again = Run(false, true);
  EXPECT_EQ(again.ExitCode(), kExitClean) << Lines(again);
  auto moved = ReadPath({"lost+found", "#" + std::to_string(k1_) + "-k1"});
  ASSERT_TRUE(moved.ok()) << moved.status().ToString();
  std::string want = k1_data_;
  std::memset(want.data() + (1 << 20), 0, 1 << 20);
  EXPECT_EQ(*moved, want);
  auto k3 = ReadPath({"k3"});
  ASSERT_TRUE(k3.ok()) << k3.status().ToString();
  EXPECT_EQ(*k3, Pattern(1 << 20, 3));
}

TEST_F(FsckTest, BadIndexRecordIsDeleted) {
  Populate();
  {
    auto idx = OpenIndex();
    ASSERT_TRUE(idx->db()
                    ->Put(rocksdb::WriteOptions(), idx->handle(index::kInodesCf),
                          index::InodeKey(k2_), "garbage")
                    .ok());
  }
  Report n = Run(false);
  EXPECT_EQ(Of(n, FindingKind::kBadRecord).size(), 1u) << Lines(n);
  EXPECT_EQ(Of(n, FindingKind::kDanglingEntry).size(), 1u) << Lines(n);
  ExpectRepaired(FindingKind::kBadRecord);
}

TEST_F(FsckTest, DamagedSuperblockIsRefusedWithExit4) {
  Populate();
  FlipByte(100);
  Report r = Run(false);
  EXPECT_EQ(r.ExitCode(), kExitUncorrected) << Lines(r);
  auto s = Of(r, FindingKind::kSuperblock);
  ASSERT_EQ(s.size(), 1u) << Lines(r);
  EXPECT_EQ(s[0]->path, img_);
  EXPECT_NE(s[0]->problem.find("checksum"), std::string::npos) << s[0]->problem;
  EXPECT_FALSE(s[0]->repairable());
  EXPECT_EQ(Run(true).ExitCode(), kExitUncorrected);
}

TEST_F(FsckTest, MissingIndexIsAnOperationalError) {
  Populate();
  std::filesystem::remove_all(img_ + ".index");
  Report r = Run(false);
  EXPECT_EQ(r.ExitCode(), kExitOperational);
  EXPECT_EQ(r.error.code(), ENOENT);
  EXPECT_NE(r.error.ToString().find("index is missing"), std::string::npos) << r.error.ToString();
}

TEST_F(FsckTest, ForeignIndexIsAnOperationalError) {
  std::string other = dir_.Join("other.img");
  volume::FormatOptions fo;
  fo.size_bytes = kImageBytes;
  ASSERT_TRUE(volume::FormatVolume({other}, fo).ok());
  CheckOptions o;
  o.devices = {img_};
  o.index_dir = other + ".index";
  Report r = Check(o);
  EXPECT_EQ(r.ExitCode(), kExitOperational);
  EXPECT_NE(r.error.ToString().find("foreign index"), std::string::npos) << r.error.ToString();
}

TEST_F(FsckTest, MountedVolumeIsCheckedReadOnlyAndNotRepaired) {
  Populate();
  Mount();
  Store(kRootIno, "live", Pattern(70000, 9));
  ASSERT_TRUE(fs_->FlushAll().ok());  // committed, but only in the live WAL
  Report y = Run(true);
  EXPECT_EQ(y.ExitCode(), kExitOperational);
  EXPECT_EQ(y.error.code(), EBUSY);
  EXPECT_NE(y.error.ToString().find("-n"), std::string::npos) << y.error.ToString();
  Report n = Run(false, true);
  EXPECT_TRUE(n.mounted);
  EXPECT_EQ(n.ExitCode(), kExitClean) << Lines(n);
  EXPECT_EQ(n.stats.files, 5u);  // sees the commit made by the live mount
  ASSERT_FALSE(n.notes.empty());
  Unmount();
}

TEST(FsckMultiDeviceTest, TwoDeviceVolumeIsCheckedAndAMissingDeviceRefused) {
  kvfs::testing::TempDir dir;
  const std::string d0 = dir.Join("d0.img"), d1 = dir.Join("d1.img");
  volume::FormatOptions fo;
  fo.size_bytes = 32 << 20;
  ASSERT_TRUE(volume::FormatVolume({d0, d1}, fo).ok());
  {
    auto v = volume::Volume::Open({d0, d1}, volume::VolumeOptions{});
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    fs::FileSystemOptions fso;
    fso.cache_bytes = 8 << 20;
    fso.prefetch = fs::PrefetchMode::kOff;
    auto f = fs::FileSystem::Create(**v, fso);
    ASSERT_TRUE(f.ok());
    // Enough data that both devices hold some (the fuller one gets less).
    for (int i = 0; i < 12; ++i) {
      auto c = (*f)->Create(kRootIno, "f" + std::to_string(i), 0644, O_WRONLY | O_CREAT,
                            fs::Caller{});
      ASSERT_TRUE(c.ok());
      ASSERT_TRUE((*f)->Write(c->fh, 0, Pattern(3 << 20, i)).ok());
      ASSERT_TRUE((*f)->Flush(c->fh).ok());
      (*f)->Release(c->fh);
    }
    ASSERT_TRUE((*f)->Shutdown().ok());
  }
  CheckOptions o;
  o.devices = {d1, d0};  // any order
  o.verify_data = true;
  Report r = Check(o);
  EXPECT_EQ(r.ExitCode(), kExitClean) << r.error.ToString();
  EXPECT_EQ(r.stats.extents, 36u);
  EXPECT_EQ(r.stats.verified_bytes, 36u << 20);

  o.devices = {d1};
  o.index_dir = d0 + ".index";
  Report missing = Check(o);
  EXPECT_EQ(missing.ExitCode(), kExitOperational);
  EXPECT_NE(missing.error.ToString().find("missing"), std::string::npos)
      << missing.error.ToString();
}

}  // namespace
}  // namespace kvfs::fsck
