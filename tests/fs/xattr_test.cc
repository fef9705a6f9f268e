// Extended attributes: the rules on one inode's list (fs/xattr.h), and
// through a FileSystem: kept across remount and rename, gone with the
// inode, readable on an unlinked file until its last close.
#include "fs/xattr.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/xattr.h>

#include "common/format.h"
#include "fs/fs_fixture.h"
#include "fs/stats.h"

namespace kvfs::fs {
namespace {

using index::Xattr;

TEST(XattrRulesTest, ErrnoOfEveryRule) {
  std::vector<Xattr> l;
  EXPECT_TRUE(xattr::Set(l, "user.a", "1", 0, false).ok());
  EXPECT_EQ(xattr::Set(l, "user.a", "2", XATTR_CREATE, false).code(), EEXIST);
  EXPECT_EQ(xattr::Set(l, "user.b", "2", XATTR_REPLACE, false).code(), ENODATA);
  EXPECT_EQ(xattr::Set(l, "user.b", "2", XATTR_CREATE | XATTR_REPLACE, false).code(), EINVAL);
  EXPECT_TRUE(xattr::Set(l, "user.a", "3", XATTR_REPLACE, false).ok());
  EXPECT_EQ(*xattr::Get(l, "user.a", false), "3");
  EXPECT_EQ(xattr::Get(l, "user.b", false).status().code(), ENODATA);
  EXPECT_EQ(xattr::Set(l, "user." + std::string(251, 'n'), "", 0, false).code(), ERANGE);
  EXPECT_TRUE(xattr::Set(l, "user." + std::string(250, 'n'), "", 0, false).ok());
  EXPECT_EQ(xattr::Set(l, "", "", 0, false).code(), ERANGE);
  EXPECT_EQ(xattr::Set(l, "user.", "", 0, false).code(), EINVAL);
  EXPECT_EQ(xattr::Set(l, "user.v", std::string((64 << 10) + 1, 'v'), 0, false).code(), E2BIG);
  EXPECT_TRUE(xattr::Set(l, "user.v", std::string(64 << 10, 'v'), 0, false).ok());
  EXPECT_EQ(xattr::Set(l, "user.w", std::string(64 << 10, 'v'), 0, false).code(), ENOSPC);
  EXPECT_EQ(xattr::Set(l, "security.capability", "c", 0, true).code(), EOPNOTSUPP);
  EXPECT_EQ(xattr::Get(l, "system.posix_acl_access", true).status().code(), ENODATA);
  EXPECT_EQ(xattr::Set(l, "system.posix_acl_access", "", 0, true).code(), EOPNOTSUPP);
  EXPECT_EQ(xattr::Set(l, "os2.x", "", 0, true).code(), EOPNOTSUPP);
  EXPECT_EQ(xattr::Set(l, "user.kvfs.other", "", 0, true).code(), EINVAL);
  EXPECT_EQ(xattr::Set(l, "user.kvfs.evict", "sometimes", 0, false).code(), EINVAL);
  EXPECT_EQ(xattr::Set(l, "trusted.t", "1", 0, false).code(), EPERM);
  EXPECT_TRUE(xattr::Set(l, "trusted.t", "1", 0, true).ok());
  EXPECT_EQ(xattr::Remove(l, "user.none", false).code(), ENODATA);
  EXPECT_TRUE(xattr::Remove(l, "user.v", false).ok());
  // Names in order, trusted.* only for the privileged.
  EXPECT_EQ(xattr::List(l, false), std::string("user.a\0", 7) + "user." + std::string(250, 'n') + '\0');
  EXPECT_EQ(xattr::List(l, true).substr(0, 10), std::string("trusted.t\0", 10));
  EXPECT_TRUE(index::CheckXattrs(l).ok());
}

TEST(XattrRulesTest, ReplacingAValueCountsOnlyTheNewOneAgainstTheTotal) {
  std::vector<Xattr> l;
  ASSERT_TRUE(xattr::Set(l, "user.a", std::string(64 << 10, 'a'), 0, false).ok());
  ASSERT_TRUE(xattr::Set(l, "user.b", std::string(60 << 10, 'b'), 0, false).ok());
  EXPECT_TRUE(xattr::Set(l, "user.b", std::string(60 << 10, 'c'), 0, false).ok());
}

class XattrFsTest : public FsTest {};

TEST_F(XattrFsTest, KeptAcrossRenameAndRemountRemovedWithTheInode) {
  const Caller me{1000, 1000, 1, {}, {}};
  auto c = fs_->Create(kRootIno, "tmp", 0644, O_WRONLY, me);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(fs_->Write(c->fh, 0, std::span<const char>("data", 4)).ok());
  ASSERT_TRUE(fs_->SetXattr(c->attr.ino, "user.vllm.kv_crc32c", "1234", 0, me).ok());
  ASSERT_TRUE(fs_->Flush(c->fh).ok());
  fs_->Release(c->fh);
  ASSERT_TRUE(fs_->Rename(kRootIno, "tmp", kRootIno, "key", 0).ok());
  Remount();
  auto a = fs_->Lookup(kRootIno, "key");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*fs_->GetXattr(a->ino, "user.vllm.kv_crc32c", me), "1234");
  EXPECT_EQ(*fs_->ListXattr(a->ino, me), std::string("user.vllm.kv_crc32c\0", 20));
  EXPECT_EQ(*Load(kRootIno, "key"), "data");
  ASSERT_TRUE(fs_->Unlink(kRootIno, "key").ok());
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_EQ(vol_->index().GetInode(a->ino).status().code(), ENOENT);  // record and attributes
}

TEST_F(XattrFsTest, SecurityNamesAreAnsweredWithoutLookingAtTheInode) {
  const Caller me{0, 0, 1, {}, {}};
  // No such inode: an answer that needed it would be ENOENT.
  EXPECT_EQ(fs_->GetXattr(999999, "security.capability", me).status().code(), ENODATA);
  EXPECT_EQ(fs_->GetXattr(999999, "system.posix_acl_access", me).status().code(), ENODATA);
  EXPECT_EQ(fs_->GetXattr(999999, "user.x", me).status().code(), ENOENT);
}

TEST_F(XattrFsTest, UnlinkedButOpenFileKeepsItsAttributesUntilClose) {
  const Caller me{0, 0, 1, {}, {}};
  auto c = fs_->Create(kRootIno, "f", 0644, O_RDWR, me);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(fs_->SetXattr(c->attr.ino, "user.x", "1", 0, me).ok());
  ASSERT_TRUE(fs_->Unlink(kRootIno, "f").ok());
  EXPECT_EQ(*fs_->GetXattr(c->attr.ino, "user.x", me), "1");
  ASSERT_TRUE(fs_->SetXattr(c->attr.ino, "user.y", "2", 0, me).ok());
  EXPECT_EQ(*fs_->ListXattr(c->attr.ino, me), std::string("user.x\0user.y\0", 14));
  fs_->Release(c->fh);
  ASSERT_TRUE(fs_->Sync().ok());
  EXPECT_EQ(vol_->index().GetInode(c->attr.ino).status().code(), ENOENT);
}

}  // namespace
}  // namespace kvfs::fs
