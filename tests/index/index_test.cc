// The index against a real RocksDB in a scratch directory: creation and the
// refusals of Open, records through the DB and across reopen, atomic
// batches, directory listing, inode numbers, scans and read-only opens.
#include "index/index.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/perf_context.h>
#include <rocksdb/perf_level.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "common/format.h"
#include "util/temp_dir.h"

namespace kvfs::index {
namespace {

using kvfs::testing::TempDir;

VolumeRecord SampleVolume() {
  VolumeRecord v;
  v.format_version = kFormatVersion;
  v.volume_uuid = Uuid::Random();
  v.index_uuid = Uuid::Random();
  v.device_count = 2;
  return v;
}

Inode FileInode(uint64_t ino, int extents) {
  Inode n;
  n.ino = ino;
  n.mode = S_IFREG | 0644;
  n.uid = 10;
  n.gid = 20;
  n.nlink = 1;
  n.size = static_cast<uint64_t>(extents) * kBlockSize;
  n.mtime_ns = 1700000000123456789;
  n.generation = ino * 3;
  for (int i = 0; i < extents; ++i) {
    n.extents.push_back(FileExtent{static_cast<uint64_t>(i) * kBlockSize,
                                   Extent{static_cast<uint32_t>(i % 2),
                                          kDataStart + (ino * 64 + i) * kBlockSize, kBlockSize},
                                   static_cast<uint32_t>(ino * 1000 + i)});
  }
  return n;
}

class IndexTest : public ::testing::Test {
 protected:
  std::string dir() const { return tmp_.Join("idx"); }

  std::unique_ptr<Index> CreateIndex() {
    auto r = Index::Create(dir(), volume_, 1000, 1001);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : nullptr;
  }
  std::unique_ptr<Index> OpenIndex(bool read_only = false) {
    Index::Options o;
    o.read_only = read_only;
    auto r = Index::Open(dir(), o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(r).value() : nullptr;
  }

  TempDir tmp_;
  VolumeRecord volume_ = SampleVolume();
};

// --- Create and Open ---------------------------------------------------------

TEST_F(IndexTest, CreateWritesVolumeRootDirectoryAndCounter) {
  const int64_t before = static_cast<int64_t>(time(nullptr)) * 1000000000;
  {
    auto idx = CreateIndex();
    ASSERT_NE(idx, nullptr);
    EXPECT_EQ(idx->volume(), volume_);
    EXPECT_EQ(idx->dir(), dir());
    EXPECT_EQ(idx->AllocateIno(), kRootIno + 1);
  }
  auto idx = OpenIndex();
  ASSERT_NE(idx, nullptr);
  EXPECT_EQ(idx->volume(), volume_);
  Result<Inode> root = idx->GetInode(kRootIno);
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  EXPECT_EQ(root->ino, kRootIno);
  EXPECT_EQ(root->mode, static_cast<uint32_t>(S_IFDIR | 0755));
  EXPECT_EQ(root->nlink, 2u);
  EXPECT_EQ(root->uid, 1000u);
  EXPECT_EQ(root->gid, 1001u);
  EXPECT_GE(root->mtime_ns, before - 1000000000);
  EXPECT_EQ(root->ctime_ns, root->mtime_ns);
  EXPECT_TRUE(root->extents.empty());
  Result<bool> has = idx->HasEntries(kRootIno);
  ASSERT_TRUE(has.ok());
  EXPECT_FALSE(*has);
  // Nothing was committed with kRootIno + 1, so it may be handed out again.
  EXPECT_EQ(idx->AllocateIno(), kRootIno + 1);
}

TEST_F(IndexTest, CreateOnAnExistingIndexFailsWithEexist) {
  ASSERT_NE(CreateIndex(), nullptr);
  auto again = Index::Create(dir(), SampleVolume(), 0, 0);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), EEXIST) << again.status().ToString();
  // The existing index is untouched.
  auto idx = OpenIndex();
  ASSERT_NE(idx, nullptr);
  EXPECT_EQ(idx->volume(), volume_);
}

TEST_F(IndexTest, CreateWhileTheIndexIsOpenFailsWithEexist) {
  auto idx = CreateIndex();
  ASSERT_NE(idx, nullptr);
  auto again = Index::Create(dir(), SampleVolume(), 0, 0);
  EXPECT_EQ(again.status().code(), EEXIST) << again.status().ToString();
}

TEST_F(IndexTest, CreateInAMissingParentFailsWithEnoent) {
  auto r = Index::Create(tmp_.Join("no/such/dir"), volume_, 0, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ENOENT) << r.status().ToString();
}

TEST_F(IndexTest, OpenOnAnEmptyDirectoryFailsWithEnoent) {
  ASSERT_EQ(mkdir(dir().c_str(), 0755), 0);
  auto r = Index::Open(dir(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ENOENT);
  EXPECT_NE(r.status().context().find("no kvfs index"), std::string::npos)
      << r.status().ToString();
  // And it wrote nothing there.
  EXPECT_TRUE(std::filesystem::is_empty(dir()));
}

TEST_F(IndexTest, OpenOnAMissingDirectoryFailsWithEnoent) {
  auto r = Index::Open(dir(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ENOENT) << r.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(dir()));
}

TEST_F(IndexTest, OpenOnAForeignRocksDbFailsWithEinval) {
  {
    rocksdb::Options o;
    o.create_if_missing = true;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir(), &db).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "some", "data").ok());
    delete db;
  }
  auto r = Index::Open(dir(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_NE(r.status().context().find("not a kvfs index"), std::string::npos)
      << r.status().ToString();
}

TEST_F(IndexTest, OpenOnRocksDbWithKvfsFamiliesButNoVolumeRecordFailsWithEinval) {
  {
    rocksdb::DBOptions o;
    o.create_if_missing = true;
    o.create_missing_column_families = true;
    std::vector<rocksdb::ColumnFamilyDescriptor> cfds = {
        {rocksdb::kDefaultColumnFamilyName, {}}, {kInodesCf, {}}, {kEntriesCf, {}},
        {kOrphansCf, {}}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir(), cfds, &handles, &db).ok());
    for (auto* h : handles) ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
    delete db;
  }
  auto r = Index::Open(dir(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL);
  EXPECT_NE(r.status().context().find("no volume record"), std::string::npos)
      << r.status().ToString();
}

TEST_F(IndexTest, OpenRefusesAFormatVersionNewerThanThisBuild) {
  volume_.format_version = kFormatVersion + 1;
  ASSERT_NE(CreateIndex(), nullptr);
  auto r = Index::Open(dir(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EINVAL) << r.status().ToString();
}

TEST_F(IndexTest, SecondReadWriteOpenInTheSameProcessFailsWithEbusy) {
  auto idx = CreateIndex();
  ASSERT_NE(idx, nullptr);
  auto r = Index::Open(dir(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EBUSY);
  EXPECT_NE(r.status().context().find("in use"), std::string::npos) << r.status().ToString();
}

TEST_F(IndexTest, ReadWriteOpenWhileAnotherProcessHoldsTheIndexFailsWithEbusy) {
  ASSERT_NE(CreateIndex(), nullptr);  // closed again
  // The child takes the same POSIX record lock on LOCK that a RocksDB
  // primary in another process holds, then waits to be told to exit. It
  // calls only async-signal-safe functions (this process has threads).
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  const std::string lock_path = dir() + "/LOCK";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int fd = open(lock_path.c_str(), O_RDWR);
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    char ok = (fd >= 0 && fcntl(fd, F_SETLK, &fl) == 0) ? 'y' : 'n';
    if (write(ready[1], &ok, 1) != 1) _exit(2);
    char c;
    if (read(done[0], &c, 1) < 0) _exit(3);
    _exit(0);
  }
  char ok = 0;
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, 'y');
  auto r = Index::Open(dir(), {});
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), EBUSY) << r.status().ToString();
  ASSERT_EQ(write(done[1], "x", 1), 1);
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
  for (int fd : {ready[0], ready[1], done[0], done[1]}) close(fd);
  // Once the other holder is gone, the index opens.
  EXPECT_NE(OpenIndex(), nullptr);
}

// --- Records through the DB --------------------------------------------------

TEST_F(IndexTest, EveryRecordTypeRoundTripsThroughTheDbAndAcrossReopen) {
  const Inode file = FileInode(10, 4);
  Inode dir_inode = FileInode(11, 0);
  dir_inode.mode = S_IFDIR | 0700;
  dir_inode.nlink = 2;
  {
    auto idx = CreateIndex();
    ASSERT_NE(idx, nullptr);
    WriteBatch b = idx->NewBatch();
    b.PutInode(file);
    b.PutInode(dir_inode);
    b.PutEntry(kRootIno, "sub", 11);
    b.PutEntry(11, "chunk-0001.bin", 10);
    b.PutOrphan(10);
    EXPECT_EQ(b.count(), 5u);
    ASSERT_TRUE(idx->Commit(b, /*sync=*/true).ok());
    EXPECT_TRUE(b.empty());  // emptied for reuse

    // Read back from the same open index (memtable).
    Result<Inode> n = idx->GetInode(10);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, file);
  }
  for (int pass = 0; pass < 2; ++pass) {
    auto idx = OpenIndex();
    ASSERT_NE(idx, nullptr);
    EXPECT_EQ(idx->volume(), volume_);
    Result<Inode> n = idx->GetInode(10);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, file);
    ASSERT_EQ(n->extents.size(), 4u);
    Result<Inode> d = idx->GetInode(11);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(*d, dir_inode);
    Result<uint64_t> c = idx->LookupEntry(11, "chunk-0001.bin");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(*c, 10u);
    EXPECT_EQ(*idx->LookupEntry(kRootIno, "sub"), 11u);
    std::vector<uint64_t> orphans;
    ASSERT_TRUE(idx->ForEachOrphan([&](uint64_t ino) {
                     orphans.push_back(ino);
                     return true;
                   }).ok());
    EXPECT_EQ(orphans, std::vector<uint64_t>{10});
    // The second pass reads from SST files instead of the WAL.
    if (pass == 0) {
      ASSERT_TRUE(idx->db()->Flush(rocksdb::FlushOptions()).ok());
    }
    for (auto* cf : {kInodesCf, kEntriesCf, kOrphansCf}) {
      ASSERT_TRUE(idx->db()->Flush(rocksdb::FlushOptions(), idx->handle(cf)).ok());
    }
  }
}

TEST_F(IndexTest, DeletesRemoveRecords) {
  auto idx = CreateIndex();
  ASSERT_NE(idx, nullptr);
  WriteBatch b = idx->NewBatch();
  b.PutInode(FileInode(5, 1));
  b.PutEntry(kRootIno, "f", 5);
  b.PutOrphan(5);
  ASSERT_TRUE(idx->Commit(b, false).ok());
  b.DeleteInode(5);
  b.DeleteEntry(kRootIno, "f");
  b.DeleteOrphan(5);
  ASSERT_TRUE(idx->Commit(b, false).ok());
  EXPECT_EQ(idx->GetInode(5).status().code(), ENOENT);
  EXPECT_EQ(idx->LookupEntry(kRootIno, "f").status().code(), ENOENT);
  EXPECT_FALSE(*idx->HasEntries(kRootIno));
  int orphans = 0;
  ASSERT_TRUE(idx->ForEachOrphan([&](uint64_t) { return ++orphans, true; }).ok());
  EXPECT_EQ(orphans, 0);
}

TEST_F(IndexTest, LookupMissesReturnEnoent) {
  auto idx = CreateIndex();
  ASSERT_NE(idx, nullptr);
  WriteBatch b = idx->NewBatch();
  b.PutEntry(kRootIno, "present", 9);
  ASSERT_TRUE(idx->Commit(b, false).ok());
  Result<uint64_t> miss = idx->LookupEntry(kRootIno, "absent");
  ASSERT_FALSE(miss.ok());
  EXPECT_EQ(miss.status().code(), ENOENT);
  EXPECT_EQ(idx->LookupEntry(kRootIno, "presen").status().code(), ENOENT);
  EXPECT_EQ(idx->LookupEntry(kRootIno, "present2").status().code(), ENOENT);
  EXPECT_EQ(idx->LookupEntry(kRootIno + 1, "present").status().code(), ENOENT);
  EXPECT_EQ(idx->GetInode(12345).status().code(), ENOENT);
  EXPECT_EQ(*idx->LookupEntry(kRootIno, "present"), 9u);
}

// Bloom filters answer misses without reading data blocks, both from SST
// files and from the memtable.
TEST_F(IndexTest, LookupMissesAreAnsweredByBloomFilters) {
  auto idx = CreateIndex();
  ASSERT_NE(idx, nullptr);
  WriteBatch b = idx->NewBatch();
  for (int i = 0; i < 2000; ++i) b.PutEntry(kRootIno, "sst-" + std::to_string(i), 100 + i);
  ASSERT_TRUE(idx->Commit(b, false).ok());
  ASSERT_TRUE(idx->db()->Flush(rocksdb::FlushOptions(), idx->handle(kEntriesCf)).ok());
  for (int i = 0; i < 2000; ++i) b.PutEntry(kRootIno, "mem-" + std::to_string(i), 5000 + i);
  ASSERT_TRUE(idx->Commit(b, false).ok());

  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kEnableCount);
  rocksdb::get_perf_context()->Reset();
  constexpr int kMisses = 1000;
  for (int i = 0; i < kMisses; ++i) {
    ASSERT_EQ(idx->LookupEntry(kRootIno, "miss-" + std::to_string(i)).status().code(), ENOENT);
  }
  const auto* pc = rocksdb::get_perf_context();
  const uint64_t sst_filtered = pc->bloom_sst_miss_count;
  const uint64_t mem_filtered = pc->bloom_memtable_miss_count;
  rocksdb::SetPerfLevel(rocksdb::PerfLevel::kDisable);
  // 10 bits/key: about 1% false positives.
  EXPECT_GE(sst_filtered, kMisses * 95 / 100);
  EXPECT_GE(mem_filtered, kMisses * 95 / 100);
  EXPECT_EQ(*idx->LookupEntry(kRootIno, "sst-7"), 107u);
  EXPECT_EQ(*idx->LookupEntry(kRootIno, "mem-7"), 5007u);
}

// --- Batches -----------------------------------------------------------------

TEST_F(IndexTest, CommittedBatchSurvivesReopenAndUncommittedBatchLeavesNothing) {
  {
    auto idx = CreateIndex();
    ASSERT_NE(idx, nullptr);
    WriteBatch a = idx->NewBatch();
    a.PutInode(FileInode(20, 2));
    a.PutEntry(kRootIno, "a", 20);
    ASSERT_TRUE(idx->Commit(a, /*sync=*/false).ok());
    WriteBatch b = idx->NewBatch();
    b.PutInode(FileInode(21, 2));
    b.PutEntry(kRootIno, "b", 21);
    b.DeleteEntry(kRootIno, "a");
    // b is dropped without Commit.
  }
  auto idx = OpenIndex();
  ASSERT_NE(idx, nullptr);
  EXPECT_EQ(*idx->GetInode(20), FileInode(20, 2));
  EXPECT_EQ(*idx->LookupEntry(kRootIno, "a"), 20u);
  EXPECT_EQ(idx->GetInode(21).status().code(), ENOENT);
  EXPECT_EQ(idx->LookupEntry(kRootIno, "b").status().code(), ENOENT);
}

TEST_F(IndexTest, BatchWithManyOpsIsFullyPresentAfterReopen) {
  constexpr int kFiles = 3000;
  {
    auto idx = CreateIndex();
    ASSERT_NE(idx, nullptr);
    WriteBatch b = idx->NewBatch();
    for (int i = 0; i < kFiles; ++i) {
      const uint64_t ino = idx->AllocateIno();
      b.PutInode(FileInode(ino, 1 + i % 3));
      b.PutEntry(kRootIno, "f" + std::to_string(i), ino);
      if (i % 10 == 0) b.PutOrphan(ino);
    }
    EXPECT_EQ(b.count(), static_cast<size_t>(kFiles * 2 + kFiles / 10));
    ASSERT_TRUE(idx->Commit(b, /*sync=*/true).ok());
  }
  auto idx = OpenIndex();
  ASSERT_NE(idx, nullptr);
  int inodes = 0, entries = 0, orphans = 0;
  ASSERT_TRUE(idx->ForEachInode([&](const Inode& n) {
                   if (n.ino != kRootIno) {
                     EXPECT_EQ(n, FileInode(n.ino, static_cast<int>(n.extents.size())));
                     ++inodes;
                   }
                   return true;
                 }).ok());
  ASSERT_TRUE(idx->ForEachEntry([&](uint64_t parent, std::string_view, uint64_t) {
                   EXPECT_EQ(parent, kRootIno);
                   return ++entries, true;
                 }).ok());
  ASSERT_TRUE(idx->ForEachOrphan([&](uint64_t) { return ++orphans, true; }).ok());
  EXPECT_EQ(inodes, kFiles);
  EXPECT_EQ(entries, kFiles);
  EXPECT_EQ(orphans, kFiles / 10);
}

TEST_F(IndexTest, BatchWithAnInvalidNameIsRejectedWhole) {
  auto idx = CreateIndex();
  ASSERT_NE(idx, nullptr);
  WriteBatch b = idx->NewBatch();
  b.PutInode(FileInode(30, 1));
  b.PutEntry(kRootIno, "ok", 30);
  b.PutEntry(kRootIno, std::string(kMaxNameLen + 1, 'x'), 30);
  Status st = idx->Commit(b, false);
  EXPECT_EQ(st.code(), EINVAL) << st.ToString();
  EXPECT_EQ(idx->GetInode(30).status().code(), ENOENT);
  EXPECT_EQ(idx->LookupEntry(kRootIno, "ok").status().code(), ENOENT);

  WriteBatch e = idx->NewBatch();
  e.PutEntry(kRootIno, "", 30);
  EXPECT_EQ(idx->Commit(e, false).code(), EINVAL);
}

TEST_F(IndexTest, LaterOpsInABatchWin) {
  auto idx = CreateIndex();
  ASSERT_NE(idx, nullptr);
  WriteBatch b = idx->NewBatch();
  b.PutEntry(kRootIno, "x", 1);
  b.DeleteEntry(kRootIno, "x");
  b.PutEntry(kRootIno, "y", 1);
  b.PutEntry(kRootIno, "y", 2);
  ASSERT_TRUE(idx->Commit(b, false).ok());
  EXPECT_EQ(idx->LookupEntry(kRootIno, "x").status().code(), ENOENT);
  EXPECT_EQ(*idx->LookupEntry(kRootIno, "y"), 2u);
}

TEST_F(IndexTest, EmptyCommitAndSyncWalSucceed) {
  auto idx = CreateIndex();
  ASSERT_NE(idx, nullptr);
  WriteBatch b = idx->NewBatch();
  EXPECT_TRUE(b.empty());
  EXPECT_TRUE(idx->Commit(b, true).ok());
  EXPECT_TRUE(idx->Commit(b, false).ok());
  b.PutOrphan(3);
  ASSERT_TRUE(idx->Commit(b, false).ok());
  EXPECT_TRUE(idx->SyncWal().ok());
}

TEST_F(IndexTest, ReopenKeepsEverythingAcrossFlushesAndCompaction) {
  std::map<std::string, uint64_t> names;
  {
    auto idx = CreateIndex();
    ASSERT_NE(idx, nullptr);
    for (int round = 0; round < 4; ++round) {
      WriteBatch b = idx->NewBatch();
      for (int i = 0; i < 500; ++i) {
        const uint64_t ino = idx->AllocateIno();
        std::string name = "r" + std::to_string(round) + "-" + std::to_string(i);
        b.PutInode(FileInode(ino, 2));
        b.PutEntry(kRootIno, name, ino);
        names[name] = ino;
      }
      ASSERT_TRUE(idx->Commit(b, false).ok());
      if (round == 1) {
        ASSERT_TRUE(idx->db()->Flush(rocksdb::FlushOptions(), idx->handle(kEntriesCf)).ok());
      }
      if (round == 2) {
        for (auto* cf : {"default", kInodesCf, kEntriesCf}) {
          ASSERT_TRUE(idx->db()
                          ->CompactRange(rocksdb::CompactRangeOptions(), idx->handle(cf),
                                         nullptr, nullptr)
                          .ok());
        }
      }
    }
  }
  auto idx = OpenIndex();
  ASSERT_NE(idx, nullptr);
  EXPECT_EQ(idx->volume(), volume_);
  for (const auto& [name, ino] : names) {
    Result<uint64_t> c = idx->LookupEntry(kRootIno, name);
    ASSERT_TRUE(c.ok()) << name;
    ASSERT_EQ(*c, ino);
    ASSERT_EQ(*idx->GetInode(ino), FileInode(ino, 2));
  }
  // Every committed inode number stays used.
  EXPECT_GT(idx->AllocateIno(), names.rbegin()->second);
}

// --- Directory listing -------------------------------------------------------

TEST_F(IndexTest, ListEntriesReturnsOnlyThatDirectoryInByteOrderAndResumes) {
  auto idx = CreateIndex();
  ASSERT_NE(idx, nullptr);
  constexpr uint64_t kDir = 1000, kPrev = kDir - 1, kNext = kDir + 1;
  std::mt19937_64 rng(7);
  std::map<std::string, uint64_t> want;  // std::string orders bytes as unsigned
  WriteBatch b = idx->NewBatch();
  while (want.size() < 10000) {
    std::string name(1 + rng() % 40, '\0');
    for (char& c : name) c = static_cast<char>(1 + rng() % 255);  // any byte but NUL
    if (!want.emplace(name, 5000 + want.size()).second) continue;
    b.PutEntry(kDir, name, want[name]);
    if (want.size() == 5000) {
      // Half in an SST file, half in the memtable.
      ASSERT_TRUE(idx->Commit(b, false).ok());
      ASSERT_TRUE(idx->db()->Flush(rocksdb::FlushOptions(), idx->handle(kEntriesCf)).ok());
    }
  }
  // Neighbours on both sides, with names that sort around kDir's names.
  for (const char* n : {"\x01", "a", "\xff\xff"}) {
    b.PutEntry(kPrev, n, 1);
    b.PutEntry(kNext, n, 2);
  }
  ASSERT_TRUE(idx->Commit(b, false).ok());

  std::vector<std::pair<std::string, uint64_t>> got;
  ASSERT_TRUE(idx->ListEntries(kDir, "", [&](std::string_view n, uint64_t c) {
                   got.emplace_back(n, c);
                   return true;
                 }).ok());
  const std::vector<std::pair<std::string, uint64_t>> want_list(want.begin(), want.end());
  EXPECT_EQ(got, want_list);

  // Paged: 97 at a time, each page resuming after the last name seen.
  std::vector<std::pair<std::string, uint64_t>> paged;
  std::string after;
  for (int pages = 0; pages < 1000; ++pages) {
    size_t n = 0;
    ASSERT_TRUE(idx->ListEntries(kDir, after, [&](std::string_view name, uint64_t c) {
                     paged.emplace_back(name, c);
                     return ++n < 97;
                   }).ok());
    if (n == 0) break;
    after = paged.back().first;
  }
  EXPECT_EQ(paged, got);

  // `after` need not be an existing name.
  auto it = want.upper_bound("m");
  std::vector<std::string> tail;
  ASSERT_TRUE(idx->ListEntries(kDir, "m", [&](std::string_view n, uint64_t) {
                   tail.emplace_back(n);
                   return true;
                 }).ok());
  ASSERT_EQ(tail.size(), static_cast<size_t>(std::distance(it, want.end())));
  EXPECT_EQ(tail.front(), it->first);
}

TEST_F(IndexTest, ListEntriesOfAnEmptyDirectoryCallsNothing) {
  auto idx = CreateIndex();
  ASSERT_NE(idx, nullptr);
  WriteBatch b = idx->NewBatch();
  b.PutEntry(4, "x", 1);
  b.PutEntry(6, "y", 1);
  b.PutEntry(~0ULL, "last", 1);
  ASSERT_TRUE(idx->Commit(b, false).ok());
  int calls = 0;
  ASSERT_TRUE(idx->ListEntries(5, "", [&](std::string_view, uint64_t) { return ++calls, true; })
                  .ok());
  EXPECT_EQ(calls, 0);
  ASSERT_TRUE(idx->ListEntries(4, "x", [&](std::string_view, uint64_t) { return ++calls, true; })
                  .ok());
  EXPECT_EQ(calls, 0);
  // The largest inode number has no successor for an upper bound.
  std::vector<std::string> last;
  ASSERT_TRUE(idx->ListEntries(~0ULL, "", [&](std::string_view n, uint64_t) {
                   last.emplace_back(n);
                   return true;
                 }).ok());
  EXPECT_EQ(last, std::vector<std::string>{"last"});
}

TEST_F(IndexTest, HasEntriesSeesOnlyThatDirectory) {
  auto idx = CreateIndex();
  ASSERT_NE(idx, nullptr);
  WriteBatch b = idx->NewBatch();
  b.PutEntry(7, "only", 70);
  b.PutEntry(9, "z", 90);
  ASSERT_TRUE(idx->Commit(b, false).ok());
  EXPECT_TRUE(*idx->HasEntries(7));
  EXPECT_FALSE(*idx->HasEntries(8));
  ASSERT_TRUE(idx->db()->Flush(rocksdb::FlushOptions(), idx->handle(kEntriesCf)).ok());
  b.DeleteEntry(7, "only");
  ASSERT_TRUE(idx->Commit(b, false).ok());
  EXPECT_FALSE(*idx->HasEntries(7));  // the tombstone hides the flushed entry
  EXPECT_TRUE(*idx->HasEntries(9));
}

// --- Inode numbers -----------------------------------------------------------

TEST_F(IndexTest, AllocateInoNeverRepeatsACommittedNumberAcrossReopen) {
  std::set<uint64_t> committed;
  uint64_t highest_handed_out = 0;
  {
    auto idx = CreateIndex();
    ASSERT_NE(idx, nullptr);
    for (int i = 0; i < 10; ++i) {
      const uint64_t ino = idx->AllocateIno();
      ASSERT_TRUE(committed.insert(ino).second);
      WriteBatch b = idx->NewBatch();
      b.PutInode(FileInode(ino, 1));
      ASSERT_TRUE(idx->Commit(b, false).ok());
      b.DeleteInode(ino);  // even once deleted, the number stays used
      if (i % 2) {
        ASSERT_TRUE(idx->Commit(b, false).ok());
      }
    }
    // A number used only as an entry target counts too.
    const uint64_t ino = idx->AllocateIno();
    committed.insert(ino);
    WriteBatch b = idx->NewBatch();
    b.PutEntry(kRootIno, "dangling", ino);
    ASSERT_TRUE(idx->Commit(b, true).ok());
    highest_handed_out = ino;
  }
  for (int reopen = 0; reopen < 3; ++reopen) {
    auto idx = OpenIndex();
    ASSERT_NE(idx, nullptr);
    const uint64_t next = idx->AllocateIno();
    EXPECT_GT(next, highest_handed_out);
    EXPECT_EQ(committed.count(next), 0u);
    WriteBatch b = idx->NewBatch();
    b.PutOrphan(next);
    ASSERT_TRUE(idx->Commit(b, false).ok());
    committed.insert(next);
    highest_handed_out = next;
    if (reopen == 1) {
      ASSERT_TRUE(idx->db()
                      ->CompactRange(rocksdb::CompactRangeOptions(), idx->handle("default"),
                                     nullptr, nullptr)
                      .ok());
    }
  }
}

TEST_F(IndexTest, ConcurrentCommitsNeverLoseTheCounter) {
  constexpr int kThreads = 4, kPerThread = 300;
  std::atomic<uint64_t> max_committed{0};
  {
    auto idx = CreateIndex();
    ASSERT_NE(idx, nullptr);
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < kPerThread; ++i) {
          const uint64_t ino = idx->AllocateIno();
          WriteBatch b = idx->NewBatch();
          b.PutInode(FileInode(ino, 0));
          if (!idx->Commit(b, false).ok()) failures++;
          uint64_t m = max_committed.load();
          while (ino > m && !max_committed.compare_exchange_weak(m, ino)) {
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(failures.load(), 0);
  }
  auto idx = OpenIndex();
  ASSERT_NE(idx, nullptr);
  EXPECT_GT(idx->AllocateIno(), max_committed.load());
  int inodes = 0;
  ASSERT_TRUE(idx->ForEachInode([&](const Inode&) { return ++inodes, true; }).ok());
  EXPECT_EQ(inodes, kThreads * kPerThread + 1);
}

// --- Scans over bad records --------------------------------------------------

TEST_F(IndexTest, ScansReportABadRecordAsEucleanNamingItsKey) {
  auto idx = CreateIndex();
  ASSERT_NE(idx, nullptr);
  WriteBatch b = idx->NewBatch();
  for (uint64_t ino = 2; ino <= 4; ++ino) b.PutInode(FileInode(ino, 1));
  b.PutEntry(kRootIno, "good", 2);
  b.PutOrphan(2);
  ASSERT_TRUE(idx->Commit(b, false).ok());
  // Plant what a bug or bit rot might leave: a truncated inode, a short
  // key, an entry value of the wrong version, an orphan with a value.
  rocksdb::DB* db = idx->db();
  rocksdb::WriteOptions wo;
  std::string inode3 = FileInode(3, 1).Encode();
  ASSERT_TRUE(db->Put(wo, idx->handle(kInodesCf), InodeKey(3), inode3.substr(0, 20)).ok());
  ASSERT_TRUE(db->Put(wo, idx->handle(kInodesCf), "abc", FileInode(9, 0).Encode()).ok());
  std::string bad_entry = EncodeEntryValue(3);
  bad_entry[0] = 7;
  ASSERT_TRUE(db->Put(wo, idx->handle(kEntriesCf), EntryKey(kRootIno, "bad"), bad_entry).ok());
  ASSERT_TRUE(db->Put(wo, idx->handle(kOrphansCf), InodeKey(5), "xx").ok());

  // Keys sort as bytes: inode 3's record comes first, "abc" after inode 4.
  Status st = idx->ForEachInode([](const Inode&) { return true; });
  EXPECT_EQ(st.code(), EUCLEAN);
  EXPECT_NE(st.context().find(KeyToString(InodeKey(3))), std::string::npos) << st.ToString();

  st = idx->ForEachEntry([](uint64_t, std::string_view, uint64_t) { return true; });
  EXPECT_EQ(st.code(), EUCLEAN);
  EXPECT_NE(st.context().find("'bad'"), std::string::npos) << st.ToString();

  st = idx->ForEachOrphan([](uint64_t) { return true; });
  EXPECT_EQ(st.code(), EUCLEAN);
  EXPECT_NE(st.context().find(KeyToString(InodeKey(5))), std::string::npos) << st.ToString();

  // Point reads of the same records fail the same way.
  EXPECT_EQ(idx->GetInode(3).status().code(), EUCLEAN);
  EXPECT_EQ(idx->LookupEntry(kRootIno, "bad").status().code(), EUCLEAN);
  EXPECT_EQ(idx->ListEntries(kRootIno, "", [](std::string_view, uint64_t) { return true; }).code(),
            EUCLEAN);

  // With on_bad, a scan (fsck) reports each bad record and goes on.
  std::vector<uint64_t> good;
  std::vector<Status> bad;
  st = idx->ForEachInode(
      [&](const Inode& n) {
        good.push_back(n.ino);
        return true;
      },
      [&](const Status& s) {
        bad.push_back(s);
        return true;
      });
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(good, (std::vector<uint64_t>{kRootIno, 2, 4}));
  ASSERT_EQ(bad.size(), 2u);
  for (const Status& s : bad) EXPECT_EQ(s.code(), EUCLEAN);
  EXPECT_NE(bad[0].context().find(KeyToString(InodeKey(3))), std::string::npos);
  EXPECT_NE(bad[1].context().find(KeyToString("abc")), std::string::npos) << bad[1].ToString();

  // on_bad returning false stops the scan.
  int calls = 0;
  st = idx->ForEachEntry([&](uint64_t, std::string_view, uint64_t) { return ++calls, true; },
                         [](const Status&) { return false; });
  EXPECT_TRUE(st.ok());
  EXPECT_EQ(calls, 0);  // "bad" sorts before "good"
}

TEST_F(IndexTest, ScansStopWhenFnReturnsFalse) {
  auto idx = CreateIndex();
  ASSERT_NE(idx, nullptr);
  WriteBatch b = idx->NewBatch();
  for (uint64_t ino = 2; ino < 12; ++ino) b.PutInode(FileInode(ino, 0));
  ASSERT_TRUE(idx->Commit(b, false).ok());
  std::vector<uint64_t> seen;
  ASSERT_TRUE(idx->ForEachInode([&](const Inode& n) {
                   seen.push_back(n.ino);
                   return seen.size() < 3;
                 }).ok());
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 2, 3}));
}

// --- Read-only ---------------------------------------------------------------

std::set<std::string> ListDir(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

TEST_F(IndexTest, ReadOnlyOpenWorksWhileOpenReadWriteAndWritesNothing) {
  auto rw = CreateIndex();
  ASSERT_NE(rw, nullptr);
  WriteBatch b = rw->NewBatch();
  b.PutInode(FileInode(40, 2));
  b.PutEntry(kRootIno, "flushed", 40);
  ASSERT_TRUE(rw->Commit(b, true).ok());
  ASSERT_TRUE(rw->db()->Flush(rocksdb::FlushOptions(), rw->handle(kEntriesCf)).ok());
  b.PutInode(FileInode(41, 1));
  b.PutEntry(kRootIno, "in-wal", 41);
  ASSERT_TRUE(rw->Commit(b, false).ok());

  const std::set<std::string> files_before = ListDir(dir());
  auto ro = OpenIndex(/*read_only=*/true);
  ASSERT_NE(ro, nullptr);
  EXPECT_EQ(ListDir(dir()), files_before);
  EXPECT_EQ(ro->volume(), volume_);
  EXPECT_EQ(*ro->LookupEntry(kRootIno, "flushed"), 40u);
  EXPECT_EQ(*ro->LookupEntry(kRootIno, "in-wal"), 41u);
  EXPECT_EQ(*ro->GetInode(41), FileInode(41, 1));

  WriteBatch rb = ro->NewBatch();
  rb.PutOrphan(41);
  EXPECT_EQ(ro->Commit(rb, false).code(), EROFS);
  EXPECT_TRUE(ro->SyncWal().ok());

  // The read-write side goes on, flushing and compacting files away under
  // the read-only view, which keeps reading what it saw.
  for (int i = 0; i < 3; ++i) {
    b.PutEntry(kRootIno, "later-" + std::to_string(i), 50 + i);
    ASSERT_TRUE(rw->Commit(b, false).ok());
    ASSERT_TRUE(rw->db()->Flush(rocksdb::FlushOptions(), rw->handle(kEntriesCf)).ok());
  }
  ASSERT_TRUE(rw->db()
                  ->CompactRange(rocksdb::CompactRangeOptions(), rw->handle(kEntriesCf), nullptr,
                                 nullptr)
                  .ok());
  EXPECT_EQ(*ro->LookupEntry(kRootIno, "flushed"), 40u);
  EXPECT_EQ(*ro->LookupEntry(kRootIno, "in-wal"), 41u);
  int n = 0;
  ASSERT_TRUE(ro->ForEachEntry([&](uint64_t, std::string_view, uint64_t) { return ++n, true; })
                  .ok());
  EXPECT_EQ(n, 2);

  // A second read-only open alongside is fine too and sees the new state.
  auto ro2 = OpenIndex(/*read_only=*/true);
  ASSERT_NE(ro2, nullptr);
  EXPECT_EQ(*ro2->LookupEntry(kRootIno, "later-2"), 52u);
  ro.reset();
  ro2.reset();
  EXPECT_EQ(*rw->LookupEntry(kRootIno, "later-1"), 51u);
}

TEST_F(IndexTest, ReadOnlyOpenRefusesTheSameWayAsReadWrite) {
  ASSERT_EQ(mkdir(dir().c_str(), 0755), 0);
  Index::Options o;
  o.read_only = true;
  EXPECT_EQ(Index::Open(dir(), o).status().code(), ENOENT);
  {
    rocksdb::Options ro;
    ro.create_if_missing = true;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(ro, dir(), &db).ok());
    delete db;
  }
  EXPECT_EQ(Index::Open(dir(), o).status().code(), EINVAL);
}

}  // namespace
}  // namespace kvfs::index
