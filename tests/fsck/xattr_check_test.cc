// fsck.kvfs and extended attributes: what the filesystem stores is clean;
// a record with attributes past kvfs's rules is reported and repaired by
// dropping only those attributes.
#include <sys/stat.h>

#include "fsck/checker.h"
#include "fsck/fsck_fixture.h"

namespace kvfs::fsck {
namespace {

TEST_F(FsckTest, AttributesWrittenByTheFilesystemAreClean) {
  Populate();
  Mount();
  fs::Caller root;
  ASSERT_TRUE(fs_->SetXattr(k2_, "user.vllm.kv_crc32c", "1234", 0, root).ok());
  ASSERT_TRUE(fs_->SetXattr(a_, "user.tag", std::string(64 << 10, 'v'), 0, root).ok());
  Unmount();
  Report r = Run(false);
  EXPECT_EQ(r.ExitCode(), kExitClean) << Lines(r);
  EXPECT_EQ(GetInode(k2_).xattrs.size(), 1u);
}

TEST_F(FsckTest, AttributesPastTheRulesAreDroppedAndTheRestKept) {
  Populate();
  index::Inode in = GetInode(k2_);
  in.xattrs = {
      {"security.selinux", "x"},                        // a namespace kvfs never stores
      {"user.big", std::string((64 << 10) + 1, 'b')},  // a value past 64 KiB
      {"user.keep", "1234"},
      {"user.kvfs.mine", "1"},                          // reserved
      {"user." + std::string(300, 'n'), "1"},           // a name past 255 bytes
  };
  PutInode(in);
  Report n = Run(false);
  auto bad = Of(n, FindingKind::kBadXattr);
  ASSERT_EQ(bad.size(), 1u) << Lines(n);
  EXPECT_EQ(bad[0]->ino, k2_);
  EXPECT_EQ(n.findings.size(), 1u) << Lines(n);
  ExpectRepaired(FindingKind::kBadXattr);
  index::Inode after = GetInode(k2_);
  ASSERT_EQ(after.xattrs.size(), 1u);
  EXPECT_EQ(after.xattrs[0].name, "user.keep");
  EXPECT_EQ(after.xattrs[0].value, "1234");
  EXPECT_EQ(after.size, in.size);  // the rest of the record is untouched
  EXPECT_EQ(after.extents, in.extents);
}

TEST_F(FsckTest, AttributesPastThePerInodeTotalAreDroppedInNameOrder) {
  Populate();
  index::Inode in = GetInode(k2_);
  // Three values of 64 KiB: the third passes the 128 KiB per-inode total.
  for (const char* n : {"user.a", "user.b", "user.c"}) {
    in.xattrs.push_back({n, std::string(60 << 10, 'v')});
  }
  PutInode(in);
  ExpectRepaired(FindingKind::kBadXattr);
  index::Inode after = GetInode(k2_);
  ASSERT_EQ(after.xattrs.size(), 2u);
  EXPECT_EQ(after.xattrs[1].name, "user.b");
}

}  // namespace
}  // namespace kvfs::fsck
