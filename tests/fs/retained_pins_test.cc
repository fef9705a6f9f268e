// RetainedPins: the newest `max` pins keep their inodes in the table; the
// oldest past that and everything at Clear are released, and a released
// inode nothing else holds leaves the table.
#include "fs/retained_pins.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace kvfs::fs {
namespace {

// Inode numbers above kRootIno, which never leaves the table.
struct Table {
  std::vector<uint64_t> unloaded;
  InodeTable table{[](uint64_t ino) -> Result<index::Inode> {
                     index::Inode r;
                     r.ino = ino;
                     r.mode = S_IFREG | 0644;
                     r.nlink = 1;
                     return r;
                   },
                   [this](const InodeState& s) { unloaded.push_back(s.ino); }};
  InodePin Pinned(uint64_t ino) {
    auto p = table.GetPinned(ino);
    EXPECT_TRUE(p.ok());
    return std::move(p).value();
  }
};

TEST(RetainedPinsTest, KeepsTheNewestAndReleasesTheOldestPastMax) {
  Table t;
  RetainedPins r(2);
  r.Retain(t.Pinned(10));
  r.Retain(t.Pinned(20));
  EXPECT_TRUE(t.unloaded.empty());
  r.Retain(t.Pinned(30));
  EXPECT_EQ(t.unloaded, std::vector<uint64_t>{10}) << "the oldest goes";
  EXPECT_EQ(r.size(), 2u);
  r.Clear();
  std::sort(t.unloaded.begin(), t.unloaded.end());
  EXPECT_EQ(t.unloaded, (std::vector<uint64_t>{10, 20, 30}));
  EXPECT_EQ(r.size(), 0u);
}

TEST(RetainedPinsTest, AReleasedInodeHeldElsewhereStays) {
  Table t;
  RetainedPins r(1);
  InodePin mine = t.Pinned(10);
  r.Retain(t.Pinned(10));
  r.Retain(t.Pinned(20));  // releases the retained pin on 10
  EXPECT_TRUE(t.unloaded.empty()) << "the other pin keeps it";
  mine.Reset();
  EXPECT_EQ(t.unloaded, std::vector<uint64_t>{10});
}

}  // namespace
}  // namespace kvfs::fs
