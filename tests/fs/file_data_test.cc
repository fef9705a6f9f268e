// FileData (fs/file_data.h), the owner of a regular file's data state, on
// its own: the served-open protocol and its one rule, the counts of the
// device commands in flight (reads that keep freed extents, writes that
// gate changes, the first write error, installed data waiting for a
// change), Quiescent() as eviction asks it, and the memory a device
// command holds: it stays the command's until its completion, whatever
// the file's memory does meanwhile (dropped from the cache, its memory
// given to the next load).
#include "fs/file_data.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "fs/committer.h"
#include "fs/file_memory.h"

namespace kvfs::fs {
namespace {

class FileDataTest : public ::testing::Test {
 protected:
  // A loaded memory of `bytes` (no cache, no pool).
  static std::shared_ptr<FileMemory> Memory(uint64_t bytes = 64 << 10) {
    auto b = MemoryBlock::Make(bytes);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    auto m = std::make_shared<FileMemory>(std::move(*b), true, MemoryVersion{bytes, {}}, nullptr);
    m->Finish(true);
    return m;
  }

  Mutex mu_;
  FileData data_{mu_};
};

TEST_F(FileDataTest, AnOpenWaitsForALoadAndIsServedWhenItsRuleHolds) {
  auto m = Memory();
  MutexLock l(data_.mu());
  // No open of the file: one may wait for a memory nobody uses yet.
  EXPECT_TRUE(data_.OthersServedFrom(nullptr, 0));
  EXPECT_FALSE(data_.OthersServedFrom(nullptr, 1));  // another open, not served
  data_.AddPending(m);
  EXPECT_TRUE(m->awaited());
  EXPECT_FALSE(m->serves_opens());
  EXPECT_EQ(data_.served(), nullptr);
  // A second open may wait for the same memory (the first is counted),
  // not for another one, nor beside an open that is not served.
  auto other = Memory();
  EXPECT_TRUE(data_.OthersServedFrom(m.get(), 1));
  EXPECT_FALSE(data_.OthersServedFrom(other.get(), 1));
  EXPECT_FALSE(data_.OthersServedFrom(m.get(), 2));
  data_.AddPending(m);
  // The first load's end: the version is current, both opens are counted.
  EXPECT_TRUE(data_.EndPending(m, /*may=*/true, /*current=*/true, /*file_opens=*/2, false));
  EXPECT_EQ(data_.served(), m);
  EXPECT_TRUE(m->serves_opens());
  EXPECT_TRUE(m->awaited());
  // The second: served from it already, so its version no longer matters.
  EXPECT_TRUE(data_.EndPending(m, true, /*current=*/false, 2, false));
  EXPECT_FALSE(m->awaited());
  // While served, every open is (the kernel's rule): a writer too.
  data_.AddServed(/*writable=*/true);
  EXPECT_TRUE(data_.OthersServedFrom(m.get(), 3));
  ASSERT_EQ(ftruncate(m->fd(), 1000), 0);  // the kernel's write through it
  ServedAttrs a;
  ASSERT_TRUE(data_.ServedAttrsOf(&a));
  EXPECT_EQ(a.size, 1000u);
  EXPECT_FALSE(data_.ReleaseServed(*other));  // not the memory opens use
  EXPECT_FALSE(data_.ReleaseServed(*m));
  EXPECT_FALSE(data_.ReleaseServed(*m));
  // The last: a writer used it, so the caller drops it from the cache.
  EXPECT_TRUE(data_.ReleaseServed(*m));
  EXPECT_EQ(data_.served(), nullptr);
  EXPECT_FALSE(m->serves_opens());
  EXPECT_FALSE(data_.ServedAttrsOf(&a));
}

TEST_F(FileDataTest, AWaitingOpenIsNotServedWhenTheRuleOrItsLoadFails) {
  auto m = Memory();
  MutexLock l(data_.mu());
  // The load failed (or the memory is not the file's any more).
  data_.AddPending(m);
  EXPECT_FALSE(data_.EndPending(m, /*may=*/false, true, 1, false));
  EXPECT_FALSE(m->awaited());
  EXPECT_FALSE(m->serves_opens());
  // Another open of the file came meanwhile and is not served.
  data_.AddPending(m);
  EXPECT_FALSE(data_.EndPending(m, true, true, /*file_opens=*/2, false));
  // The file moved to another version while it loaded.
  data_.AddPending(m);
  EXPECT_FALSE(data_.EndPending(m, true, /*current=*/false, 1, false));
  EXPECT_EQ(data_.served(), nullptr);
  // A reader's last release does not drop the memory.
  data_.AddPending(m);
  ASSERT_TRUE(data_.EndPending(m, true, true, 1, false));
  EXPECT_FALSE(data_.ReleaseServed(*m));
  EXPECT_FALSE(m->serves_opens());
}

TEST_F(FileDataTest, OnlyALoadedServedMemoryIsResized) {
  MutexLock l(data_.mu());
  EXPECT_TRUE(data_.ResizeServed(4096, false).ok());  // nothing served: nothing to do
  auto m = Memory();
  data_.AddPending(m);
  ASSERT_TRUE(data_.EndPending(m, true, true, 1, true));
  ASSERT_TRUE(data_.ResizeServed(100, false).ok());
  struct stat st;
  ASSERT_EQ(fstat(m->fd(), &st), 0);
  EXPECT_EQ(st.st_size, 100);
  ASSERT_TRUE(data_.ResizeServed(50, /*grow_only=*/true).ok());
  ASSERT_EQ(fstat(m->fd(), &st), 0);
  EXPECT_EQ(st.st_size, 100);
  ASSERT_TRUE(data_.ResizeServed(8192, true).ok());
  ASSERT_EQ(fstat(m->fd(), &st), 0);
  EXPECT_EQ(st.st_size, 8192);
}

TEST_F(FileDataTest, ExtentsFreedDuringReadsWaitForTheLastRead) {
  MutexLock l(data_.mu());
  const std::vector<Extent> gone{{0, 4096, 8192}};
  EXPECT_FALSE(data_.KeepForReads(gone));  // nothing reads: freed at once
  data_.BeginRead();
  data_.BeginRead();
  EXPECT_EQ(data_.reads_in_flight(), 2);
  EXPECT_TRUE(data_.KeepForReads(gone));
  EXPECT_TRUE(data_.EndRead().empty());
  const std::vector<Extent> freed = data_.EndRead();
  ASSERT_EQ(freed.size(), 1u);
  EXPECT_EQ(freed[0].byte_off, 4096u);
  EXPECT_EQ(data_.reads_in_flight(), 0);
  EXPECT_FALSE(data_.KeepForReads(gone));
}

TEST_F(FileDataTest, ChangesWaitForTheWritesInFlightAndEvictionForQuiet) {
  MutexLock l(data_.mu());
  EXPECT_TRUE(data_.Quiescent());
  auto early = std::make_shared<Change>();
  EXPECT_FALSE(data_.Gate(early));  // nothing in flight: no wait
  EXPECT_EQ(early->gates.load(), 0);
  data_.BeginWrite();
  data_.BeginWrite();
  EXPECT_FALSE(data_.Quiescent());
  auto c = std::make_shared<Change>();
  EXPECT_TRUE(data_.Gate(c));
  EXPECT_EQ(c->gates.load(), 1);
  EXPECT_TRUE(data_.EndWrite().empty());  // one write still in flight
  // The first error is kept; later ones do not replace it.
  EXPECT_TRUE(data_.NoteWriteError(EIO));
  EXPECT_FALSE(data_.NoteWriteError(ENOSPC));
  EXPECT_EQ(data_.write_error(), EIO);
  const auto gates = data_.EndWrite();
  ASSERT_EQ(gates.size(), 1u);
  EXPECT_EQ(gates[0], c);
  EXPECT_TRUE(data_.Quiescent());
  // Installed data waits for a change that captures it: one is queued.
  EXPECT_TRUE(data_.NoteInstalled());
  EXPECT_FALSE(data_.NoteInstalled());
  EXPECT_TRUE(data_.change_queued());
  EXPECT_FALSE(data_.Quiescent());
  data_.Captured();
  EXPECT_TRUE(data_.Quiescent());
}

TEST_F(FileDataTest, AnUnknownErrorIsKeptAsEio) {
  MutexLock l(data_.mu());
  EXPECT_TRUE(data_.NoteWriteError(0));
  EXPECT_EQ(data_.write_error(), EIO);
}

// The memory a device read lands in is the command's until it completes:
// the file's memory dropped from the cache meanwhile (a drop, an eviction,
// a newer version) is not freed, nor given to the next load, before then.
TEST(FileDataCommandTest, MemoryAReadHoldsStaysItsUntilItCompletes) {
  FileMemoryCache cache(8 << 20);
  constexpr uint64_t kBytes = 1 << 20;
  auto made = cache.Make(MemoryVersion{kBytes, {}}, kBytes, /*prefetch=*/false);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::shared_ptr<FileMemory> m = std::move(*made);
  ASSERT_TRUE(cache.Insert(/*owner=*/1, m, false));
  std::weak_ptr<FileMemory> watch = m;
  char* const at = m->data();
  bool completed = false;
  device::IoRequest r = FileData::ReadInto(
      m, at, /*device=*/0, /*byte_off=*/0, kBytes, [&](Status st) { completed = st.ok(); }, m.get());
  EXPECT_EQ(r.buf, at);
  EXPECT_EQ(r.group, m.get());
  m.reset();
  cache.Clear();  // the file's memory is dropped; the read is still at the device
  EXPECT_FALSE(watch.expired()) << "memory a read lands in was released under it";
  // The next loads get other memory, which the read's bytes never reach.
  auto next = cache.Make(MemoryVersion{kBytes, {}}, kBytes, false);
  ASSERT_TRUE(next.ok());
  EXPECT_NE((*next)->data(), at);
  std::memset((*next)->data(), 0x5a, kBytes);
  std::memset(at, 0xa5, kBytes);  // the device's transfer
  r.done(Status::OK());
  EXPECT_TRUE(completed);
  r = device::IoRequest();  // the request's last copy: the memory goes now
  EXPECT_TRUE(watch.expired());
  EXPECT_EQ(std::string((*next)->data(), kBytes), std::string(kBytes, '\x5a'));
}

// A write holds the buffer it writes from the same way.
TEST(FileDataCommandTest, MemoryAWriteHoldsStaysItsUntilItCompletes) {
  auto buf = std::make_shared<std::string>(4096, 'x');
  std::weak_ptr<std::string> watch = buf;
  device::IoRequest r = FileData::WriteFrom(buf, buf->data(), 0, 0, 4096, [](Status) {});
  EXPECT_EQ(r.op, device::IoOp::kWrite);
  buf.reset();
  EXPECT_FALSE(watch.expired());
  r.done(Status::OK());
  r = device::IoRequest();
  EXPECT_TRUE(watch.expired());
}

}  // namespace
}  // namespace kvfs::fs
