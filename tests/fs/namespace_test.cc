// Namespace: a recorded change's names override the index's (resolve and
// list) until it is committed, however many queued changes set the same
// name; a failed commit leaves names as the index has them; what the index
// answers, names and misses, is cached.
#include "fs/namespace.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/format.h"
#include "util/temp_dir.h"

namespace kvfs::fs {
namespace {

using kvfs::testing::TempDir;

class NamespaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    index::VolumeRecord v;
    v.format_version = kFormatVersion;
    v.volume_uuid = Uuid::Random();
    v.index_uuid = Uuid::Random();
    v.device_count = 1;
    auto r = index::Index::Create(dir_.Join("index"), v, 0, 0);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    index_ = std::move(r).value();
    ns_ = std::make_unique<Namespace>(*index_, 1 << 20);
  }
  void Commit(const std::vector<EntryOp>& ops) {
    index::WriteBatch b = index_->NewBatch();
    for (const EntryOp& op : ops) {
      if (op.child) b.PutEntry(op.parent, op.name, op.child);
      else b.DeleteEntry(op.parent, op.name);
    }
    ASSERT_TRUE(index_->Commit(b, false).ok());
  }
  static std::unique_ptr<Change> ChangeOf(std::vector<EntryOp> ops) {
    auto c = std::make_unique<Change>();
    c->entry_ops = std::move(ops);
    return c;
  }
  Result<uint64_t> Resolve(uint64_t parent, std::string_view name) {
    NamespaceReadLock l(ns_->mu());
    return ns_->Resolve(parent, name);
  }
  std::vector<std::string> List(uint64_t dir) {
    NamespaceReadLock l(ns_->mu());
    std::vector<Namespace::Entry> out;
    EXPECT_TRUE(ns_->List(dir, &out).ok());
    std::vector<std::string> names;
    for (const auto& e : out) names.push_back(e.name + "=" + std::to_string(e.child));
    return names;
  }
  void Record(const Change& c) {
    NamespaceWriteLock l(ns_->mu());
    ns_->Record(c);
  }
  // Records the making of directory 100 ("d" in the root), as MkDir does,
  // then puts a name in it ("behind" -> 7) into the index alone, behind the
  // namespace's back: while 100 is complete it resolves as missing, which
  // shows the index was not read. Returns the making's change.
  std::unique_ptr<Change> MakeDirectoryWithANameBehind() {
    auto mk = ChangeOf({{kRootIno, "d", 100}});
    {
      NamespaceWriteLock l(ns_->mu());
      ns_->Record(*mk);
      ns_->NewDirectory(100);
    }
    Commit({{100, "behind", 7}});
    EXPECT_EQ(Resolve(100, "behind").status().code(), ENOENT);
    return mk;
  }

  TempDir dir_;
  std::unique_ptr<index::Index> index_;
  std::unique_ptr<Namespace> ns_;
};

TEST_F(NamespaceTest, PendingNamesOverrideTheIndexUntilCommitted) {
  Commit({{kRootIno, "b", 20}, {kRootIno, "c", 30}});
  auto add = ChangeOf({{kRootIno, "a", 10}, {kRootIno, "c", 0}});
  Record(*add);
  EXPECT_EQ(*Resolve(kRootIno, "a"), 10u);
  EXPECT_EQ(Resolve(kRootIno, "c").status().code(), ENOENT);
  EXPECT_EQ(List(kRootIno), (std::vector<std::string>{"a=10", "b=20"}));
  // Committed: the index has it; nothing pending is left to answer.
  Commit(add->entry_ops);
  ns_->Committed(*add, /*ok=*/true);
  EXPECT_EQ(*Resolve(kRootIno, "a"), 10u);
  EXPECT_EQ(List(kRootIno), (std::vector<std::string>{"a=10", "b=20"}));
}

TEST_F(NamespaceTest, ANameSetByTwoQueuedChangesStaysPendingUntilBothCommit) {
  auto first = ChangeOf({{kRootIno, "k", 10}});
  auto second = ChangeOf({{kRootIno, "k", 0}});
  Record(*first);
  Record(*second);
  Commit(first->entry_ops);
  ns_->Committed(*first, true);
  EXPECT_EQ(Resolve(kRootIno, "k").status().code(), ENOENT) << "the second change still decides";
  EXPECT_TRUE(List(kRootIno).empty());
}

TEST_F(NamespaceTest, AFailedCommitLeavesNamesAsTheIndexHasThem) {
  Commit({{kRootIno, "old", 20}});
  EXPECT_EQ(*Resolve(kRootIno, "old"), 20u);  // cached now
  auto c = ChangeOf({{kRootIno, "old", 0}, {kRootIno, "new", 20}});
  Record(*c);
  EXPECT_EQ(Resolve(kRootIno, "old").status().code(), ENOENT);
  ns_->Committed(*c, /*ok=*/false);
  EXPECT_EQ(*Resolve(kRootIno, "old"), 20u);
  EXPECT_EQ(Resolve(kRootIno, "new").status().code(), ENOENT);
}

TEST_F(NamespaceTest, IndexAnswersAreCachedMissesIncluded) {
  Commit({{kRootIno, "x", 7}});
  EXPECT_EQ(*Resolve(kRootIno, "x"), 7u);
  EXPECT_EQ(Resolve(kRootIno, "y").status().code(), ENOENT);
  EXPECT_EQ(ns_->cached_entries(), 2u);
}

// A directory made by this mount answers a name it never held as missing
// without the index; once the cache has lost one of its names, the index
// answers again, so no name that exists is ever missing.
TEST_F(NamespaceTest, ANewDirectoryAnswersMissingNamesUntilItsCacheLosesOne) {
  ns_ = std::make_unique<Namespace>(*index_, 64 << 10);  // 4 KiB a shard
  MakeDirectoryWithANameBehind();
  std::vector<std::string> names;
  for (int i = 0; i < 300; ++i) names.push_back(std::string(100, 'k') + std::to_string(i));
  std::vector<EntryOp> ops;
  for (size_t i = 0; i < names.size(); ++i) ops.push_back({100, names[i], 1000 + i});
  auto add = ChangeOf(ops);
  Record(*add);
  Commit(add->entry_ops);
  ns_->Committed(*add, /*ok=*/true);
  // 300 names of ~120 bytes do not fit 64 KiB: some were lost, so the
  // index answers again, and every name resolves.
  for (size_t i = 0; i < names.size(); ++i) {
    Result<uint64_t> r = Resolve(100, names[i]);
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
    EXPECT_EQ(*r, 1000 + i);
  }
  EXPECT_EQ(*Resolve(100, "behind"), 7u);
  EXPECT_EQ(Resolve(100, "never").status().code(), ENOENT);
}

TEST_F(NamespaceTest, AFailedCommitTrustsNoDirectoryToBeComplete) {
  auto mk = MakeDirectoryWithANameBehind();
  ns_->Committed(*mk, /*ok=*/false);
  EXPECT_EQ(*Resolve(100, "behind"), 7u);
}

}  // namespace
}  // namespace kvfs::fs
