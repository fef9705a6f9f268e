// File memory (fs/file_memory.h) and the opens served from it
// (FileSystem::OpenServed): which opens are served, the rule that keeps a
// file's opens all served or all not, writers through served opens, and
// the cache's budget. The kernel's side (passthrough) is tested on real
// mounts (tests/integration/test_passthrough.py).
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <atomic>
#include <functional>
#include <future>
#include <thread>

#include "common/format.h"
#include "common/sync_point.h"
#include "fs/file_memory.h"
#include "fs/stats.h"
#include "fs_fixture.h"

namespace kvfs::fs {
namespace {

class FileMemoryTest : public FsTest {
 protected:
  FileSystemOptions FsOpts() override {
    FileSystemOptions o;
    o.file_memory = true;
    o.cache_bytes = 64 << 20;  // 48 MiB of file memory
    return o;
  }

  FileSystem::Opened OpenServed(uint64_t ino, int flags, bool can_serve = true) {
    std::promise<Result<FileSystem::Opened>> p;
    fs_->OpenServed(
        ino, flags, nullptr, [can_serve](FileMemory&) { return can_serve; },
        [&](Result<FileSystem::Opened> r) { p.set_value(std::move(r)); });
    Result<FileSystem::Opened> r = p.get_future().get();
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : FileSystem::Opened{};
  }

  // The bytes of a served open, as the kernel reads them.
  static std::string KernelRead(const FileMemory& m) {
    struct stat st;
    EXPECT_EQ(fstat(m.fd(), &st), 0);
    std::string out(static_cast<size_t>(st.st_size), '\0');
    EXPECT_EQ(pread(m.fd(), out.data(), out.size(), 0), static_cast<ssize_t>(out.size()));
    return out;
  }

  // Runs `step` on a thread of its own at the first write-out's read of a
  // file's memory (the write-out holds the memory's write-out lock), and
  // lets the write-out go on once `step` returned, or after 1 s: a step
  // that wrongly does not wait for the write-out ends first.
  class AtFirstWriteOutRead {
   public:
    explicit AtFirstWriteOutRead(std::function<void()> step) : step_(std::move(step)) {
      SyncPoints::Set("FileSystem::WriteOutMemory:Read", [this](void*) {
        if (once_.exchange(true)) return;
        thread_ = std::thread([this] {
          step_();
          done_.set_value();
        });
        done_.get_future().wait_for(std::chrono::seconds(1));
      });
    }
    // Waits for the step; clears the hook.
    ~AtFirstWriteOutRead() {
      if (thread_.joinable()) thread_.join();
      SyncPoints::ClearAll();
    }

   private:
    const std::function<void()> step_;
    std::atomic<bool> once_{false};
    std::thread thread_;
    std::promise<void> done_;
  };

  static void KernelWrite(const FileMemory& m, uint64_t off, const std::string& data) {
    ASSERT_EQ(pwrite(m.fd(), data.data(), data.size(), static_cast<off_t>(off)),
              static_cast<ssize_t>(data.size()));
  }
};

TEST_F(FileMemoryTest, ReadOnlyOpenOfAFileIsServedWithItsExactBytes) {
  const std::string data = Pattern(3 * (1 << 20) + 1234, 1);
  const uint64_t ino = Store(kRootIno, "k", data);
  ASSERT_TRUE(fs_->Sync().ok());
  FileSystem::Opened o = OpenServed(ino, O_RDONLY);
  ASSERT_NE(o.memory, nullptr);
  EXPECT_EQ(KernelRead(*o.memory), data);
  // The daemon's own read path reads the same memory.
  auto r = ReadFh(o.fh, 1 << 20, 100);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, data.substr(1 << 20, 100));
  fs_->Release(o.fh);
  EXPECT_EQ(fs_->Stats().file_memory.served_opens, 1u);
}

TEST_F(FileMemoryTest, AFileJustWrittenIsServedFromItsBuffersBeforeTheDeviceHasThem) {
  const std::string data = Pattern(2 * (1 << 20) + 7, 2);
  const uint64_t ino = Store(kRootIno, "k", data);  // no Sync: writes may be in flight
  FileSystem::Opened o = OpenServed(ino, O_RDONLY);
  ASSERT_NE(o.memory, nullptr);
  EXPECT_EQ(KernelRead(*o.memory), data);
  fs_->Release(o.fh);
}

TEST_F(FileMemoryTest, NoOpenIsServedWhileAnotherOpenIsNot) {
  const uint64_t ino = Store(kRootIno, "k", Pattern(1 << 20, 3));
  auto w = fs_->Open(ino, O_WRONLY);  // a writer through the daemon
  ASSERT_TRUE(w.ok());
  FileSystem::Opened r = OpenServed(ino, O_RDONLY);
  EXPECT_EQ(r.memory, nullptr);
  fs_->Release(r.fh);
  fs_->Release(*w);
  // Nor a writer or an O_TRUNC open of a file nobody holds.
  FileSystem::Opened w2 = OpenServed(ino, O_WRONLY);
  EXPECT_EQ(w2.memory, nullptr);
  fs_->Release(w2.fh);
}

TEST_F(FileMemoryTest, WhileOneOpenIsServedEveryOpenIsAndWritesReachTheFile) {
  const std::string data = Pattern(1 << 20, 4);
  const uint64_t ino = Store(kRootIno, "k", data);
  FileSystem::Opened reader = OpenServed(ino, O_RDONLY);
  ASSERT_NE(reader.memory, nullptr);
  // A writer and an O_TRUNC open: served from the same memory.
  FileSystem::Opened writer = OpenServed(ino, O_RDWR);
  ASSERT_EQ(writer.memory, reader.memory);
  KernelWrite(*writer.memory, 10, "written by the kernel");
  KernelWrite(*writer.memory, data.size(), "tail");
  // Its size shows before the bytes are written out.
  auto a = fs_->GetAttr(ino);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->size, data.size() + 4);
  ASSERT_TRUE(fs_->Flush(writer.fh).ok());  // close(2): written out
  fs_->Release(writer.fh);
  std::string want = data + "tail";
  want.replace(10, 21, "written by the kernel");
  EXPECT_EQ(KernelRead(*reader.memory), want);
  // A truncate resizes what the reader sees.
  SetAttrRequest t;
  t.size = 4096;
  ASSERT_TRUE(fs_->SetAttr(ino, t).ok());
  EXPECT_EQ(KernelRead(*reader.memory), want.substr(0, 4096));
  fs_->Release(reader.fh);
  ASSERT_TRUE(fs_->Sync().ok());
  Remount();
  auto o = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(o.ok());
  auto r = ReadFh(*o, 0, 1 << 20);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, want.substr(0, 4096));
  fs_->Release(*o);
}

// generic/451's loop: a writer rewrites a file in place while others
// hold it (so its opens are served). The previous cycle's release, which
// the kernel sends after close(2) returned, writes the memory out as it
// read it before this cycle's write; this cycle's close writes out the new
// bytes meanwhile. What the file keeps is the newer.
TEST_F(FileMemoryTest, AnOlderWriteOutNeverStagesAfterANewerOne) {
#ifdef NDEBUG
  GTEST_SKIP() << "sync points are compiled out";
#endif
  const uint64_t size = 640 << 10;
  const std::string old_bytes(size, '\xaa');
  const std::string new_bytes(size, '\x55');
  const uint64_t ino = Store(kRootIno, "k", old_bytes);
  ASSERT_TRUE(fs_->Sync().ok());
  FileSystem::Opened reader = OpenServed(ino, O_RDONLY);
  ASSERT_NE(reader.memory, nullptr);
  FileSystem::Opened before = OpenServed(ino, O_RDWR);  // the last cycle's open
  FileSystem::Opened writer = OpenServed(ino, O_RDWR | O_DIRECT);
  ASSERT_EQ(writer.memory, reader.memory);
  {
    // `before`'s write-out has read the old bytes: the writer writes and
    // closes now; its write-out waits for this one.
    AtFirstWriteOutRead next_cycle([&] {
      KernelWrite(*writer.memory, 0, new_bytes);
      EXPECT_TRUE(fs_->Flush(writer.fh).ok());
      fs_->Release(writer.fh);
    });
    fs_->Release(before.fh);
  }
  fs_->Release(reader.fh);
  ASSERT_TRUE(fs_->Sync().ok());
  Remount();
  auto o = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(o.ok());
  auto r = ReadFh(*o, 0, size);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r == new_bytes) << "first byte that is not the writer's: "
                               << r->find_first_not_of('\x55');
  fs_->Release(*o);
}

// A truncate while a served writer's release is writing the memory out
// (the kernel sends it after close(2) returned): the write-out read the
// bytes before the truncate; staged after it, they would give the file
// its old size back. The truncate waits for the write-out.
TEST_F(FileMemoryTest, ATruncateThatFailsOnAFullVolumeLeavesServedReadersTheWholeFile) {
  // A cut inside a chunk restages that chunk's head; on a full volume the
  // truncate fails with ENOSPC, and a reader served from the file's memory
  // still sees every byte (the memory is cut only once the cut is sure).
  const std::string a = Pattern(3 << 20, 5);
  const uint64_t ino = Store(kRootIno, "a", a);
  ASSERT_TRUE(fs_->FlushAll().ok());
  FileSystem::Opened reader = OpenServed(ino, O_RDONLY);
  ASSERT_NE(reader.memory, nullptr);
  ASSERT_NO_FATAL_FAILURE(FillVolume("fill"));
  SetAttrRequest cut;
  cut.size = (3 << 20) / 2;
  auto r = fs_->SetAttr(ino, cut);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ENOSPC);
  const std::string seen = KernelRead(*reader.memory);
  EXPECT_EQ(seen.size(), a.size());
  EXPECT_TRUE(seen == a) << "the served bytes changed";
  auto attr = fs_->GetAttr(ino);
  ASSERT_TRUE(attr.ok());
  EXPECT_EQ(attr->size, a.size());
  fs_->Release(reader.fh);
}

TEST_F(FileMemoryTest, ATruncateIsNeverUndoneByAWriteOutThatReadBeforeIt) {
#ifdef NDEBUG
  GTEST_SKIP() << "sync points are compiled out";
#endif
  const uint64_t size = 256 << 10, cut = 100 << 10;
  const std::string bytes = Pattern(size, 9);
  const uint64_t ino = Store(kRootIno, "k", Pattern(size, 8));
  ASSERT_TRUE(fs_->Sync().ok());
  FileSystem::Opened reader = OpenServed(ino, O_RDONLY);
  ASSERT_NE(reader.memory, nullptr);
  FileSystem::Opened writer = OpenServed(ino, O_RDWR);
  ASSERT_EQ(writer.memory, reader.memory);
  KernelWrite(*writer.memory, 0, bytes);
  ASSERT_TRUE(fs_->Flush(writer.fh).ok());
  {
    // The release's write-out has read the bytes: a truncate now, which
    // waits for this write-out.
    AtFirstWriteOutRead truncate([&] {
      SetAttrRequest req;
      req.size = cut;
      EXPECT_TRUE(fs_->SetAttr(ino, req).ok());
    });
    fs_->Release(writer.fh);
  }
  fs_->Release(reader.fh);
  ASSERT_TRUE(fs_->Sync().ok());
  auto a = fs_->GetAttr(ino);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->size, cut);
  Remount();
  auto o = fs_->Open(ino, O_RDONLY);
  ASSERT_TRUE(o.ok());
  auto r = ReadFh(*o, 0, size);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), cut);
  EXPECT_TRUE(*r == bytes.substr(0, cut));
  fs_->Release(*o);
}

// The kernel's rule (all of a file's opens served, or none) across a cache
// drop: an open decided served keeps its memory the file's, so the next
// open (a writer) is served from it too. Were the memory dropped between
// the decision and the count, the writer's open would be an ordinary one
// beside a served one, which the kernel refuses (EIO).
TEST_F(FileMemoryTest, AnOpenDecidedServedKeepsItsMemoryThroughACacheDrop) {
#ifdef NDEBUG
  GTEST_SKIP() << "sync points are compiled out";
#endif
  const std::string data = Pattern(1 << 20, 7);
  const uint64_t ino = Store(kRootIno, "k", data);
  ASSERT_TRUE(fs_->Sync().ok());
  ASSERT_TRUE(fs_->DropCache().ok());
  int drops = 0;
  SyncPoints::Set("FileSystem::OpenServed:Decided", [&](void* cache) {
    static_cast<FileMemoryCache*>(cache)->Clear();  // .kvfs/drop_cache, now
    ++drops;
  });
  FileSystem::Opened reader = OpenServed(ino, O_RDONLY);
  SyncPoints::ClearAll();
  ASSERT_EQ(drops, 1);
  ASSERT_NE(reader.memory, nullptr);
  FileSystem::Opened writer = OpenServed(ino, O_RDWR);
  EXPECT_EQ(writer.memory, reader.memory);
  fs_->Release(writer.fh);
  fs_->Release(reader.fh);
}

// generic/451's loop again: readers open, read and close the file while a
// writer opens it O_RDWR. An open decided not served (the writer: nothing
// is served when it asks) is counted in the same hold of the inode's lock
// as the decision. Counted only later, a reader's open decided meanwhile
// was served (nothing else open), beside the writer's ordinary open: the
// kernel fails the later of the two opens with EIO, or takes both, and the
// writer's bytes go to the file while the reader's memory, still the
// file's authority, keeps the old ones; the writer's read-back open is
// served from that memory and sees the old bytes.
TEST_F(FileMemoryTest, AnOpenDecidedNotServedIsCountedBeforeAnotherOpenIsDecided) {
#ifdef NDEBUG
  GTEST_SKIP() << "sync points are compiled out";
#endif
  const uint64_t size = 640 << 10;
  const std::string old_bytes(size, '\x55');
  const std::string new_bytes(size, '\xaa');
  const uint64_t ino = Store(kRootIno, "k", old_bytes);
  ASSERT_TRUE(fs_->Sync().ok());
  {
    FileSystem::Opened r = OpenServed(ino, O_RDONLY);  // loads the file's memory
    ASSERT_NE(r.memory, nullptr);
    fs_->Release(r.fh);
  }
  std::atomic<int> reached{0};
  FileSystem::Opened reader;
  SyncPoints::Set("FileSystem::OpenServed:NotServed", [&](void*) {
    if (reached.fetch_add(1) != 0) return;
    reader = OpenServed(ino, O_RDONLY);  // a reader's open, now
  });
  FileSystem::Opened writer = OpenServed(ino, O_RDWR);
  SyncPoints::ClearAll();
  ASSERT_GE(reached.load(), 1);
  // All of the file's opens served, or none (the kernel's rule).
  EXPECT_EQ(writer.memory, nullptr);
  EXPECT_EQ(reader.memory != nullptr, writer.memory != nullptr) << "the reader's open was served";
  // The writer's cycle: write, close, reopen and read back.
  auto w = fs_->Write(writer.fh, 0, new_bytes);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(fs_->Flush(writer.fh).ok());
  fs_->Release(writer.fh);
  FileSystem::Opened back = OpenServed(ino, O_RDONLY);
  std::string got;
  if (back.memory) {
    got = KernelRead(*back.memory);
  } else {
    auto r = ReadFh(back.fh, 0, size);
    ASSERT_TRUE(r.ok());
    got = *r;
  }
  EXPECT_TRUE(got == new_bytes) << "read back served=" << (back.memory != nullptr)
                                << ", first byte that is not the writer's: "
                                << got.find_first_not_of('\xaa');
  fs_->Release(back.fh);
  fs_->Release(reader.fh);
}

TEST_F(FileMemoryTest, AnOpenTheFrontEndCannotServeIsAnOrdinaryOne) {
  const uint64_t ino = Store(kRootIno, "k", Pattern(1 << 20, 5));
  FileSystem::Opened o = OpenServed(ino, O_RDONLY, /*can_serve=*/false);
  EXPECT_EQ(o.memory, nullptr);
  auto r = ReadFh(o.fh, 0, 10);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, Pattern(1 << 20, 5).substr(0, 10));
  fs_->Release(o.fh);
}

TEST_F(FileMemoryTest, TheBudgetHoldsAndOpenFilesAreNotDropped) {
  std::vector<uint64_t> inos;
  for (int i = 0; i < 20; i++) {
    inos.push_back(Store(kRootIno, "k" + std::to_string(i), Pattern(4 << 20, i)));
  }
  ASSERT_TRUE(fs_->Sync().ok());
  FileSystem::Opened held = OpenServed(inos[0], O_RDONLY);
  ASSERT_NE(held.memory, nullptr);
  for (size_t i = 1; i < inos.size(); i++) {
    FileSystem::Opened o = OpenServed(inos[i], O_RDONLY);
    ASSERT_NE(o.memory, nullptr) << i;
    EXPECT_EQ(KernelRead(*o.memory), Pattern(4 << 20, static_cast<int>(i)));
    fs_->Release(o.fh);
    const FileMemoryCounters c = fs_->Stats().file_memory;
    EXPECT_LE(c.bytes, c.budget_bytes);
  }
  EXPECT_GT(fs_->Stats().file_memory.dropped, 0u);
  // The held file kept its memory: a second open is served from it.
  FileSystem::Opened again = OpenServed(inos[0], O_RDONLY);
  EXPECT_EQ(again.memory, held.memory);
  EXPECT_EQ(KernelRead(*again.memory), Pattern(4 << 20, 0));
  fs_->Release(again.fh);
  fs_->Release(held.fh);
}

// The memory of a dropped file is the next load's, with no memory made:
// that load sees its own bytes, zeros where it has none (a hole), never
// the former file's.
TEST_F(FileMemoryTest, DroppedMemoryIsReusedAndShowsOnlyTheNextFilesBytes) {
  const uint64_t size = 2 << 20;
  const uint64_t a = Store(kRootIno, "a", Pattern(size, 1));
  // b: bytes only in its last 64 KiB, the rest a hole.
  auto c = fs_->Create(kRootIno, "b", 0644, O_WRONLY | O_CREAT, Caller{});
  ASSERT_TRUE(c.ok());
  const std::string tail = Pattern(64 << 10, 2);
  ASSERT_TRUE(fs_->Write(c->fh, size - tail.size(), tail).ok());
  ASSERT_TRUE(fs_->Flush(c->fh).ok());
  fs_->Release(c->fh);
  const uint64_t b = c->attr.ino;
  ASSERT_TRUE(fs_->Sync().ok());

  FileSystem::Opened oa = OpenServed(a, O_RDONLY);
  ASSERT_NE(oa.memory, nullptr);
  EXPECT_EQ(KernelRead(*oa.memory), Pattern(size, 1));
  fs_->Release(oa.fh);
  oa.memory.reset();
  // The pool's thread makes blocks of the stored size ahead (an eighth of
  // the budget): once it has, a's memory, dropped, is the last one kept
  // and the next load's.
  for (int i = 0; i < 1000; i++) {
    const FileMemoryCounters c = fs_->Stats().file_memory;
    if (c.kept_bytes + size > c.budget_bytes / 8) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(fs_->DropCache().ok());
  const uint64_t reused = fs_->Stats().file_memory.reused;

  FileSystem::Opened ob = OpenServed(b, O_RDONLY);
  ASSERT_NE(ob.memory, nullptr);
  EXPECT_EQ(fs_->Stats().file_memory.reused, reused + 1);
  EXPECT_EQ(KernelRead(*ob.memory), std::string(size - tail.size(), '\0') + tail);
  fs_->Release(ob.fh);
}

// A client that still maps (or holds open) a file's memory after its last
// release keeps seeing that file's bytes: such memory is never reused.
TEST_F(FileMemoryTest, MemoryAClientStillMapsIsNeverReused) {
  const uint64_t size = 1 << 20;
  const uint64_t a = Store(kRootIno, "a", Pattern(size, 3));
  std::vector<uint64_t> others;
  for (int i = 0; i < 12; i++) {
    others.push_back(Store(kRootIno, "b" + std::to_string(i), Pattern(size, 10 + i)));
  }
  ASSERT_TRUE(fs_->Sync().ok());
  FileSystem::Opened oa = OpenServed(a, O_RDONLY);
  ASSERT_NE(oa.memory, nullptr);
  // The client's map, through an open of its own (as a passthrough open
  // makes one), which it closes: the map alone keeps the file open.
  const int client = open(("/proc/self/fd/" + std::to_string(oa.memory->fd())).c_str(), O_RDONLY);
  ASSERT_GE(client, 0);
  void* map = mmap(nullptr, size, PROT_READ, MAP_SHARED, client, 0);
  ASSERT_NE(map, MAP_FAILED);
  close(client);
  fs_->Release(oa.fh);
  oa.memory.reset();
  ASSERT_TRUE(fs_->DropCache().ok());
  // Loads that take every kept block (the last one kept is taken first).
  for (size_t i = 0; i < others.size(); i++) {
    FileSystem::Opened o = OpenServed(others[i], O_RDONLY);
    ASSERT_NE(o.memory, nullptr);
    EXPECT_EQ(KernelRead(*o.memory), Pattern(size, 10 + static_cast<int>(i)));
    EXPECT_EQ(std::string(static_cast<const char*>(map), size), Pattern(size, 3)) << i;
    fs_->Release(o.fh);
  }
  EXPECT_GT(fs_->Stats().file_memory.reused, 0u);
  munmap(map, size);
}

// Storing a key makes memory of its size ahead of its load: that load
// makes none on its critical path.
TEST_F(FileMemoryTest, AStoredFilesFirstLoadFindsMemoryMadeAheadForIt) {
  const uint64_t size = 3 << 20;
  const uint64_t a = Store(kRootIno, "a", Pattern(size, 5));
  ASSERT_TRUE(fs_->Sync().ok());
  // The pool's thread makes it at low priority: wait for it, boundedly.
  for (int i = 0; i < 1000 && fs_->Stats().file_memory.made_ahead == 0; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(fs_->Stats().file_memory.made_ahead, 0u);
  FileSystem::Opened o = OpenServed(a, O_RDONLY);
  ASSERT_NE(o.memory, nullptr);
  EXPECT_EQ(fs_->Stats().file_memory.reused, 1u);
  EXPECT_EQ(KernelRead(*o.memory), Pattern(size, 5));
  fs_->Release(o.fh);
}

// Every stored file gets memory made ahead of its load, not only an
// eighth of the budget: a first pass over more keys than that finds each
// one's memory made.
TEST_F(FileMemoryTest, EachStoredFileWithinTheBudgetFindsMemoryMadeAhead) {
  const uint64_t size = 2 << 20;
  const int keys = 12;  // 24 MiB: half the budget, four times an eighth
  std::vector<uint64_t> inos;
  for (int i = 0; i < keys; i++) {
    inos.push_back(Store(kRootIno, "k" + std::to_string(i), Pattern(size, i)));
  }
  ASSERT_TRUE(fs_->Sync().ok());
  for (int i = 0; i < 1000 && fs_->Stats().file_memory.made_ahead < keys; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(fs_->Stats().file_memory.made_ahead, static_cast<uint64_t>(keys));
  for (int i = 0; i < keys; i++) {
    FileSystem::Opened o = OpenServed(inos[i], O_RDONLY);
    ASSERT_NE(o.memory, nullptr);
    EXPECT_EQ(KernelRead(*o.memory), Pattern(size, i)) << i;
    fs_->Release(o.fh);
  }
  EXPECT_EQ(fs_->Stats().file_memory.reused, static_cast<uint64_t>(keys));
}

// Memory made ahead in a size nobody wants any more makes room for the
// size the stores moved on to.
TEST_F(FileMemoryTest, MemoryOfAnOldSizeMakesRoomForTheNewOne) {
  // 40 MiB of 1 MiB blocks: nearly all of the 48 MiB budget.
  for (int i = 0; i < 40; i++) Store(kRootIno, "a" + std::to_string(i), Pattern(1 << 20, i));
  ASSERT_TRUE(fs_->Sync().ok());
  for (int i = 0; i < 1000 && fs_->Stats().file_memory.made_ahead < 40; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(fs_->Stats().file_memory.made_ahead, 40u);
  // Then keys of other sizes, enough of them that the first size drops out
  // of the few remembered.
  const uint64_t big = 4 << 20;
  std::vector<uint64_t> bigs;
  for (uint64_t s : {uint64_t{2} << 20, uint64_t{3} << 20, uint64_t{5} << 20}) {
    Store(kRootIno, "s" + std::to_string(s), Pattern(s, 1));
  }
  for (int i = 0; i < 6; i++) bigs.push_back(Store(kRootIno, "b" + std::to_string(i), Pattern(big, i)));
  ASSERT_TRUE(fs_->Sync().ok());
  FileMemoryCounters c;
  for (int i = 0; i < 1000; i++) {
    c = fs_->Stats().file_memory;
    if (c.made_ahead >= 40 + 6) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // The 4 MiB blocks first (the newest size), as many as fit: the 1 MiB
  // ones, no longer wanted, were freed for them.
  EXPECT_GE(c.made_ahead, 40u + 6) << "the new size's memory was not made";
  EXPECT_LE(c.kept_bytes, c.budget_bytes);
  FileSystem::Opened o = OpenServed(bigs[5], O_RDONLY);
  ASSERT_NE(o.memory, nullptr);
  EXPECT_EQ(KernelRead(*o.memory), Pattern(big, 5));
  fs_->Release(o.fh);
}

// Kept memory counts against the budget with the entries.
TEST_F(FileMemoryTest, KeptMemoryAndEntriesStayWithinTheBudget) {
  std::vector<uint64_t> inos;
  for (int i = 0; i < 24; i++) {
    inos.push_back(Store(kRootIno, "k" + std::to_string(i), Pattern(4 << 20, i)));
  }
  ASSERT_TRUE(fs_->Sync().ok());
  for (int round = 0; round < 2; round++) {
    for (size_t i = 0; i < inos.size(); i++) {
      FileSystem::Opened o = OpenServed(inos[i], O_RDONLY);
      ASSERT_NE(o.memory, nullptr) << i;
      EXPECT_EQ(KernelRead(*o.memory), Pattern(4 << 20, static_cast<int>(i)));
      fs_->Release(o.fh);
      const FileMemoryCounters c = fs_->Stats().file_memory;
      EXPECT_LE(c.bytes + c.kept_bytes, c.budget_bytes);
    }
  }
  // 48 MiB hold fewer than 24 files of 4 MiB: later loads reused memory.
  EXPECT_GT(fs_->Stats().file_memory.reused, 0u);
}

}  // namespace
}  // namespace kvfs::fs

namespace kvfs::fs {
namespace {

class HeldReadsFileMemoryTest : public WriteGated<FileMemoryTest> {
 protected:
  FileSystemOptions FsOpts() override {
    FileSystemOptions o = FileMemoryTest::FsOpts();
    o.prefetch_budget_bytes = 8 << 20;
    return o;
  }
};

// A storm of lookups and cache drops (.kvfs/drop_cache every few loads):
// the loads a drop leaves running still hold their memory, so they count
// against the prefetch budget until they end. Otherwise each drop let a
// budget's worth more be queued and made, until the memory ran out.
TEST_F(HeldReadsFileMemoryTest, LoadsADropLeftRunningStillCountAgainstTheBudget) {
  for (int k = 0; k < 32; ++k) Store(kRootIno, "k" + std::to_string(k), Pattern(1 << 20, k));
  ASSERT_TRUE(fs_->Sync().ok());
  ASSERT_TRUE(fs_->DropCache().ok());
  // Prefetch loads on the lane: queued, or at the (held) device.
  auto on_lane = [&] {
    for (const LaneStats& l : fs_->Stats().lanes) {
      if (l.name == "prefetch") return static_cast<uint64_t>(l.inflight) + l.queued;
    }
    ADD_FAILURE() << "no prefetch lane";
    return uint64_t{0};
  };
  gate_->HoldReads();
  ASSERT_TRUE(fs_->Prefetch(kRootIno).ok());  // every file in the directory, within the budget
  const uint64_t first = on_lane();
  EXPECT_GE(first, 4u);
  EXPECT_LE(first, 9u);
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(fs_->DropCache().ok());
    ASSERT_TRUE(fs_->Prefetch(kRootIno).ok());
  }
  EXPECT_LE(on_lane(), first) << "loads queued beyond the budget after cache drops";
  gate_->Release();
  ASSERT_TRUE(fs_->Sync().ok());
}

}  // namespace
}  // namespace kvfs::fs
