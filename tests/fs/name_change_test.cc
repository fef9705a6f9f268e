// NameChange: each name change moves the live counts, and records for the
// index exactly what it moved (the durable counts plus the deltas equal
// the live counts), the entry ops in order, the orphan or delete of a file
// that loses its only name, and tells the observer each regular file's
// name change. A link that may not happen changes nothing.
#include "fs/name_change.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace kvfs::fs {
namespace {

constexpr int64_t kNow = 12345;

struct Events : NameObserver {
  std::vector<std::string> seen;
  void Named(uint64_t ino, uint64_t parent, std::string_view name, int64_t now_ns) override {
    seen.push_back("named " + std::to_string(ino) + " " + std::to_string(parent) + "/" +
                   std::string(name) + " @" + std::to_string(now_ns));
  }
  void Moved(uint64_t ino, uint64_t parent, std::string_view name) override {
    seen.push_back("moved " + std::to_string(ino) + " " + std::to_string(parent) + "/" +
                   std::string(name));
  }
  void Unnamed(uint64_t ino) override { seen.push_back("unnamed " + std::to_string(ino)); }
};

using Ops = std::vector<std::tuple<uint64_t, std::string, uint64_t>>;

class NameChangeTest : public ::testing::Test {
 protected:
  // An inode in the table as the index has it: durable counts = live ones.
  InodeRef Make(uint64_t ino, uint32_t mode, uint32_t nlink, uint64_t entries = 0, int opens = 0) {
    index::Inode r;
    r.ino = ino;
    r.mode = mode;
    r.nlink = nlink;
    r.size = entries;
    InodeRef i = table_.Make(r);
    i->durable_size = entries;
    table_.Insert(i, /*lookups=*/1, opens);
    return i;
  }
  InodeRef Dir(uint64_t ino, uint64_t entries = 0, uint32_t subdirs = 0) {
    return Make(ino, S_IFDIR | 0755, 2 + subdirs, entries);
  }
  InodeRef File(uint64_t ino, int opens = 0) { return Make(ino, S_IFREG | 0644, 1, 0, opens); }

  // What the committer makes of the deltas equals what the change did live.
  static void ExpectDeltasMatchLive(const Change& c) {
    std::map<InodeState*, std::pair<int64_t, int64_t>> sum;
    for (const Change::Delta& d : c.deltas) {
      sum[d.inode.get()].first += d.size;
      sum[d.inode.get()].second += d.nlink;
    }
    for (const Change::Delta& d : c.deltas) {
      InodeState& i = *d.inode;
      EXPECT_EQ(static_cast<int64_t>(i.rec.nlink),
                static_cast<int64_t>(i.durable_nlink) + sum[&i].second)
          << "inode " << i.ino;
      if (i.is_dir()) {
        EXPECT_EQ(static_cast<int64_t>(i.rec.size),
                  static_cast<int64_t>(i.durable_size) + sum[&i].first)
            << "inode " << i.ino;
      }
    }
  }
  static Ops OpsOf(const Change& c) {
    Ops out;
    for (const EntryOp& op : c.entry_ops) out.emplace_back(op.parent, op.name, op.child);
    return out;
  }
  static bool Captures(const Change& c, const InodeRef& i) {
    return std::count(c.inodes.begin(), c.inodes.end(), i) == 1;
  }

  InodeTable table_{[](uint64_t) -> Result<index::Inode> { return Status::Error(ENOENT, "none"); },
                    [](const InodeState&) {}};
  Events events_;
  NameChange change_{table_, &events_, kNow};
};

TEST_F(NameChangeTest, LinkOfANewFileCountsItInTheParentAndTellsTheObserver) {
  InodeRef p = Dir(1, /*entries=*/3);
  InodeRef f = File(10);
  change_.Link(p, "key", f);
  EXPECT_EQ(p->rec.size, 4u);
  EXPECT_EQ(p->rec.nlink, 2u);
  EXPECT_EQ(p->rec.mtime_ns, kNow);
  EXPECT_EQ(p->rec.ctime_ns, kNow);
  const Change& c = *change_.change();
  EXPECT_EQ(OpsOf(c), (Ops{{1, "key", 10}}));
  EXPECT_TRUE(Captures(c, p));
  EXPECT_TRUE(Captures(c, f));
  EXPECT_TRUE(c.deletes.empty());
  EXPECT_TRUE(c.orphan_puts.empty());
  ExpectDeltasMatchLive(c);
  EXPECT_EQ(events_.seen, (std::vector<std::string>{"named 10 1/key @12345"}));
}

TEST_F(NameChangeTest, LinkOfANewDirectoryCountsItsDotDotAndIsNotObserved) {
  InodeRef p = Dir(1);
  InodeRef d = Dir(20);
  change_.Link(p, "sub", d);
  EXPECT_EQ(p->rec.size, 1u);
  EXPECT_EQ(p->rec.nlink, 3u);
  ExpectDeltasMatchLive(*change_.change());
  EXPECT_TRUE(events_.seen.empty());
}

TEST_F(NameChangeTest, UnlinkOfAClosedFileDeletesItsRecord) {
  InodeRef p = Dir(1, 2);
  InodeRef f = File(10);
  change_.Unlink(p, "key", f);
  EXPECT_EQ(p->rec.size, 1u);
  EXPECT_EQ(f->rec.nlink, 0u);
  EXPECT_TRUE(f->deleted);
  EXPECT_FALSE(f->orphan);
  const Change& c = *change_.change();
  EXPECT_EQ(OpsOf(c), (Ops{{1, "key", 0}}));
  EXPECT_EQ(c.deletes, std::vector<InodeRef>{f});
  EXPECT_FALSE(Captures(c, f)) << "a deleted record is not put back";
  EXPECT_TRUE(c.orphan_puts.empty());
  ExpectDeltasMatchLive(c);
  EXPECT_EQ(events_.seen, (std::vector<std::string>{"unnamed 10"}));
}

TEST_F(NameChangeTest, UnlinkOfAnOpenFileLeavesAnOrphanItsReadersKeep) {
  InodeRef p = Dir(1, 1);
  InodeRef f = File(10, /*opens=*/1);
  change_.Unlink(p, "key", f);
  EXPECT_TRUE(f->orphan);
  EXPECT_FALSE(f->deleted);
  EXPECT_FALSE(f->orphan_queued) << "settled when the change is queued";
  const Change& c = *change_.change();
  EXPECT_TRUE(c.deletes.empty());
  EXPECT_EQ(c.orphan_puts, std::vector<uint64_t>{10});
  EXPECT_TRUE(Captures(c, f)) << "its record is put with nlink 0";
  ExpectDeltasMatchLive(c);
}

TEST_F(NameChangeTest, UnlinkOfAnEmptyDirectoryDropsTheParentsLink) {
  InodeRef p = Dir(1, 1, /*subdirs=*/1);
  InodeRef d = Dir(20);
  change_.Unlink(p, "sub", d);
  EXPECT_EQ(p->rec.size, 0u);
  EXPECT_EQ(p->rec.nlink, 2u);
  EXPECT_TRUE(d->deleted);
  EXPECT_EQ(change_.change()->deletes, std::vector<InodeRef>{d});
  ExpectDeltasMatchLive(*change_.change());
  EXPECT_TRUE(events_.seen.empty());
}

TEST_F(NameChangeTest, MoveOfADirectoryAcrossParentsMovesItsDotDot) {
  InodeRef from = Dir(1, 1, 1);
  InodeRef to = Dir(2);
  InodeRef d = Dir(20);
  d->rec.parent = 1;
  change_.Move(from, "a", to, "b", d, nullptr);
  EXPECT_EQ(from->rec.size, 0u);
  EXPECT_EQ(from->rec.nlink, 2u);
  EXPECT_EQ(to->rec.size, 1u);
  EXPECT_EQ(to->rec.nlink, 3u);
  EXPECT_EQ(d->rec.parent, 2u);
  EXPECT_EQ(d->rec.ctime_ns, kNow);
  EXPECT_EQ(OpsOf(*change_.change()), (Ops{{1, "a", 0}, {2, "b", 20}}));
  ExpectDeltasMatchLive(*change_.change());
}

TEST_F(NameChangeTest, MoveOverAnOpenFileKeepsTheEntryCountAndOrphansIt) {
  InodeRef p = Dir(1, 2);
  InodeRef x = File(10);
  InodeRef y = File(11, /*opens=*/1);
  change_.Move(p, "tmp", p, "key", x, y);
  EXPECT_EQ(p->rec.size, 1u);
  EXPECT_EQ(x->rec.nlink, 1u);
  EXPECT_TRUE(y->orphan);
  const Change& c = *change_.change();
  EXPECT_EQ(OpsOf(c), (Ops{{1, "tmp", 0}, {1, "key", 10}}));
  EXPECT_EQ(c.orphan_puts, std::vector<uint64_t>{11});
  EXPECT_TRUE(Captures(c, p)) << "once, however often it changed";
  ExpectDeltasMatchLive(c);
  EXPECT_EQ(events_.seen, (std::vector<std::string>{"unnamed 11", "moved 10 1/key"}));
}

TEST_F(NameChangeTest, MoveOfADirectoryOverAnEmptyOneInTheSameParent) {
  InodeRef p = Dir(1, 2, 2);
  InodeRef x = Dir(20);
  InodeRef y = Dir(21);
  change_.Move(p, "a", p, "b", x, y);
  EXPECT_EQ(p->rec.size, 1u);
  EXPECT_EQ(p->rec.nlink, 3u);
  EXPECT_TRUE(y->deleted);
  ExpectDeltasMatchLive(*change_.change());
}

TEST_F(NameChangeTest, ReplaceNamesTheNewFileAndDropsTheOld) {
  InodeRef p = Dir(1, 1);
  InodeRef old = File(10);
  InodeRef f = File(11);
  change_.Replace(p, "key", f, old);
  EXPECT_EQ(p->rec.size, 1u);
  EXPECT_TRUE(old->deleted);
  const Change& c = *change_.change();
  EXPECT_EQ(OpsOf(c), (Ops{{1, "key", 11}}));
  EXPECT_EQ(c.deletes, std::vector<InodeRef>{old});
  ExpectDeltasMatchLive(c);
  EXPECT_EQ(events_.seen, (std::vector<std::string>{"named 11 1/key @12345", "unnamed 10"}));
}

TEST_F(NameChangeTest, LinkOfAnUnnamedFileGivesItItsOneLinkAndDropsItsOrphanKey) {
  InodeRef p = Dir(1);
  InodeRef x = Make(10, S_IFREG | 0600, /*nlink=*/0, 0, /*opens=*/1);
  x->orphan = true;
  x->linkable = true;
  ASSERT_TRUE(change_.LinkUnnamed(p, "key", x).ok());
  EXPECT_EQ(x->rec.nlink, 1u);
  EXPECT_FALSE(x->orphan);
  EXPECT_FALSE(x->linkable) << "one link only";
  const Change& c = *change_.change();
  EXPECT_EQ(c.orphan_deletes, std::vector<uint64_t>{10});
  ExpectDeltasMatchLive(c);
  EXPECT_EQ(change_.LinkUnnamed(p, "again", x).code(), EPERM);
}

TEST_F(NameChangeTest, ALinkThatMayNotHappenChangesNothing) {
  InodeRef p = Dir(1);
  InodeRef closed = Make(10, S_IFREG | 0600, 0);
  closed->linkable = true;
  closed->deleted = true;  // its last handle closed
  EXPECT_EQ(change_.LinkUnnamed(p, "key", closed).code(), ENOENT);
  InodeRef excl = Make(11, S_IFREG | 0600, 0, 0, 1);
  excl->orphan = true;  // O_TMPFILE | O_EXCL: never linkable
  EXPECT_EQ(change_.LinkUnnamed(p, "key", excl).code(), EPERM);
  EXPECT_EQ(p->rec.size, 0u);
  EXPECT_EQ(p->rec.mtime_ns, 0);
  const Change& c = *change_.change();
  EXPECT_TRUE(c.entry_ops.empty());
  EXPECT_TRUE(c.deltas.empty());
  EXPECT_TRUE(c.inodes.empty());
  EXPECT_TRUE(events_.seen.empty());
}

}  // namespace
}  // namespace kvfs::fs
