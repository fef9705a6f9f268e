// POSIX rules an external suite (xfstests generic/314, 471, 683, 426...)
// checks and kvfs decides itself (issue 34): setgid directories, rewinddir,
// the setgid drop rule for callers outside the file's group, lookups of an
// inode by number (file handles), read-only mounts.
#include <fcntl.h>
#include <sys/stat.h>

#include <set>
#include <string>
#include <vector>

#include "common/format.h"
#include "fs/fs_fixture.h"
#include "fs/killpriv.h"

namespace kvfs::fs {
namespace {

constexpr uint32_t kGroup = 12345;
const Caller kUser{1001, 1001, 0, {}, {}};

std::set<std::string> List(FileSystem& fs, uint64_t dh) {
  std::set<std::string> out;
  EXPECT_TRUE(fs.ReadDir(dh, 0, [&](std::string_view name, uint64_t, uint32_t, uint64_t) {
                  out.insert(std::string(name));
                  return true;
                }).ok());
  return out;
}

// A KillPriv for a caller in exactly the groups `groups`.
KillPriv InGroups(std::set<uint32_t> groups) {
  KillPriv k;
  k.in_group = [groups](uint32_t gid) { return groups.count(gid) > 0; };
  return k;
}

// Sets `ino`'s mode to `mode` and its group to kGroup, as its owner would.
void SetModeAndGroup(FileSystem& fs, uint64_t ino, uint32_t mode) {
  SetAttrRequest q;
  q.mode = mode;
  q.gid = kGroup;
  ASSERT_TRUE(fs.SetAttr(ino, q).ok());
}

// --- setgid directories (generic/314)

TEST_F(FsTest, SetgidDirectoryGivesItsGroupAndSetgidToWhatIsMadeInIt) {
  auto d = fs_->MkDir(kRootIno, "shared", 0775, Caller{});
  ASSERT_TRUE(d.ok());
  SetModeAndGroup(*fs_, d->ino, 02775);

  auto sub = fs_->MkDir(d->ino, "sub", 0755, kUser);
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ(sub->gid, kGroup);
  EXPECT_EQ(sub->uid, kUser.uid);
  EXPECT_EQ(sub->mode & 07777, 02755u);  // subdirectories carry it on
  auto f = fs_->Create(d->ino, "f", 0644, O_WRONLY, kUser);
  ASSERT_TRUE(f.ok());
  fs_->Release(f->fh);
  EXPECT_EQ(f->attr.gid, kGroup);
  EXPECT_EQ(f->attr.mode & 07777, 0644u);  // files do not
  // Two levels down too, through the inherited bit.
  auto g = fs_->Create(sub->ino, "g", 0600, O_WRONLY, kUser);
  ASSERT_TRUE(g.ok());
  fs_->Release(g->fh);
  EXPECT_EQ(g->attr.gid, kGroup);

  // An unnamed file (O_TMPFILE) made there too, also once linked.
  auto t = fs_->CreateUnnamed(d->ino, 0644, O_WRONLY, kUser);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->attr.gid, kGroup);
  auto linked = fs_->Link(t->attr.ino, d->ino, "t");
  ASSERT_TRUE(linked.ok()) << linked.status().ToString();
  EXPECT_EQ(linked->gid, kGroup);
  fs_->Release(t->fh);

  // Outside a setgid directory: the creator's group, as before.
  auto plain = fs_->Create(kRootIno, "plain", 0644, O_WRONLY, kUser);
  ASSERT_TRUE(plain.ok());
  fs_->Release(plain->fh);
  EXPECT_EQ(plain->attr.gid, kUser.gid);

  Remount();
  auto d2 = fs_->Lookup(kRootIno, "shared");
  ASSERT_TRUE(d2.ok());
  auto sub2 = fs_->Lookup(d2->ino, "sub");
  ASSERT_TRUE(sub2.ok());
  EXPECT_EQ(sub2->gid, kGroup);
  EXPECT_EQ(sub2->mode & 07777, 02755u);
  auto f2 = fs_->Lookup(d2->ino, "f");
  ASSERT_TRUE(f2.ok());
  EXPECT_EQ(f2->gid, kGroup);
  auto g2 = fs_->Lookup(sub2->ino, "g");
  ASSERT_TRUE(g2.ok());
  EXPECT_EQ(g2->gid, kGroup);
}

// --- rewinddir (generic/471)

TEST_F(FsTest, ListingFromOffsetZeroAgainShowsEntriesMadeSinceOpenDir) {
  auto d = fs_->MkDir(kRootIno, "d", 0755, Caller{});
  ASSERT_TRUE(d.ok());
  auto dh = fs_->OpenDir(d->ino);
  ASSERT_TRUE(dh.ok());
  // Made after the open, before the first read (lseek(fd, 0) right after
  // opendir reaches kvfs as nothing).
  Store(d->ino, "early", "x");
  EXPECT_EQ(List(*fs_, *dh), (std::set<std::string>{".", "..", "early"}));
  ASSERT_TRUE(fs_->Unlink(d->ino, "early").ok());
  for (int k = 0; k < 5; ++k) Store(d->ino, "f" + std::to_string(k), "x");
  // Offsets past 0 keep the listing they started (stable while names
  // change); offset 0 again is a rewind.
  EXPECT_EQ(List(*fs_, *dh), (std::set<std::string>{".", "..", "f0", "f1", "f2", "f3", "f4"}));
  ASSERT_TRUE(fs_->Unlink(d->ino, "f2").ok());
  EXPECT_EQ(List(*fs_, *dh), (std::set<std::string>{".", "..", "f0", "f1", "f3", "f4"}));
  fs_->ReleaseDir(*dh);
}

TEST_F(FsTest, ListingResumedPastZeroKeepsItsSnapshot) {
  auto d = fs_->MkDir(kRootIno, "d", 0755, Caller{});
  ASSERT_TRUE(d.ok());
  for (int k = 0; k < 4; ++k) Store(d->ino, "f" + std::to_string(k), "x");
  auto dh = fs_->OpenDir(d->ino);
  ASSERT_TRUE(dh.ok());
  uint64_t next = 0;
  std::vector<std::string> seen;
  ASSERT_TRUE(fs_->ReadDir(*dh, 0, [&](std::string_view n, uint64_t, uint32_t, uint64_t o) {
                    seen.emplace_back(n);
                    next = o;
                    return seen.size() < 3;  // ".", "..", "f0"
                  }).ok());
  Store(d->ino, "a-new", "x");  // sorts first: must not shift the resumed listing
  ASSERT_TRUE(fs_->ReadDir(*dh, next, [&](std::string_view n, uint64_t, uint32_t, uint64_t) {
                    seen.emplace_back(n);
                    return true;
                  }).ok());
  EXPECT_EQ(seen, (std::vector<std::string>{".", "..", "f0", "f1", "f2", "f3"}));
  fs_->ReleaseDir(*dh);
}

// --- the setgid drop rule (generic/683)

TEST(KillSuidGid, DropsSetgidWithoutGroupExecuteForCallersOutsideTheGroup) {
  EXPECT_EQ(KillSuidGid(S_IFREG | 06666, /*in_group=*/false) & 07777, 0666u);
  EXPECT_EQ(KillSuidGid(S_IFREG | 06766, false) & 07777, 0766u);
  EXPECT_EQ(KillSuidGid(S_IFREG | 06666, true) & 07777, 02666u);  // mandatory locking stays
  EXPECT_EQ(KillSuidGid(S_IFREG | 06676, true) & 07777, 0676u);
  EXPECT_EQ(KillSuidGid(S_IFDIR | 06666, false) & 07777, 06666u);  // regular files only
}

TEST_F(FsTest, UnprivilegedWriteDropsSetgidWhenTheWriterIsNotInTheGroup) {
  struct Case {
    uint32_t mode;
    std::set<uint32_t> groups;
    uint32_t want;
  };
  const Case cases[] = {
      {06666, {}, 0666},        {06766, {}, 0766},          {06666, {kGroup}, 02666},
      {06676, {kGroup}, 0676},  {04757, {}, 0757},          {02666, {}, 0666},
      {0666, {}, 0666},
  };
  int n = 0;
  for (const Case& c : cases) {
    const std::string name = "f" + std::to_string(n++);
    const uint64_t ino = Store(kRootIno, name, "abc");
    SetModeAndGroup(*fs_, ino, c.mode);
    auto fh = fs_->Open(ino, O_WRONLY);
    ASSERT_TRUE(fh.ok());
    KillPriv who = InGroups(c.groups);
    ASSERT_TRUE(fs_->Write(*fh, 1, std::string_view("z"), &who).ok());
    fs_->Release(*fh);
    auto a = fs_->GetAttr(ino);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->mode & 07777, c.want) << std::oct << c.mode;
    EXPECT_EQ(who.mode_changed, c.want != c.mode) << std::oct << c.mode;
  }
  // A privileged write (no KillPriv) keeps everything.
  const uint64_t ino = Store(kRootIno, "root", "abc");
  SetAttrRequest q;
  q.mode = 06666;
  ASSERT_TRUE(fs_->SetAttr(ino, q).ok());
  auto fh = fs_->Open(ino, O_WRONLY);
  ASSERT_TRUE(fh.ok());
  ASSERT_TRUE(fs_->Write(*fh, 0, std::string_view("z")).ok());
  fs_->Release(*fh);
  EXPECT_EQ(fs_->GetAttr(ino)->mode & 07777, 06666u);
}

TEST_F(FsTest, UnprivilegedTruncatingOpenDropsSetgidOutsideTheGroup) {
  const uint64_t ino = Store(kRootIno, "f", "abc");
  SetModeAndGroup(*fs_, ino, 06666);
  KillPriv who = InGroups({});
  auto fh = fs_->Open(ino, O_WRONLY | O_TRUNC, &who);
  ASSERT_TRUE(fh.ok());
  fs_->Release(*fh);
  EXPECT_TRUE(who.mode_changed);
  EXPECT_EQ(fs_->GetAttr(ino)->mode & 07777, 0666u);
}

// A fallocate of 2666 by a caller outside the group: FUSE's rule drops
// nothing, so no SETATTR comes first; kvfs applies the whole rule itself.
TEST_F(FsTest, UnprivilegedFallocateDropsSetgidOutsideTheGroup) {
  const uint64_t ino = Store(kRootIno, "f", "abc");
  SetModeAndGroup(*fs_, ino, 02666);
  auto fh = fs_->Open(ino, O_WRONLY);
  ASSERT_TRUE(fh.ok());
  KillPriv member = InGroups({kGroup});
  ASSERT_TRUE(fs_->Fallocate(*fh, 0, 0, 8192, &member).ok());
  EXPECT_FALSE(member.mode_changed);
  EXPECT_EQ(fs_->GetAttr(ino)->mode & 07777, 02666u);
  KillPriv outside = InGroups({});
  ASSERT_TRUE(fs_->Fallocate(*fh, 0, 0, 100, &outside).ok());  // no growth: still a change
  EXPECT_TRUE(outside.mode_changed);
  fs_->Release(*fh);
  EXPECT_EQ(fs_->GetAttr(ino)->mode & 07777, 0666u);
  EXPECT_EQ(fs_->GetAttr(ino)->size, 8192u);
  ASSERT_TRUE(fs_->Sync().ok());
  Remount();
  EXPECT_EQ(fs_->GetAttr(ino)->mode & 07777, 0666u);
}

// The kernel's own mode change after a fallocate or truncate by another
// user arrives as a SETATTR of the mode with S_ISGID kept (FUSE computes
// it with the group-execute rule only); kvfs completes the rule.
TEST_F(FsTest, ModeSetByCallerOutsideTheGroupLosesSetgid) {
  const uint64_t ino = Store(kRootIno, "f", "abc");
  SetModeAndGroup(*fs_, ino, 06666);
  SetAttrRequest kernel;
  kernel.mode = 02666;  // S_ISUID dropped by the kernel, S_ISGID kept
  KillPriv outside = InGroups({});
  kernel.unprivileged = &outside;
  auto a = fs_->SetAttr(ino, kernel);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->mode & 07777, 0666u);
  // A member of the group keeps it.
  SetModeAndGroup(*fs_, ino, 06666);
  KillPriv member = InGroups({kGroup});
  kernel.unprivileged = &member;
  a = fs_->SetAttr(ino, kernel);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->mode & 07777, 02666u);
}

// --- lookups by inode number (file handles after the kernel forgot the
// inode: LOOKUP of "." in it, ".." of a directory)

TEST_F(FsTest, DotLookupFindsAnyInodeByNumberWhileItHasAName) {
  const uint64_t f = Store(kRootIno, "f", "abc");
  auto d = fs_->MkDir(kRootIno, "d", 0755, Caller{});
  ASSERT_TRUE(d.ok());
  auto sub = fs_->MkDir(d->ino, "sub", 0755, Caller{});
  ASSERT_TRUE(sub.ok());
  ASSERT_TRUE(fs_->Sync().ok());
  Remount();  // nothing cached: the numbers come from the index
  auto a = fs_->Lookup(f, ".");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->ino, f);
  EXPECT_EQ(a->size, 3u);
  auto up = fs_->Lookup(sub->ino, "..");
  ASSERT_TRUE(up.ok());
  EXPECT_EQ(up->ino, d->ino);
  // The generation is the one the inode was made with, on every mount.
  auto again = fs_->Lookup(kRootIno, "f");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->generation, a->generation);

  ASSERT_TRUE(fs_->Unlink(kRootIno, "f").ok());
  EXPECT_EQ(fs_->Lookup(f, ".").status().code(), ESTALE);
  ASSERT_TRUE(fs_->Sync().ok());
  Remount();
  EXPECT_FALSE(fs_->Lookup(f, ".").ok());
  // Other names than "." and ".." in a file: still ENOTDIR.
  const uint64_t g = Store(kRootIno, "g", "x");
  EXPECT_EQ(fs_->Lookup(g, "x").status().code(), ENOTDIR);
}

TEST_F(FsTest, InodesOfDifferentMountsHaveDifferentGenerations) {
  const uint64_t a = Store(kRootIno, "a", "x");
  auto ga = fs_->GetAttr(a);
  ASSERT_TRUE(ga.ok());
  Remount();
  const uint64_t b = Store(kRootIno, "b", "x");
  auto gb = fs_->GetAttr(b);
  ASSERT_TRUE(gb.ok());
  EXPECT_NE(ga->generation, gb->generation);
  EXPECT_GT(ga->generation, 1u);
  EXPECT_LT(ga->generation, 1ull << 32);  // the kernel's file handle keeps 32 bits
  EXPECT_EQ(fs_->GetAttr(a)->generation, ga->generation);
}

// --- read-only mounts

class ReadOnlyFsTest : public FsTest {
 protected:
  void RemountReadOnly() {
    Unmount();
    read_only_ = true;
    Mount();
  }
  volume::VolumeOptions VolumeOpts() override {
    auto o = FsTest::VolumeOpts();
    o.read_only = read_only_;
    o.shared_lock = read_only_;
    return o;
  }
  FileSystemOptions FsOpts() override {
    FileSystemOptions o;
    o.read_only = read_only_;
    o.atime = AtimeMode::kStrictatime;  // every read would move it
    return o;
  }
  bool read_only_ = false;
};

TEST_F(ReadOnlyFsTest, ReadOnlyOpenIsRefusedWhileTheVolumeIsOpenReadWrite) {
  volume::VolumeOptions ro = FsTest::VolumeOpts();
  ro.read_only = true;
  ro.shared_lock = true;
  EXPECT_EQ(volume::Volume::Open({img_}, ro).status().code(), EBUSY);
  // fsck -n's read-only open takes no lock and still works.
  ro.shared_lock = false;
  EXPECT_TRUE(volume::Volume::Open({img_}, ro).ok());
}

TEST_F(ReadOnlyFsTest, ReadOnlyMountReadsAndChangesNothing) {
  const uint64_t f = Store(kRootIno, "f", "hello");
  auto d = fs_->MkDir(kRootIno, "d", 0755, Caller{});
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(fs_->Sync().ok());
  const int64_t atime = fs_->GetAttr(f)->atime_ns;
  RemountReadOnly();

  // A read-write open of the volume meanwhile is refused.
  volume::VolumeOptions rw = FsTest::VolumeOpts();
  EXPECT_EQ(volume::Volume::Open({img_}, rw).status().code(), EBUSY);

  auto r = Load(kRootIno, "f");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "hello");
  auto dh = fs_->OpenDir(d->ino);
  ASSERT_TRUE(dh.ok());
  fs_->ReleaseDir(*dh);
  EXPECT_EQ(fs_->GetAttr(f)->atime_ns, atime);

  EXPECT_EQ(fs_->Create(kRootIno, "g", 0644, O_WRONLY, Caller{}).status().code(), EROFS);
  EXPECT_EQ(fs_->MkDir(kRootIno, "e", 0755, Caller{}).status().code(), EROFS);
  EXPECT_EQ(fs_->Unlink(kRootIno, "f").code(), EROFS);
  EXPECT_EQ(fs_->Open(f, O_WRONLY).status().code(), EROFS);
  SetAttrRequest q;
  q.mode = 0600;
  EXPECT_EQ(fs_->SetAttr(f, q).status().code(), EROFS);
  auto fh = fs_->Open(f, O_RDONLY);
  ASSERT_TRUE(fh.ok());
  EXPECT_TRUE(FsyncFh(*fh).ok());
  fs_->Release(*fh);
  EXPECT_TRUE(fs_->Sync().ok());

  // Back read-write: the atime never moved.
  Unmount();
  read_only_ = false;
  Mount();
  EXPECT_EQ(fs_->GetAttr(f)->atime_ns, atime);
  EXPECT_EQ(*Load(kRootIno, "f"), "hello");
}

}  // namespace
}  // namespace kvfs::fs
