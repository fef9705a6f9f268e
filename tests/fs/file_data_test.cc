// FileData (fs/file_data.h), the owner of a regular file's data state, on
// its own: a chunk's versions through write-behind (stage, copy in, submit,
// written, a failed write, a truncate, a partial overwrite), what a read
// plans and a capture names, the versions a file memory holds and a load
// into one; the served-open protocol and its one rule, the counts of the
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

#include "common/format.h"
#include "device/buffer_pool.h"
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

// --------------------------------------------------------------- chunks

class FileDataChunkTest : public ::testing::Test {
 protected:
  static std::unique_ptr<device::BufferPool> Pool() {
    auto p = device::BufferPool::Create(8 << 20, kChunkBytes);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? std::move(*p) : nullptr;
  }
  // A staging buffer with `reserved` bytes of space at device offset `at`.
  std::shared_ptr<ChunkBuf> Buffer(uint64_t at, uint64_t reserved = kChunkBytes) {
    auto cb = std::make_shared<ChunkBuf>();
    cb->buf = pool_->TryAcquire();
    EXPECT_TRUE(cb->buf);
    cb->alloc = {Extent{0, at, reserved}};
    return cb;
  }
  // Stages chunk `ci` of a file of `size` and copies `bytes` in at `lo`.
  std::shared_ptr<ChunkBuf> Write(uint64_t ci, uint64_t size, uint64_t lo, const std::string& bytes,
                                  uint64_t at) {
    auto cb = Buffer(at);
    InstalledChunk old;
    EXPECT_EQ(data_.Stage(ci, cb, size, lo, lo + bytes.size(), &old), FileData::Staging::kStaged);
    data_.CopyIn(ci, lo, lo + bytes.size(), bytes.data());
    return cb;
  }
  // The pool outlives the buffers the file's chunks hold.
  std::unique_ptr<device::BufferPool> pool_ = Pool();
  Mutex mu_;
  FileData data_{mu_};
};

TEST_F(FileDataChunkTest, AWrittenChunkGoesFromStagedToInstalledAndItsVersionFollows) {
  MutexLock l(data_.mu());
  EXPECT_TRUE(data_.HasVersion());
  EXPECT_TRUE(data_.Quiescent());
  const std::string bytes(100, 'k');
  Write(0, 0, 0, bytes, 1 << 20);
  EXPECT_TRUE(data_.Staged(0));
  EXPECT_FALSE(data_.HasVersion()) << "staged bytes may still change";
  EXPECT_FALSE(data_.Quiescent());
  EXPECT_EQ(data_.ReservationShort(0, 100), 0u);
  EXPECT_EQ(data_.StagedChunks(), std::vector<uint64_t>{0});
  // A read copies the staged bytes and asks nothing of the device.
  std::string out(100, '\0');
  bool device = false;
  ASSERT_TRUE(data_.PlanRead(0, 100, out.data(), [&](auto...) { device = true; }).ok());
  EXPECT_EQ(out, bytes);
  EXPECT_FALSE(device);
  // Submitted: exactly the block its bytes take stays reserved.
  std::vector<Extent> spare;
  std::shared_ptr<ChunkBuf> cb = data_.Submit(0, &spare);
  ASSERT_NE(cb, nullptr);
  ASSERT_EQ(cb->alloc.size(), 1u);
  EXPECT_EQ(cb->alloc[0].len, kBlockSize);
  ASSERT_EQ(spare.size(), 1u);
  EXPECT_EQ(spare[0].len, kChunkBytes - kBlockSize);
  EXPECT_EQ(data_.writes_in_flight(), 1);
  // Being written, it has a version (installed under its own number).
  std::optional<MemoryVersion> v = data_.Version(100);
  ASSERT_TRUE(v.has_value());
  ASSERT_EQ(v->chunks.size(), 1u);
  EXPECT_EQ(v->chunks[0].second, cb->seq);
  WrittenOutcome w = data_.Written(0, cb, Status::OK(), /*taken=*/false);
  EXPECT_TRUE(w.installed);
  EXPECT_TRUE(w.queue_change);
  EXPECT_TRUE(w.free_now.empty());
  EXPECT_TRUE(data_.AtVersion(*v, 100));
  EXPECT_FALSE(data_.AtVersion(*v, 101));
  std::optional<InstalledChunk> in = data_.Installed(0);
  ASSERT_TRUE(in.has_value());
  ASSERT_EQ(in->extents.size(), 1u);
  EXPECT_EQ(in->extents[0].ext.byte_off, 1u << 20);
  // Installed bytes are the caller's to read (cache or device).
  uint64_t asked_lo = 1, asked_hi = 0;
  ASSERT_TRUE(data_.PlanRead(10, 50, out.data(),
                             [&](uint64_t pos, uint64_t hi, uint64_t ci, uint64_t seq,
                                 const std::vector<index::FileExtent>& extents) {
                               asked_lo = pos;
                               asked_hi = hi;
                               EXPECT_EQ(ci, 0u);
                               EXPECT_EQ(seq, cb->seq);
                               EXPECT_EQ(extents.size(), 1u);
                             })
                  .ok());
  EXPECT_EQ(asked_lo, 10u);
  EXPECT_EQ(asked_hi, 60u);
  // Written and waiting for its change: not quiescent until captured.
  EXPECT_FALSE(data_.Quiescent());
  std::vector<index::FileExtent> named;
  std::vector<Extent> frees;
  EXPECT_EQ(data_.Capture(100, 0, &named, &frees), 100u);
  EXPECT_EQ(named.size(), 1u);
  EXPECT_TRUE(frees.empty());
  EXPECT_TRUE(data_.Quiescent());
  // The next version replaces it: the old extent is freed after the next capture.
  Write(0, 100, 0, bytes, 2 << 20);
  spare.clear();
  cb = data_.Submit(0, &spare);
  ASSERT_TRUE(data_.Written(0, cb, Status::OK(), false).installed);
  named.clear();
  EXPECT_EQ(data_.Capture(100, 100, &named, &frees), 100u);
  ASSERT_EQ(frees.size(), 1u);
  EXPECT_EQ(frees[0].byte_off, 1u << 20);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].ext.byte_off, 2u << 20);
  data_.TakeAll(&frees);
  EXPECT_EQ(frees.size(), 2u);
}

TEST_F(FileDataChunkTest, AFailedWriteLosesTheChunkAndKeepsTheError) {
  MutexLock l(data_.mu());
  Write(0, 0, 0, std::string(8192, 'f'), 1 << 20);
  std::vector<Extent> spare;
  std::shared_ptr<ChunkBuf> cb = data_.Submit(0, &spare);
  WrittenOutcome w = data_.Written(0, cb, Status::Error(EIO, "device"), false);
  EXPECT_TRUE(w.first_error);
  EXPECT_FALSE(w.installed);
  EXPECT_EQ(w.free_now, cb->alloc);  // never indexed
  EXPECT_EQ(data_.write_error(), EIO);
  EXPECT_FALSE(data_.HasVersion());
  std::string out(8192, '\0');
  EXPECT_EQ(data_.PlanRead(0, 8192, out.data(), [](auto...) {}).code(), EIO);
  // Not a name's data: the record holds its size back below it.
  std::vector<index::FileExtent> named;
  std::vector<Extent> frees;
  EXPECT_EQ(data_.Capture(8192, 0, &named, &frees), 0u);
}

TEST_F(FileDataChunkTest, ATruncateDropsChunksAndMakesTheirWritesObsolete) {
  MutexLock l(data_.mu());
  Write(0, 0, 0, std::string(kChunkBytes, 'a'), 1 << 20);
  Write(1, kChunkBytes, 0, std::string(kChunkBytes, 'b'), 2 << 20);
  std::vector<Extent> spare;
  std::shared_ptr<ChunkBuf> first = data_.Submit(0, &spare);
  std::shared_ptr<ChunkBuf> second = data_.Submit(1, &spare);
  // The cut falls in chunk 0, which is being written: its head is written
  // first (the caller's TruncateData), then the rest dropped.
  EXPECT_TRUE(data_.TruncateWritesHead(100, 2 * kChunkBytes));
  EXPECT_FALSE(data_.TruncateWritesHead(kChunkBytes, 2 * kChunkBytes));  // at a chunk's start
  std::vector<Extent> free_now;
  std::vector<uint64_t> dropped;
  data_.Truncate(kChunkBytes, 2 * kChunkBytes, &free_now, &dropped);
  EXPECT_EQ(dropped, std::vector<uint64_t>{1});
  // The dropped chunk's write lands obsolete: never installed, its space back.
  WrittenOutcome w = data_.Written(1, second, Status::OK(), false);
  EXPECT_FALSE(w.installed);
  EXPECT_EQ(w.free_now, second->alloc);
  // The surviving chunk's write is still current despite the truncate.
  EXPECT_TRUE(data_.Written(0, first, Status::OK(), false).installed);
  EXPECT_EQ(data_.chunk_count(), 1u);
}

TEST_F(FileDataChunkTest, APartialOverwriteReadsTheOldBytesFirstAndRetriesOnAChange) {
  MutexLock l(data_.mu());
  index::FileExtent fe;
  fe.file_off = 0;
  fe.ext = Extent{0, 4 << 20, 8192};
  ASSERT_TRUE(data_.Load({fe}, 8192));
  EXPECT_TRUE(data_.HasVersion());
  auto cb = Buffer(1 << 20);
  InstalledChunk old;
  ASSERT_EQ(data_.Stage(0, cb, 8192, 10, 20, &old), FileData::Staging::kReadOldBytes);
  ASSERT_EQ(old.extents.size(), 1u);
  EXPECT_FALSE(data_.Staged(0));  // not until its old bytes are in
  // The file grew meanwhile (the lock was let go of for the read): again.
  InstalledChunk again;
  EXPECT_EQ(data_.StageRead(0, cb, old, 8192, 9000, 10, 20, &again),
            FileData::Staging::kReadOldBytes);
  EXPECT_EQ(data_.StageRead(0, cb, again, 9000, 9000, 10, 20, &old), FileData::Staging::kStaged);
  EXPECT_TRUE(data_.Staged(0));
  EXPECT_EQ(cb->valid, 9000u);
  // A second writer finds it staged.
  EXPECT_EQ(data_.Stage(0, Buffer(2 << 20), 9000, 0, 10, &old),
            FileData::Staging::kStagedMeanwhile);
  // An extent that crosses a chunk's end is refused.
  fe.ext.len = kChunkBytes + 4096;
  EXPECT_FALSE(data_.Load({fe}, 8192));
}

TEST_F(FileDataChunkTest, ACaptureHoldsTheSizeBelowChunksNotWrittenYet) {
  MutexLock l(data_.mu());
  data_.Install(0, {Extent{0, 1 << 20, kChunkBytes}}, {0}, kChunkBytes);
  Write(1, kChunkBytes, 0, std::string(4096, 'x'), 2 << 20);
  std::vector<index::FileExtent> named;
  std::vector<Extent> frees;
  EXPECT_EQ(data_.Capture(kChunkBytes + 4096, kChunkBytes, &named, &frees), kChunkBytes);
  EXPECT_EQ(named.size(), 1u);
  EXPECT_FALSE(data_.Quiescent());  // staged
}

// A store's chunks written, never captured (its change waited for them),
// then rewritten in place (staged, being written): the capture names the
// written version of each, at the file's size, instead of holding the size
// back to the last captured one (0: the file came back empty after a kill).
// A chunk grown past its written version holds the size at that version's end.
TEST_F(FileDataChunkTest, ACaptureNamesAWrittenVersionWhileTheNewestIsNotWritten) {
  MutexLock l(data_.mu());
  const uint64_t size = 2 * kChunkBytes + 5000;
  data_.Install(0, {Extent{0, 1 << 20, kChunkBytes}}, {0}, kChunkBytes);
  data_.Install(1, {Extent{0, 2 << 20, kChunkBytes}}, {0}, kChunkBytes);
  data_.Install(2, {Extent{0, 3 << 20, 8192}}, {0}, 5000);
  Write(0, size, 0, std::string(kChunkBytes, 'r'), 4 << 20);  // staged
  Write(1, size, 0, std::string(kChunkBytes, 'r'), 5 << 20);
  std::vector<Extent> spare;
  ASSERT_NE(data_.Submit(1, &spare), nullptr);  // being written
  std::vector<index::FileExtent> named;
  std::vector<Extent> frees;
  EXPECT_EQ(data_.Capture(size, 0, &named, &frees), size);
  ASSERT_EQ(named.size(), 3u);
  EXPECT_EQ(named[1].ext.byte_off, 2u << 20);  // the written version
  // The last chunk grown (staged) past its written 5000 bytes.
  Write(2, size, 0, std::string(8000, 'g'), 6 << 20);
  named.clear();
  EXPECT_EQ(data_.Capture(size + 3000, 0, &named, &frees), size);
  EXPECT_EQ(named.size(), 3u);
}

// A cut inside a chunk: the head, written by the caller from TakeHead's
// bytes, is installed with the cut; what was staged there is replaced, a
// version being written of it lands obsolete, chunks past it are dropped,
// and the capture names the new size over the head. A change of the chunk
// while the head was written makes the caller write it again.
TEST_F(FileDataChunkTest, ATruncateInstallsTheHeadItWroteAndDropsTheRest) {
  MutexLock l(data_.mu());
  const uint64_t size = 3 * kChunkBytes;
  data_.Install(0, {Extent{0, 1 << 20, kChunkBytes}}, {0}, kChunkBytes);
  data_.Install(1, {Extent{0, 2 << 20, kChunkBytes}}, {0}, kChunkBytes);
  Write(2, size, 0, std::string(kChunkBytes, 'c'), 3 << 20);
  std::vector<Extent> spare;
  std::shared_ptr<ChunkBuf> third = data_.Submit(2, &spare);
  ASSERT_NE(third, nullptr);
  Write(1, size, 0, std::string(kChunkBytes, 's'), 4 << 20);  // staged over the written chunk 1
  const uint64_t cut = kChunkBytes + 100;
  ASSERT_TRUE(data_.TruncateWritesHead(cut, size));
  std::string head(kChunkBytes, 'x');
  const FileData::Head h = data_.TakeHead(cut, head.data());
  EXPECT_TRUE(h.read.empty());  // staged: copied, nothing to read
  EXPECT_EQ(head.substr(0, 100), std::string(100, 's'));
  EXPECT_TRUE(data_.HeadCurrent(h));
  data_.CopyIn(1, 0, 10, "0123456789");  // a writer meanwhile
  EXPECT_FALSE(data_.HeadCurrent(h));
  const FileData::Head again = data_.TakeHead(cut, head.data());
  EXPECT_EQ(head.substr(0, 10), "0123456789");
  FileData::WrittenHead w{1, {Extent{0, 7 << 20, 4096}}, {0}, 100};
  std::vector<Extent> free_now;
  std::vector<uint64_t> dropped;
  ASSERT_TRUE(data_.HeadCurrent(again));
  data_.Truncate(cut, size, &free_now, &dropped, &w);
  EXPECT_EQ(dropped, std::vector<uint64_t>{2});
  ASSERT_EQ(free_now.size(), 1u);  // the staged version's space
  EXPECT_EQ(free_now[0].byte_off, 4u << 20);
  EXPECT_FALSE(data_.Staged(1));
  EXPECT_TRUE(data_.HasVersion());
  std::vector<index::FileExtent> named;
  std::vector<Extent> frees;
  EXPECT_EQ(data_.Capture(cut, size, &named, &frees), cut);
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[1].ext.byte_off, 7u << 20);
  ASSERT_EQ(frees.size(), 1u);  // chunk 1's older version, after this capture
  EXPECT_EQ(frees[0].byte_off, 2u << 20);
  // The dropped chunk's write lands obsolete.
  WrittenOutcome out = data_.Written(2, third, Status::OK(), false);
  EXPECT_FALSE(out.installed);
  EXPECT_EQ(out.free_now, third->alloc);
  // An installed head is read from the device for a cut in it.
  ASSERT_TRUE(data_.TruncateWritesHead(kChunkBytes + 50, cut));
  const FileData::Head from_device = data_.TakeHead(kChunkBytes + 50, head.data());
  ASSERT_EQ(from_device.read.size(), 1u);
  EXPECT_EQ(from_device.read[0].ext.byte_off, 7u << 20);
  EXPECT_FALSE(data_.TruncateWritesHead(kChunkBytes, cut));  // at a chunk's start: no head
}

TEST_F(FileDataChunkTest, AReaderThatMovesOnKeepsItsReadAheadWindow) {
  MutexLock l(data_.mu());
  constexpr uint64_t kSize = 100 << 20, kWindow = 16 << 20;
  auto r = data_.NextReadAhead(0, 4096, kSize, kWindow);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->first, 4096u);
  EXPECT_EQ(r->second, 4096 + kWindow);
  data_.ReadAheadTo(AlignUp(r->second, kChunkBytes));
  r = data_.NextReadAhead(4096, kChunkBytes, kSize, kWindow);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->first, AlignUp(4096 + kWindow, kChunkBytes));  // a chunk at a time
  EXPECT_FALSE(data_.NextReadAhead(50 << 20, 4096, kSize, kWindow).has_value());  // a jump
}

TEST_F(FileDataChunkTest, ALoadCopiesWhatIsBeingWrittenZeroesHolesAndReadsTheRest) {
  MutexLock l(data_.mu());
  index::FileExtent fe;
  fe.file_off = 0;
  fe.ext = Extent{0, 4 << 20, 4096};
  ASSERT_TRUE(data_.Load({fe}, 4096));  // chunk 0: one block; then a hole
  Write(2, 4096, 0, std::string(4096, 'w'), 1 << 20);  // chunk 2, being written
  std::vector<Extent> spare;
  ASSERT_NE(data_.Submit(2, &spare), nullptr);
  const uint64_t size = 2 * kChunkBytes + 4096;
  auto v = data_.Version(size);
  ASSERT_TRUE(v.has_value());
  const uint64_t map = data_.MemoryBytes(size);
  EXPECT_EQ(map, size);
  auto b = MemoryBlock::Make(map);
  ASSERT_TRUE(b.ok());
  std::memset((*b)->data, 0x77, map);  // a former file's bytes
  auto m = std::make_shared<FileMemory>(std::move(*b), /*zeroed=*/false, *v, nullptr);
  EXPECT_EQ(data_.LoadReads(), 1u);
  std::vector<device::IoRequest> reqs;
  int completions = 0;
  data_.LoadInto(m, size, [&](Status) { ++completions; }, &reqs);
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].buf, m->data());
  EXPECT_EQ(reqs[0].len, 4096u);
  EXPECT_EQ(reqs[0].group, m.get());
  EXPECT_EQ(std::string(m->data() + 4096, kChunkBytes), std::string(kChunkBytes, '\0'));
  EXPECT_EQ(std::string(m->data() + 2 * kChunkBytes, 4096), std::string(4096, 'w'));
  reqs[0].done(Status::OK());
  EXPECT_EQ(completions, 1);
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
