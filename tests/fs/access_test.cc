// Permission checks made by the fs/ calls that take the caller to check
// (`const Caller* check`; fs/access.h has the rules): each checks in the
// same call as the operation, before anything changes, with the semantics
// and errno order of the kernel's own checks; a null caller checks nothing.
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <string>

#include "fs/access.h"
#include "common/format.h"
#include "fs/fs_fixture.h"

namespace kvfs::fs {
namespace {

constexpr uint32_t kGroup = 4242;

// A caller whose groups are asked lazily, counting the questions.
struct LazyCaller {
  explicit LazyCaller(bool member) {
    caller.uid = 1001;
    caller.gid = 1001;
    caller.in_group = [this, member](uint32_t gid) {
      ++asked;
      return member && gid == kGroup;
    };
  }
  Caller caller;
  int asked = 0;
};

// `ino` made root's, in group kGroup, with permission bits `mode`.
SetAttrRequest RootsInGroup(uint32_t mode) {
  SetAttrRequest q;
  q.mode = mode;
  q.uid = 0;
  q.gid = kGroup;
  return q;
}

TEST_F(FsTest, LookupChecksSearchPermissionOnTheParentBeforeTheName) {
  auto d = fs_->MkDir(kRootIno, "priv", 0700, Caller{});
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(fs_->SetAttr(d->ino, RootsInGroup(0710)).ok());
  LazyCaller outsider(false), member(true);
  bool everyone = true;
  EXPECT_EQ(fs_->Lookup(d->ino, "missing", &outsider.caller, &everyone).status().code(),
            EACCES);
  EXPECT_FALSE(everyone);
  // Permission comes before the name's own errors, as in the kernel's walk.
  EXPECT_EQ(fs_->Lookup(d->ino, std::string(300, 'n'), &outsider.caller).status().code(),
            EACCES);
  EXPECT_EQ(fs_->Lookup(d->ino, "missing", &member.caller).status().code(), ENOENT);
  EXPECT_EQ(fs_->Lookup(d->ino, "missing").status().code(), ENOENT) << "no caller: no check";
  const Caller root;
  EXPECT_EQ(fs_->Lookup(d->ino, "missing", &root).status().code(), ENOENT) << "root";

  everyone = false;
  ASSERT_TRUE(fs_->SetAttr(d->ino, RootsInGroup(0711)).ok());
  EXPECT_EQ(fs_->Lookup(d->ino, "missing", &outsider.caller, &everyone).status().code(),
            ENOENT);
  EXPECT_TRUE(everyone) << "a missing name in a directory all may search";
  // Asked by the two lookups under 0710 (the group's x bit decides), not
  // under 0711.
  EXPECT_EQ(outsider.asked, 2);
}

TEST_F(FsTest, OpenChecksWhatItsFlagsAskBeforeOpening) {
  auto c = fs_->Create(kRootIno, "f", 0644, O_WRONLY, Caller{});
  ASSERT_TRUE(c.ok());
  fs_->Release(c->fh);
  ASSERT_TRUE(fs_->SetAttr(c->attr.ino, RootsInGroup(0640)).ok());
  LazyCaller outsider(false), member(true);
  EXPECT_EQ(fs_->Open(c->attr.ino, O_RDONLY, nullptr, &outsider.caller).status().code(), EACCES);
  EXPECT_EQ(fs_->Open(c->attr.ino, O_WRONLY, nullptr, &member.caller).status().code(), EACCES);
  EXPECT_EQ(fs_->Open(c->attr.ino, O_RDONLY | O_TRUNC, nullptr, &member.caller).status().code(),
            EACCES);
  EXPECT_EQ(fs_->Open(c->attr.ino, O_RDONLY | kOpenForExec, nullptr, &member.caller)
                .status()
                .code(),
            EACCES);
  auto r = fs_->Open(c->attr.ino, O_RDONLY, nullptr, &member.caller);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  fs_->Release(*r);
}

TEST_F(FsTest, OpenDirChecksReadPermission) {
  auto d = fs_->MkDir(kRootIno, "d", 0755, Caller{});
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(fs_->SetAttr(d->ino, RootsInGroup(0711)).ok());
  LazyCaller outsider(false);
  EXPECT_EQ(fs_->OpenDir(d->ino, O_RDONLY, &outsider.caller).status().code(), EACCES);
  auto r = fs_->OpenDir(d->ino, O_RDONLY, nullptr);
  ASSERT_TRUE(r.ok());
  fs_->ReleaseDir(*r);
}

// A directory `name` in `parent` with permission bits `mode`, owned by
// uid:gid.
uint64_t Dir(FileSystem& fs, uint64_t parent, const std::string& name, uint32_t mode,
             uint32_t uid = 0, uint32_t gid = kGroup) {
  auto d = fs.MkDir(parent, name, 0755, Caller{});
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  if (!d.ok()) return 0;
  SetAttrRequest q;
  q.mode = mode;
  q.uid = uid;
  q.gid = gid;
  EXPECT_TRUE(fs.SetAttr(d->ino, q).ok());
  return d->ino;
}

// A closed regular file `name` in `parent`, as Dir.
uint64_t File(FileSystem& fs, uint64_t parent, const std::string& name, uint32_t mode,
              uint32_t uid = 0, uint32_t gid = kGroup) {
  auto c = fs.Create(parent, name, 0644, O_WRONLY, Caller{});
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  if (!c.ok()) return 0;
  fs.Release(c->fh);
  SetAttrRequest q;
  q.mode = mode;
  q.uid = uid;
  q.gid = gid;
  EXPECT_TRUE(fs.SetAttr(c->attr.ino, q).ok());
  return c->attr.ino;
}

TEST_F(FsTest, CreateMkDirAndTmpfileNeedWriteAndSearchOnTheParent) {
  const uint64_t d = Dir(*fs_, kRootIno, "d", 0755);
  LazyCaller outsider(false), member(true);
  const Caller& who = outsider.caller;
  bool everyone = false;
  EXPECT_EQ(fs_->Create(d, "f", 0644, O_WRONLY, who, &who, &everyone).status().code(), EACCES);
  EXPECT_TRUE(everyone);
  EXPECT_EQ(fs_->MkDir(d, "sub", 0755, who, &who).status().code(), EACCES);
  EXPECT_EQ(fs_->CreateUnnamed(d, 0644, O_WRONLY | O_TMPFILE, who, &who).status().code(),
            EACCES);
  EXPECT_EQ(fs_->Lookup(d, "f").status().code(), ENOENT) << "nothing made";
  // Permission comes before EEXIST, the parent's type before permission.
  const uint64_t f = File(*fs_, d, "f", 0644);
  EXPECT_EQ(fs_->MkDir(d, "f", 0755, who, &who).status().code(), EACCES);
  EXPECT_EQ(fs_->Create(f, "x", 0644, O_WRONLY, who, &who).status().code(), ENOTDIR);

  // The group may write: a member may, and the directory is not searched
  // by everyone.
  SetAttrRequest q;
  q.mode = 0770;
  ASSERT_TRUE(fs_->SetAttr(d, q).ok());
  const Caller& in = member.caller;
  auto c = fs_->Create(d, "g", 0644, O_WRONLY, in, &in, &everyone);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  fs_->Release(c->fh);
  EXPECT_FALSE(everyone);
  EXPECT_EQ(c->attr.uid, 1001u);
  auto m = fs_->MkDir(d, "sub", 0755, in, &in);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // No caller to check: no check.
  auto n = fs_->MkDir(d, "free", 0755, who);
  EXPECT_TRUE(n.ok()) << n.status().ToString();
}

TEST_F(FsTest, LinkChecksTheNewDirectoryBeforeTheInode) {
  const uint64_t d = Dir(*fs_, kRootIno, "d", 0755);
  LazyCaller outsider(false);
  const Caller& who = outsider.caller;
  auto c = fs_->CreateUnnamed(kRootIno, 0644, O_WRONLY | O_TMPFILE, Caller{});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(fs_->Link(c->attr.ino, d, "k", &who).status().code(), EACCES);
  // A named file may not be linked (EPERM), but the directory says first.
  const uint64_t named = File(*fs_, kRootIno, "named", 0644);
  EXPECT_EQ(fs_->Link(named, d, "k2", &who).status().code(), EACCES);
  EXPECT_EQ(fs_->Link(named, d, "k2").status().code(), EPERM);
  bool everyone = false;
  auto l = fs_->Link(c->attr.ino, d, "k", nullptr, &everyone);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_TRUE(everyone);
  fs_->Forget(c->attr.ino, 1);
  fs_->Release(c->fh);
}

TEST_F(FsTest, UnlinkAndRmDirSayENOENTBeforeEACCESThenTheStickyRule) {
  const uint64_t d = Dir(*fs_, kRootIno, "d", 0755);
  File(*fs_, d, "f", 0644);
  Dir(*fs_, d, "sub", 0755);
  LazyCaller outsider(false);
  const Caller& who = outsider.caller;
  EXPECT_EQ(fs_->Unlink(d, "missing", &who).code(), ENOENT);
  EXPECT_EQ(fs_->Unlink(d, "f", &who).code(), EACCES);
  EXPECT_EQ(fs_->RmDir(d, "missing", &who).code(), ENOENT);
  EXPECT_EQ(fs_->RmDir(d, "sub", &who).code(), EACCES);
  // Search permission comes first, as the kernel's walk checks it.
  const uint64_t closed = Dir(*fs_, kRootIno, "closed", 0750);
  EXPECT_EQ(fs_->Unlink(closed, "missing", &who).code(), EACCES);
  EXPECT_EQ(fs_->Unlink(closed, "missing").code(), ENOENT) << "no caller: no check";

  // Sticky: only the owner of the entry or of the directory, or root.
  const uint64_t tmp = Dir(*fs_, kRootIno, "tmp", 01777);
  File(*fs_, tmp, "roots", 0666);
  File(*fs_, tmp, "mine", 0600, 1001, 1001);
  Dir(*fs_, tmp, "rootdir", 0777);
  EXPECT_EQ(fs_->Unlink(tmp, "roots", &who).code(), EPERM);
  EXPECT_EQ(fs_->RmDir(tmp, "rootdir", &who).code(), EPERM);
  EXPECT_EQ(fs_->Unlink(tmp, "missing", &who).code(), ENOENT);
  // The call's own errors come after the permission's.
  EXPECT_EQ(fs_->Unlink(tmp, "rootdir", &who).code(), EPERM);
  EXPECT_TRUE(fs_->Unlink(tmp, "mine", &who).ok());
  const Caller root;
  EXPECT_TRUE(fs_->Unlink(tmp, "roots", &root).ok());
  EXPECT_TRUE(fs_->Unlink(d, "f").ok());
}

TEST_F(FsTest, RenameChecksSourceThenTargetThenAMovedDirectory) {
  const uint64_t ro = Dir(*fs_, kRootIno, "ro", 0755);
  const uint64_t rw = Dir(*fs_, kRootIno, "rw", 0777);
  const uint64_t tmp = Dir(*fs_, kRootIno, "tmp", 01777);
  const uint64_t closed = Dir(*fs_, kRootIno, "closed", 0770);
  File(*fs_, ro, "f", 0644);
  File(*fs_, rw, "g", 0644, 1001, 1001);
  File(*fs_, tmp, "roots", 0644);
  Dir(*fs_, rw, "dir", 0755);  // root's: the outsider may not write it
  LazyCaller outsider(false);
  const Caller& who = outsider.caller;
  // The source must exist before anything else is said.
  EXPECT_EQ(fs_->Rename(rw, "missing", ro, "x", 0, &who).code(), ENOENT);
  // Search on both parents comes before that.
  EXPECT_EQ(fs_->Rename(rw, "missing", closed, "x", 0, &who).code(), EACCES);
  EXPECT_EQ(fs_->Rename(ro, "f", rw, "x", 0, &who).code(), EACCES) << "source's directory";
  EXPECT_EQ(fs_->Rename(rw, "g", ro, "x", 0, &who).code(), EACCES) << "target's directory";
  EXPECT_EQ(fs_->Rename(rw, "g", tmp, "roots", 0, &who).code(), EPERM) << "sticky target";
  EXPECT_EQ(fs_->Rename(rw, "dir", tmp, "d", 0, &who).code(), EACCES) << "its .. changes";
  // Permission comes before the call's own errors.
  EXPECT_EQ(fs_->Rename(rw, "g", ro, "f", RENAME_EXCHANGE, &who).code(), EACCES);
  EXPECT_EQ(fs_->Rename(rw, "g", rw, "g2", RENAME_EXCHANGE, &who).code(), EINVAL);
  EXPECT_TRUE(fs_->Lookup(rw, "g").ok()) << "nothing moved";

  // Within one directory a directory keeps its "..": no write on it needed.
  EXPECT_TRUE(fs_->Rename(rw, "dir", rw, "dir2", 0, &who).ok());
  // Out of a directory everyone searches into one not everyone does: the
  // kernel's cached names must go.
  bool drop = false;
  ASSERT_TRUE(fs_->Rename(rw, "g", tmp, "g", 0, &who, &drop).ok());
  EXPECT_FALSE(drop);
  SetAttrRequest q;
  q.mode = 0777;
  ASSERT_TRUE(fs_->SetAttr(closed, q).ok());
  q.mode = 0770;
  ASSERT_TRUE(fs_->Rename(tmp, "g", closed, "g", 0, &who, &drop).ok());
  EXPECT_FALSE(drop) << "0777: everyone searches";
  ASSERT_TRUE(fs_->SetAttr(closed, q).ok());
  const Caller root;
  ASSERT_TRUE(fs_->Rename(ro, "f", closed, "f", 0, &root, &drop).ok());
  EXPECT_TRUE(drop);
  EXPECT_TRUE(fs_->Rename(closed, "f", ro, "f", 0).ok()) << "no caller: no check";
}

TEST_F(FsTest, SetAttrChecksOwnershipAndWritePermissionBeforeChanging) {
  const uint64_t f = File(*fs_, kRootIno, "f", 0644, 1001, 1001);
  const uint64_t g = File(*fs_, kRootIno, "g", 0666);  // root's, others may write
  LazyCaller owner(false), member(true), other(false);
  other.caller.uid = 1002;
  const Caller& me = owner.caller;
  const Caller& them = other.caller;
  SetAttrRequest chown;
  chown.uid = 1002;
  EXPECT_EQ(fs_->SetAttr(f, chown, &me).status().code(), EPERM) << "only root gives away";
  chown.uid = 1001;
  EXPECT_TRUE(fs_->SetAttr(f, chown, &me).ok()) << "to itself";
  SetAttrRequest chgrp;
  chgrp.gid = kGroup;
  EXPECT_EQ(fs_->SetAttr(f, chgrp, &me).status().code(), EPERM) << "not its group";
  EXPECT_TRUE(fs_->SetAttr(f, chgrp, &member.caller).ok());
  SetAttrRequest chmod;
  chmod.mode = 0600;
  EXPECT_EQ(fs_->SetAttr(f, chmod, &them).status().code(), EPERM);
  // The owner outside the file's group may not set S_ISGID: it is dropped.
  chmod.mode = 02755;
  auto a = fs_->SetAttr(f, chmod, &me);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->mode & 07777, 0755u);
  a = fs_->SetAttr(f, chmod, &member.caller);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->mode & 07777, 02755u);

  // Times: explicit ones by the owner only; "now" also by a writer.
  SetAttrRequest times;
  times.mtime_ns = 1;
  EXPECT_EQ(fs_->SetAttr(g, times, &me).status().code(), EPERM);
  SetAttrRequest touch;
  touch.atime_now = touch.mtime_now = true;
  EXPECT_TRUE(fs_->SetAttr(g, touch, &me).ok());
  EXPECT_EQ(fs_->SetAttr(f, touch, &them).status().code(), EACCES);
  // Truncate: write permission, unless through an open file.
  SetAttrRequest trunc;
  trunc.size = 0;
  EXPECT_EQ(fs_->SetAttr(f, trunc, &them).status().code(), EACCES);
  trunc.with_handle = true;
  EXPECT_TRUE(fs_->SetAttr(f, trunc, &them).ok());
  // A writer may clear setuid/setgid (the kernel's own mode change after a
  // write), and nothing more.
  chmod.mode = 06666;
  ASSERT_TRUE(fs_->SetAttr(g, chmod).ok());
  chmod.mode = 0666;
  EXPECT_TRUE(fs_->SetAttr(g, chmod, &me).ok());
  chmod.mode = 0644;
  EXPECT_EQ(fs_->SetAttr(g, chmod, &me).status().code(), EPERM);
  EXPECT_TRUE(fs_->SetAttr(g, chmod).ok()) << "no caller: no check";

  // A directory that everyone could search no longer is.
  const uint64_t d = Dir(*fs_, kRootIno, "d", 0755, 1001, 1001);
  bool narrowed = false;
  chmod.mode = 0751;
  ASSERT_TRUE(fs_->SetAttr(d, chmod, &me, &narrowed).ok());
  EXPECT_FALSE(narrowed);
  chmod.mode = 0750;
  ASSERT_TRUE(fs_->SetAttr(d, chmod, &me, &narrowed).ok());
  EXPECT_TRUE(narrowed);
}

TEST_F(FsTest, AccessChecksTheModeBitsForTheCaller) {
  const uint64_t f = File(*fs_, kRootIno, "f", 0640);
  const uint64_t d = Dir(*fs_, kRootIno, "d", 0750);
  LazyCaller outsider(false), member(true);
  EXPECT_EQ(fs_->Access(f, kMayRead, &outsider.caller).code(), EACCES);
  EXPECT_TRUE(fs_->Access(f, kMayRead, &member.caller).ok());
  EXPECT_EQ(fs_->Access(f, kMayRead | kMayWrite, &member.caller).code(), EACCES);
  EXPECT_TRUE(fs_->Access(f, 0, &outsider.caller).ok()) << "F_OK";
  bool everyone = true;
  EXPECT_TRUE(fs_->Access(d, kMayExec, &member.caller, &everyone).ok());
  EXPECT_FALSE(everyone);
  EXPECT_EQ(fs_->Access(d, kMayExec, &outsider.caller).code(), EACCES);
  EXPECT_EQ(fs_->Access(1u << 30, kMayRead, &member.caller).code(), ENOENT);
  EXPECT_TRUE(fs_->Access(f, kMayWrite, nullptr).ok()) << "no caller: no check";
}

TEST_F(FsTest, UserXattrsNeedReadOrWritePermissionAndTheStickyDirectorysOwner) {
  const uint64_t f = File(*fs_, kRootIno, "f", 0640);
  const uint64_t tmp = Dir(*fs_, kRootIno, "tmp", 01777);
  LazyCaller outsider(false), member(true);
  const Caller& who = outsider.caller;
  const Caller root;
  ASSERT_TRUE(fs_->SetXattr(f, "user.a", "1", 0, root).ok());
  EXPECT_EQ(fs_->GetXattr(f, "user.a", who, &who).status().code(), EACCES);
  auto v = fs_->GetXattr(f, "user.a", member.caller, &member.caller);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, "1");
  EXPECT_EQ(fs_->SetXattr(f, "user.a", "2", 0, member.caller, &member.caller).code(), EACCES);
  EXPECT_EQ(fs_->RemoveXattr(f, "user.a", member.caller, &member.caller).code(), EACCES);
  // Permission comes before the call's own errors (a flag it refuses).
  EXPECT_EQ(fs_->SetXattr(f, "user.a", "2", 0x40, who, &who).code(), EACCES);
  EXPECT_EQ(fs_->SetXattr(tmp, "user.a", "2", 0, who, &who).code(), EPERM) << "sticky";
  EXPECT_EQ(fs_->Prefetch(f, &who).code(), EACCES) << "the hint is a set";
  EXPECT_TRUE(fs_->Prefetch(f).ok());
  EXPECT_TRUE(fs_->SetXattr(f, "user.a", "2", 0, who).ok()) << "no caller: no check";
}

}  // namespace
}  // namespace kvfs::fs
