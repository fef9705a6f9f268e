// StagedInodes: Take hands out each inode added since the last Take once,
// skips inodes that left memory, and leaves the set empty.
#include "fs/staged_inodes.h"

#include <gtest/gtest.h>

namespace kvfs::fs {
namespace {

InodeRef Inode(uint64_t ino) {
  index::Inode r;
  r.ino = ino;
  r.mode = S_IFREG | 0644;
  return std::make_shared<InodeState>(r, ino);
}

TEST(StagedInodesTest, TakeGivesEachInodeOnceAndEmptiesTheSet) {
  StagedInodes s;
  InodeRef a = Inode(1), b = Inode(2);
  s.Add(a);
  s.Add(b);
  s.Add(a);  // a second chunk of the same file
  std::vector<InodeRef> taken = s.Take();
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_TRUE((taken[0] == a && taken[1] == b) || (taken[0] == b && taken[1] == a));
  EXPECT_TRUE(s.Take().empty());
  s.Add(b);  // staged again
  EXPECT_EQ(s.Take(), std::vector<InodeRef>{b});
}

TEST(StagedInodesTest, AnInodeThatLeftMemoryIsSkipped) {
  StagedInodes s;
  InodeRef kept = Inode(1);
  {
    InodeRef gone = Inode(2);
    s.Add(gone);
  }
  s.Add(kept);
  EXPECT_EQ(s.Take(), std::vector<InodeRef>{kept});
}

}  // namespace
}  // namespace kvfs::fs
