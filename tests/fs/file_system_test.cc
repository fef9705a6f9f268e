#include "fs/file_system.h"

#include <fcntl.h>
#include <linux/fs.h>

#include <chrono>
#include <set>
#include <thread>

#include "common/format.h"
#include "fs/fs_fixture.h"
#include "fs/inode_state.h"
#include "fs/stats.h"

namespace kvfs::fs {
namespace {

TEST_F(FsTest, ConnectorStoreThenLoadIsByteExactAtChunkSizes) {
  for (size_t size : {size_t{256} << 10, size_t{4} << 20, size_t{24} << 20, size_t{5000}}) {
    std::string data = Pattern(size, static_cast<uint32_t>(size));
    std::string name = "key-" + std::to_string(size);
    Store(kRootIno, name + ".tmp", data);
    ASSERT_TRUE(fs_->Rename(kRootIno, name + ".tmp", kRootIno, name, 0).ok());
    EXPECT_EQ(fs_->Lookup(kRootIno, name + ".tmp").status().code(), ENOENT);
    auto got = Load(kRootIno, name);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(got->size(), size);
    EXPECT_TRUE(*got == data) << "size " << size;
  }
}

TEST_F(FsTest, EverythingSurvivesRemount) {
  std::string a = Pattern(3 << 20, 1), b = Pattern(123457, 2);
  auto d = fs_->MkDir(kRootIno, "ab", 0750, Caller{1000, 1000, 0, {}, {}});
  ASSERT_TRUE(d.ok());
  Store(d->ino, "a", a);
  uint64_t bino = Store(kRootIno, "b", b);
  SetAttrRequest req;
  req.mode = 0600;
  req.mtime_ns = 1234567890123;
  ASSERT_TRUE(fs_->SetAttr(bino, req).ok());
  Attr before = *fs_->GetAttr(bino);
  Remount();
  auto dir = fs_->Lookup(kRootIno, "ab");
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->uid, 1000u);
  EXPECT_EQ(dir->mode, S_IFDIR | 0750u);
  EXPECT_EQ(*Load(dir->ino, "a"), a);
  EXPECT_EQ(*Load(kRootIno, "b"), b);
  Attr after = *fs_->GetAttr(bino);
  EXPECT_EQ(after.mode, before.mode);
  EXPECT_EQ(after.size, before.size);
  EXPECT_EQ(after.mtime_ns, 1234567890123);
}

TEST_F(FsTest, UnlinkedWhileOpenStaysReadableUntilLastRelease) {
  std::string data = Pattern(8 << 20, 3);
  Store(kRootIno, "f", data);
  uint64_t free_before_store = fs_->StatFs().free_blocks;
  auto a = fs_->Lookup(kRootIno, "f");
  ASSERT_TRUE(a.ok());
  auto fh = fs_->Open(a->ino, O_RDWR);
  ASSERT_TRUE(fh.ok());
  ASSERT_TRUE(fs_->Unlink(kRootIno, "f").ok());
  EXPECT_EQ(fs_->Lookup(kRootIno, "f").status().code(), ENOENT);
  EXPECT_EQ(*ReadFh(*fh, 0, data.size()), data);
  // Still writable.
  std::string tail = Pattern(4096, 9);
  ASSERT_TRUE(fs_->Write(*fh, data.size(), tail).ok());
  EXPECT_EQ(*ReadFh(*fh, data.size(), 4096), tail);
  fs_->Release(*fh);
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_GE(fs_->StatFs().free_blocks, free_before_store + (8 << 20) / 4096);
}

TEST_F(FsTest, RenameOverOpenFileKeepsOldContentForItsHandle) {
  std::string old_data = Pattern(1 << 20, 4), new_data = Pattern(2 << 20, 5);
  Store(kRootIno, "final", old_data);
  auto a = fs_->Lookup(kRootIno, "final");
  auto fh = fs_->Open(a->ino, O_RDONLY);
  ASSERT_TRUE(fh.ok());
  Store(kRootIno, "tmp", new_data);
  ASSERT_TRUE(fs_->Rename(kRootIno, "tmp", kRootIno, "final", 0).ok());
  EXPECT_EQ(*Load(kRootIno, "final"), new_data);
  EXPECT_EQ(*ReadFh(*fh, 0, old_data.size()), old_data);
  fs_->Release(*fh);
  Remount();
  EXPECT_EQ(*Load(kRootIno, "final"), new_data);
  EXPECT_EQ(vol_->reclaimed_orphans(), 0u);
}

TEST_F(FsTest, NamespaceErrorsHaveTheRightErrno) {
  std::string n255(255, 'n'), n256(256, 'n');
  Store(kRootIno, n255, "x");
  EXPECT_EQ(*Load(kRootIno, n255), "x");
  EXPECT_EQ(fs_->Create(kRootIno, n256, 0644, O_WRONLY, Caller{}).status().code(), ENAMETOOLONG);
  EXPECT_EQ(fs_->Lookup(kRootIno, n256).status().code(), ENAMETOOLONG);
  EXPECT_EQ(fs_->Create(kRootIno, n255, 0644, O_WRONLY, Caller{}).status().code(), EEXIST);
  auto d = fs_->MkDir(kRootIno, "d", 0755, Caller{});
  ASSERT_TRUE(d.ok());
  Store(d->ino, "inside", "y");
  EXPECT_EQ(fs_->RmDir(kRootIno, "d").code(), ENOTEMPTY);
  EXPECT_EQ(fs_->Unlink(kRootIno, "d").code(), EISDIR);
  EXPECT_EQ(fs_->RmDir(kRootIno, n255).code(), ENOTDIR);
  EXPECT_EQ(fs_->Open(d->ino, O_RDONLY).status().code(), EISDIR);
  EXPECT_EQ(fs_->Unlink(kRootIno, "missing").code(), ENOENT);
  EXPECT_EQ(fs_->Rename(kRootIno, n255, d->ino, "inside", RENAME_NOREPLACE).code(), EEXIST);
  auto sub = fs_->MkDir(d->ino, "sub", 0755, Caller{});
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ(fs_->Rename(kRootIno, "d", sub->ino, "loop", 0).code(), EINVAL);
  EXPECT_EQ(fs_->Rename(kRootIno, n255, kRootIno, "x", RENAME_EXCHANGE).code(), EINVAL);
  EXPECT_EQ(fs_->Create(kRootIno, "dev", S_IFCHR | 0644, 0, Caller{}).status().code(), EPERM);
  ASSERT_TRUE(fs_->Unlink(d->ino, "inside").ok());
  ASSERT_TRUE(fs_->RmDir(d->ino, "sub").ok());
  ASSERT_TRUE(fs_->RmDir(kRootIno, "d").ok());
  EXPECT_EQ(fs_->Lookup(kRootIno, "d").status().code(), ENOENT);
}

TEST_F(FsTest, TruncateShrinkThenGrowReadsZeros) {
  std::string data = Pattern(3 << 20, 6);
  uint64_t ino = Store(kRootIno, "t", data);
  SetAttrRequest shrink;
  shrink.size = 1500000;
  ASSERT_TRUE(fs_->SetAttr(ino, shrink).ok());
  SetAttrRequest grow;
  grow.size = 3 << 20;
  ASSERT_TRUE(fs_->SetAttr(ino, grow).ok());
  std::string expect = data.substr(0, 1500000) + std::string((3 << 20) - 1500000, '\0');
  EXPECT_EQ(*Load(kRootIno, "t"), expect);
  Remount();
  EXPECT_EQ(*Load(kRootIno, "t"), expect);
}

// Staging buffers are reused without being cleared first. A pool of 8
// buffers, all filled with non-zero bytes before the test writes sparsely.
class SmallPoolTest : public FsTest {
  volume::VolumeOptions VolumeOpts() override {
    volume::VolumeOptions o = FsTest::VolumeOpts();
    o.engine.staging_pool_bytes = 8 << 20;
    return o;
  }
};

TEST_F(SmallPoolTest, GapsAndGrownTailsOfReusedStagingBuffersReadAsZeros) {
  // No old byte may show through, from staging or from the device.
  Store(kRootIno, "junk", std::string(16 << 20, '\xAB'));
  auto c = fs_->Create(kRootIno, "sparse", 0644, O_RDWR, Caller{});
  ASSERT_TRUE(c.ok());
  std::string model(900000, '\0');
  std::string a = Pattern(4096, 1), b = Pattern(5000, 2);
  ASSERT_TRUE(fs_->Write(c->fh, 0, a).ok());
  ASSERT_TRUE(fs_->Write(c->fh, 524288, b).ok());  // a gap inside the staged chunk
  model.replace(0, a.size(), a);
  model.replace(524288, b.size(), b);
  SetAttrRequest grow;
  grow.size = model.size();  // a tail past the written bytes
  ASSERT_TRUE(fs_->SetAttr(c->attr.ino, grow).ok());
  EXPECT_EQ(*ReadFh(c->fh, 0, model.size()), model);  // from staging
  ASSERT_TRUE(FsyncFh(c->fh).ok());
  EXPECT_EQ(*ReadFh(c->fh, 0, model.size()), model);  // written out
  SetAttrRequest shrink;
  shrink.size = 4000;  // the rest of the staged chunk is garbage again
  ASSERT_TRUE(fs_->SetAttr(c->attr.ino, shrink).ok());
  grow.size = 700000;
  ASSERT_TRUE(fs_->SetAttr(c->attr.ino, grow).ok());
  model = model.substr(0, 4000) + std::string(700000 - 4000, '\0');
  EXPECT_EQ(*ReadFh(c->fh, 0, model.size()), model);
  fs_->Release(c->fh);
  Remount();
  EXPECT_EQ(*Load(kRootIno, "sparse"), model);
}

TEST_F(FsTest, PartialOverwritesAndHolesReadBackExactly) {
  // Dynamo-style: a preallocated slab written at offsets.
  auto c = fs_->Create(kRootIno, "slab", 0644, O_RDWR, Caller{});
  ASSERT_TRUE(c.ok());
  const uint64_t slab = 16 << 20;
  ASSERT_TRUE(fs_->Fallocate(c->fh, 0, 0, slab).ok());
  std::string model(slab, '\0');
  std::mt19937 rng(7);
  for (int k = 0; k < 60; ++k) {
    uint64_t off = rng() % (slab - 300000);
    size_t len = 1 + rng() % 300000;
    std::string d = Pattern(len, static_cast<uint32_t>(k));
    ASSERT_TRUE(fs_->Write(c->fh, off, d).ok());
    model.replace(off, len, d);
    if (k % 10 == 9) {
      ASSERT_TRUE(FsyncFh(c->fh).ok());
    }
  }
  EXPECT_EQ(*ReadFh(c->fh, 0, slab), model);
  EXPECT_EQ(*ReadFh(c->fh, 12345, 777777), model.substr(12345, 777777));
  fs_->Release(c->fh);
  Remount();
  EXPECT_EQ(*Load(kRootIno, "slab"), model);
}

TEST_F(FsTest, FullVolumeGivesEnospcAndUnlinkMakesRoomAtOnce) {
  std::string big = Pattern(100 << 20, 8);
  Store(kRootIno, "a", big);
  auto c = fs_->Create(kRootIno, "b", 0644, O_WRONLY, Caller{});
  ASSERT_TRUE(c.ok());
  auto w = fs_->Write(c->fh, 0, std::string(200 << 20, 'b'));
  if (w.ok()) {
    EXPECT_LT(*w, size_t{200} << 20);  // a short write at the end of space
  } else {
    EXPECT_EQ(w.status().code(), ENOSPC);
  }
  auto w2 = fs_->Write(c->fh, 200 << 20, std::string(1 << 20, 'c'));
  EXPECT_EQ(w2.status().code(), ENOSPC);
  ASSERT_TRUE(fs_->Unlink(kRootIno, "a").ok());
  auto w3 = fs_->Write(c->fh, 200 << 20, std::string(1 << 20, 'c'));
  EXPECT_TRUE(w3.ok()) << w3.status().ToString();
  fs_->Release(c->fh);
  ASSERT_TRUE(fs_->Unlink(kRootIno, "b").ok());
  ASSERT_TRUE(fs_->FlushAll().ok());
  EXPECT_EQ(fs_->StatFs().free_blocks, fs_->StatFs().total_blocks);
}

TEST_F(FsTest, TruncateThatCannotRestageItsLastChunkFailsAndChangesNothing) {
  // Shrinking into the middle of a chunk rewrites that chunk's head to new
  // space (data is never overwritten in place). On a full volume that
  // fails: the truncate must fail too, not drop the head it should keep.
  const std::string a = Pattern(3 << 20, 3);
  const uint64_t ino = Store(kRootIno, "a", a);
  ASSERT_TRUE(fs_->FlushAll().ok());
  ASSERT_NO_FATAL_FAILURE(FillVolume("fill"));
  SetAttrRequest cut;
  cut.size = (3 << 20) / 2;  // 1.5 MiB: inside the second chunk
  auto r = fs_->SetAttr(ino, cut);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ENOSPC);
  EXPECT_EQ(*Load(kRootIno, "a"), a);
  Remount();
  EXPECT_EQ(*Load(kRootIno, "a"), a);
  // With room again it works and keeps exactly the head.
  ASSERT_TRUE(fs_->Unlink(kRootIno, "fill").ok());
  ASSERT_TRUE(fs_->FlushAll().ok());
  ASSERT_TRUE(fs_->SetAttr(ino, cut).ok());
  EXPECT_EQ(*Load(kRootIno, "a"), a.substr(0, *cut.size));
  Remount();
  EXPECT_EQ(*Load(kRootIno, "a"), a.substr(0, *cut.size));
}

TEST_F(FsTest, TruncateByPathThenUnlinkFreesTheRestagedChunksSpace) {
  // A truncate without an open handle writes the head of the chunk it cuts
  // to new space; that space, and the replaced chunks', must come back when
  // the file goes, as a written one's does.
  auto c = fs_->Create(kRootIno, "a", 0644, O_WRONLY, Caller{});
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(fs_->Write(c->fh, 0, Pattern(3 << 20, 4)).ok());
  ASSERT_TRUE(fs_->Flush(c->fh).ok());
  fs_->Release(c->fh);
  ASSERT_TRUE(fs_->FlushAll().ok());
  SetAttrRequest cut;
  cut.size = (3 << 20) / 2;
  ASSERT_TRUE(fs_->SetAttr(c->attr.ino, cut).ok());
  EXPECT_EQ(*Load(kRootIno, "a"), Pattern(3 << 20, 4).substr(0, *cut.size));
  ASSERT_TRUE(fs_->Unlink(kRootIno, "a").ok());
  fs_->Forget(c->attr.ino, 1);  // the kernel's reference from the create
  ASSERT_TRUE(fs_->FlushAll().ok());
  // Freed once the delete is committed and the last device read of the file
  // ended: the open's prefetch loads the (truncated, written) file into its
  // memory in the background, and may still be reading.
  for (int tries = 0; fs_->StatFs().free_blocks != fs_->StatFs().total_blocks && tries < 5000;
       ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(fs_->StatFs().free_blocks, fs_->StatFs().total_blocks);
}

TEST_F(FsTest, ReaddirListsEveryEntryOnceIncludingUncommitted) {
  std::set<std::string> names;
  for (int k = 0; k < 3000; ++k) {
    std::string n = "f" + std::to_string(k);
    auto c = fs_->Create(kRootIno, n, 0644, O_WRONLY, Caller{});
    ASSERT_TRUE(c.ok());
    fs_->Release(c->fh);
    names.insert(n);
    if (k == 1500) {
      ASSERT_TRUE(fs_->FlushAll().ok());  // half committed, half pending
    }
  }
  ASSERT_TRUE(fs_->Unlink(kRootIno, "f7").ok());
  names.erase("f7");
  auto dh = fs_->OpenDir(kRootIno);
  ASSERT_TRUE(dh.ok());
  std::multiset<std::string> seen;
  uint64_t off = 0;
  for (;;) {
    int n = 0;
    ASSERT_TRUE(fs_->ReadDir(*dh, off, [&](std::string_view name, uint64_t, uint32_t, uint64_t next) {
      seen.insert(std::string(name));
      off = next;
      return ++n < 100;  // resume in pages, like the kernel
    }).ok());
    if (n == 0) break;
  }
  fs_->ReleaseDir(*dh);
  seen.erase(".");
  seen.erase("..");
  EXPECT_EQ(seen.size(), names.size());
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()), names);
}

TEST_F(FsTest, ConcurrentWritersOfDifferentFiles) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([this, t] {
      for (int k = 0; k < 6; ++k) {
        std::string n = "t" + std::to_string(t) + "-" + std::to_string(k);
        Store(kRootIno, n + ".tmp", Pattern((1 << 20) + t * 4096 + k, t * 100 + k));
        EXPECT_TRUE(fs_->Rename(kRootIno, n + ".tmp", kRootIno, n, 0).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  Remount();
  for (int t = 0; t < 8; ++t) {
    for (int k = 0; k < 6; ++k) {
      std::string n = "t" + std::to_string(t) + "-" + std::to_string(k);
      auto got = Load(kRootIno, n);
      ASSERT_TRUE(got.ok()) << n;
      EXPECT_EQ(*got, Pattern((1 << 20) + t * 4096 + k, t * 100 + k)) << n;
    }
  }
}

TEST_F(FsTest, OpenTruncOverStaleLongerFile) {
  Store(kRootIno, "tmp", Pattern(5 << 20, 1));
  auto a = fs_->Lookup(kRootIno, "tmp");
  // O_DIRECT-style store without O_TRUNC over a longer stale file, then
  // ftruncate to the new length (what LMCache does).
  auto fh = fs_->Open(a->ino, O_WRONLY);
  std::string fresh = Pattern(2 << 20, 2);
  ASSERT_TRUE(fs_->Write(*fh, 0, fresh).ok());
  SetAttrRequest t;
  t.size = fresh.size();
  ASSERT_TRUE(fs_->SetAttr(a->ino, t).ok());
  fs_->Release(*fh);
  EXPECT_EQ(*Load(kRootIno, "tmp"), fresh);
  auto fh2 = fs_->Open(a->ino, O_WRONLY | O_TRUNC);
  ASSERT_TRUE(fh2.ok());
  EXPECT_EQ(fs_->GetAttr(a->ino)->size, 0u);
  fs_->Release(*fh2);
  Remount();
  EXPECT_EQ(fs_->Lookup(kRootIno, "tmp")->size, 0u);
}

}  // namespace
}  // namespace kvfs::fs

namespace kvfs::fs {
namespace {

// The renderings of the snapshot are tested in tests/fuse/stats_render_test.cc.
TEST_F(FsTest, StatsCountOperationsLanesAndSpace) {
  Store(kRootIno, "s", Pattern(2 << 20, 1));
  EXPECT_EQ(*Load(kRootIno, "s"), Pattern(2 << 20, 1));
  EXPECT_EQ(fs_->Lookup(kRootIno, "missing").status().code(), ENOENT);
  // The store's data leaves write-behind for the device at its own pace.
  ASSERT_TRUE(fs_->Sync().ok());
  StatsSnapshot s = fs_->Stats();
  EXPECT_GE(s.ops[static_cast<size_t>(Op::kLookup)].latency.count(), 2u);
  EXPECT_GE(s.ops[static_cast<size_t>(Op::kWrite)].bytes, 2u << 20);
  EXPECT_GE(s.ops[static_cast<size_t>(Op::kRead)].bytes, 2u << 20);
  EXPECT_TRUE(s.errors.empty());  // ENOENT of a lookup is not an error
  EXPECT_GT(s.total_bytes, s.free_bytes);
  ASSERT_FALSE(s.lanes.empty());
  uint64_t lane_bytes = 0;
  for (const LaneStats& l : s.lanes) lane_bytes += l.bytes;
  EXPECT_GE(lane_bytes, 2u << 20);  // the store's data went through a lane
  ASSERT_EQ(s.devices.size(), 1u);
  EXPECT_GE(s.devices[0].bytes, 2u << 20);
}

TEST_F(FsTest, StatsTimeTheNamespaceCallsOfAStoreAndCountTheirFailures) {
  auto count = [&](Op op) { return fs_->Stats().ops[static_cast<size_t>(op)].latency.count(); };
  auto c = fs_->Create(kRootIno, "k.tmp", 0644, O_WRONLY, Caller{});
  ASSERT_TRUE(c.ok());
  fs_->Release(c->fh);
  ASSERT_TRUE(fs_->Rename(kRootIno, "k.tmp", kRootIno, "k", 0).ok());
  ASSERT_TRUE(fs_->GetAttr(c->attr.ino).ok());
  auto o = fs_->Open(c->attr.ino, O_RDONLY);
  ASSERT_TRUE(o.ok());
  fs_->Release(*o);
  ASSERT_TRUE(fs_->Unlink(kRootIno, "k").ok());
  EXPECT_EQ(count(Op::kOpen), 1u);
  EXPECT_EQ(count(Op::kCreate), 1u);
  EXPECT_EQ(count(Op::kRename), 1u);
  EXPECT_EQ(count(Op::kGetattr), 1u);
  EXPECT_EQ(count(Op::kUnlink), 1u);
  EXPECT_TRUE(fs_->Stats().errors.empty());
  // A failed call is timed and its errno counted.
  EXPECT_EQ(fs_->Unlink(kRootIno, "k").code(), ENOENT);
  EXPECT_EQ(fs_->Rename(kRootIno, "k", kRootIno, "j", 0).code(), ENOENT);
  EXPECT_EQ(count(Op::kUnlink), 2u);
  EXPECT_EQ(fs_->Stats().errors.at(ENOENT), 2u);
}

}  // namespace
}  // namespace kvfs::fs

namespace kvfs::fs {

// fuse/'s request receiver tries a write with may_wait false and hands it
// to a worker when it is refused; a write that waited there would stall
// every other request behind a device read, and a refused write that
// changed something would be applied twice.
TEST_F(FsTest, AWriteThatMayNotWaitIsRefusedUnchangedWhereItWouldWait) {
  const std::string data = Pattern(3 * kChunkBytes + 5000, 7);
  auto c = fs_->Create(kRootIno, "f", 0644, O_WRONLY, Caller{});
  ASSERT_TRUE(c.ok());
  auto try_write = [&](uint64_t fh, uint64_t off, std::string_view bytes) {
    return fs_->Write(fh, off, bytes, nullptr, /*may_wait=*/false);
  };
  auto size_of = [&] { return fs_->GetAttr(c->attr.ino)->size; };
  EXPECT_TRUE(try_write(c->fh, 0, data).ok()) << "a new file's chunks only take copies";
  EXPECT_TRUE(try_write(c->fh, 4096, "staged").ok()) << "a staged chunk takes the write as it is";
  ASSERT_TRUE(fs_->Write(c->fh, 4096, std::string_view(data).substr(4096, 6)).ok());
  ASSERT_TRUE(fs_->Flush(c->fh, /*may_wait=*/false).ok()) << "nothing written through memory";
  EXPECT_TRUE(fs_->Release(c->fh, /*may_wait=*/false));
  ASSERT_TRUE(fs_->Sync().ok());  // on the device now

  auto fh = fs_->Open(c->attr.ino, O_WRONLY);
  ASSERT_TRUE(fh.ok());
  EXPECT_EQ(try_write(*fh, 4096, "overwritten").status().code(), kWouldWait)
      << "the chunk is read first";
  EXPECT_EQ(try_write(*fh, 3 * kChunkBytes, "tail").status().code(), kWouldWait)
      << "so is a partial tail chunk";
  EXPECT_EQ(size_of(), data.size());
  EXPECT_TRUE(try_write(*fh, kChunkBytes, std::string_view(data).substr(kChunkBytes, kChunkBytes))
                  .ok())
      << "a whole chunk replaces it";
  EXPECT_TRUE(try_write(*fh, 3 * kChunkBytes, std::string_view(data).substr(3 * kChunkBytes)).ok())
      << "all the tail's bytes";
  EXPECT_EQ(try_write(12345, 0, "x").status().code(), EBADF) << "a bad handle fails at once";

  {
    // Every staging buffer taken: a write to an unstaged chunk is refused
    // before it changes anything, also past the end.
    std::vector<device::PoolBuffer> held;
    while (device::PoolBuffer b = vol_->buffers().TryAcquire()) held.push_back(std::move(b));
    EXPECT_EQ(try_write(*fh, 8 * kChunkBytes, "past the end").status().code(), kWouldWait);
    EXPECT_EQ(size_of(), data.size());
  }
  ASSERT_TRUE(fs_->Write(*fh, 4096, std::string_view("overwritten")).ok());
  fs_->Release(*fh);
  auto r = Load(kRootIno, "f");
  ASSERT_TRUE(r.ok());
  std::string want = data;
  want.replace(4096, 11, "overwritten");
  EXPECT_EQ(*r, want);
}

}  // namespace kvfs::fs
