// Permission checks made by the fs/ calls that take the caller (Lookup,
// Open, OpenDir; fs/access.h has the rules): each checks first, in the same
// call as the operation, with the semantics of the kernel's own checks.
#include <fcntl.h>
#include <sys/stat.h>

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

}  // namespace
}  // namespace kvfs::fs
